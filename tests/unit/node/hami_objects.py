"""Pods and claims as the API server returns them, and an API server in a dict that serves them
and counts the calls: for the tests of the agent's HAMi-compatible series."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client

from tests.unit.node.claims import allocated_claim, result
from vgpu_bridge.kube import KubeApi, KubeError

Json = dict[str, Any]
NAMESPACE = "team-a"
POD_UID = "9d0d0000-0000-4000-8000-000000000001"
CONTAINER_ID = "c" * 64


def pod(
    name: str = "infer",
    *,
    uid: str = POD_UID,
    namespace: str = NAMESPACE,
    containers: dict[str, list[str]] | None = None,
    init_containers: dict[str, list[str]] | None = None,
    entries: dict[str, str] | None = None,
    generated: dict[str, str] | None = None,
    container_ids: dict[str, str] | None = None,
) -> Json:
    """A pod: `containers` and `init_containers` map names to the claim entries they list;
    `entries` maps entry names to a ResourceClaim's name, `generated` to the name of the claim
    made from a template for this pod; `container_ids`: the runtime's id of each container."""
    containers = {"main": ["gpu"]} if containers is None else containers
    generated = {"gpu": "infer-gpu-x1"} if generated is None and entries is None else generated

    def spec_of(named: dict[str, list[str]]) -> list[Json]:
        return [
            {"name": n, "image": "i", "resources": {"claims": [{"name": c} for c in claims]}}
            for n, claims in named.items()
        ]

    resource_claims = [{"name": e, "resourceClaimName": c} for e, c in (entries or {}).items()]
    resource_claims += [{"name": e, "resourceClaimTemplateName": "t"} for e in generated or {}]
    statuses = [
        {"name": n, "containerID": f"containerd://{cid}"}
        for n, cid in (container_ids or {}).items()
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {
            "containers": spec_of(containers),
            "initContainers": spec_of(init_containers or {}),
            "resourceClaims": resource_claims,
        },
        "status": {
            "resourceClaimStatuses": [
                {"name": e, "resourceClaimName": c} for e, c in (generated or {}).items()
            ],
            "containerStatuses": statuses,
        },
    }


def reserved_claim(
    name: str = "infer-gpu-x1",
    *,
    uid: str,
    pods: list[Json],
    owned: bool = True,
    results: list[Json] | None = None,
) -> Json:
    """An allocated claim reserved for `pods`; `owned`: made from a template for the first."""
    claim = allocated_claim(*(results or [result()]), uid=uid, name=name, namespace=NAMESPACE)
    claim["status"]["reservedFor"] = [
        {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
        for p in pods
    ]
    if owned:
        first = pods[0]["metadata"]
        claim["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": first["name"], "uid": first["uid"],
             "controller": True}
        ]  # fmt: skip
    return claim


def claim_path(claim: Json) -> str:
    meta = claim["metadata"]
    return f"/apis/resource.k8s.io/v1/namespaces/{meta['namespace']}/resourceclaims/{meta['name']}"


def pod_path(pod: Json) -> str:
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"


class ObjectsApi(KubeApi):
    """GETs answered from `objects` (path -> object; a missing one is 404), each call recorded."""

    def __init__(self, *objects: Json) -> None:
        super().__init__(client.ApiClient(client.Configuration()))
        self.objects: dict[str, Json] = {}
        self.calls: list[str] = []
        for obj in objects:
            self.add(obj)

    def add(self, obj: Json) -> None:
        path = claim_path(obj) if obj["kind"] == "ResourceClaim" else pod_path(obj)
        self.objects[path] = copy.deepcopy(obj)

    def get(self, path: str) -> Json:
        self.calls.append(path)
        if path not in self.objects:
            raise KubeError("GET", path, 404, "not found")
        return copy.deepcopy(self.objects[path])
