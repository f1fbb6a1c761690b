"""Fixtures of the Volcano e2e tests: Volcano's CRDs, vc-scheduler and vc-controller-manager on the
session's control plane, our driver's cards, and our webhook registered for a namespace.

Package scope: Volcano, the cards and the webhook process exist only while this package's tests
run, so the webhook package (which publishes the same DeviceClass in its session fixtures) starts
from a clean cluster after it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster
from e2e.volcano.build import VolcanoBuild, ensure_binary
from e2e.volcano.components import Volcano, install_crds, running_volcano
from e2e.webhook.helpers import serve_namespace
from e2e.webhook.our_driver import RESOURCE, Card, publish, withdraw
from e2e.webhook.process import WebhookProcess, running_webhook
from vgpu_bridge.core import DEFAULT

#: Our webhook process of this package is registered for namespaces with this label only.
NAMESPACE_LABEL = "e2e.vgpu-bridge.io/volcano-webhook"
GRACE_S = 3


def cards(nodes: list[str]) -> dict[str, list[Card]]:
    """Two 80Gi cards on the first node, one 40Gi card on the second (200Gi in all)."""
    return {
        nodes[0]: [
            Card("gpu-0", "GPU-vc-0000", "NVIDIA H100 80GB HBM3", "80Gi"),
            Card("gpu-1", "GPU-vc-0001", "NVIDIA H100 80GB HBM3", "80Gi"),
        ],
        nodes[1]: [Card("gpu-0", "GPU-vc-1000", "NVIDIA A100-PCIE-40GB", "40Gi")],
    }


@pytest.fixture(scope="package")
def volcano_build() -> VolcanoBuild:
    return VolcanoBuild.from_env()


@pytest.fixture(scope="package")
def volcano(
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    volcano_build: VolcanoBuild,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Volcano]:
    binary = ensure_binary(volcano_build).binary
    install_crds(kube, volcano_build.crd_files())
    workdir = tmp_path_factory.mktemp("volcano")
    with running_volcano(binary, kube, e2e_cluster.kubeconfig, workdir) as running:
        yield running


@pytest.fixture(scope="package")
def volcano_cards(kube: KubeClient, fake_nodes: list[str]) -> Iterator[dict[str, list[Card]]]:
    layout = cards(fake_nodes)
    if kube.exists(f"{RESOURCE}/deviceclasses/{DEFAULT.device_class}"):
        pytest.fail(
            f"DeviceClass {DEFAULT.device_class} already exists: another package's session "
            "fixture published our driver's cards; run the Volcano package on its own or first"
        )
    slices = publish(kube, layout)
    yield layout
    withdraw(kube, slices)


@pytest.fixture(scope="package")
def volcano_webhook(
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    volcano_cards: dict[str, list[Card]],
    volcano_build: VolcanoBuild,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebhookProcess]:
    workdir = tmp_path_factory.mktemp("volcano-webhook")
    with running_webhook(
        kube,
        e2e_cluster.kubeconfig,
        workdir,
        grace_s=GRACE_S,
        namespace_label=NAMESPACE_LABEL,
        extra_args=["--volcano-version", volcano_build.version],
    ) as process:
        yield process


@pytest.fixture
def vns(
    kube: KubeClient,
    namespace: str,
    volcano: Volcano,
    volcano_webhook: WebhookProcess,
    kubelet_standin: KubeletStandIn,
) -> Iterator[str]:
    """A test namespace our webhook translates, with Volcano running and the kubelet stand-in.

    On failure, the tails of the Volcano and webhook logs are printed (pytest shows them).
    """
    serve_namespace(kube, namespace, NAMESPACE_LABEL)
    yield namespace
    assert volcano.alive(), "a Volcano component exited during the test"
    for name, log in {**volcano.logs(), "webhook": volcano_webhook.log_file}.items():
        text = log.read_text(errors="replace") if log.exists() else ""
        print(f"--- {name} (last lines) ---\n" + "\n".join(text.splitlines()[-60:]))
