"""GPU Operator coexistence on kind (``make e2e-kind`` collects this file after ``scenarios.py``;
run only against kind's kubeconfig): the chart with ``agent.gpuOperator.enabled`` on a pool
where the Operator's per-node label turns its device plugin off on one GPU worker only.

kind-config.yaml labels both GPU workers nvidia.com/gpu.present=true, as the Operator does. Here
the first also gets nvidia.com/gpu.deploy.device-plugin=false (what docs/gpu-operator.md tells an
operator to set on our pool); the second keeps no such label, as a node where the Operator's
device plugin runs. The agent must run on the first only: never two bookkeepers of one card.
No Operator is installed (kind has no GPU and no driver to install); the agents keep kind's mock
GPUs, with which the chart mounts no driver root (``/run/nvidia/driver`` does not exist on kind's
nodes, and the mount is rendered-checked in e2e/chart/test_node_operations.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.kind.cluster import NAMESPACE, Kind, install
from e2e.kind.scenarios import agent_pods, api, kind, workers
from e2e.waiting import wait_for
from vgpu_bridge.kube import KubeApi

pytestmark = pytest.mark.e2e
__all__ = ["api", "kind", "workers"]  # fixtures, used by name
Json = dict[str, Any]
DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"


def label(api: KubeApi, node: str, value: str | None) -> None:
    api.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {DEVICE_PLUGIN_LABEL: value}}})


@pytest.fixture(scope="module", autouse=True)
def operator_pool(kind: Kind, api: KubeApi, workers: list[str]) -> Iterator[None]:
    """The first GPU worker labelled as our pool, the chart installed with the Operator block;
    afterwards the label removed and the chart's kind values installed again."""
    label(api, workers[0], "false")
    try:
        install(kind, "--set", "agent.gpuOperator.enabled=true")
        yield
    finally:
        label(api, workers[0], None)
        install(kind)


def running_agents_by_node(api: KubeApi) -> dict[str, Json]:
    """Node -> its agent pod, for agents that are Running and not being deleted."""
    return {
        pod["spec"]["nodeName"]: pod
        for pod in agent_pods(api)
        if pod.get("status", {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    }


def test_the_agent_runs_only_where_the_operators_device_plugin_is_labelled_off(
    api: KubeApi, workers: list[str]
) -> None:
    ours, operators = workers

    def placed_on_ours_only() -> dict[str, Json] | None:
        found = running_agents_by_node(api)
        everyone = {pod["spec"]["nodeName"] for pod in agent_pods(api)}
        return found if set(found) == {ours} and everyone == {ours} else None

    agents = wait_for(placed_on_ours_only, timeout_s=180, what=f"one agent, on {ours}")
    assert operators not in agents
    daemonsets = api.list(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets")["items"]
    (status,) = [d["status"] for d in daemonsets if d["metadata"]["name"].endswith("-agent")]
    assert status["desiredNumberScheduled"] == 1  # the other GPU worker is not a candidate


def test_the_agent_on_our_node_gets_ready_and_reads_no_driver_root_with_mock_gpus(
    api: KubeApi, workers: list[str]
) -> None:
    def ready_on_ours() -> Json | None:
        agent = running_agents_by_node(api).get(workers[0])
        statuses = (agent or {}).get("status", {}).get("containerStatuses") or []
        return agent if statuses and all(s["ready"] for s in statuses) else None

    agent = wait_for(ready_on_ours, timeout_s=180, what=f"the agent on {workers[0]} Ready")
    (container,) = [c for c in agent["spec"]["containers"] if c["name"] == "agent"]
    assert "VGPU_BRIDGE_DRIVER_ROOT" not in {var["name"] for var in container["env"]}
    assert "driver-root" not in {volume["name"] for volume in agent["spec"]["volumes"]}
