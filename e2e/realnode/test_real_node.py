"""The real node (issue 10): a real kubelet + containerd + runc runs pods placed by kube-scheduler.

Collected only with ``VGPU_REALNODE=1`` (``make e2e-realnode``); see conftest.py.
"""

from __future__ import annotations

import os

import pytest

from e2e.cluster import LocalCluster
from e2e.cluster.client import ApiError, KubeClient
from e2e.cluster.pki import KeyPair
from e2e.realnode.node import RealNode
from e2e.realnode.spike import probe_pod, run_pod

pytestmark = pytest.mark.e2e


def test_host_network_pod_runs_to_completion(real_node: tuple[LocalCluster, RealNode]) -> None:
    cluster, node = real_node
    run = run_pod(cluster.client(), node, probe_pod("plain", node.name, args=("plain", "0")))
    values = run.values()
    assert run.phase == "Succeeded", run.events
    assert run.node_name == node.name
    assert values["probe"] == "plain"
    # host network (and so the host's UTS namespace): the container sees the VM's hostname
    assert values["hostname"] == os.uname().nodename
    # a container of its own: not one of our pids, and it ran as root in a fresh pid namespace
    assert values["uid"] == "0"
    assert values["pid"] == "1"


def test_exit_status_reaches_the_api(real_node: tuple[LocalCluster, RealNode]) -> None:
    cluster, node = real_node
    run = run_pod(cluster.client(), node, probe_pod("fails", node.name, args=("fails", "3")))
    assert run.phase == "Failed", run.events
    assert run.values()["probe"] == "fails"


def test_node_registered_with_its_own_credentials(
    real_node: tuple[LocalCluster, RealNode],
) -> None:
    cluster, node = real_node
    obj = cluster.client().get(f"/api/v1/nodes/{node.name}")
    assert not obj["spec"].get("taints")
    assert obj["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://2.3.")
    assert obj["status"]["nodeInfo"]["kubeletVersion"] == cluster.version
    # the kubelet's credential is the node's identity: NodeRestriction refuses it another node
    pki = node.layout.etc / "pki"
    as_node = KubeClient(
        "127.0.0.1",
        cluster.ports.apiserver,
        cluster.ca_file,
        KeyPair(pki / "kubelet.crt", pki / "kubelet.key"),
    )
    assert as_node.get(f"/api/v1/nodes/{node.name}")["metadata"]["name"] == node.name
    other = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "not-" + node.name}}
    with pytest.raises(ApiError) as refused:
        as_node.create("/api/v1/nodes", other)
    assert refused.value.status == 403
