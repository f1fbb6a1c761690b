"""HAMi's resource names renamed outside nvidia.com/ (issue 16, item 8): a webhook started with
--resource-count-name example.com/vgpu --resource-memory-name example.com/vgpu-memory, registered
with the matchConditions the chart renders from the same names (webhook.settings), translates a
pod that asks for example.com/vgpu + example.com/vgpu-memory through the real API server into a
claim that runs on the agents' cards. The chart's default conditions (names not renamed) keep the
same pod away from the webhook: the conditions are in force, and they follow the settings."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from e2e.chart.helmbin import ensure_helm
from e2e.chart.rendering import Helm, one
from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster, Settings
from e2e.cluster.client import Json
from e2e.dra_objects import quantity
from e2e.node.agent import PreparerByNode
from e2e.pods import claim_of, only_result, running_pod
from e2e.waiting import wait_for
from e2e.webhook.helpers import create_pod, gpu_pod, templates
from e2e.webhook.our_driver import Card
from e2e.webhook.process import CONFIGS, WebhookProcess, running_webhook

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
COUNT, MEMORY = "example.com/vgpu", "example.com/vgpu-memory"
RENAMED_LABEL = "e2e.vgpu-bridge.io/webhook-renamed-outside"
DEFAULT_LABEL = "e2e.vgpu-bridge.io/webhook-renamed-default-conditions"
RENAMED_VALUES = {
    "webhook": {"settings": {"resourceCountName": COUNT, "resourceMemoryName": MEMORY}}
}


def chart_conditions(helm: Helm, values: Json) -> list[Json]:
    """The pods webhook's matchConditions as the chart renders them for `values`."""
    config = one(helm.template(values), "MutatingWebhookConfiguration")
    [pods] = [w for w in config["webhooks"] if w["name"] == "pods.vgpu-bridge.io"]
    conditions: list[Json] = pods["matchConditions"]
    return conditions


def register(
    kube: KubeClient, base: Json, *, name: str, label: str, conditions: list[Json]
) -> None:
    """A copy of the registration `base` for namespaces labelled `label`, with `conditions`."""
    body = copy.deepcopy(base)
    body["metadata"] = {"name": name}
    [hook] = body["webhooks"]
    hook["namespaceSelector"] = {"matchLabels": {label: "true"}}
    hook["matchConditions"] = conditions
    kube.create(CONFIGS, body)


@pytest.fixture(scope="module")
def renamed_webhook(
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    e2e_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebhookProcess]:
    """The webhook with the renamed names, registered twice: with the chart's conditions for
    those names (RENAMED_LABEL), and with its default conditions (DEFAULT_LABEL)."""
    helm = Helm(ensure_helm(e2e_settings).binary)
    renamed, default = chart_conditions(helm, RENAMED_VALUES), chart_conditions(helm, {})
    args = ["--resource-count-name", COUNT, "--resource-memory-name", MEMORY]
    name = "gpu-sharing-e2e-renamed-outside"
    with running_webhook(
        kube, e2e_cluster.kubeconfig, tmp_path_factory.mktemp("renamed-outside"), grace_s=None,
        namespace_label="e2e.vgpu-bridge.io/webhook-unused", config_name=name, extra_args=args,
    ) as process:  # fmt: skip
        base = kube.get(f"{CONFIGS}/{name}")
        configs = [f"{name}-chart", f"{name}-default"]
        register(kube, base, name=configs[0], label=RENAMED_LABEL, conditions=renamed)
        register(kube, base, name=configs[1], label=DEFAULT_LABEL, conditions=default)
        try:
            yield process
        finally:
            for config in configs:
                kube.delete(f"{CONFIGS}/{config}")
            print(process.log()[-4000:])


def labelled(kube: KubeClient, namespace: str, label: str) -> None:
    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {label: "true"}}})


@pytest.fixture
def renamed_ns(
    kube: KubeClient,
    namespace: str,
    renamed_webhook: WebhookProcess,
    kubelet_standin: KubeletStandIn,
    _our_agents: tuple[dict[str, list[Card]], PreparerByNode],
) -> str:
    """A namespace of the chart-conditioned registration whose pods the node agents prepare;
    ready once a dry run of a renamed pod comes out translated."""
    kubelet_standin.preparer = _our_agents[1]
    labelled(kube, namespace, RENAMED_LABEL)
    probe = gpu_pod("probe", {COUNT: 1})
    wait_for(
        lambda: "resourceClaims" in create_pod(kube, namespace, probe, dry_run=True)["spec"],
        timeout_s=20,
        what="the webhook to be called for a pod asking for example.com/vgpu",
    )
    return namespace


def test_renamed_resources_outside_nvidia_are_translated_into_a_claim_that_runs(
    kube: KubeClient, renamed_ns: str
) -> None:
    created = create_pod(kube, renamed_ns, gpu_pod("renamed", {COUNT: 1, MEMORY: 3000}))
    assert "limits" not in created["spec"]["containers"][0]["resources"]
    assert created["metadata"]["labels"]["vgpu-bridge.io/translated"] == "true"
    [template] = templates(kube, renamed_ns)
    assert created["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == template

    pod = running_pod(kube, renamed_ns, "renamed")
    result = only_result(claim_of(kube, renamed_ns, pod))
    assert result["driver"] == "gpu.vgpu-bridge.io"
    assert quantity(result["consumedCapacity"]["memory"]) == quantity("3000Mi")


def test_the_default_conditions_keep_a_renamed_pod_from_the_webhook(
    kube: KubeClient, namespace: str, renamed_webhook: WebhookProcess
) -> None:
    """The same webhook under the chart's default conditions is never asked: the pod is created
    as written (in the cluster it would wait for an extended resource no one serves)."""
    labelled(kube, namespace, DEFAULT_LABEL)
    cores = gpu_pod("probe", {"nvidia.com/gpucores": 30})  # a name not renamed, under nvidia.com/
    wait_for(
        lambda: "resourceClaims" in create_pod(kube, namespace, cores, dry_run=True)["spec"],
        timeout_s=20,
        what="the webhook to be called for namespaces labelled " + DEFAULT_LABEL,
    )
    created = create_pod(kube, namespace, gpu_pod("renamed", {COUNT: 1, MEMORY: 3000}))
    assert set(created["spec"]["containers"][0]["resources"]["limits"]) == {COUNT, MEMORY}
    assert "resourceClaims" not in created["spec"]
    assert templates(kube, namespace) == []
