"""Polling until the cluster reaches a state: the one way e2e tests wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None], *, timeout_s: float = 60.0, what: str, interval_s: float = 0.25
) -> T:
    """Call ``probe`` until it returns something other than None or False; return that."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if result is not None and result is not False:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def stays(probe: Callable[[], bool], *, for_s: float, what: str, interval_s: float = 0.25) -> None:
    """Assert ``probe`` holds on every poll for ``for_s`` seconds."""
    deadline = time.monotonic() + for_s
    while time.monotonic() < deadline:
        assert probe(), f"{what} stopped holding"
        time.sleep(interval_s)
