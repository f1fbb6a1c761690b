"""Mock cards from a label on the agent's Node: `<count>x<profile>` or `<count>x<memory>`,
UUIDs the same on every start and distinct across nodes, and refusals that name the label,
its value and the reason."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.node.fake_api import FakeApi
from vgpu_bridge.kube import KubeError
from vgpu_bridge.node.mock_cards import (
    MOCK_PRODUCT_NAME,
    MockLabelError,
    card_uuid,
    node_label_gpus,
    parse_label,
)
from vgpu_bridge.node.mock_driver import NVML_UUID

LABEL = "vgpu-bridge.io/mock-gpus"
GiB = 2**30


def _cards(value: str, node: str = "kind-worker") -> Any:
    return parse_label(value, node=node, label=LABEL)


def test_a_profile_names_the_cards_product_memory_and_sm_count() -> None:
    gpus = _cards("8xh100-80gb")
    assert len(gpus) == 8
    assert [gpu.index for gpu in gpus] == list(range(8))
    assert {(g.product_name, g.memory, g.sm_count, g.architecture) for g in gpus} == {
        ("NVIDIA H100 80GB HBM3", 80 * GiB, 132, "Hopper")
    }
    assert {gpu.compute_capability for gpu in gpus} == {"9.0"}


@pytest.mark.parametrize(
    ("value", "product", "memory", "sms"),
    [
        ("1xa100-40gb", "NVIDIA A100-SXM4-40GB", 40 * GiB, 108),
        ("2xA100-80GB", "NVIDIA A100-SXM4-80GB", 80 * GiB, 108),
        ("4xh200-141gb", "NVIDIA H200", 141 * GiB, 132),
        ("16xl4-24gb", "NVIDIA L4", 24 * GiB, 58),
        ("2x24Gi", MOCK_PRODUCT_NAME, 24 * GiB, 132),
        ("1x80Gi", MOCK_PRODUCT_NAME, 80 * GiB, 132),
        ("3x1536Mi", MOCK_PRODUCT_NAME, 1536 * 2**20, 132),
    ],
    ids=["a100-40", "upper-case", "h200", "sixteen-l4", "quantity", "one", "mebibytes"],
)
def test_the_card_is_a_profile_or_a_memory_size(
    value: str, product: str, memory: int, sms: int
) -> None:
    gpus = _cards(value)
    assert len(gpus) == int(value.split("x")[0])
    assert {(g.product_name, g.memory, g.sm_count) for g in gpus} == {(product, memory, sms)}


def test_uuids_have_nvmls_shape_are_stable_and_distinct_across_nodes() -> None:
    one, again, other = _cards("4xh100-80gb"), _cards("4xh100-80gb"), _cards("4x80Gi", "w2")
    uuids = [gpu.uuid for gpu in one]
    assert all(NVML_UUID.fullmatch(uuid) for uuid in uuids)
    assert uuids == [gpu.uuid for gpu in again]
    assert uuids == [card_uuid("kind-worker", i) for i in range(4)]
    assert len(set(uuids) | {gpu.uuid for gpu in other}) == 8
    assert uuids[0][4:] == uuids[0][4:].lower()


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "expected <count>x<card>"),
        ("h100-80gb", "expected <count>x<card>"),
        ("0xh100-80gb", "expected <count>x<card>"),
        ("08xh100-80gb", "expected <count>x<card>"),
        ("17xh100-80gb", "17 cards: at most 16 per node"),
        ("99x24Gi", "99 cards: at most 16 per node"),
        ("8x", "expected <count>x<card>"),
        ("8xb200-192gb", "'b200-192gb' is neither a card profile"),
        ("2x1Mi", "memory 1Mi must be a whole number of bytes from 2Mi to 4Ti"),
        ("2x5Ti", "memory 5Ti must be a whole number of bytes from 2Mi to 4Ti"),
        ("2x1.5", "memory 1.5 must be a whole number"),
        ("x" * 64, "longer than a label value may be (63)"),
    ],
    ids=["empty", "no-count", "zero", "leading-zero", "seventeen", "ninety-nine", "no-card",
         "unknown-profile", "too-small", "too-big", "fraction", "too-long"],
)  # fmt: skip
def test_a_value_that_names_no_cards_is_refused_with_the_label_value_and_reason(
    value: str, reason: str
) -> None:
    with pytest.raises(MockLabelError) as refused:
        _cards(value)
    message = str(refused.value)
    assert message.startswith(f"Node kind-worker: label {LABEL}={value[:63]!r}: ")
    assert reason in message


class NodeApi(FakeApi):
    """The API with one Node, labelled as a test says, or an error for every read."""

    def __init__(self, labels: dict[str, str], *, error: Exception | None = None) -> None:
        super().__init__()
        self.labels, self.error, self.paths = labels, error, list[str]()

    def get(self, path: str) -> dict[str, Any]:
        self.paths.append(path)
        if self.error is not None:
            raise self.error
        return {"metadata": {"name": "kind-worker", "labels": self.labels}}


def test_the_agent_reads_its_own_node_and_its_label() -> None:
    api = NodeApi({LABEL: "2xl4-24gb", "other": "8x80Gi"})
    gpus = node_label_gpus(api, node="kind-worker", label=LABEL)
    assert api.paths == ["/api/v1/nodes/kind-worker"]
    assert [gpu.product_name for gpu in gpus] == ["NVIDIA L4", "NVIDIA L4"]


def test_a_node_without_the_label_is_refused_saying_how_to_label_it() -> None:
    with pytest.raises(MockLabelError) as refused:
        node_label_gpus(NodeApi({"other": "8x80Gi"}), node="kind-worker", label=LABEL)
    assert str(refused.value) == (
        f"Node kind-worker: no label {LABEL}: label the node with its mock cards, e.g. "
        f"kubectl label node kind-worker {LABEL}=8xh100-80gb"
    )


def test_a_node_that_cannot_be_read_is_refused_with_the_api_servers_answer() -> None:
    error = KubeError("GET", "/api/v1/nodes/kind-worker", 403, "nodes is forbidden")
    with pytest.raises(MockLabelError, match=r"cannot read it for label .*HTTP 403"):
        node_label_gpus(NodeApi({}, error=error), node="kind-worker", label=LABEL)
