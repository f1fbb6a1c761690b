"""`helm uninstall` leaves none of what the webhook made at run time: its claim templates and its
certificate Secret (tls.mode self-managed) are owned by the release's MutatingWebhookConfiguration,
so the real garbage collector deletes them once helm has deleted it; and `helm install` again
works over what an interrupted uninstall or an older release left (an ownerless Secret and
template: the chart renders neither, the webhook adopts both). On a private control plane, the
webhook run with the Deployment's env (e2e/chart/installed_webhook.py)."""

from __future__ import annotations

import base64
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.chart.cluster_api import Identity, allowed
from e2e.chart.installed_webhook import Release, reachable, running_release_webhook
from e2e.chart.rendering import CHART, Helm
from e2e.cluster import ApiError, KubeClient, LocalCluster, Settings, running_cluster
from e2e.cluster.client import Json
from e2e.waiting import wait_for
from vgpu_bridge.core.claims import claim_template, template_name
from vgpu_bridge.webhook import certificates
from vgpu_bridge.webhook.cert_keeper import KEYS, LABELS, TLS_TYPE

pytestmark = pytest.mark.e2e

RELEASE, NAMESPACE, TEAM = "vgpu-bridge", "vgpu-bridge", "gpu-team"
CONFIGURATION = "gpu-sharing-vgpu-bridge"
CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
SECRET = f"/api/v1/namespaces/{NAMESPACE}/secrets/vgpu-bridge-webhook-cert"
TEMPLATES = f"/apis/resource.k8s.io/v1/namespaces/{TEAM}/resourceclaimtemplates"
OURS = "app.kubernetes.io/managed-by=vgpu-bridge"
WEBHOOK = Release(NAMESPACE, "vgpu-bridge-webhook", "vgpu-bridge-webhook", CONFIGURATION)
GPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "share"},
    "spec": {"containers": [{"name": "cuda", "image": "busybox", "resources": {
        "limits": {"nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}}}]},
}  # fmt: skip


@pytest.fixture(scope="module")
def private_cluster(e2e_settings: Settings) -> Iterator[LocalCluster]:
    with running_cluster(e2e_settings) as cluster:
        yield cluster


def helm_on(helm: Helm, cluster: LocalCluster, *args: str) -> str:
    return helm.run(*args, "--kubeconfig", str(cluster.kubeconfig))


def left_over_secret() -> Json:
    """The Secret as the webhook writes it, without its owner: what an uninstall whose garbage
    collection did not run to the end leaves."""
    names = certificates.service_names(WEBHOOK.service, NAMESPACE)
    material = certificates.issue(f"{WEBHOOK.service}-ca", names=names,
                                  now=datetime.datetime.now(datetime.UTC))  # fmt: skip
    data = {key: base64.b64encode(getattr(material, field)).decode() for field, key in KEYS.items()}
    return {"apiVersion": "v1", "kind": "Secret", "type": TLS_TYPE, "data": data,
            "metadata": {"name": "vgpu-bridge-webhook-cert", "labels": LABELS}}  # fmt: skip


def left_over_template() -> Json:
    """One of our templates as the previous release (fdf5730) made it: labelled ours, no owner."""
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.vgpu-bridge.io", "count": 1}}]}}  # fmt: skip
    return claim_template(spec, name=template_name(spec), namespace=TEAM)


def owners(kube: KubeClient, path: str) -> list[Json] | None:
    if not kube.exists(path):
        return None
    found: list[Json] | None = kube.get(path)["metadata"].get("ownerReferences")
    return found


def the_owner(kube: KubeClient) -> list[Json]:
    uid = kube.get(f"{CONFIGS}/{CONFIGURATION}")["metadata"]["uid"]
    return [{"apiVersion": "admissionregistration.k8s.io/v1",
             "kind": "MutatingWebhookConfiguration", "name": CONFIGURATION, "uid": uid,
             "blockOwnerDeletion": False, "controller": False}]  # fmt: skip


def ours_in_team(kube: KubeClient) -> list[str]:
    return sorted(t["metadata"]["name"] for t in kube.items(TEMPLATES, labelSelector=OURS))


def translated(kube: KubeClient, name: str) -> Json | None:
    """A GPU pod created for real (its template is made), once the webhook translates it."""
    pod: dict[str, Any] = {**GPU_POD, "metadata": {"name": name}}
    try:
        created = kube.create(f"/api/v1/namespaces/{TEAM}/pods", pod)
    except ApiError:  # refused: the API server has not yet picked up where the webhook is
        return None
    return created if created["spec"].get("resourceClaims") else None


def test_uninstall_deletes_the_webhooks_templates_and_secret_and_install_works_over_leftovers(
    helm: Helm, private_cluster: LocalCluster, tmp_path: Path
) -> None:
    kube = private_cluster.client()
    for namespace in (NAMESPACE, TEAM):
        kube.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    kube.create(f"/api/v1/namespaces/{NAMESPACE}/secrets", left_over_secret())
    old = left_over_template()
    kube.create(TEMPLATES, old)
    helm_on(helm, private_cluster, "install", RELEASE, str(CHART), "-n", NAMESPACE)
    account = Identity.service_account(NAMESPACE, "vgpu-bridge-webhook")
    reads = {name: allowed(kube, account, verb="get", group="admissionregistration.k8s.io",
                           resource="mutatingwebhookconfigurations", name=name)
             for name in (CONFIGURATION, "another")}  # fmt: skip
    assert reads == {CONFIGURATION: True, "another": False}
    with running_release_webhook(kube, private_cluster.kubeconfig, WEBHOOK, tmp_path) as webhook:
        owner = the_owner(kube)
        adopted = wait_for(lambda: owners(kube, SECRET), timeout_s=60, what="the Secret adopted")
        assert adopted == owner, webhook.log()[-3000:]
        path = f"{TEMPLATES}/{old['metadata']['name']}"
        assert wait_for(lambda: owners(kube, path), timeout_s=60,
                        what="the old template adopted") == owner  # fmt: skip
        with reachable(kube, WEBHOOK, webhook.port):
            pod = wait_for(lambda: translated(kube, "share"), timeout_s=30, what="a GPU pod")
        [claim] = pod["spec"]["resourceClaims"]
        made = f"{TEMPLATES}/{claim['resourceClaimTemplateName']}"
        assert owners(kube, made) == owner
    assert len(ours_in_team(kube)) == 2
    # --no-hooks: the pre-delete hook's Job cannot run here (no kubelet); it deletes nothing
    helm_on(helm, private_cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--no-hooks")
    wait_for(lambda: not kube.exists(SECRET) and not ours_in_team(kube), timeout_s=60,
             what="the garbage collector to delete the Secret and the templates")  # fmt: skip
    helm_on(helm, private_cluster, "install", RELEASE, str(CHART), "-n", NAMESPACE)  # again
    helm_on(helm, private_cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--no-hooks")
