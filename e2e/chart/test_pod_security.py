"""Pod Security Admission on the real API server (docs/pod-security.md): the webhook's pod passes
`restricted`, the agent's needs `privileged`, and the chart refuses to install the agent into a
namespace that enforces less, saying which label to set (helm reads the namespace at install;
here ``helm template --dry-run=server``, which runs the same lookup)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from e2e.chart.rendering import CHART, KUBE_VERSION, Helm, HelmFailed, Json, one
from e2e.cluster import ApiError, KubeClient, LocalCluster

pytestmark = pytest.mark.e2e

ENFORCE = "pod-security.kubernetes.io/enforce"


def label(kube: KubeClient, namespace: str, level: str) -> None:
    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {ENFORCE: level}}})


def create_pod_dry_run(kube: KubeClient, namespace: str, workload: Json) -> str:
    """'' when the API server admits the workload's pod (dry run), else its refusal."""
    template = workload["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "psa-check", "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    }
    try:
        kube.request(
            "POST", f"/api/v1/namespaces/{namespace}/pods", body=pod, query={"dryRun": "All"}
        )
    except ApiError as refused:
        if refused.status != 403:  # not an admission refusal: the test cannot judge it
            raise
        message: str = json.loads(refused.body)["message"]
        return message
    return ""


@pytest.fixture(scope="module")
def rendered(helm: Helm) -> list[Json]:
    return helm.template()


def test_webhook_pod_is_admitted_where_restricted_is_enforced(
    kube: KubeClient, namespace: str, rendered: list[Json]
) -> None:
    label(kube, namespace, "restricted")
    assert create_pod_dry_run(kube, namespace, one(rendered, "Deployment")) == ""


@pytest.mark.parametrize("level", ["restricted", "baseline"])
def test_agent_pod_is_refused_below_privileged(
    kube: KubeClient, namespace: str, rendered: list[Json], level: str
) -> None:
    label(kube, namespace, level)
    refusal = create_pod_dry_run(kube, namespace, one(rendered, "DaemonSet"))
    assert f'violates PodSecurity "{level}:' in refusal, refusal


def test_agent_pod_is_admitted_where_privileged_is_enforced(
    kube: KubeClient, namespace: str, rendered: list[Json]
) -> None:
    label(kube, namespace, "privileged")
    assert create_pod_dry_run(kube, namespace, one(rendered, "DaemonSet")) == ""


def render_on(helm: Helm, cluster: LocalCluster, namespace: str, **values: Any) -> str:
    """helm template with the cluster's namespace looked up (as helm install does)."""
    return helm.run(
        "template", "vb", str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION,
        "--dry-run=server", "--kubeconfig", str(cluster.kubeconfig), values=values,
    )  # fmt: skip


@pytest.mark.parametrize("level", ["restricted", "baseline"])
def test_install_into_a_namespace_enforcing_less_than_privileged_says_which_label_to_set(
    helm: Helm, kube: KubeClient, e2e_cluster: LocalCluster, namespace: str, level: str
) -> None:
    label(kube, namespace, level)
    with pytest.raises(HelmFailed) as refused:
        render_on(helm, e2e_cluster, namespace)
    message = str(refused.value)
    assert f'namespace {namespace} enforces Pod Security level "{level}"' in message
    fix = f"kubectl label namespace {namespace} {ENFORCE}=privileged --overwrite"
    assert fix in message


@pytest.mark.parametrize(
    ("level", "values"),
    [
        ("privileged", {}),
        ("", {}),  # unlabelled: the cluster's default decides, which helm cannot read
        ("restricted", {"agent": {"enabled": False}}),
        ("restricted", {"podSecurity": {"checkNamespace": False}}),
    ],
    ids=["privileged", "unlabelled", "restricted-without-agent", "restricted-check-off"],
)
def test_install_goes_ahead_where_the_agent_may_run_or_is_not_installed(
    helm: Helm,
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    namespace: str,
    level: str,
    values: dict[str, Any],
) -> None:
    if level:
        label(kube, namespace, level)
    assert "kind: Deployment" in render_on(helm, e2e_cluster, namespace, **values)
