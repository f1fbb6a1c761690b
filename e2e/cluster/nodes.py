"""Fake nodes: Node objects made through the API, with no kubelet behind them.

The scheduler reads taints, ``spec.unschedulable``, labels and ``status.allocatable``, not the Ready
condition; we still report Ready so nothing (and nobody reading ``kubectl get nodes``) is misled.
Capacity is GPU-free on purpose: a node that lists an extended resource such as ``nvidia.com/gpu``
counts as a device-plugin node for it. The apiserver runs without the TaintNodesByCondition
admission plugin and no node-lifecycle controller runs, so no not-ready taint is ever added.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from e2e.cluster.client import Json, KubeClient

FAKE_NODE_LABEL = "e2e.vgpu-bridge.io/fake-node"
KUBELET_VERSION = "v1.36.3-standin"


def create_fake_nodes(
    client: KubeClient,
    count: int,
    *,
    prefix: str = "e2e-node-",
    labels: Mapping[str, str] | None = None,
) -> list[str]:
    """Create ``<prefix>0`` … ``<prefix>{count-1}``, each Ready and schedulable; their names."""
    names = [f"{prefix}{index}" for index in range(count)]
    for name in names:
        create_fake_node(client, name, labels=labels)
    return names


def create_fake_node(
    client: KubeClient,
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    cpu: str = "32",
    memory: str = "128Gi",
    pods: str = "110",
) -> Json:
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
        "nodeInfo": _node_info(),
    }
    node = client.patch(f"/api/v1/nodes/{name}/status", {"status": status})
    if node.get("spec", {}).get("taints"):
        node = client.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})
    return node


def delete_nodes(client: KubeClient, names: list[str]) -> None:
    for name in names:
        client.delete(f"/api/v1/nodes/{name}")


def _node_info() -> dict[str, str]:
    return {
        "machineID": "",
        "systemUUID": "",
        "bootID": "",
        "kernelVersion": "",
        "osImage": "vgpu-bridge e2e fake node",
        "containerRuntimeVersion": "none://0",
        "kubeletVersion": KUBELET_VERSION,
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }
