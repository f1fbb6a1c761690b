"""The chart's MutatingWebhookConfiguration, registered for real in front of a running
`vgpu-bridge webhook`: its rules send pods and workloads, and its namespaceSelector keeps the
release namespace out. Only the client config differs from what the chart renders: a URL to the
local process instead of the in-cluster Service (no Service networking here). Every request is a
dry run, so the webhook writes nothing."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from e2e.chart.rendering import Helm, Json, one
from e2e.cluster import KubeClient, LocalCluster
from e2e.waiting import wait_for
from e2e.webhook.process import running_webhook

pytestmark = pytest.mark.e2e

CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
#: Only namespaces with this label reach the chart's webhooks in these tests (a value the chart
#: offers: webhook.namespaceSelectorExpressions), so the rest of the session is left alone.
SERVED = "e2e.vgpu-bridge.io/chart-webhook"
GPU_LIMITS = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}


@dataclass(frozen=True)
class Registered:
    release_namespace: str
    name: str


def label(kube: KubeClient, namespace: str) -> None:
    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {SERVED: "true"}}})


def pod_spec() -> Json:
    container = {"name": "cuda", "image": "busybox", "resources": {"limits": GPU_LIMITS}}
    return {"containers": [container]}


def pod(name: str) -> Json:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec()}


def dry_run_create(kube: KubeClient, path: str, body: Json) -> Json:
    return kube.request("POST", path, body=body, query={"dryRun": "All"})


def translated(obj: Json) -> bool:
    return bool(obj["metadata"].get("labels", {}).get("vgpu-bridge.io/translated") == "true")


@pytest.fixture(scope="module")
def registered(
    helm: Helm,
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Registered]:
    release_ns = f"vb-release-{secrets.token_hex(3)}"
    kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": release_ns}},
    )
    label(kube, release_ns)
    workdir = tmp_path_factory.mktemp("chart-webhook")
    # the helper's own registration serves namespaces with its label: none of these tests' own
    with running_webhook(kube, e2e_cluster.kubeconfig, workdir, grace_s=600) as webhook:
        values = {
            "webhook": {
                "workloads": True,  # the workload tests below; the default is pods only
                "namespaceSelectorExpressions": [
                    {"key": SERVED, "operator": "In", "values": ["true"]}
                ],
            }
        }
        config = one(helm.template(values, namespace=release_ns), "MutatingWebhookConfiguration")
        bundle = base64.b64encode(webhook.cert_file.read_bytes()).decode()
        for entry in config["webhooks"]:
            url = f"https://127.0.0.1:{webhook.port}{entry['clientConfig']['service']['path']}"
            entry["clientConfig"] = {"url": url, "caBundle": bundle}
        kube.create(CONFIGS, config)
        name = config["metadata"]["name"]
        try:
            yield Registered(release_ns, name)
        finally:
            kube.delete(f"{CONFIGS}/{name}")
            kube.delete(f"/api/v1/namespaces/{release_ns}")


@pytest.fixture
def served(kube: KubeClient, namespace: str, registered: Registered) -> str:
    label(kube, namespace)

    def reached() -> bool:
        created = dry_run_create(kube, f"/api/v1/namespaces/{namespace}/pods", pod("probe"))
        return translated(created)

    wait_for(reached, timeout_s=20, what="the chart's webhook configuration to take effect")
    return namespace


def test_pods_in_served_namespaces_are_translated(kube: KubeClient, served: str) -> None:
    created = dry_run_create(kube, f"/api/v1/namespaces/{served}/pods", pod("share"))
    assert translated(created)
    assert created["spec"]["resourceClaims"]
    assert "nvidia.com/gpumem" not in created["spec"]["containers"][0]["resources"].get(
        "limits", {}
    )


def test_the_release_namespace_is_never_mutated(
    kube: KubeClient, served: str, registered: Registered
) -> None:
    path = f"/api/v1/namespaces/{registered.release_namespace}/pods"
    created = dry_run_create(kube, path, pod("share"))
    assert not translated(created)
    assert created["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] == "3k"


def test_namespaces_outside_the_extra_selector_are_not_sent(
    kube: KubeClient, namespace: str, registered: Registered
) -> None:
    created = dry_run_create(kube, f"/api/v1/namespaces/{namespace}/pods", pod("share"))
    assert not translated(created)


WORKLOADS = [
    ("apps/v1", "Deployment", "deployments"),
    ("apps/v1", "StatefulSet", "statefulsets"),
    ("batch/v1", "Job", "jobs"),
]


@pytest.mark.parametrize(
    ("api_version", "kind", "plural"), WORKLOADS, ids=[w[1] for w in WORKLOADS]
)
def test_workloads_are_sent_and_translated(
    kube: KubeClient, served: str, api_version: str, kind: str, plural: str
) -> None:
    template = {"metadata": {"labels": {"app": "w"}}, "spec": pod_spec()}
    spec: Json = {"template": template}
    if kind != "Job":
        spec["selector"] = {"matchLabels": {"app": "w"}}
    else:
        template["spec"]["restartPolicy"] = "Never"
    body = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w"}, "spec": spec}
    created = dry_run_create(kube, f"/apis/{api_version}/namespaces/{served}/{plural}", body)
    assert created["spec"]["template"]["spec"]["resourceClaims"]


def test_cronjobs_are_sent_and_translated(kube: KubeClient, served: str) -> None:
    job_template = {"spec": {"template": {"spec": {**pod_spec(), "restartPolicy": "Never"}}}}
    body = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": job_template},
    }
    created = dry_run_create(kube, f"/apis/batch/v1/namespaces/{served}/cronjobs", body)
    assert created["spec"]["jobTemplate"]["spec"]["template"]["spec"]["resourceClaims"]
