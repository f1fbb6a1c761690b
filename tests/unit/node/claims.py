"""Allocated ResourceClaims as the API server returns them, for tests of the node agent."""

from __future__ import annotations

from typing import Any

from vgpu_bridge.core import DEFAULT
from vgpu_bridge.core.opaque_config import API_VERSION, KIND
from vgpu_bridge.node.gpus import Gpu

Json = dict[str, Any]
NODE = "node-a"
# the API server makes claim uids UUIDs; the agent refuses anything else
UID = "0c1a1d00-0000-4000-8000-000000000001"
GPUS = (
    Gpu(index=0, uuid="GPU-aaaa", product_name="NVIDIA H100 80GB HBM3", memory=80 * 2**30),
    Gpu(index=1, uuid="GPU-bbbb", product_name="NVIDIA H100 80GB HBM3", memory=80 * 2**30),
)
BY_NAME = {gpu.device_name: gpu for gpu in GPUS}


def result(
    device: str = "gpu-0",
    *,
    request: str = "gpu",
    memory: str | None = "3000Mi",
    cores: str | None = "30",
    pool: str = NODE,
    share_id: str | None = "7c6c2d7e-0000-4000-8000-000000000001",
) -> Json:
    consumed = {k: v for k, v in (("memory", memory), ("cores", cores)) if v is not None}
    entry: Json = {"request": request, "driver": DEFAULT.driver, "pool": pool, "device": device}
    if consumed:
        entry["consumedCapacity"] = consumed
    if share_id:
        entry["shareID"] = share_id
    return entry


def allocated_claim(
    *results: Json,
    uid: str = UID,
    name: str = "pod-gpu-x1",
    namespace: str = "team-a",
    node: str = NODE,
    priority: int | None = None,
    config: list[Json] | None = None,
) -> Json:
    allocation: Json = {
        "devices": {"results": list(results or [result()])},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }
    if priority is not None:
        parameters = {"apiVersion": API_VERSION, "kind": KIND, "priority": priority}
        config = [
            {
                "source": "FromClaim",
                "requests": ["gpu"],
                "opaque": {"driver": DEFAULT.driver, "parameters": parameters},
            }
        ]
    if config is not None:
        allocation["devices"]["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": {"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "p"}]},
    }
