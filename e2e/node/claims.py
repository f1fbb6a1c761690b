"""ResourceClaims with an allocation written through the API's status subresource, as the
scheduler would write it: for bad-input tests (shapes no scheduler makes) and the benchmark
(many allocated claims without scheduling pods)."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from vgpu_bridge.core import DEFAULT

RESOURCE = "/apis/resource.k8s.io/v1"


def result(
    node: str,
    device: str = "gpu-0",
    *,
    memory: str | None = "1Gi",
    cores: str | None = "10",
    driver: str = DEFAULT.driver,
) -> Json:
    entry: Json = {
        "request": "gpu",
        "driver": driver,
        "pool": node,
        "device": device,
        "shareID": str(uuidlib.uuid4()),
    }
    consumed = {k: v for k, v in (("memory", memory), ("cores", cores)) if v is not None}
    if consumed:
        entry["consumedCapacity"] = consumed
    return entry


def allocated_claim(
    kube: KubeClient,
    namespace: str,
    name: str,
    *,
    node: str,
    results: list[Json] | None = None,
    allocate: bool = True,
) -> Json:
    """Create a claim for one share of our class and, unless `allocate` is False, allocate it
    on `node` with `results` (default: 1Gi and 10% of gpu-0)."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": DEFAULT.device_class,
                            "capacity": {"requests": {"memory": "1Gi", "cores": "10"}},
                        },
                    }
                ]
            }
        },
    }
    claim = kube.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaims", body)
    if not allocate:
        return claim
    allocation: dict[str, Any] = {
        "devices": {"results": results if results is not None else [result(node)]},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }
    claim["status"] = {"allocation": allocation}
    return kube.replace(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}/status", claim)
