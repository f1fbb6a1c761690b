"""Long work shows progress: a block that runs for minutes says what it is doing and for how long.

``with progress("go build vgpu-k8s"):`` prints ``go build vgpu-k8s: still running, 1m30s`` to
stderr every ``interval_s`` (30 s) while the block runs, and ``go build vgpu-k8s: done in 2m05s``
(or ``failed after ...``) when it ends, so a newcomer never stares at a silent terminal. Work that
ends within ``total_after_s`` prints nothing at the end: short steps stay quiet. The clock and the
wait between lines are injectable, so tests need no real 30 s.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

INTERVAL_S = 30.0


def elapsed_text(seconds: float) -> str:
    """``45s``, ``1m30s``, ``1h02m03s``: whole seconds, the way a person reads a stopwatch."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def command_label(command: Sequence[str], *, limit: int = 100) -> str:
    """A command's name for progress lines: the program and its words that are not options
    (``go install example.com/x@v1``), cut at ``limit`` characters."""
    program, *words = command
    label = " ".join([Path(program).name, *(w for w in words if not w.startswith("-"))])
    return label if len(label) <= limit else label[: limit - 3] + "..."


class Heartbeat:
    """Prints ``<what>: still running, <elapsed>`` each time ``beat`` is called."""

    def __init__(self, what: str, *, clock: Callable[[], float], stream: TextIO) -> None:
        self.what = what
        self.clock = clock
        self.stream = stream
        self.started = clock()

    def elapsed(self) -> float:
        return self.clock() - self.started

    def beat(self) -> None:
        self.say(f"still running, {elapsed_text(self.elapsed())}")

    def say(self, text: str) -> None:
        print(f"{self.what}: {text}", file=self.stream, flush=True)


@contextmanager
def progress(
    what: str,
    *,
    interval_s: float | None = None,
    total_after_s: float | None = 0.0,
    clock: Callable[[], float] = time.monotonic,
    stream: TextIO | None = None,
) -> Iterator[Heartbeat]:
    """Run the block with a heartbeat line every ``interval_s`` (default ``INTERVAL_S``); then
    the total, when the block took at least ``total_after_s`` (never when it is None)."""
    heartbeat = Heartbeat(what, clock=clock, stream=stream or sys.stderr)
    stop = threading.Event()
    every = INTERVAL_S if interval_s is None else interval_s
    thread = threading.Thread(target=_beat_until, args=(heartbeat, stop, every), daemon=True)
    thread.start()
    outcome = "failed after"
    try:
        yield heartbeat
        outcome = "done in"
    finally:
        stop.set()
        thread.join()
        took = heartbeat.elapsed()
        if total_after_s is not None and took >= total_after_s:
            heartbeat.say(f"{outcome} {elapsed_text(took)}")


def _beat_until(heartbeat: Heartbeat, stop: threading.Event, interval_s: float) -> None:
    while not stop.wait(interval_s):
        heartbeat.beat()
