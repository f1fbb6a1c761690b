"""Fixtures of the node-agent e2e tests: a fake node of their own (so the webhook tests' hand-made
slices on the session's fake nodes are never touched), the agent's API client, and our
DeviceClass while these tests run."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from e2e.cluster import KubeClient, LocalCluster, create_fake_node
from e2e.cluster.client import ApiError
from e2e.dra_objects import device_class
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
def our_device_class(kube: KubeClient) -> Iterator[str]:
    """Our DeviceClass, created for these tests unless someone else already made it."""
    body = device_class(DEFAULT.device_class, driver=DEFAULT.driver)
    try:
        kube.create(f"{RESOURCE}/deviceclasses", body)
        created = True
    except ApiError as error:
        if error.status != 409:
            raise
        created = False
    yield DEFAULT.device_class
    if created:
        kube.delete(f"{RESOURCE}/deviceclasses/{DEFAULT.device_class}")
