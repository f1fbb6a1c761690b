"""Live usage read from the node agents' Prometheus text (`node/metrics.py` names; pure).

The agent reports the memory each claim's containers use per GPU uuid and the SM utilisation
its processes last measured (libvgpu's shared region), and each card's node, device and uuid. A
claim with no sample on a node whose agent was read uses nothing through libvgpu yet (no CUDA
process has started), so it counts 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from prometheus_client.parser import text_string_to_metric_families

from vgpu_bridge.status.model import Share

CARD_METRIC = "vgpu_bridge_gpu_memory_bytes"  # labels node, device, uuid, product
CLAIM_USED_METRIC = "vgpu_bridge_claim_memory_used_bytes"  # labels claim_uid, uuid
CLAIM_SM_METRIC = "vgpu_bridge_claim_sm_utilization_ratio"  # labels claim_uid; 0-1


class MetricsError(ValueError):
    """The text is not Prometheus exposition text."""


@dataclass(frozen=True)
class Usage:
    """The agents of `nodes`: bytes used per (claim uid, uuid) and uuid per (node, device)."""

    nodes: frozenset[str] = frozenset()
    used: dict[tuple[str, str], int] = field(default_factory=dict)
    uuids: dict[tuple[str, str], str] = field(default_factory=dict)
    sm: dict[str, int] = field(default_factory=dict)

    def of_shares(self, shares: Iterable[Share]) -> list[Share]:
        """Each share with its live memory and SM utilisation, where its node's agent was read."""
        shares = list(shares)
        devices = Counter(share.claim_uid for share in shares)
        return [self._of_share(share, only=devices[share.claim_uid] == 1) for share in shares]

    def by_card(self) -> dict[str, int]:
        """Bytes used per GPU uuid, every claim's together."""
        used: dict[str, int] = {}
        for (_, uuid), value in self.used.items():
            used[uuid] = used.get(uuid, 0) + value
        return used

    def _of_share(self, share: Share, *, only: bool) -> Share:
        """The region counts memory by the uuid the CUDA driver names; where a claim has one
        device (`only`), all its memory is on that one, whatever the driver calls the card."""
        if share.node not in self.nodes:
            return share
        uuid = self.uuids.get((share.node, share.device))
        used = self.used.get((share.claim_uid, uuid or ""))
        if used is None and only:
            used = sum(value for (uid, _), value in self.used.items() if uid == share.claim_uid)
        sm = self.sm.get(share.claim_uid, 0)
        return replace(share, used_memory=used or 0, sm_utilisation=sm)


def parse_agent_metrics(node: str, text: str) -> Usage:
    """One agent's `/metrics` text; MetricsError when it cannot be parsed."""
    used: dict[tuple[str, str], int] = {}
    uuids: dict[tuple[str, str], str] = {}
    sm: dict[str, int] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = sample.labels
                if sample.name == CARD_METRIC and labels.get("node", node) == node:
                    uuids[(node, labels.get("device", ""))] = labels.get("uuid", "")
                elif sample.name == CLAIM_USED_METRIC:
                    key = (labels.get("claim_uid", ""), labels.get("uuid", ""))
                    used[key] = used.get(key, 0) + int(sample.value)
                elif sample.name == CLAIM_SM_METRIC:
                    sm[labels.get("claim_uid", "")] = round(sample.value * 100)  # percent
    except ValueError as error:
        raise MetricsError(f"agent metrics of node {node}: {error}") from None
    return Usage(frozenset({node}), used, uuids, sm)


def merged(usages: Iterable[Usage]) -> Usage:
    """The usage of several agents together."""
    nodes: set[str] = set()
    used: dict[tuple[str, str], int] = {}
    uuids: dict[tuple[str, str], str] = {}
    sm: dict[str, int] = {}
    for usage in usages:
        nodes |= usage.nodes
        used.update(usage.used)
        uuids.update(usage.uuids)
        sm.update(usage.sm)
    return Usage(frozenset(nodes), used, uuids, sm)
