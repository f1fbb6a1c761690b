"""Live usage from an agent's /metrics: the recorded text of the real agent, and that text with
the used-memory samples an agent adds once a CUDA process wrote its claim's shared region."""

from __future__ import annotations

import pytest

from tests.unit.status.recorded import NAMESPACE, NODE, MiB, agent_metrics, claim_uid, recorded
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.status import Card, build_report
from vgpu_bridge.status.usage import MetricsError, merged, parse_agent_metrics


def used_sample(pod: str, uuid: str, used: int) -> str:
    """The sample `NodeCollector` writes for a claim's region (its labels, in its order)."""
    claim = next(c for c in recorded("claims") if c["metadata"]["uid"] == claim_uid(pod))
    labels = (
        f'claim="{claim["metadata"]["name"]}",claim_uid="{claim_uid(pod)}",'
        f'namespace="{NAMESPACE}",uuid="{uuid}"'
    )
    return f"vgpu_bridge_claim_memory_used_bytes{{{labels}}} {float(used)!r}\n"


def sm_sample(pod: str, percent: int) -> str:
    """The SM utilization sample `NodeCollector` writes for a claim's region (a 0-1 ratio)."""
    claim = next(c for c in recorded("claims") if c["metadata"]["uid"] == claim_uid(pod))
    labels = (
        f'claim="{claim["metadata"]["name"]}",claim_uid="{claim_uid(pod)}",namespace="{NAMESPACE}"'
    )
    return f"vgpu_bridge_claim_sm_utilization_ratio{{{labels}}} {percent / 100!r}\n"


def in_use() -> str:
    """The recorded text with infer-a and train in use: what their regions would add."""
    used = (
        "# TYPE vgpu_bridge_claim_memory_used_bytes gauge\n"
        + used_sample("infer-a", "GPU-agent-0000", 512 * MiB)
        + used_sample("train", "GPU-agent-0001", 3 * MiB + 7)
    )
    sm = "# TYPE vgpu_bridge_claim_sm_utilization_ratio gauge\n" + sm_sample("infer-a", 64)
    return agent_metrics() + used + sm + sm_sample("train", 0)


def cards_with(text: str) -> dict[str, Card]:
    usage = parse_agent_metrics(NODE, text)
    report = build_report(recorded("slices"), recorded("claims"), recorded("pods"),
                          profile=DEFAULT, usage=usage)  # fmt: skip
    return {card.device: card for card in report.cards}


def test_the_agents_cards_are_known_by_node_and_device() -> None:
    usage = parse_agent_metrics(NODE, agent_metrics())
    assert usage.nodes == {NODE}
    assert usage.uuids == {(NODE, "gpu-0"): "GPU-agent-0000", (NODE, "gpu-1"): "GPU-agent-0001"}


def test_before_any_cuda_process_the_shares_and_cards_use_nothing() -> None:
    cards = cards_with(agent_metrics())
    assert {card.used_memory for card in cards.values()} == {0}
    assert {share.used_memory for card in cards.values() for share in card.shares} == {0}


def test_used_memory_is_shown_per_share_and_summed_per_card() -> None:
    cards = cards_with(in_use())
    used = {s.pod: s.used_memory for card in cards.values() for s in card.shares}
    assert used == {"infer-a": 512 * MiB, "infer-b": 0, "neighbour": 0, "train": 3 * MiB + 7}
    assert (cards["gpu-0"].used_memory, cards["gpu-1"].used_memory) == (512 * MiB, 3 * MiB + 7)


def test_a_one_device_claim_uses_what_its_region_counts_under_any_uuid() -> None:
    """The fake CUDA driver of the kind tier names its cards GPU-a0a1…, not the mock inventory's
    uuids; a claim of one device holds all its region's memory on that device."""
    fake_uuid = "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae00"
    text = agent_metrics() + used_sample("train", fake_uuid, 950 * MiB)
    cards = cards_with(text)
    (train,) = cards["gpu-1"].shares
    assert (train.used_memory, cards["gpu-1"].used_memory) == (950 * MiB, 950 * MiB)
    assert cards["gpu-0"].used_memory == 0


def test_sm_utilisation_is_shown_per_share() -> None:
    cards = cards_with(in_use())
    utilisation = {s.pod: s.sm_utilisation for card in cards.values() for s in card.shares}
    assert utilisation == {"infer-a": 64, "infer-b": 0, "neighbour": 0, "train": 0}


def test_without_the_nodes_agent_usage_is_not_known() -> None:
    usage = merged([parse_agent_metrics("another-node", in_use())])
    report = build_report(recorded("slices"), recorded("claims"), recorded("pods"),
                          profile=DEFAULT, usage=usage)  # fmt: skip
    assert {card.used_memory for card in report.cards} == {None}
    assert {s.used_memory for card in report.cards for s in card.shares} == {None}
    assert {s.sm_utilisation for card in report.cards for s in card.shares} == {None}


def test_text_that_is_not_prometheus_names_the_node() -> None:
    with pytest.raises(MetricsError, match=f"agent metrics of node {NODE}: "):
        parse_agent_metrics(NODE, "<html>502 Bad Gateway</html>\n")
