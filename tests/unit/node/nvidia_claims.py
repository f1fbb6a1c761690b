"""Claims on NVIDIA's DRA driver with our enforcer beside, as the allocator writes them (issue 37),
and NVIDIA's slice of the node (e2e/nvidia/slices.py: its plugin's shapes, not ours)."""

from __future__ import annotations

from typing import Any

from e2e.nvidia.slices import NvidiaCard, mock_uuid, nvidia_resource_slice
from tests.unit.node.claims import NODE, UID
from vgpu_bridge.core.opaque_config import GpuShareConfig
from vgpu_bridge.core.profiles import ENFORCER_DRIVER, ENFORCER_REQUEST, NVIDIA_DRIVER

Json = dict[str, Any]
CARDS = [NvidiaCard(minor=0, uuid=mock_uuid(0)), NvidiaCard(minor=1, uuid=mock_uuid(1))]
SHARE_ID = "5b4f0a11-0000-4000-8000-000000000001"
ENFORCER_SHARE_ID = "5b4f0a11-0000-4000-8000-0000000000ee"


def nvidia_slice(mode: str = "100", *, node: str = NODE, cards: list[NvidiaCard] = CARDS) -> Json:
    """NVIDIA's slice of `node` as the API server returns it (named, with a resourceVersion)."""
    published = nvidia_resource_slice(node, cards, mode)
    published["metadata"] = {"name": f"00000-{NVIDIA_DRIVER}-{node}-abcde", "resourceVersion": "7"}
    return published


def nvidia_result(
    device: str = "gpu-0",
    *,
    memory: str | None = "1Gi",
    shares: str | None = "30",
    pool: str = NODE,
    request: str = "gpu",
    share_id: str = SHARE_ID,
) -> Json:
    consumed = {k: v for k, v in (("memory", memory), ("shares", shares)) if v is not None}
    entry: Json = {"request": request, "driver": NVIDIA_DRIVER, "pool": pool, "device": device,
                   "shareID": share_id}  # fmt: skip
    if consumed:
        entry["consumedCapacity"] = consumed
    return entry


def enforcer_result(*, pool: str = NODE, device: str = "enforcer") -> Json:
    return {"request": ENFORCER_REQUEST, "driver": ENFORCER_DRIVER, "pool": pool,
            "device": device, "shareID": ENFORCER_SHARE_ID}  # fmt: skip


def enforcer_config(*, cores: int | None = None, priority: int | None = None) -> Json:
    parameters = GpuShareConfig(cores=cores, priority=priority).to_parameters()
    return {"source": "FromClaim", "requests": [ENFORCER_REQUEST],
            "opaque": {"driver": ENFORCER_DRIVER, "parameters": parameters}}  # fmt: skip


def nvidia_claim(
    *results: Json,
    uid: str = UID,
    name: str = "pod-gpu-nv",
    namespace: str = "team-a",
    node: str = NODE,
    config: list[Json] | None = None,
) -> Json:
    """An allocated claim: NVIDIA's share and our enforcer unless `results` says otherwise."""
    allocation: Json = {
        "devices": {
            "results": list(results or [nvidia_result(), enforcer_result()]),
            "config": config if config is not None else [enforcer_config(cores=30)],
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu"}, {"name": ENFORCER_REQUEST}]}},
        "status": {"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "p"}]},
    }
