"""Issue 36 items 2 and 3 on the real node: our agent in NVML mode (no mock GPUs) over fake
NVML cards, registered by the real kubelet. No pod is needed.

- Two cards, the second in MIG mode: it is never published as shareable. The node's
  ResourceSlice has gpu-0 only (the whole card keeps its NVML index), the Node carries a
  GpuSkipped Warning Event naming the card and its reason, and the agent's /metrics says it in
  `vgpu_bridge_agent_gpus_skipped`.
- NVIDIA's device plugin registered on the node (`nvidia.com/gpu` in the Node's capacity, which
  the kubelet keeps as it keeps any advertised extended resource): the agent publishes nothing and
  says why, then publishes once the capacity is gone; when the plugin comes back under the
  running agent, the agent withdraws its devices (and keeps serving the kubelet) until it is gone
  again.

Collected only with ``VGPU_REALNODE=1`` (``make e2e-realnode``); see conftest.py.
"""

from __future__ import annotations

import urllib.request

import pytest

from e2e.cluster import LocalCluster
from e2e.cluster.client import Json
from e2e.realnode.agent import AGENT, RESOURCE, published_devices, wait_published
from e2e.realnode.node import RealNode, stop_component
from e2e.realnode.nvml_agent import fake_card_uuid, launch_nvml_agent, start_nvml_agent
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT

pytestmark = pytest.mark.e2e


def metrics(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        text: str = response.read().decode()
        return text


def served(url: str) -> str:
    """The page at `url`, or "" while nothing serves it yet."""
    try:
        return metrics(url)
    except OSError:
        return ""


def skipped_events(cluster: LocalCluster, node: str) -> list[Json]:
    events = cluster.client().items("/apis/events.k8s.io/v1/namespaces/default/events")
    return [
        event
        for event in events
        if event["reason"] == "GpuSkipped"
        and (event["regarding"]["kind"], event["regarding"]["name"]) == ("Node", node)
    ]


def test_a_card_in_mig_mode_is_not_published_and_the_node_says_why(
    real_node: tuple[LocalCluster, RealNode],
) -> None:
    cluster, node = real_node
    metrics_url = start_nvml_agent(node, cluster, cards=2, mig_modes="0,1", published=1).metrics_url

    selector = f"spec.nodeName={node.name},spec.driver={DEFAULT.driver}"
    slices = cluster.client().items(f"{RESOURCE}/resourceslices", fieldSelector=selector)
    devices = [device for s in slices for device in s["spec"].get("devices") or []]
    assert [device["name"] for device in devices] == ["gpu-0"]
    assert devices[0]["attributes"]["uuid"] == {"string": fake_card_uuid(0)}

    [event] = wait_for(lambda: skipped_events(cluster, node.name) or None, timeout_s=60,
                       what="the GpuSkipped Event on the Node")  # fmt: skip
    assert event["type"] == "Warning"
    assert event["note"].startswith(f"{fake_card_uuid(1)} not published (mig-enabled)")

    expected = (
        f'vgpu_bridge_agent_gpus_skipped{{gpu="{fake_card_uuid(1)}",reason="mig-enabled"}} 1.0'
    )
    assert expected in metrics(metrics_url)


def test_with_nvidias_device_plugin_on_the_node_nothing_is_published_until_it_is_gone(
    real_node: tuple[LocalCluster, RealNode],
) -> None:
    cluster, node = real_node
    client = cluster.client()
    if any(component.name == AGENT for component in node.components):
        stop_component(node, AGENT)
    for item in client.items(f"{RESOURCE}/resourceslices",
                             fieldSelector=f"spec.nodeName={node.name}"):  # fmt: skip
        client.delete(f"{RESOURCE}/resourceslices/{item['metadata']['name']}")
    for event in skipped_events(cluster, node.name):
        client.delete(
            f"/apis/events.k8s.io/v1/namespaces/default/events/{event['metadata']['name']}"
        )
    status = f"/api/v1/nodes/{node.name}/status"
    client.patch(status, {"status": {"capacity": {"nvidia.com/gpu": "1"}}})
    try:
        agent = launch_nvml_agent(node, cluster, cards=1, mig_modes="0", gpu_wait_seconds=1)
        [event] = wait_for(lambda: skipped_events(cluster, node.name) or None, timeout_s=60,
                           what="the device plugin's GpuSkipped Event")  # fmt: skip
        assert event["note"].startswith("every card not published (device-plugin-present)")
        gauge = 'vgpu_bridge_agent_gpus_skipped{gpu="*",reason="device-plugin-present"} 1.0'
        wait_for(lambda: gauge in served(agent.metrics_url), timeout_s=60, what="the gauge")
        assert published_devices(client, node.name) == 0
        assert not agent.registered()
    finally:
        client.patch(status, {"status": {"capacity": {"nvidia.com/gpu": None}}})
    wait_published(node, cluster, agent, published=1)
    client.patch(status, {"status": {"capacity": {"nvidia.com/gpu": "1"}}})
    try:
        wait_for(lambda: published_devices(client, node.name) == 0, timeout_s=60,
                 what="the running agent's devices withdrawn for the device plugin")  # fmt: skip
        assert agent.component.alive()  # still serving: the kubelet may unprepare its claims
    finally:
        client.patch(status, {"status": {"capacity": {"nvidia.com/gpu": None}}})
    wait_for(lambda: published_devices(client, node.name) == 1, timeout_s=60,
             what="the devices published again once the device plugin is gone")  # fmt: skip
