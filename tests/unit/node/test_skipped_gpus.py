"""Cards the agent does not publish (a card in MIG mode; every card while NVIDIA's device plugin
is registered on the node) are said in a log line, one Warning Event on the Node per card and
reason per start, and the gauge `vgpu_bridge_agent_gpus_skipped`; with none left to publish the
agent waits as on a node without GPUs."""

from __future__ import annotations

import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry, generate_latest

from tests.integration.webhook_harness import free_port
from vgpu_bridge.kube import KubeApi, KubeConfigError, KubeError
from vgpu_bridge.node.gpus import MIG_ENABLED, Gpu, Inventory, SkippedGpu
from vgpu_bridge.node.no_gpu import wait_for_gpus
from vgpu_bridge.node.skipped_gpus import (
    DEVICE_PLUGIN_PRESENT,
    NodeEvents,
    NoShareableGpu,
    ShareableGpus,
    SkippedGauge,
    device_plugin_gpus,
)

NODE = "gpu-node-1"
GPU = Gpu(index=0, uuid="GPU-0", product_name="NVIDIA H100", memory=80 << 30)
MIG_CARD = SkippedGpu(index=1, uuid="GPU-1", reason=MIG_ENABLED)
Json = dict[str, Any]


class NodeApi(KubeApi):
    """Our Node (its capacity set by the test) and the Events posted about it."""

    def __init__(self) -> None:
        super().__init__(client.ApiClient(client.Configuration()))
        self.capacity: Json = {"cpu": "8"}
        self.events: list[tuple[str, Json]] = []
        self.node_reads = 0
        self.broken: Exception | None = None
        self.slices = {"gpu-node-1-gpu.vgpu-bridge.io-abcde"}  # an earlier run's
        self.slice_queries: list[Any] = []

    def list(self, path: str, **query: Any) -> Json:
        assert path == "/apis/resource.k8s.io/v1/resourceslices"
        self.slice_queries.append(query)
        return {"items": [{"metadata": {"name": name}} for name in sorted(self.slices)]}

    def delete(self, path: str, *, preconditions: Json | None = None) -> Json:
        self.slices.remove(path.rsplit("/", 1)[1])
        return {}

    def get(self, path: str) -> Json:
        assert path == f"/api/v1/nodes/{NODE}"
        self.node_reads += 1
        if self.broken is not None:
            raise self.broken
        return {
            "metadata": {"name": NODE, "uid": "node-uid"},
            "status": {"capacity": self.capacity},
        }

    def create(self, path: str, body: Json, **query: Any) -> Json:
        if self.broken is not None:
            raise self.broken
        self.events.append((path, body))
        return body


def shareable(api: NodeApi, *cards: Gpu | SkippedGpu) -> ShareableGpus:
    inventory = Inventory(
        gpus=tuple(c for c in cards if isinstance(c, Gpu)),
        skipped=tuple(c for c in cards if isinstance(c, SkippedGpu)),
    )
    events = NodeEvents(api, NODE, controller="gpu.vgpu-bridge.io", wall=lambda: 0.0)
    return ShareableGpus(lambda: inventory, api=api, node=NODE, events=events)


def gauge_lines(gauge: SkippedGauge) -> list[str]:
    registry = CollectorRegistry()
    registry.register(gauge)
    text = generate_latest(registry).decode()
    return [line for line in text.splitlines() if line.startswith("vgpu_bridge_agent_gpus_skipped")]


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ({}, None),
        ({"status": {"capacity": {"cpu": "8"}}}, None),
        ({"status": {"capacity": {"nvidia.com/gpu": "0"}}}, None),
        ({"status": {"capacity": {"nvidia.com/gpu": "8"}}}, "8"),
        ({"status": {"capacity": {"nvidia.com/gpu": "lots"}}}, "lots"),
        ({"status": "broken"}, None),
    ],
    ids=["no-status", "no-gpus", "plugin-gone", "plugin", "not-a-quantity", "malformed"],
)
def test_the_device_plugin_is_there_when_the_node_has_nvidia_gpu_capacity(
    node: Json, expected: str | None
) -> None:
    assert device_plugin_gpus(node) == expected


def test_a_mig_card_is_skipped_with_one_warning_event_on_the_node_and_a_gauge() -> None:
    api = NodeApi()
    find = shareable(api, GPU, MIG_CARD)
    assert find() == (GPU,)
    assert find.unless_device_plugin((GPU,))() == (GPU,)
    assert find() == (GPU,)  # the agent looks again: no second Event
    [(path, event)] = api.events
    assert path == "/apis/events.k8s.io/v1/namespaces/default/events"
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE}
    assert (event["type"], event["reason"]) == ("Warning", "GpuSkipped")
    assert event["note"].startswith("GPU-1 not published (mig-enabled): the card is in MIG mode")
    assert event["metadata"]["name"].startswith(f"{NODE}.")
    assert gauge_lines(find.gauge) == [
        'vgpu_bridge_agent_gpus_skipped{gpu="GPU-1",reason="mig-enabled"} 1.0'
    ]


def test_every_card_in_mig_mode_leaves_nothing_to_publish_and_says_why() -> None:
    api = NodeApi()
    with pytest.raises(NoShareableGpu, match=r"every card .* skipped: GPU-1 \(mig-enabled\)"):
        shareable(api, MIG_CARD)()
    assert api.node_reads == 0  # NVML's look asks the API nothing
    assert len(api.events) == 1


def test_nvidias_device_plugin_on_the_node_stops_every_card_until_it_is_gone() -> None:
    api = NodeApi()
    api.capacity["nvidia.com/gpu"] = "4"
    find = shareable(api, GPU)
    look = find.unless_device_plugin(find())
    for _ in range(2):
        with pytest.raises(NoShareableGpu, match=r"device plugin registered nvidia.com/gpu=4"):
            look()
    [(_, event)] = api.events
    assert event["note"].startswith(f"every card not published ({DEVICE_PLUGIN_PRESENT}): NVIDIA's")
    assert gauge_lines(find.gauge) == [
        'vgpu_bridge_agent_gpus_skipped{gpu="*",reason="device-plugin-present"} 1.0'
    ]
    assert api.slices == set()  # the scheduler must not allocate from an earlier run's slice
    assert api.slice_queries[0] == {
        "fieldSelector": f"spec.nodeName={NODE},spec.driver=gpu.vgpu-bridge.io"
    }
    api.capacity["nvidia.com/gpu"] = "0"  # the kubelet zeroes a plugin's resource once it is gone
    assert look() == (GPU,)
    assert gauge_lines(find.gauge) == []


def test_a_node_that_cannot_be_read_is_a_reason_to_wait_not_to_publish() -> None:
    api = NodeApi()
    api.broken = KubeError("GET", f"/api/v1/nodes/{NODE}", 403, "forbidden")
    find = shareable(api, GPU, MIG_CARD)
    with pytest.raises(NoShareableGpu, match=f"cannot read Node {NODE}.*403"):
        find.unless_device_plugin(find())()
    assert gauge_lines(find.gauge) == [  # what is known is still said
        'vgpu_bridge_agent_gpus_skipped{gpu="GPU-1",reason="mig-enabled"} 1.0'
    ]


def test_an_event_that_cannot_be_posted_is_posted_at_the_next_look() -> None:
    api = NodeApi()
    find = shareable(api, GPU, MIG_CARD)
    events = find.events
    events.api = broken = NodeApi()
    broken.broken = KubeError("POST", "/apis/events.k8s.io/v1", 500, "etcd")
    assert find() == (GPU,)  # an Event is never a reason to stop
    events.api = api
    find()
    assert len(api.events) == 1


def test_the_waiting_agent_serves_the_skipped_gauge_and_starts_once_a_card_is_shareable() -> None:
    port = free_port()
    api = NodeApi()
    inventories = iter([Inventory(gpus=(), skipped=(MIG_CARD,)), Inventory(gpus=(GPU,))])
    events = NodeEvents(api, NODE, controller="gpu.vgpu-bridge.io")
    find = ShareableGpus(lambda: next(inventories), api=api, node=NODE, events=events)
    seen: list[str] = []

    def look() -> tuple[Gpu, ...]:
        if api.events:  # the second look: the agent is waiting and serving
            url = f"http://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=30) as response:
                seen.append(response.read().decode())
        return find()

    found = wait_for_gpus(look, stop=threading.Event(), recheck_s=0.01,
                          host_port=("127.0.0.1", port), collectors=(find.gauge,))  # fmt: skip
    assert found == (GPU,)
    assert 'vgpu_bridge_agent_gpus_skipped{gpu="GPU-1",reason="mig-enabled"} 1.0' in seen[0]
    assert "vgpu_bridge_agent_waiting_for_gpus 1.0" in seen[0]


def test_a_running_agent_sees_the_device_plugin_arrive_and_reports_it() -> None:
    api = NodeApi()
    find = shareable(api, GPU)
    find()
    assert find.device_plugin_on_node() is None
    api.broken = KubeError("GET", f"/api/v1/nodes/{NODE}", 503, "unavailable")
    with pytest.raises(NoShareableGpu, match="cannot read Node"):  # neither here nor gone
        find.device_plugin_on_node()
    api.broken = None
    api.capacity["nvidia.com/gpu"] = "2"
    assert find.device_plugin_on_node() == "2"
    assert gauge_lines(find.gauge) == [
        'vgpu_bridge_agent_gpus_skipped{gpu="*",reason="device-plugin-present"} 1.0'
    ]
    [(_, event)] = api.events
    assert DEVICE_PLUGIN_PRESENT in event["note"]
    api.capacity["nvidia.com/gpu"] = "0"
    assert find.device_plugin_on_node() is None
    assert gauge_lines(find.gauge) == []


def test_an_unusable_kubeconfig_stops_the_start_instead_of_waiting_healthy_for_ever(
    tmp_path: Path,
) -> None:
    """A Node that cannot be read now (403, the API down) is a reason to wait; a kubeconfig or
    in-cluster config that can never be read is not: the agent exits 1 saying why, as it did
    before it read its Node at start, instead of answering /healthz 200 while it waits."""
    api = KubeApi.connect_on_first_use(str(tmp_path / "no-such-kubeconfig"))
    events = NodeEvents(api, NODE, controller="gpu.vgpu-bridge.io", wall=lambda: 0.0)
    find = ShareableGpus(lambda: Inventory(gpus=(GPU,)), api=api, node=NODE, events=events)
    with pytest.raises(KubeConfigError, match="no-such-kubeconfig"):
        find.unless_device_plugin(find())()
