"""The agent's series the alerts and the dashboard read (charts/vgpu-bridge/files/alerts.yaml):
refusals and SM utilisation from libvgpu's region, the agent's health and how long ago its
ResourceSlices were published."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.node.claims import GPUS, NODE, UID
from tests.unit.node.fake_api import FakeApi
from tests.unit.node.test_checkpoint import CLAIM
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node import checkpoint
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.health import Health
from vgpu_bridge.node.metrics import AgentCollector, NodeCollector
from vgpu_bridge.node.publisher import Publication
from vgpu_bridge.node.region import (
    COUNTS_OFFSET,
    DEVICES_OFFSET,
    REGION_MAGIC,
    REGION_SIZE,
    REGION_VERSION,
    SLOT_SIZE,
    SLOTS_OFFSET,
)
from vgpu_bridge.node.state import DeviceState


def _samples(collector: object) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(collector)  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _region(uuid: str, *, refused: int, sm_utils: list[int]) -> bytes:
    """A region (libvgpu's current version) with one device and a live slot (pid 100 + i) per SM
    utilisation."""
    data = bytearray(REGION_SIZE)
    struct.pack_into("<IIQ", data, 0, REGION_MAGIC, REGION_VERSION, REGION_SIZE)
    struct.pack_into("<II", data, COUNTS_OFFSET, 1, len(sm_utils))
    struct.pack_into("<48sQII", data, DEVICES_OFFSET, uuid.encode(), 2**30, 30, refused)
    for i, util in enumerate(sm_utils):
        struct.pack_into("<iiQiI", data, SLOTS_OFFSET + i * SLOT_SIZE, 100 + i, 0, 1, 0, util)
    return bytes(data)


@pytest.fixture
def prepared(tmp_path: Path) -> Iterator[tuple[NodeCollector, CdiLayout]]:
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)
    checkpoint_file = tmp_path / "plugin" / "checkpoint.json"
    checkpoint_file.parent.mkdir()
    checkpoint.save(checkpoint_file, {UID: CLAIM.model_copy(update={"uid": UID})})
    state = DeviceState(FakeApi(), node=NODE, profile=DEFAULT, gpus=GPUS, layout=layout,
                        checkpoint_file=checkpoint_file)  # fmt: skip
    state.start()
    yield NodeCollector(state, GPUS, node=NODE, vgpu_dir=layout.vgpu_dir), layout
    state.close()


def test_refusals_and_sm_utilisation_of_a_claim_come_from_its_region(
    prepared: tuple[NodeCollector, CdiLayout],
) -> None:
    collector, layout = prepared
    uuid = GPUS[0].uuid
    (layout.shared_dir(UID) / "vgpu.cache").write_bytes(_region(uuid, refused=3, sm_utils=[20, 45]))
    samples = _samples(collector)
    claim = (("claim", CLAIM.name), ("claim_uid", UID), ("namespace", CLAIM.namespace))
    refused = tuple(sorted((*claim, ("uuid", uuid))))
    assert samples[("vgpu_bridge_claim_allocations_refused_total", refused)] == 3
    assert samples[("vgpu_bridge_claim_sm_utilization_ratio", claim)] == 0.45


def test_a_claim_without_a_region_has_no_refusal_or_utilisation_series(
    prepared: tuple[NodeCollector, CdiLayout],
) -> None:
    names = {name for name, _ in _samples(prepared[0])}
    assert "vgpu_bridge_claim_region_readable" in names
    assert "vgpu_bridge_claim_allocations_refused_total" not in names
    assert "vgpu_bridge_claim_sm_utilization_ratio" not in names


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _agent(clock: Clock, *, sockets: str | None, last: Publication | None) -> AgentCollector:
    health = Health(sockets=lambda: sockets, publications=lambda: last, max_silence_s=150,
                    clock=clock)  # fmt: skip
    return AgentCollector(health, lambda: last, clock=clock)


@pytest.mark.parametrize(
    ("sockets", "last", "later_s", "healthy", "age"),
    [
        pytest.param(None, None, 30, 1, 30, id="no-publication-yet-counts-from-the-start"),
        pytest.param(None, Publication(1010, None, 1010), 60, 1, 50, id="published"),
        pytest.param(
            None, Publication(1200, "HTTP 500", 1010), 200, 0, 190, id="failing-past-the-grace"
        ),
        pytest.param(
            "the DRA socket is gone", Publication(1010, None, 1010), 20, 0, 10, id="socket-gone"
        ),
    ],
)
def test_the_agent_reports_its_health_and_the_age_of_its_last_publication(
    sockets: str | None, last: Publication | None, later_s: float, healthy: int, age: float
) -> None:
    clock = Clock()
    collector = _agent(clock, sockets=sockets, last=last)
    clock.now += later_s
    samples = _samples(collector)
    assert samples[("vgpu_bridge_agent_healthy", ())] == healthy
    assert samples[("vgpu_bridge_slices_seconds_since_publication", ())] == age
