"""The words an Event uses for what a claim template asks: cards, memory, cores, alternatives."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.core import DEFAULT
from vgpu_bridge.webhook.event_notes import Admitted, claim_text, occurrences


def exactly(count: int = 1, **capacity: str) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": DEFAULT.device_class, "count": count}
    if capacity:
        body["capacity"] = {"requests": capacity}
    return body


def spec(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


CASES = [
    pytest.param(spec({"exactly": exactly(memory="3000Mi", cores="30")}),
                 "1 card, 3000 MiB, 30% cores", id="share"),
    pytest.param(spec({"exactly": exactly(2, memory="1000Mi", cores="0")}),
                 "2 cards, 1000 MiB, 0% cores each", id="two-cards-no-sm-limit"),
    pytest.param(spec({"exactly": exactly()}), "1 card, whole memory, 100% cores", id="whole"),
    pytest.param(spec({"exactly": exactly(memory="1.5Gi", cores="10")}),
                 "1 card, 1536 MiB, 10% cores", id="binary-units"),
    pytest.param(
        spec({"firstAvailable": [exactly(memory="10Gi", cores="20"),
                                 exactly(memory="20Gi", cores="20")]}),
        "1 card, 10240 MiB, 20% cores or 1 card, 20480 MiB, 20% cores",
        id="percentage-per-card-size",
    ),
    pytest.param(spec(), "no devices", id="empty"),
    pytest.param(spec({"exactly": exactly(memory="lots")}), "1 card, whole memory, 100% cores",
                 id="unreadable-quantity-is-not-made-up"),
]  # fmt: skip


@pytest.mark.parametrize(("claim", "text"), CASES)
def test_claim_text_says_what_each_request_books(claim: dict[str, Any], text: str) -> None:
    assert claim_text(claim, profile=DEFAULT) == text


HOSTILE_METADATA = [
    {"name": "p", "ownerReferences": 5},
    {"name": "p", "ownerReferences": ["x", {"controller": True, "name": 3}]},
    {"name": ["p"], "generateName": {"a": 1}},
    {"name": "Not_A_Name", "uid": 7},
]


@pytest.mark.parametrize("metadata", HOSTILE_METADATA, ids=range(len(HOSTILE_METADATA)))
@pytest.mark.parametrize("decision", ["denied", "translated"])
def test_malformed_metadata_makes_no_event_and_raises_nothing(
    metadata: dict[str, Any], decision: str
) -> None:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata}
    admitted = Admitted(uid="u", object=obj, namespace="team-a", decision=decision,
                        reasons=["refused"], warnings=["careful"])  # fmt: skip
    found = occurrences(admitted, profile=DEFAULT)
    assert all(o.regarding.name == "p" for o in found)
    assert all(o.lookup for o in found) or decision == "denied"  # a refused pod is never stored
