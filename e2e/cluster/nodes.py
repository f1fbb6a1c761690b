"""Fake nodes: Node objects made through the API, with no kubelet behind them.

The scheduler reads taints, ``spec.unschedulable``, labels and ``status.allocatable``, not the Ready
condition; we still report Ready so nothing (and nobody reading ``kubectl get nodes``) is misled.
Capacity is GPU-free on purpose: a node that lists an extended resource such as ``nvidia.com/gpu``
counts as a device-plugin node for it. The apiserver runs without the TaintNodesByCondition
admission plugin and no node-lifecycle controller runs, so no not-ready taint is ever added.
The kubelet version a node reports is the cluster's own (``<apiserver gitVersion>-standin``), so a
cluster at v1.37.2 gets v1.37.2 nodes, as a real kubelet of that release would report.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from e2e.cluster.client import Json, KubeClient

FAKE_NODE_LABEL = "e2e.vgpu-bridge.io/fake-node"
#: Appended to the API server's version in ``nodeInfo.kubeletVersion``: no real kubelet runs.
STANDIN_SUFFIX = "-standin"


def create_fake_nodes(
    client: KubeClient,
    count: int,
    *,
    prefix: str = "e2e-node-",
    labels: Mapping[str, str] | None = None,
) -> list[str]:
    """Create ``<prefix>0`` … ``<prefix>{count-1}``, each Ready and schedulable; their names."""
    names = [f"{prefix}{index}" for index in range(count)]
    version = kubelet_version(client)
    for name in names:
        create_fake_node(client, name, labels=labels, version=version)
    return names


def create_fake_node(
    client: KubeClient,
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    cpu: str = "32",
    memory: str = "128Gi",
    pods: str = "110",
    version: str | None = None,
) -> Json:
    """A Ready node ``name`` whose kubelet version is ``version`` (default: ``kubelet_version``)."""
    body: Json = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                FAKE_NODE_LABEL: "true",
                **(labels or {}),
            },
        },
        "spec": {},
    }
    client.create("/api/v1/nodes", body)
    capacity = {"cpu": cpu, "memory": memory, "pods": pods}
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "capacity": capacity,
        "allocatable": capacity,
        "phase": "Running",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletStandInReady",
                "message": "fake node of the e2e tier; pods are run by the kubelet stand-in",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
        "addresses": [{"type": "Hostname", "address": name}],
        "nodeInfo": _node_info(version or kubelet_version(client)),
    }
    node = client.patch(f"/api/v1/nodes/{name}/status", {"status": status})
    if node.get("spec", {}).get("taints"):
        node = client.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})
    return node


def delete_nodes(client: KubeClient, names: list[str]) -> None:
    for name in names:
        client.delete(f"/api/v1/nodes/{name}")


def kubelet_version(client: KubeClient) -> str:
    """What the stand-in reports as its kubelet version: the API server's, e.g. v1.37.2-standin."""
    git_version = client.get("/version").get("gitVersion")
    if not isinstance(git_version, str) or not git_version.startswith("v1."):
        raise ValueError(f"/version: gitVersion {git_version!r} is not a Kubernetes release")
    return git_version + STANDIN_SUFFIX


def _node_info(kubelet: str) -> dict[str, str]:
    return {
        "machineID": "",
        "systemUUID": "",
        "bootID": "",
        "kernelVersion": "",
        "osImage": "vgpu-bridge e2e fake node",
        "containerRuntimeVersion": "none://0",
        "kubeletVersion": kubelet,
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }
