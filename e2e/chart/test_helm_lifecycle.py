"""`helm install`, `upgrade` and `uninstall` of the chart against a real API server (a private
control plane, so the release's cluster-wide objects meet no other test): the generated
certificate survives upgrades (the caBundle keeps matching the Secret), settings changes reach
the Deployment, uninstall runs the pre-delete hook before deleting anything (here its Job cannot
run: `--no-hooks` is the way around), and uninstall leaves nothing behind."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.chart.cluster_api import Identity, allowed
from e2e.chart.installed_webhook import Release, reachable, running_release_webhook
from e2e.chart.rendering import CHART, Helm, HelmFailed
from e2e.cluster import ApiError, KubeClient, LocalCluster, Settings, running_cluster
from e2e.waiting import wait_for

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
    *(
        f"/apis/admissionregistration.k8s.io/v1/{kind}/vgpu-bridge-{name}"
        for kind, name in [
            ("validatingadmissionpolicies", "claims-where-served"),
            ("validatingadmissionpolicybindings", "claims-where-served-excluded"),
            ("validatingadmissionpolicies", "claim-templates-where-served"),
            ("validatingadmissionpolicybindings", "claim-templates-where-served-excluded"),
            ("validatingadmissionpolicies", "nvidia-runtime"),
            ("validatingadmissionpolicybindings", "nvidia-runtime"),
        ]
    ),
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
    """tls.mode generate: the chart's CA is kept across upgrades by `lookup`."""
    kube, kubeconfig = private_cluster.client(), private_cluster.kubeconfig
    chart = str(CHART)
    generate = {"tls": {"mode": "generate"}}
    helm_on(helm, kubeconfig, "install", RELEASE, chart, "-n", NAMESPACE, "--create-namespace",
            values=generate)  # fmt: skip
    secret_ca, bundles = ca_bundles(kube)
    assert bundles == {secret_ca}
    assert "BEGIN CERTIFICATE" in base64.b64decode(secret_ca).decode()
    assert all(kube.exists(path) for path in CLUSTER_WIDE)

    upgrade = {"webhook": {"settings": {"sweepGraceSeconds": 900}}, **generate}
    helm_on(helm, kubeconfig, "upgrade", RELEASE, chart, "-n", NAMESPACE, values=upgrade)
    assert ca_bundles(kube) == (secret_ca, {secret_ca})  # lookup kept the chart's CA
    assert webhook_env(kube)["VGPU_BRIDGE_SWEEP_GRACE_SECONDS"] == "900"

    # the pre-delete hook runs first; its Job cannot run here (no kubelet), so helm gives up at
    # its timeout having deleted nothing, and the hook's account and RBAC are gone again
    hook = "vgpu-bridge-uninstall-notice"
    with pytest.raises(HelmFailed) as hook_failed:
        helm_on(helm, kubeconfig, "uninstall", RELEASE, "-n", NAMESPACE, "--wait",
                "--timeout", "15s")  # fmt: skip
    assert f"Job/{NAMESPACE}/{hook}" in str(hook_failed.value)
    assert all(kube.exists(path) for path in [*CLUSTER_WIDE, SECRET, DEPLOYMENT])
    rbac = [f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{hook}",
            f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{hook}",
            f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{hook}"]  # fmt: skip
    assert not [path for path in rbac if kube.exists(path)]
    # the way around a hook that cannot run (the failed Job stays for its logs, then its TTL)
    helm_on(helm, kubeconfig, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--no-hooks")
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


def test_network_policy_takes_the_pod_network_from_the_values_not_the_nodes(
    helm: Helm, private_cluster: LocalCluster
) -> None:
    """A node's podCIDRs at install time are no part of the policy: `helm template` and GitOps
    renderers cannot see them, and nodes added later would not be covered
    (docs/networkpolicy.md)."""
    kube = private_cluster.client()
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "netpol-cidr-node"},
            "spec": {"podCIDR": "10.99.0.0/24", "podCIDRs": ["10.99.0.0/24"],
                     "unschedulable": True}}  # fmt: skip
    kube.create("/api/v1/nodes", node)
    try:
        values = {"webhook": {"networkPolicy": {"enabled": True, "podCIDRs": ["10.244.0.0/16"]}}}
        out = helm_on(
            helm, private_cluster.kubeconfig, "template", "vb", str(CHART), "-n", NAMESPACE,
            "--dry-run=server", "--show-only", "templates/webhook-networkpolicy.yaml",
            values=values,
        )  # fmt: skip
    finally:
        kube.delete("/api/v1/nodes/netpol-cidr-node")
    [policy] = [doc for doc in yaml.safe_load_all(out) if doc]
    blocks = [peer["ipBlock"] for peer in policy["spec"]["ingress"][0]["from"] if "ipBlock" in peer]
    assert blocks[0] == {"cidr": "0.0.0.0/0", "except": ["10.244.0.0/16"]}


OWN_SECRET = f"/api/v1/namespaces/{NAMESPACE}/secrets/vgpu-bridge-webhook-cert"
OWN_RELEASE = Release(NAMESPACE, "vgpu-bridge-webhook", "vgpu-bridge-webhook",
                      "gpu-sharing-vgpu-bridge")  # fmt: skip
GPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "share"},
    "spec": {"containers": [{"name": "cuda", "image": "busybox", "resources": {
        "limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}}}]},
}  # fmt: skip


def gpu_pod_answer(kube: KubeClient, namespace: str) -> str:
    """'translated', 'untouched', or the API server's refusal, for a dry-run GPU pod."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    try:
        created = kube.request("POST", path, body=GPU_POD, query={"dryRun": "All"})
    except ApiError as error:
        return f"refused: {error}"
    labels = created["metadata"].get("labels", {})
    return "translated" if labels.get("vgpu-bridge.io/translated") == "true" else "untouched"


def trusted_ca(kube: KubeClient) -> str | None:
    """The Secret's CA once every webhook of the configuration trusts it."""
    if not kube.exists(OWN_SECRET):
        return None
    ca: str = kube.get(OWN_SECRET)["data"]["ca.crt"]
    return ca if ca_bundles_only(kube) == {ca} else None


def ca_bundles_only(kube: KubeClient) -> set[str | None]:
    return {w["clientConfig"].get("caBundle") for w in kube.get(CONFIG)["webhooks"]}


def answered(kube: KubeClient, namespace: str, prefix: str) -> str | None:
    answer = gpu_pod_answer(kube, namespace)
    return answer if answer.startswith(prefix) else None


CERTIFICATE_ACCESS = [
    # (verb, group, resource, name, namespace, allowed)
    ("get", "", "secrets", "vgpu-bridge-webhook-cert", NAMESPACE, True),
    ("update", "", "secrets", "vgpu-bridge-webhook-cert", NAMESPACE, True),
    ("create", "", "secrets", "", NAMESPACE, True),
    ("get", "", "secrets", "another", NAMESPACE, False),
    ("create", "", "secrets", "", "default", False),
    ("get", "admissionregistration.k8s.io", "mutatingwebhookconfigurations",
     "gpu-sharing-vgpu-bridge", "", True),
    ("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations",
     "gpu-sharing-vgpu-bridge", "", True),
    ("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "another", "",
     False),
]  # fmt: skip


def test_self_managed_certificate_survives_upgrade_and_goes_with_uninstall(
    helm: Helm, private_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The default mode end to end: the chart renders no certificate; the webhook, started as
    the Deployment says, makes its Secret and sets the caBundle; the API server then sends it a
    GPU pod and takes the translation; `helm upgrade` keeps Secret and caBundle (so no pod is
    refused across it); without the webhook a GPU pod is refused (fail closed); uninstall
    deletes the Secret with the configuration that owns it."""
    kube, kubeconfig = private_cluster.client(), private_cluster.kubeconfig
    chart = str(CHART)
    helm_on(helm, kubeconfig, "install", RELEASE, chart, "-n", NAMESPACE, "--create-namespace")
    assert not kube.exists(OWN_SECRET)
    assert ca_bundles_only(kube) == {None}
    account = Identity.service_account(NAMESPACE, "vgpu-bridge-webhook")
    access = [
        (verb, resource, name, namespace)
        for verb, group, resource, name, namespace, expected in CERTIFICATE_ACCESS
        if allowed(kube, account, verb=verb, group=group, resource=resource, name=name,
                   namespace=namespace) != expected
    ]  # fmt: skip
    assert not access
    team = "gpu-team"
    kube.create("/api/v1/namespaces", {"metadata": {"name": team}})
    with running_release_webhook(kube, kubeconfig, OWN_RELEASE, tmp_path / "pod") as webhook:
        ca = wait_for(lambda: trusted_ca(kube), timeout_s=60, what="the webhook's own CA")
        with reachable(kube, OWN_RELEASE, webhook.port):
            wait_for(lambda: answered(kube, team, "translated"), timeout_s=30,
                     what="a GPU pod translated")  # fmt: skip
        # the upgrade also adds a webhook entry (workloads): it must be trusted at once, not
        # after the webhook's next pass (the chart carries the live caBundle into it)
        upgrade = {"webhook": {"workloads": True, "settings": {"sweepGraceSeconds": 900}}}
        before = kube.get(OWN_SECRET)["data"]
        entries = len(kube.get(CONFIG)["webhooks"])
        helm_on(helm, kubeconfig, "upgrade", RELEASE, chart, "-n", NAMESPACE, values=upgrade)
        assert len(kube.get(CONFIG)["webhooks"]) > entries
        assert ca_bundles_only(kube) == {ca}, webhook.log()  # every entry, the new one too
        assert kube.get(OWN_SECRET)["data"] == before
        with reachable(kube, OWN_RELEASE, webhook.port):
            assert gpu_pod_answer(kube, team) == "translated"
    with reachable(kube, OWN_RELEASE, webhook.port):
        refusal = wait_for(lambda: answered(kube, team, "refused"), timeout_s=30,
                           what="a GPU pod refused without the webhook")  # fmt: skip
    assert "failed calling webhook" in refusal
    # no kubelet runs the pre-delete hook's Job here (test_install_upgrade_uninstall)
    helm_on(helm, kubeconfig, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--no-hooks")
    wait_for(lambda: not kube.exists(OWN_SECRET), timeout_s=60, what="the Secret collected")
    kube.delete(f"/api/v1/namespaces/{team}")
