"""A taint the agent could not publish (the API server down) is handed over again at the next
check, with its first `timeAdded`, until it is published: the health thread's publication is
the only one a changed taint gets before the next resync period."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

import pytest

from tests.unit.node.test_device_health import GPUS, KEY, Clock, FakeSource
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.device_health import DeviceHealthWatcher
from vgpu_bridge.node.slices import DeviceTaint


class Down:
    """An `on_change` that fails while `down`, else records what it was handed."""

    def __init__(self) -> None:
        self.down = True
        self.published: list[Mapping[str, DeviceTaint]] = []

    def __call__(self, taints: Mapping[str, DeviceTaint]) -> None:
        if self.down:
            raise ConnectionRefusedError(111, "Connection refused")
        self.published.append(taints)


def test_a_taint_that_could_not_be_published_is_handed_over_again_until_it_is() -> None:
    source, clock, publish = FakeSource(), Clock(), Down()
    watcher = DeviceHealthWatcher(source, gpus=GPUS, driver=DEFAULT.driver, effect="NoSchedule",
                                  on_change=publish, clock=clock)  # fmt: skip
    source.now = {"GPU-a": "xid-79"}
    for _ in range(2):
        with pytest.raises(ConnectionRefusedError):
            watcher.check()
        clock.now += timedelta(seconds=5)
    publish.down = False
    assert watcher.check()
    assert publish.published == [{"GPU-a": DeviceTaint(KEY, "xid-79", "NoSchedule",
                                                       "2026-12-01T17:00:00Z")}]  # fmt: skip
    assert not watcher.check()  # published: nothing more to hand over
