"""Metrics in enforcer mode (issue 37): the cards are NVIDIA's, read from its slice, and each
prepared NVIDIA share counts on its card; HAMi's per-container series reach every container of
the claim, whichever request it names, as the limits do; a card in use keeps its priority board."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e.nvidia.slices import mock_uuid
from tests.unit.node.claims import NODE, UID
from tests.unit.node.nvidia_claims import nvidia_claim, nvidia_slice
from tests.unit.node.test_metrics import _samples
from vgpu_bridge.core.profiles import ENFORCER_DRIVER, our_profile
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.node.app import CardUuids, node_cards
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.checkpoint import PreparedDevice
from vgpu_bridge.node.hami_metrics import Consumer
from vgpu_bridge.node.metrics import NodeCollector
from vgpu_bridge.node.nvidia_slices import NvidiaCards
from vgpu_bridge.node.state import ClaimRef, DeviceState

Json = dict[str, Any]
GIB = 2**30


class ClaimApi(KubeApi):
    def __init__(self, claim: Json) -> None:
        super().__init__(client.ApiClient(client.Configuration()))
        self.claim = claim

    def get(self, path: str) -> Json:
        return copy.deepcopy(self.claim)


class Slices:
    def __init__(self) -> None:
        self.broken = False

    def __call__(self) -> list[Json]:
        if self.broken:
            raise RuntimeError("API down")
        return [nvidia_slice()]


@pytest.fixture
def enforcing(tmp_path: Path) -> Iterator[tuple[DeviceState, NvidiaCards, Slices]]:
    slices = Slices()
    cards = NvidiaCards(slices, node=NODE, max_age_s=0)  # read at every ask
    layout = CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu",
                       driver=ENFORCER_DRIVER, enforcer=True)  # fmt: skip
    state = DeviceState(ClaimApi(nvidia_claim()), node=NODE, profile=our_profile(ENFORCER_DRIVER),
                        gpus=(), layout=layout, checkpoint_file=tmp_path / "p" / "checkpoint.json",
                        nvidia_cards=cards)  # fmt: skip
    state.start()
    assert state.prepare([ClaimRef("team-a", "pod-gpu-nv", UID)])[UID].error is None
    yield state, cards, slices
    state.close()


def test_nvidias_cards_carry_the_series_and_the_prepared_share_counts_on_its_card(
    enforcing: tuple[DeviceState, NvidiaCards, Slices],
) -> None:
    state, cards, _ = enforcing
    samples = _samples(NodeCollector(state, node_cards(cards, state), node=NODE,
                                     vgpu_dir=Path("/nonexistent")))  # fmt: skip

    def card(index: int) -> tuple[tuple[str, str], ...]:
        return (("device", f"gpu-{index}"), ("node", NODE), ("product", "NVIDIA H100 80GB HBM3"),
                ("uuid", mock_uuid(index)))  # fmt: skip

    assert samples[("vgpu_bridge_gpu_memory_bytes", card(1))] == 80 * GIB
    assert samples[("vgpu_bridge_gpu_memory_allocated_bytes", card(0))] == GIB
    assert samples[("vgpu_bridge_gpu_cores_allocated_ratio", card(0))] == 0.3
    assert samples[("vgpu_bridge_gpu_shares", card(0))] == 1
    assert samples[("vgpu_bridge_gpu_shares", card(1))] == 0


def test_a_card_in_use_keeps_its_board_while_nvidias_slice_cannot_be_read(
    enforcing: tuple[DeviceState, NvidiaCards, Slices],
) -> None:
    state, _cards, slices = enforcing
    slices.broken = True
    uuids = CardUuids(node_cards(NvidiaCards(slices, node=NODE), state))
    assert mock_uuid(0) in uuids
    assert list(uuids) == [mock_uuid(0)]


def test_a_container_naming_any_request_takes_the_enforcer_device() -> None:
    """The kubelet gives a device without request names to every container of the claim."""
    enforcer = PreparedDevice(request_names=(), pool_name=NODE, device_name="enforcer",
                              share_id=None, cdi_device_ids=("x",), uuid=mock_uuid(0),
                              memory=GIB, cores=30)  # fmt: skip
    consumer = Consumer("team-a", "p", "pod-uid", "main", 0, requests=frozenset({"gpu"}))
    assert consumer.takes(enforcer)
