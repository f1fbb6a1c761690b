"""GPU Operator coexistence on kind (``make e2e-kind`` collects this file after ``scenarios.py``;
run only against kind's kubeconfig): the chart with ``agent.gpuOperator.enabled`` on a pool
where the Operator's per-node label turns its device plugin off on one GPU worker only.

kind-config.yaml labels both GPU workers nvidia.com/gpu.present=true, as the Operator does. Here
the first also gets nvidia.com/gpu.deploy.device-plugin=false (what docs/gpu-operator.md tells an
operator to set on our pool); the second keeps no such label, as a node where the Operator's
device plugin runs. The agent must run on the first only: never two bookkeepers of one card.

No Operator runs (kind has no GPU). The agents run without the kind values' mock GPUs, so the
chart mounts the Operator's driver root, ``/run/nvidia/driver``, made empty on the first worker
as the driver container's hostPath would be. A tmpfs mounted there after the agent started plays
the driver container mounting its root: the agent must see it (``HostToContainer``). With no
NVML under that root the agent waits, idle, as on a node whose driver is not ready.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.kind.cluster import NAMESPACE, Kind, install
from e2e.kind.scenarios import agent_pods, api, kind, node_exec, workers
from e2e.waiting import wait_for
from vgpu_bridge.kube import KubeApi

pytestmark = pytest.mark.e2e
__all__ = ["api", "kind", "workers"]  # fixtures, used by name
Json = dict[str, Any]
DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"
DRIVER_ROOT = "/run/nvidia/driver"
MARKER = "stand-in driver root, mounted after the agent started"
CRICTL = ("crictl", "--runtime-endpoint", "unix:///run/containerd/containerd.sock")


def label(api: KubeApi, node: str, value: str | None) -> None:
    api.merge_patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {DEVICE_PLUGIN_LABEL: value}}})


def put_back_driver_root(node: str) -> None:
    node_exec(node, "sh", "-c", f"umount {DRIVER_ROOT} 2>/dev/null; rm -rf /run/nvidia")


@pytest.fixture(scope="module", autouse=True)
def operator_pool(kind: Kind, api: KubeApi, workers: list[str]) -> Iterator[None]:
    """The first GPU worker labelled as our pool with an empty driver root, the chart installed
    with the Operator block and no mock GPUs; afterwards all of it put back, kind values again."""
    ours = workers[0]
    node_exec(ours, "mkdir", "-p", DRIVER_ROOT)
    label(api, ours, "false")
    try:
        install(kind, "--set", "agent.gpuOperator.enabled=true", "--set", "agent.mockGpus=null")
        yield
    finally:
        label(api, ours, None)
        install(kind)
        put_back_driver_root(ours)


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


def agent_container_id(node: str) -> str | None:
    found = node_exec(node, *CRICTL, "ps", "--name", "^agent$", "--state", "running", "-q")
    ids = found.split()
    return ids[0] if len(ids) == 1 else None


def test_the_agent_reads_the_operators_driver_root_and_sees_its_later_mount(
    api: KubeApi, workers: list[str]
) -> None:
    ours = workers[0]
    agent = wait_for(lambda: running_agents_by_node(api).get(ours), timeout_s=180,
                     what=f"the agent on {ours} Running")  # fmt: skip
    (container,) = [c for c in agent["spec"]["containers"] if c["name"] == "agent"]
    env = {var["name"]: var.get("value") for var in container["env"]}
    assert env["VGPU_BRIDGE_DRIVER_ROOT"] == DRIVER_ROOT
    assert env["VGPU_BRIDGE_DRIVER_ROOT_MOUNT"] == "/driver-root"
    container_id = wait_for(lambda: agent_container_id(ours), timeout_s=60, what="agent container")

    def in_the_agent(*command: str) -> str:
        return node_exec(ours, *CRICTL, "exec", container_id, *command).strip()

    def python_in_the_agent(code: str) -> str:
        return in_the_agent("python3", "-c", code)  # the image has Python, not a shell

    def seen_by_the_agent() -> str:
        return python_in_the_agent("import os; print(sorted(os.listdir('/driver-root')))")

    assert seen_by_the_agent() == "[]"  # the empty directory, as the agent started with it
    write = "try: open('/driver-root/x', 'w')\nexcept OSError as e: print(e.errno)"
    assert python_in_the_agent(write) == str(errno.EROFS)  # mounted read-only
    node_exec(ours, "mount", "-t", "tmpfs", "-o", "size=1m", "stand-in-driver", DRIVER_ROOT)
    node_exec(ours, "sh", "-c", f"echo '{MARKER}' > {DRIVER_ROOT}/marker")
    assert wait_for(
        lambda: seen_by_the_agent() == "['marker']", timeout_s=30, what="the mount in the agent"
    )
    assert python_in_the_agent("print(open('/driver-root/marker').read())") == MARKER
