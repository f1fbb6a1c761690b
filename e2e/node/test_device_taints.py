"""Device health on the real control plane: a fault injected into one of the agent's two mock
cards (its health file under the agent's plugin dir) shows as a device taint in the agent's
slice, kube-scheduler places every new share on the other card and, once that card is full,
leaves the next pod Pending; when the card heals the taint goes and it takes shares again."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from e2e.dra_objects import share_template
from e2e.node.conftest import AgentOnNode
from e2e.pods import claim_of, get_pod, only_result, running_pod, unschedulable_condition
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeApi
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.publisher import SlicePublisher
from vgpu_bridge.node.slices import DeviceTaint

pytestmark = pytest.mark.e2e
RESOURCE = "/apis/resource.k8s.io/v1"
KEY = f"{DEFAULT.driver}/unhealthy"
SHARE = {"memory": "20Gi", "cores": "10"}  # two fill the healthy 40Gi card (gpu-1)


def _health_file(agent_on_node: AgentOnNode, device: str) -> Path:
    return agent_on_node.agent.dra_socket.parent / "mock-health" / device


def _devices(kube: KubeClient, node: str) -> dict[str, Json]:
    selector = f"spec.nodeName={node},spec.driver={DEFAULT.driver}"
    slices = kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector)
    return {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}


def _taints(kube: KubeClient, node: str, device: str) -> list[Json]:
    taints: list[Json] = _devices(kube, node).get(device, {}).get("taints", [])
    return taints


def _create_share_pod(kube: KubeClient, ns: str, name: str, node: str) -> None:
    template = share_template(name, device_class_name=DEFAULT.device_class, capacity=SHARE)
    kube.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", template)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{"name": "main", "image": "registry.invalid/e2e/never-pulled:1",
                            "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
        },
    }  # fmt: skip
    kube.create(f"/api/v1/namespaces/{ns}/pods", body)


def _card_of(kube: KubeClient, ns: str, name: str) -> str:
    """The device the pod's share was allocated on, once the pod runs."""
    pod = running_pod(kube, ns, name, timeout_s=90)
    device: str = only_result(claim_of(kube, ns, pod))["device"]
    return device


def test_a_tainted_mock_card_receives_no_new_share_until_it_heals(
    kube: KubeClient, namespace: str, agent_on_node: AgentOnNode
) -> None:
    node = agent_on_node.node
    wait_for(lambda: len(_devices(kube, node)) == 2, timeout_s=30, what="the agent's two cards")
    fault = _health_file(agent_on_node, "gpu-0")  # the 80Gi card: room for four shares
    fault.parent.mkdir(exist_ok=True)
    fault.write_text("79\n")  # XID 79: the GPU has fallen off the bus
    [taint] = wait_for(
        lambda: _taints(kube, node, "gpu-0") or None, timeout_s=60, what="gpu-0's taint"
    )
    assert (taint["key"], taint["value"], taint["effect"]) == (KEY, "xid-79", "NoSchedule")
    assert _taints(kube, node, "gpu-1") == []

    for name in ("first", "second"):
        _create_share_pod(kube, namespace, name, node)
        assert _card_of(kube, namespace, name) == "gpu-1"
    _create_share_pod(kube, namespace, "third", node)  # fits only on the tainted card
    wait_for(lambda: unschedulable_condition(kube, namespace, "third"), timeout_s=60,
             what="kube-scheduler to find no card for the third share")  # fmt: skip
    assert not get_pod(kube, namespace, "third")["spec"].get("nodeName")

    fault.unlink()  # healthy again
    wait_for(lambda: not _taints(kube, node, "gpu-0"), timeout_s=60, what="gpu-0's taint gone")
    assert _card_of(kube, namespace, "third") == "gpu-0"
    _create_share_pod(kube, namespace, "fourth", node)
    assert _card_of(kube, namespace, "fourth") == "gpu-0"


def test_a_tainted_pool_is_published_as_sent_and_an_unchanged_one_is_not_rewritten(
    kube: KubeClient, agent_api: KubeApi, agent_node: str
) -> None:
    gpus = [Gpu(index=i, uuid=f"GPU-taint-{i}", product_name="NVIDIA H100", memory=80 * 2**30)
            for i in range(2)]  # fmt: skip
    publisher = SlicePublisher(agent_api, node=agent_node, profile=DEFAULT, gpus=gpus)
    publisher.sync()
    taint = DeviceTaint(KEY, "xid-48", "NoSchedule", "2026-12-01T17:00:00Z")
    publisher.set_taints({"GPU-taint-1": taint})
    assert publisher.sync().changed  # the API server kept the taint (DRADeviceTaints is on)
    assert _taints(kube, agent_node, "gpu-1") == [taint.to_json()]
    assert not publisher.sync().changed  # our timeAdded is kept: no rewrite every resync
    publisher.set_taints({})
    assert publisher.sync().changed
    assert all("taints" not in d for d in _devices(kube, agent_node).values())
