"""A private cluster for one test session, gone when the session ends however it ends.

Normal end, a failed test, Ctrl-C (KeyboardInterrupt) or SIGTERM: the ``finally`` stops every
component and removes the state directory. A hard kill (SIGKILL) of the test process cannot run
that code: the components die with it (``die_with_parent``) and the next session removes the
state directory it left (``sweep_stale``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from e2e.cluster.build import ensure_binary
from e2e.cluster.controlplane import LocalCluster, start_cluster
from e2e.cluster.settings import Settings


@contextlib.contextmanager
def running_cluster(settings: Settings) -> Iterator[LocalCluster]:
    binary = ensure_binary(settings).binary
    root = settings.cache_root / "state" / "sessions"
    root.mkdir(parents=True, exist_ok=True)
    sweep_stale(root)
    state_dir = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))
    with _sigterm_as_interrupt():
        cluster = start_cluster(
            binary, settings.k8s_version, state_dir=state_dir, die_with_parent=True
        )
        try:
            yield cluster
        finally:
            cluster.stop()


def sweep_stale(root: Path) -> list[Path]:
    """Stop and remove session clusters whose test process (the name's pid prefix) is gone."""
    removed = []
    for state_dir in root.iterdir():
        owner = state_dir.name.split("-", 1)[0]
        if owner.isdigit() and _pid_alive(int(owner)):
            continue
        stale = LocalCluster.load(state_dir)
        if stale is not None:
            stale.stop()
        shutil.rmtree(state_dir, ignore_errors=True)
        removed.append(state_dir)
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt (main thread only) so cleanup code runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
