"""The agent at SIGTERM on the real control plane (vgpu_bridge/node/uninstall.py): with its
DaemonSet deleted (`helm uninstall`) it keeps serving the kubelet's unprepares of a terminating
pod, then removes every file of ours from the node, and posts no Event (the chart's pre-delete
hook, `vgpu-bridge uninstall-notice`, told the running pods before); with its DaemonSet there (a
rolling update, an eviction, a drain) SIGTERM changes nothing on disk. The DaemonSet is an
object only (its node selector matches no node: no pod of it runs); the agent is a real process,
the kubelet's calls go over its real gRPC socket."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster
from e2e.cluster.client import Json
from e2e.dra_objects import pod_with_claim_template, share_template
from e2e.node.agent import AgentProcess, GrpcPreparer, running_agent
from e2e.node.conftest import AGENT_GPUS
from e2e.pods import claim_of, running_pod
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.kubeletapi import dra_v1_pb2, dra_v1_pb2_grpc
from vgpu_bridge.uninstall_notice import EVENT_REASON

pytestmark = pytest.mark.e2e
RESOURCE = "/apis/resource.k8s.io/v1"
DAEMONSET = "vgpu-bridge-agent"
DRAIN_S = 20  # long enough for the test's Unprepare after SIGTERM on a busy machine
EXIT_WAIT_S = 120


def _daemonset(namespace: str) -> Json:
    labels = {"app": "e2e-uninstall"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DAEMONSET, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"e2e.vgpu-bridge.io/no-such-node": "true"},
                    "containers": [{"name": "agent", "image": "example.invalid/agent:none"}],
                },
            },
        },
    }


@dataclass
class Share:
    name: str
    claim: Json  # its ResourceClaim

    @property
    def uid(self) -> str:
        return str(self.claim["metadata"]["uid"])


@dataclass
class Node:
    agent: AgentProcess
    namespace: str
    shares: dict[str, Share]


def _share(kube: KubeClient, namespace: str, name: str, node: str) -> Share:
    template = share_template(name, device_class_name=DEFAULT.device_class,
                              capacity={"memory": "1Gi", "cores": "10"})  # fmt: skip
    kube.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates", template)
    kube.create(f"/api/v1/namespaces/{namespace}/pods",
                pod_with_claim_template(name, template=name, node=node))  # fmt: skip
    return Share(name, claim_of(kube, namespace, running_pod(kube, namespace, name)))


@contextmanager
def node_with_shares(
    kube: KubeClient, cluster: LocalCluster, namespace: str, node: str
) -> Iterator[Node]:
    """The agent (told its DaemonSet) on `node` with two shares prepared by the stand-in, which
    then stops: from there on only the test plays the kubelet."""
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/daemonsets", _daemonset(namespace))
    env = {"VGPU_BRIDGE_DAEMONSET": DAEMONSET, "VGPU_BRIDGE_DAEMONSET_NAMESPACE": namespace,
           "VGPU_BRIDGE_UNINSTALL_DRAIN_SECONDS": str(DRAIN_S)}  # fmt: skip
    with running_agent(node, cluster.kubeconfig, AGENT_GPUS, extra_env=env) as agent:
        preparer = GrpcPreparer(agent.dra_socket)
        with KubeletStandIn(kube, [node], preparer=preparer):
            shares = {n: _share(kube, namespace, n, node) for n in ("running", "leaving")}
        preparer.close()
        yield Node(agent, namespace, shares)


def _unprepare(agent: AgentProcess, share: Share, namespace: str) -> str:
    """The kubelet's NodeUnprepareResources for one claim; the claim's error ('' when done)."""
    claim = dra_v1_pb2.Claim(namespace=namespace, name=share.claim["metadata"]["name"],
                             uid=share.uid)  # fmt: skip
    with grpc.insecure_channel(f"unix:{agent.dra_socket}") as channel:
        answer = dra_v1_pb2_grpc.DRAPluginStub(channel).NodeUnprepareResources(
            dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[claim]), timeout=45
        )
    return str(answer.claims[share.uid].error)


def _sigterm_and_exit_code(agent: AgentProcess) -> int:
    assert agent.process is not None
    agent.process.terminate()
    try:
        code = agent.process.wait(timeout=EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        agent.process.kill()
        raise AssertionError(f"the agent did not exit:\n{agent.log()[-3000:]}") from None
    agent.process = None
    return code


def _ours_on_node(agent: AgentProcess) -> list[Path]:
    layout = agent.layout
    specs = [p for p in layout.cdi_dir.iterdir() if layout.claim_uid_of(p)]
    plugin_dir = agent.dra_socket.parent
    kept = [layout.vgpu_dir, plugin_dir / "checkpoint.json", plugin_dir / "agent.lock"]
    return specs + [path for path in kept if path.exists()]


def _uninstall_events(kube: KubeClient, namespace: str) -> list[Json]:
    events = kube.items(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [e for e in events if e.get("reason") == EVENT_REASON]


def test_uninstall_waits_for_the_terminating_pod_removes_our_files_and_leaves_telling_to_the_hook(
    kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, agent_node: str,
    our_device_class: str,
) -> None:  # fmt: skip
    with node_with_shares(kube, e2e_cluster, namespace, agent_node) as node:
        agent, leaving = node.agent, node.shares["leaving"]
        assert agent.layout.spec_path(leaving.uid).exists()
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/leaving")  # Terminating: no kubelet
        kube.delete(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{DAEMONSET}")
        assert agent.process is not None
        agent.process.terminate()
        # the kubelet, done with the terminating pod's containers, unprepares its claim
        assert _unprepare(agent, leaving, namespace) == ""
        assert not agent.layout.spec_path(leaving.uid).exists()
        assert _sigterm_and_exit_code(agent) == 0
        assert _ours_on_node(agent) == []
        # one teller, before anything is deleted: the hook (e2e/test_uninstall_notice.py)
        assert _uninstall_events(kube, namespace) == []


def _wait_for_log(agent: AgentProcess, text: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while text not in agent.log():
        assert time.monotonic() < deadline, f"no {text} in the agent's log:\n{agent.log()[-3000:]}"
        time.sleep(0.1)


def _node_files(agent: AgentProcess) -> dict[Path, bytes | None]:
    """Every path under the agent's root but its log and sockets, with a file's contents."""
    sockets = {agent.dra_socket, agent.registration_socket}
    paths = sorted(p for p in agent.root.rglob("*") if p.name != "agent.log" and p not in sockets)
    return {p: p.read_bytes() if p.is_file() and not p.is_socket() else None for p in paths}


def _assert_restart_left_every_file(node: Node, before: dict[Path, bytes | None]) -> None:
    agent = node.agent
    assert _node_files(agent) == before
    for share in node.shares.values():
        assert agent.layout.spec_path(share.uid).exists()
        assert agent.layout.limits_path(share.uid).exists()
        assert agent.layout.shared_dir(share.uid).is_dir()


def test_sigterm_with_the_daemonset_there_is_a_restart_and_leaves_every_file(
    kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, agent_node: str,
    our_device_class: str,
) -> None:  # fmt: skip
    with node_with_shares(kube, e2e_cluster, namespace, agent_node) as node:
        before = _node_files(node.agent)
        assert _sigterm_and_exit_code(node.agent) == 0
        _assert_restart_left_every_file(node, before)
        assert _uninstall_events(kube, namespace) == []


def test_a_daemonset_deleted_and_made_again_is_a_restart_and_leaves_every_file(
    kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, agent_node: str,
    our_device_class: str,
) -> None:  # fmt: skip
    """`kubectl replace --force` (Argo CD's Replace=true,Force=true): the DaemonSet is gone when
    SIGTERM comes, and made again (another uid) a moment later, within the agent's drain."""
    with node_with_shares(kube, e2e_cluster, namespace, agent_node) as node:
        before = _node_files(node.agent)
        daemonsets = f"/apis/apps/v1/namespaces/{namespace}/daemonsets"
        kube.delete(f"{daemonsets}/{DAEMONSET}")
        assert node.agent.process is not None
        node.agent.process.terminate()
        _wait_for_log(node.agent, '"SIGTERM: uninstall"')  # read gone: the uninstall has begun
        kube.create(daemonsets, _daemonset(namespace))
        assert _sigterm_and_exit_code(node.agent) == 0
        assert "uninstall called off" in node.agent.log()
        _assert_restart_left_every_file(node, before)
