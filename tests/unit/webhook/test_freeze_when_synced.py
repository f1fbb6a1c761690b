"""The webhook freezes its heap once every cache has listed (a full pass of the cyclic collector
over 20,000 claim bookings took ~40 ms, a pause for every admission in flight), and never while
one has not: a stop ends the wait without freezing."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from vgpu_bridge.webhook.app import freeze_when_synced


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_it_freezes_once_every_cache_has_listed() -> None:
    synced = [threading.Event(), threading.Event()]
    kept = [{"booking": n} for n in range(1_000)]  # what a cache holds
    waiting = threading.Thread(target=freeze_when_synced, args=(synced, threading.Event()))
    waiting.start()
    synced[0].set()
    waiting.join(timeout=0.3)
    assert waiting.is_alive()
    assert gc.get_freeze_count() == 0
    synced[1].set()
    waiting.join(timeout=10)
    assert not waiting.is_alive()
    assert gc.get_freeze_count() >= len(kept)


def test_a_stop_ends_the_wait_without_freezing() -> None:
    stop = threading.Event()
    stop.set()
    freeze_when_synced([threading.Event()], stop)
    assert gc.get_freeze_count() == 0
