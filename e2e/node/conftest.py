"""Fixtures of the node-agent e2e tests: a fake node of their own (so the webhook tests' hand-made
slices on the session's fake nodes are never touched), the agent's API client, and our
DeviceClass while these tests run. A test module that overrides `agent_driver` gets the agent and
the DeviceClass under that driver name."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster, create_fake_node
from e2e.cluster.client import created_unless_present
from e2e.dra_objects import device_class
from e2e.node.agent import AgentProcess, GrpcPreparer, remove_node, running_agent
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.kube import KubeApi

RESOURCE = "/apis/resource.k8s.io/v1"
AGENT_NODE_LABEL = "e2e.vgpu-bridge.io/agent-node"


@pytest.fixture
def agent_node(kube: KubeClient) -> Iterator[str]:
    """A fresh Ready node for one test; deleted, with our slices on it, afterwards."""
    name = f"e2e-agent-{secrets.token_hex(3)}"
    create_fake_node(kube, name, labels={AGENT_NODE_LABEL: "true"})
    yield name
    selector = f"spec.nodeName={name},spec.driver={DEFAULT.driver}"
    for item in kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector):
        kube.delete(f"{RESOURCE}/resourceslices/{item['metadata']['name']}")
    kube.delete(f"/api/v1/nodes/{name}")


@pytest.fixture(scope="session")
def agent_api(e2e_cluster: LocalCluster) -> KubeApi:
    """The API client the agent itself uses (`KubeApi` from the kubeconfig)."""
    return KubeApi.connect(str(e2e_cluster.kubeconfig))


@pytest.fixture(scope="module")
def agent_driver() -> str:
    """The DRA driver name the module's agent runs under (its DeviceClass has the same name)."""
    return DEFAULT.driver


@contextmanager
def device_class_present(kube: KubeClient, driver: str) -> Iterator[str]:
    """The DeviceClass named `driver` for that driver (the chart's selector), created unless
    someone else already made it, and then removed again."""
    with created_unless_present(
        kube, f"{RESOURCE}/deviceclasses", device_class(driver, driver=driver)
    ) as name:
        yield name


@pytest.fixture(scope="module")
def our_device_class(kube: KubeClient, agent_driver: str) -> Iterator[str]:
    """Our DeviceClass while these tests run."""
    with device_class_present(kube, agent_driver) as name:
        yield name


AGENT_GPUS = [
    {"uuid": "GPU-agent-0000", "productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"},
    {"uuid": "GPU-agent-0001", "productName": "NVIDIA A100-PCIE-40GB", "memory": "40Gi"},
]


@dataclass
class AgentOnNode:
    node: str
    agent: AgentProcess
    preparer: GrpcPreparer
    standin: KubeletStandIn


@pytest.fixture(scope="module")
def agent_on_node(
    kube: KubeClient, e2e_cluster: LocalCluster, our_device_class: str, agent_driver: str
) -> Iterator[AgentOnNode]:
    """A node of its own with `vgpu-bridge node` (mock GPUs) and a kubelet stand-in that
    prepares its pods through the agent's socket."""
    node = f"e2e-agent-{secrets.token_hex(3)}"
    create_fake_node(kube, node, labels={AGENT_NODE_LABEL: "true"})
    try:
        with running_agent(node, e2e_cluster.kubeconfig, AGENT_GPUS, driver=agent_driver) as agent:
            preparer = GrpcPreparer(agent.dra_socket)
            with KubeletStandIn(kube, [node], preparer=preparer) as standin:
                yield AgentOnNode(node, agent, preparer, standin)
            preparer.close()
    finally:
        remove_node(kube, node, agent_driver)
