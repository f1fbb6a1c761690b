"""What ``kubectl vgpu status -o json`` shows, checked against the claims' allocations; shared by
the status tests on the local control plane (``e2e/node/test_status.py``) and on kind
(``e2e/kind/scenarios_status.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from e2e.cluster.client import Json
from e2e.pods import only_result
from vgpu_bridge.core.quantity import parse_quantity


@dataclass(frozen=True)
class ShownShare:
    """A claim's one allocation result, the view's card it names, and the claim's share there."""

    result: Json
    card: Json
    share: Json


def card_of(document: Json, node: str, device: str) -> Json:
    """The view's one card of ``device`` on ``node``."""
    (card,) = [c for c in document["cards"] if (c["node"], c["device"]) == (node, device)]
    found: Json = card
    return found


def shown_as_allocated(document: Json, claims: Mapping[str, Json]) -> dict[str, ShownShare]:
    """Each claim's share (``claims`` by pod name) as the view shows it on the card the claim's
    allocation names; checked to be that pod's and to book the memory the claim consumed."""
    shown: dict[str, ShownShare] = {}
    for pod, claim in claims.items():
        result = only_result(claim)
        card = card_of(document, result["pool"], result["device"])
        (share,) = [s for s in card["shares"] if s["claim"] == claim["metadata"]["name"]]
        assert share["pod"] == pod
        assert share["memory"] == parse_quantity(result["consumedCapacity"]["memory"])
        shown[pod] = ShownShare(result, card, share)
    return shown
