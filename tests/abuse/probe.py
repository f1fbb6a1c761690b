"""A thread that keeps asking a process's health endpoint and watching its memory and threads,
while a test attacks it. Latencies are recorded for the summary, never asserted tightly."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.abuse.processes import RUNAWAY_RSS_MB, proc_status

PERIOD_S = 0.25


@dataclass
class Prober:
    pid: int
    healthz: Callable[[], int]  # the HTTP status; raises OSError when unanswered in time
    failures: list[str] = field(default_factory=list)
    slowest_s: float = 0.0
    max_rss_mb: float = 0.0
    max_threads: int = 0
    probes: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Prober:
        self._thread = threading.Thread(target=self._run, name="prober", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(PERIOD_S):
            self.sample()

    def sample(self) -> None:
        self.max_rss_mb = max(self.max_rss_mb, proc_status(self.pid, "VmRSS") / 1024)
        if self.max_rss_mb > RUNAWAY_RSS_MB:
            os.kill(self.pid, signal.SIGKILL)
            self.failures.append(f"killed at {self.max_rss_mb:.0f} MB of RSS")
            self._stop.set()
            return
        self.max_threads = max(self.max_threads, proc_status(self.pid, "Threads"))
        start = time.monotonic()
        try:
            status = self.healthz()
        except OSError as error:
            self.failures.append(f"/healthz unanswered: {type(error).__name__}: {error}")
            return
        finally:
            self.slowest_s = max(self.slowest_s, time.monotonic() - start)
            self.probes += 1
        if status != 200:
            self.failures.append(f"/healthz answered {status}")

    def summary(self) -> str:
        return (
            f"{self.probes} health probes, slowest {self.slowest_s:.2f} s, "
            f"max RSS {self.max_rss_mb:.0f} MB, max threads {self.max_threads}"
        )
