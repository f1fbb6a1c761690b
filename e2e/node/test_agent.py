"""The node agent on the real control plane: it publishes its mock GPUs for its node, pods get
shares from kube-scheduler, the kubelet stand-in prepares them through the agent's socket, the
CDI specs carry exactly the shares, and deleting a pod unprepares it and removes its files."""

from __future__ import annotations

import json
import urllib.request

import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import Json
from e2e.dra_objects import pod_with_claim_template, quantity, share_template
from e2e.node.agent import published_devices
from e2e.node.conftest import AGENT_GPUS, AgentOnNode
from e2e.pods import claim_of, only_result, running_pod
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT

pytestmark = pytest.mark.e2e
RESOURCE = "/apis/resource.k8s.io/v1"


def _share_pod(kube: KubeClient, ns: str, name: str, node: str, memory: str, cores: str) -> Json:
    template = share_template(
        name, device_class_name=DEFAULT.device_class, capacity={"memory": memory, "cores": cores}
    )
    kube.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", template)
    kube.create(
        f"/api/v1/namespaces/{ns}/pods", pod_with_claim_template(name, template=name, node=node)
    )
    return running_pod(kube, ns, name)


def _spec(agent_on_node: AgentOnNode, claim_uid: str) -> Json:
    spec: Json = json.loads(agent_on_node.agent.layout.spec_path(claim_uid).read_text())
    return spec


def test_the_agent_publishes_its_mock_gpus_for_its_node(
    kube: KubeClient, agent_on_node: AgentOnNode
) -> None:
    devices = published_devices(kube, agent_on_node.node)
    assert sorted(devices) == ["gpu-0", "gpu-1"]
    assert devices["gpu-1"]["attributes"]["uuid"] == {"string": AGENT_GPUS[1]["uuid"]}
    assert devices["gpu-1"]["capacity"]["memory"]["value"] == "40Gi"


def test_shares_scheduled_on_the_node_are_prepared_with_exactly_their_limits(
    kube: KubeClient, namespace: str, agent_on_node: AgentOnNode
) -> None:
    pods = [
        _share_pod(kube, namespace, "small", agent_on_node.node, "3000Mi", "30"),
        _share_pod(kube, namespace, "large", agent_on_node.node, "20Gi", "50"),
    ]
    uuids = {f"gpu-{i}": gpu["uuid"] for i, gpu in enumerate(AGENT_GPUS)}
    for pod, (mib, cores) in zip(pods, [(3000, 30), (20480, 50)], strict=True):
        claim = claim_of(kube, namespace, pod)
        result = only_result(claim)
        assert quantity(result["consumedCapacity"]["memory"]) == mib * 2**20
        spec = _spec(agent_on_node, claim["metadata"]["uid"])
        [device] = spec["devices"]
        assert device["containerEdits"]["env"] == [
            f"CUDA_DEVICE_MEMORY_LIMIT_0={mib}m",
            f"CUDA_DEVICE_SM_LIMIT_0={cores}",
        ]
        env = spec["containerEdits"]["env"]
        assert f"NVIDIA_VISIBLE_DEVICES={uuids[result['device']]}" in env
        assert f"CUDA_DEVICE_SM_LIMIT={cores}" in env
        answer = agent_on_node.preparer.answers[claim["metadata"]["uid"]]
        [prepared] = answer.devices
        assert prepared.share_id == result["shareID"]
        assert list(prepared.cdi_device_ids) == [
            agent_on_node.agent.layout.device_id(claim["metadata"]["uid"], 0)
        ]


def test_deleting_a_pod_unprepares_its_claim_and_removes_its_files(
    kube: KubeClient, namespace: str, agent_on_node: AgentOnNode
) -> None:
    pod = _share_pod(kube, namespace, "short-lived", agent_on_node.node, "1Gi", "10")
    uid = claim_of(kube, namespace, pod)["metadata"]["uid"]
    layout = agent_on_node.agent.layout
    assert layout.spec_path(uid).exists()
    assert layout.shared_dir(uid).is_dir()
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/short-lived")  # graceful: the stand-in acts
    wait_for(
        lambda: not layout.spec_path(uid).exists(), timeout_s=30, what="the spec to be removed"
    )
    assert not layout.shared_dir(uid).exists()
    wait_for(
        lambda: not kube.items(f"/api/v1/namespaces/{namespace}/pods"),
        timeout_s=30,
        what="the pod to be gone",
    )


def test_metrics_show_the_prepared_shares(
    kube: KubeClient, namespace: str, agent_on_node: AgentOnNode
) -> None:
    pod = _share_pod(kube, namespace, "measured", agent_on_node.node, "2Gi", "20")
    claim = claim_of(kube, namespace, pod)
    uid = claim["metadata"]["uid"]
    url = f"http://127.0.0.1:{agent_on_node.agent.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    limit = [
        line
        for line in text.splitlines()
        if line.startswith("vgpu_bridge_claim_memory_limit_bytes{") and uid in line
    ]
    assert len(limit) == 1
    assert float(limit[0].rsplit(" ", 1)[1]) == 2 * 2**30
    assert "vgpu_bridge_gpu_memory_allocated_bytes{" in text
    [prepared] = [
        line
        for line in text.splitlines()
        if line.startswith(
            'vgpu_bridge_claim_call_seconds_count{call="prepare",decision="prepared"}'
        )
    ]
    assert float(prepared.rsplit(" ", 1)[1]) >= 1


def test_slices_the_kubelet_wipes_are_republished_by_the_running_agent(
    kube: KubeClient, agent_on_node: AgentOnNode
) -> None:
    selector = f"spec.nodeName={agent_on_node.node},spec.driver={DEFAULT.driver}"
    for item in kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector):
        kube.delete(f"{RESOURCE}/resourceslices/{item['metadata']['name']}")  # kubelet start
    slices = wait_for(
        lambda: kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector) or None,
        timeout_s=20,
        what="the agent to republish its slices",
    )
    assert sorted(d["name"] for s in slices for d in s["spec"]["devices"]) == ["gpu-0", "gpu-1"]


def test_a_claim_shared_by_two_pods_is_prepared_once_and_kept_until_the_last_pod_goes(
    kube: KubeClient, namespace: str, agent_on_node: AgentOnNode
) -> None:
    claim_body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "shared"},
        "spec": share_template(
            "x", device_class_name=DEFAULT.device_class, capacity={"memory": "4Gi", "cores": "40"}
        )["spec"]["spec"],
    }
    kube.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaims", claim_body)
    for name in ("first", "second"):
        pod = pod_with_claim_template(name, template="unused", node=agent_on_node.node)
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
        kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    for name in ("first", "second"):
        running_pod(kube, namespace, name)
    claim = kube.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/shared")
    uid, layout = claim["metadata"]["uid"], agent_on_node.agent.layout
    [device] = _spec(agent_on_node, uid)["devices"]
    assert device["containerEdits"]["env"] == [
        "CUDA_DEVICE_MEMORY_LIMIT_0=4096m",
        "CUDA_DEVICE_SM_LIMIT_0=40",
    ]

    kube.delete(f"/api/v1/namespaces/{namespace}/pods/first")
    wait_for(
        lambda: (
            not kube.items(
                f"/api/v1/namespaces/{namespace}/pods", fieldSelector="metadata.name=first"
            )
        ),
        timeout_s=30,
        what="the first pod to be gone",
    )
    assert layout.spec_path(uid).exists()  # the second pod still uses the share
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/second")
    wait_for(lambda: not layout.spec_path(uid).exists(), timeout_s=30, what="the spec removed")
