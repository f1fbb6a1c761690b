"""`helm install`, `upgrade` and `uninstall` of the chart against a real API server (a private
control plane, so the release's cluster-wide objects meet no other test): the generated
certificate survives upgrades (the caBundle keeps matching the Secret), settings changes reach
the Deployment, and uninstall leaves nothing behind."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.chart.rendering import CHART, Helm, HelmFailed
from e2e.cluster import KubeClient, LocalCluster, Settings, running_cluster

pytestmark = pytest.mark.e2e

RELEASE, NAMESPACE = "vgpu-bridge", "vgpu-bridge"
CONFIG = (
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpu-sharing-vgpu-bridge"
)
SECRET = f"/api/v1/namespaces/{NAMESPACE}/secrets/vgpu-bridge-webhook-tls"
DEPLOYMENT = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/vgpu-bridge-webhook"
CLUSTER_WIDE = [
    CONFIG,
    "/apis/resource.k8s.io/v1/deviceclasses/gpu.vgpu-bridge.io",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles/vgpu-bridge-webhook",
    "/apis/rbac.authorization.k8s.io/v1/clusterroles/vgpu-bridge-agent",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/vgpu-bridge-agent",
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/vgpu-bridge-agent-own-node-slices",
    "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/vgpu-bridge-agent-own-node-slices",
]


@pytest.fixture(scope="module")
def private_cluster(e2e_settings: Settings) -> Iterator[LocalCluster]:
    with running_cluster(e2e_settings) as cluster:
        yield cluster


def helm_on(helm: Helm, kubeconfig: Path, *args: str, values: dict[str, Any] | None = None) -> str:
    return helm.run(*args, "--kubeconfig", str(kubeconfig), values=values)


def ca_bundles(kube: KubeClient) -> tuple[str, set[str]]:
    secret_ca = kube.get(SECRET)["data"]["ca.crt"]
    webhooks = kube.get(CONFIG)["webhooks"]
    return secret_ca, {w["clientConfig"]["caBundle"] for w in webhooks}


def webhook_env(kube: KubeClient) -> dict[str, str]:
    container = kube.get(DEPLOYMENT)["spec"]["template"]["spec"]["containers"][0]
    return {var["name"]: var.get("value", "") for var in container["env"]}


def test_install_upgrade_uninstall(helm: Helm, private_cluster: LocalCluster) -> None:
    kube, kubeconfig = private_cluster.client(), private_cluster.kubeconfig
    chart = str(CHART)
    helm_on(helm, kubeconfig, "install", RELEASE, chart, "-n", NAMESPACE, "--create-namespace")
    secret_ca, bundles = ca_bundles(kube)
    assert bundles == {secret_ca}
    assert "BEGIN CERTIFICATE" in base64.b64decode(secret_ca).decode()
    assert all(kube.exists(path) for path in CLUSTER_WIDE)

    upgrade = {"webhook": {"settings": {"sweepGraceSeconds": 900}}}
    helm_on(helm, kubeconfig, "upgrade", RELEASE, chart, "-n", NAMESPACE, values=upgrade)
    assert ca_bundles(kube) == (secret_ca, {secret_ca})  # lookup kept the chart's CA
    assert webhook_env(kube)["VGPU_BRIDGE_SWEEP_GRACE_SECONDS"] == "900"

    helm_on(helm, kubeconfig, "uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    left = [path for path in [*CLUSTER_WIDE, SECRET, DEPLOYMENT] if kube.exists(path)]
    assert not left


def test_install_into_the_default_namespace_is_refused_with_the_reason(
    helm: Helm, private_cluster: LocalCluster
) -> None:
    with pytest.raises(HelmFailed) as refused:
        helm_on(helm, private_cluster.kubeconfig, "install", "vb", str(CHART), "-n", "default")
    assert "install into a namespace of its own" in str(refused.value)
    configs = private_cluster.client().items(
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        labelSelector="app.kubernetes.io/instance=vb",
    )
    assert not configs
