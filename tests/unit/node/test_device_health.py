"""Device health: a fake source's faults become device taints in the slices, published at once,
and go when the card is healthy again; which XIDs count; the mock health files."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.unit.node.claims import NODE
from tests.unit.node.fake_api import FakeApi
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.device_health import DeviceHealthWatcher, taint_key
from vgpu_bridge.node.device_health.mock_source import MockHealthFiles
from vgpu_bridge.node.device_health.xids import reason_for_xid
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.publisher import PublishError, SlicePublisher
from vgpu_bridge.node.slices import DeviceTaint

GPUS = (
    Gpu(index=0, uuid="GPU-a", product_name="NVIDIA H100", memory=80 * 2**30),
    Gpu(index=1, uuid="GPU-b", product_name="NVIDIA H100", memory=80 * 2**30),
)
KEY = "gpu.vgpu-bridge.io/unhealthy"


class FakeSource:
    """Says whatever the test sets in `now`."""

    def __init__(self) -> None:
        self.now: dict[str, str] = {}

    def unhealthy(self) -> dict[str, str]:
        return dict(self.now)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, 17, 0, 0, 700_000, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class Watched:
    """A watcher over a fake source; what it hands to `on_change` lands in `published`."""

    def __init__(self) -> None:
        self.source, self.clock = FakeSource(), Clock()
        self.published: list[Mapping[str, DeviceTaint]] = []
        self.watcher = DeviceHealthWatcher(self.source, gpus=GPUS, driver=DEFAULT.driver,
                                           effect="NoSchedule", on_change=self.published.append,
                                           clock=self.clock)  # fmt: skip


def test_a_fault_taints_its_card_under_the_driver_name_with_the_time_in_whole_seconds() -> None:
    w = Watched()
    w.source.now = {"GPU-b": "xid-79"}
    assert w.watcher.check()
    taint = DeviceTaint(KEY, "xid-79", "NoSchedule", "2026-12-01T17:00:00Z")
    assert w.published == [{"GPU-b": taint}]
    assert taint_key("gpu.example.com") == "gpu.example.com/unhealthy"


def test_an_unchanged_fault_publishes_nothing_and_keeps_its_time_added() -> None:
    w = Watched()
    w.source.now = {"GPU-a": "xid-48"}
    w.watcher.check()
    w.clock.now += timedelta(minutes=5)
    assert not w.watcher.check()
    assert len(w.published) == 1
    assert w.watcher.taints["GPU-a"].time_added == "2026-12-01T17:00:00Z"


def test_a_new_reason_is_a_new_taint_and_a_healed_card_loses_it() -> None:
    w = Watched()
    w.source.now = {"GPU-a": "xid-48"}
    w.watcher.check()
    w.clock.now += timedelta(minutes=5)
    w.source.now = {"GPU-a": "gpu-lost"}
    assert w.watcher.check()
    assert w.published[-1]["GPU-a"].time_added == "2026-12-01T17:05:00Z"
    w.source.now = {}
    assert w.watcher.check()
    assert w.published[-1] == {}


def test_cards_the_agent_does_not_publish_are_ignored() -> None:
    w = Watched()
    w.source.now = {"GPU-elsewhere": "xid-79"}
    assert not w.watcher.check()
    assert w.published == []


@pytest.mark.parametrize(
    ("xid", "reason"),
    [(48, "xid-48"), (63, "xid-63"), (64, "xid-64"), (74, "xid-74"), (79, "xid-79"),
     (92, "xid-92"), (94, "xid-94"), (95, "xid-95"), (119, "xid-119"), (120, "xid-120"),
     (13, None), (31, None), (43, None), (45, None), (68, None), (109, None), (999, None)],
)  # fmt: skip
def test_card_xids_mark_the_card_and_application_or_unknown_xids_do_not(
    xid: int, reason: str | None
) -> None:
    assert reason_for_xid(xid) == reason


@pytest.mark.parametrize(
    ("content", "reason"),
    [("79\n", "xid-79"), ("lost", "gpu-lost"), ("LOST\n", "gpu-lost"), ("13", None), ("", None),
     ("on fire", None), ("-79", None)],
)  # fmt: skip
def test_a_mock_health_file_holds_an_xid_or_lost(
    tmp_path: Path, content: str, reason: str | None
) -> None:
    (tmp_path / "gpu-1").write_text(content)
    expected = {} if reason is None else {"GPU-b": reason}
    assert MockHealthFiles(tmp_path, GPUS).unhealthy() == expected


def test_mock_cards_without_a_file_or_dir_are_healthy_and_links_are_not_followed(
    tmp_path: Path,
) -> None:
    assert MockHealthFiles(tmp_path / "absent", GPUS).unhealthy() == {}
    (tmp_path / "fault").write_text("79")
    (tmp_path / "gpu-0").symlink_to(tmp_path / "fault")
    assert MockHealthFiles(tmp_path, GPUS).unhealthy() == {}


def _devices(api: FakeApi) -> dict[str, dict[str, object]]:
    return {d["name"]: d for s in api.slices.values() for d in s["spec"].get("devices", [])}


def test_the_watcher_publishes_the_taint_at_once_and_removes_it_on_recovery() -> None:
    api = FakeApi()
    publisher = SlicePublisher(api, node=NODE, profile=DEFAULT, gpus=GPUS)
    publisher.sync()
    source = FakeSource()

    def publish(taints: Mapping[str, DeviceTaint]) -> None:
        publisher.set_taints(taints)
        publisher.sync()

    watcher = DeviceHealthWatcher(source, gpus=GPUS, driver=DEFAULT.driver, effect="NoExecute",
                                  on_change=publish, clock=Clock())  # fmt: skip
    source.now = {"GPU-b": "xid-95"}
    watcher.check()
    devices = _devices(api)
    assert "taints" not in devices["gpu-0"]
    assert devices["gpu-1"]["taints"] == [
        {"key": KEY, "value": "xid-95", "effect": "NoExecute", "timeAdded": "2026-12-01T17:00:00Z"}
    ]
    generation = next(iter(api.slices.values()))["spec"]["pool"]["generation"]
    assert not publisher.sync().changed  # the taint as sent is what is published
    source.now = {}
    watcher.check()
    assert all("taints" not in d for d in _devices(api).values())
    assert next(iter(api.slices.values()))["spec"]["pool"]["generation"] == generation + 1


class TaintDroppingApi(FakeApi):
    """An API server with DRADeviceTaints off: it stores slices without their taints."""

    def create(self, path: str, body: dict[str, Any], **query: Any) -> dict[str, Any]:
        return super().create(path, _without_taints(body), **query)

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return super().replace(path, _without_taints(body))


def _without_taints(body: dict[str, Any]) -> dict[str, Any]:
    stripped = copy.deepcopy(body)
    for entry in stripped["spec"].get("devices", []):
        entry.pop("taints", None)
    return stripped


def test_an_api_server_that_drops_the_taint_fails_the_publication_naming_the_gate() -> None:
    publisher = SlicePublisher(TaintDroppingApi(), node=NODE, profile=DEFAULT, gpus=GPUS)
    publisher.sync()
    publisher.set_taints(
        {"GPU-a": DeviceTaint(KEY, "xid-79", "NoSchedule", "2026-12-01T17:00:00Z")}
    )
    with pytest.raises(PublishError, match="DRADeviceTaints"):
        publisher.sync()
