"""The webhook's inventory reads only our driver's ResourceSlices; one it cannot read is named,
skipped and never keeps the cache from being synced."""

from __future__ import annotations

import threading
from typing import Any

from tests.integration.webhook_harness import unreachable_api
from vgpu_bridge.webhook.inventory import InventoryCache

OURS = "gpu.vgpu-bridge.io"
GiB = 2**30


def slice_of(name: str, driver: str, *memories: str) -> dict[str, Any]:
    devices = [
        {"name": f"gpu-{i}", "capacity": {"memory": {"value": m}}} for i, m in enumerate(memories)
    ]
    return {"metadata": {"name": name}, "spec": {"driver": driver, "devices": devices}}


def cache() -> InventoryCache:
    return InventoryCache(unreachable_api(), driver=OURS, memory_capacity="memory")


def test_a_foreign_drivers_unreadable_slice_is_ignored() -> None:
    inventory = cache()
    inventory.replace([slice_of("theirs", "other.example.com", "1500m"),
                       slice_of("mine", OURS, "80Gi")])  # fmt: skip
    assert inventory.synced.is_set()
    assert inventory.current().sizes(OURS) == (80 * GiB,)
    assert inventory.current().sizes("other.example.com") == ()
    assert inventory.unreadable() == []


def test_an_unreadable_slice_of_ours_is_skipped_and_named() -> None:
    inventory = cache()
    inventory.replace([slice_of("bad", OURS, "80Gi", "1500m"), slice_of("good", OURS, "40Gi")])
    assert inventory.synced.is_set()
    assert inventory.current().sizes(OURS) == (40 * GiB,)
    assert inventory.unreadable() == ["bad"]
    inventory.apply("MODIFIED", slice_of("bad", OURS, "24Gi"))  # fixed by its agent
    assert inventory.current().sizes(OURS) == (24 * GiB, 40 * GiB)
    assert inventory.unreadable() == []


def test_watch_events_add_and_remove_card_sizes() -> None:
    inventory = cache()
    inventory.replace([])
    inventory.apply("ADDED", slice_of("a", OURS, "80Gi"))
    inventory.apply("ADDED", slice_of("b", "other.example.com", "1500m"))
    inventory.apply("ADDED", slice_of("c", OURS, "80Gi", "40Gi"))
    assert inventory.current().sizes(OURS) == (40 * GiB, 80 * GiB)
    inventory.apply("DELETED", slice_of("c", OURS))
    assert inventory.current().sizes(OURS) == (80 * GiB,)


def test_the_watch_loop_ends_when_told_to_stop_even_while_the_api_fails() -> None:
    inventory, stop = cache(), threading.Event()
    runner = threading.Thread(target=inventory.run, args=(stop,), daemon=True)
    runner.start()
    stop.set()
    runner.join(timeout=30)
    assert not runner.is_alive()
    assert not inventory.synced.is_set()
