"""The real binaries as subprocesses, and what /proc says about them (memory, threads)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

START_DEADLINE_S = 60.0  # a cold start on a busy 2-core machine, generously
RUNAWAY_RSS_MB = 2000  # far past any bound a test asserts: a process this big is killed


def command(*args: str) -> list[str]:
    """`vgpu-bridge <args>` as the installed entry point runs it (`vgpu_bridge.cli:main`)."""
    return [sys.executable, "-m", "vgpu_bridge.cli", *args]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_status(pid: int, field: str) -> int:
    """A number from /proc/<pid>/status (`VmRSS` in kB, `Threads`); 0 once the process is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def rss_mb(pid: int) -> float:
    return proc_status(pid, "VmRSS") / 1024


@contextmanager
def running(args: list[str], log_file: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The binary with stdout+stderr into `log_file`; terminated (then killed) on the way out."""
    with log_file.open("wb") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def wait_until(
    check: Callable[[], bool], process: subprocess.Popen[bytes], log_file: Path, what: str
) -> None:
    """Poll `check` until it holds; fail with the log if the process exits or time runs out."""
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{what}: exited {process.returncode}:\n{tail(log_file)}")
        if rss_mb(process.pid) > RUNAWAY_RSS_MB:
            process.kill()
            raise AssertionError(f"{what}: killed past {RUNAWAY_RSS_MB} MB of RSS")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {START_DEADLINE_S} s:\n{tail(log_file)}")


def tail(log_file: Path, lines: int = 40) -> str:
    return "\n".join(log_file.read_text(errors="replace").splitlines()[-lines:])


def non_json_lines(log_file: Path) -> list[str]:
    """Log lines that are not one JSON object each (a traceback, a bare print)."""
    bad = []
    for line in log_file.read_text(errors="replace").splitlines():
        try:
            parsed = json.loads(line)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            bad.append(line[:200])
    return bad
