"""A node agent process that waits for GPUs, seen over HTTP: its first /healthz answer."""

from __future__ import annotations

import subprocess
import time
import urllib.request


def get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        return response.status, response.read().decode()


def first_healthz(process: subprocess.Popen[str], port: int) -> tuple[int, str]:
    """The first /healthz answer of `process` on `port`; fails if the process ends first or it
    never answers (a bound for a busy machine, not a measurement)."""
    deadline = time.monotonic() + 120
    while True:
        assert process.poll() is None, process.communicate()[0]
        try:
            return get(port, "/healthz")
        except OSError:
            assert time.monotonic() < deadline, "the waiting agent never served /healthz"
            time.sleep(0.2)
