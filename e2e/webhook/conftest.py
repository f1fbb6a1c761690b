"""Fixtures of the webhook e2e tests: our driver's cards (served by real node agents), the webhook
process, and a namespace the webhook is registered for, whose pods the agents prepare."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster
from e2e.node.agent import GrpcPreparer, PreparerByNode
from e2e.webhook.helpers import serve_namespace
from e2e.webhook.our_driver import Card, serve_cards
from e2e.webhook.process import NAMESPACE_LABEL, WebhookProcess, running_webhook

GRACE_S = 3


@pytest.fixture(scope="session")
def _our_agents(
    kube: KubeClient, e2e_cluster: LocalCluster, fake_nodes: list[str]
) -> Iterator[tuple[dict[str, list[Card]], PreparerByNode]]:
    """The real node agent (mock GPUs) on each fake node publishes these cards and prepares the
    pods bound there (through the kubelet stand-in, in tests that use `ns`)."""
    cards = {
        fake_nodes[0]: [
            Card("gpu-0", "GPU-e2e-0000", "NVIDIA H100 80GB HBM3", "80Gi"),
            Card("gpu-1", "GPU-e2e-0001", "NVIDIA H100 80GB HBM3", "80Gi"),
        ],
        fake_nodes[1]: [Card("gpu-0", "GPU-e2e-1000", "NVIDIA A100-PCIE-40GB", "40Gi")],
    }
    with serve_cards(kube, e2e_cluster.kubeconfig, cards) as agents:
        preparer = PreparerByNode({a.node: GrpcPreparer(a.dra_socket) for a in agents})
        yield cards, preparer
        preparer.close()


@pytest.fixture(scope="session")
def our_cards(
    _our_agents: tuple[dict[str, list[Card]], PreparerByNode],
) -> dict[str, list[Card]]:
    return _our_agents[0]


@pytest.fixture(scope="session")
def webhook(
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    our_cards: dict[str, list[Card]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebhookProcess]:
    workdir = tmp_path_factory.mktemp("webhook")
    with running_webhook(kube, e2e_cluster.kubeconfig, workdir, grace_s=GRACE_S) as process:
        yield process
        print(process.log()[-4000:])  # shown by pytest for failed tests


@pytest.fixture
def ns(
    kube: KubeClient,
    namespace: str,
    webhook: WebhookProcess,
    kubelet_standin: KubeletStandIn,
    _our_agents: tuple[dict[str, list[Card]], PreparerByNode],
) -> str:
    """A test namespace the webhook is registered for; its pods are prepared by the agents."""
    kubelet_standin.preparer = _our_agents[1]
    serve_namespace(kube, namespace, NAMESPACE_LABEL)
    return namespace
