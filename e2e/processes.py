"""Stopping the processes the harness and the benchmarks start."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(process: subprocess.Popen[Any], *, grace_s: float = 10.0) -> None:
    """SIGTERM, up to `grace_s` for the process to exit, then SIGKILL; reaped either way."""
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
