"""HAMi's admission guardrails through the webhook on the real API server: a GPU pod bound to a
node by hand and a GPU pod with a privileged container (app or init) are refused with the field
and the reason; a webhook started with --allow-privileged admits and translates the latter; a
webhook started with a renamed count resource (--resource-count-name hami.io/gpu) translates a pod
that asks for hami.io/gpu and leaves nvidia.com/gpu to whoever serves it.

These webhooks are registered without the chart's matchConditions (e2e/webhook/process.py), so
every pod of their namespaces reaches them; the chart's condition matches any hami.io/ key."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster
from e2e.cluster.client import ApiError, Json
from e2e.dra_objects import quantity
from e2e.node.agent import PreparerByNode
from e2e.pods import claim_of, only_result, running_pod
from e2e.waiting import wait_for
from e2e.webhook.helpers import create_pod, gpu_pod, templates
from e2e.webhook.our_driver import Card
from e2e.webhook.process import WebhookProcess, running_webhook

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
PRIVILEGED_LABEL = "e2e.vgpu-bridge.io/webhook-privileged"
RENAMED_LABEL = "e2e.vgpu-bridge.io/webhook-renamed"
SHARE = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2048}


def refusal(kube: KubeClient, ns: str, pod: Json) -> str:
    with pytest.raises(ApiError) as refused:
        create_pod(kube, ns, pod)
    assert refused.value.status == 403, refused.value
    return refused.value.body


def privileged(pod: Json, *, init: bool) -> Json:
    """`pod` with a privileged container: its app container, or an init container without GPUs."""
    context = {"privileged": True}
    if init:
        setup = {"name": "setup", "image": pod["spec"]["containers"][0]["image"]}
        pod["spec"]["initContainers"] = [{**setup, "securityContext": context}]
    else:
        pod["spec"]["containers"][0]["securityContext"] = context
    return pod


@pytest.fixture(scope="module")
def permissive_webhook(
    kube: KubeClient, e2e_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    with running_webhook(
        kube, e2e_cluster.kubeconfig, tmp_path_factory.mktemp("privileged"), grace_s=None,
        namespace_label=PRIVILEGED_LABEL, extra_args=["--allow-privileged", "true"],
    ) as process:  # fmt: skip
        yield process
        print(process.log()[-4000:])


@pytest.fixture(scope="module")
def renamed_webhook(
    kube: KubeClient, e2e_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WebhookProcess]:
    with running_webhook(
        kube, e2e_cluster.kubeconfig, tmp_path_factory.mktemp("renamed"), grace_s=None,
        namespace_label=RENAMED_LABEL, extra_args=["--resource-count-name", "hami.io/gpu"],
    ) as process:  # fmt: skip
        yield process
        print(process.log()[-4000:])


def registered(kube: KubeClient, namespace: str, label: str, probe_limits: dict[str, int]) -> str:
    """Label `namespace` for one webhook and wait until a dry run of a GPU pod comes out
    translated."""
    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {label: "true"}}})
    probe = gpu_pod("probe", probe_limits)
    wait_for(
        lambda: "resourceClaims" in create_pod(kube, namespace, probe, dry_run=True)["spec"],
        timeout_s=20,
        what=f"the webhook to be called for namespaces labelled {label}",
    )
    return namespace


@pytest.fixture
def permissive_ns(kube: KubeClient, namespace: str, permissive_webhook: WebhookProcess) -> str:
    return registered(kube, namespace, PRIVILEGED_LABEL, {"nvidia.com/gpu": 1})


@pytest.fixture
def renamed_ns(
    kube: KubeClient,
    namespace: str,
    renamed_webhook: WebhookProcess,
    kubelet_standin: KubeletStandIn,
    _our_agents: tuple[dict[str, list[Card]], PreparerByNode],
) -> str:
    """A namespace of the renamed webhook whose pods the node agents prepare."""
    kubelet_standin.preparer = _our_agents[1]
    return registered(kube, namespace, RENAMED_LABEL, {"hami.io/gpu": 1})


def test_gpu_pod_with_node_name_is_refused_naming_spec_node_name(
    kube: KubeClient, ns: str, fake_nodes: list[str]
) -> None:
    pod = gpu_pod("pinned", SHARE)
    pod["spec"]["nodeName"] = fake_nodes[0]
    body = refusal(kube, ns, pod)
    assert "spec.nodeName: is set, so no scheduler places this pod" in body
    assert templates(kube, ns) == []
    assert kube.items(f"/api/v1/namespaces/{ns}/pods") == []


def test_pod_with_node_name_and_no_gpu_is_admitted(
    kube: KubeClient, ns: str, fake_nodes: list[str]
) -> None:
    pod = gpu_pod("plain", {"cpu": "100m"})
    pod["spec"]["nodeName"] = fake_nodes[0]
    assert create_pod(kube, ns, pod)["spec"]["nodeName"] == fake_nodes[0]


@pytest.mark.parametrize(
    ("init", "field"),
    [
        (False, "spec.containers[0].securityContext.privileged"),
        (True, "spec.initContainers[0].securityContext.privileged"),
    ],
    ids=["app-container", "init-container"],
)
def test_gpu_pod_with_privileged_container_is_refused_naming_its_field(
    kube: KubeClient, ns: str, init: bool, field: str
) -> None:
    body = refusal(kube, ns, privileged(gpu_pod("root", SHARE), init=init))
    assert f"{field}: is true in a pod that asks for a GPU share" in body
    assert "VGPU_BRIDGE_ALLOW_PRIVILEGED=true" in body
    assert templates(kube, ns) == []


@pytest.mark.parametrize("init", [False, True], ids=["app-container", "init-container"])
def test_webhook_allowing_privileged_admits_and_translates_privileged_gpu_pod(
    kube: KubeClient, permissive_ns: str, init: bool
) -> None:
    created = create_pod(kube, permissive_ns, privileged(gpu_pod("root", SHARE), init=init))
    [template] = templates(kube, permissive_ns)
    assert created["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == template
    spec = created["spec"]
    target = spec["initContainers"][0] if init else spec["containers"][0]
    assert target["securityContext"]["privileged"] is True
    assert "limits" not in spec["containers"][0]["resources"]


def test_renamed_count_resource_is_translated_into_a_claim_that_runs(
    kube: KubeClient, renamed_ns: str
) -> None:
    limits = {"hami.io/gpu": 1, "nvidia.com/gpumem": 3000}
    created = create_pod(kube, renamed_ns, gpu_pod("renamed", limits))
    assert "limits" not in created["spec"]["containers"][0]["resources"]
    [template] = templates(kube, renamed_ns)
    assert created["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == template

    pod = running_pod(kube, renamed_ns, "renamed")
    result = only_result(claim_of(kube, renamed_ns, pod))
    assert result["driver"] == "gpu.vgpu-bridge.io"
    assert quantity(result["consumedCapacity"]["memory"]) == quantity("3000Mi")


def test_renamed_count_resource_leaves_nvidia_gpu_untouched(
    kube: KubeClient, renamed_ns: str
) -> None:
    created = create_pod(kube, renamed_ns, gpu_pod("whole", {"nvidia.com/gpu": 1}))
    assert created["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert "resourceClaims" not in created["spec"]
    assert "vgpu-bridge.io/translated" not in created["metadata"].get("labels", {})
    assert templates(kube, renamed_ns) == []
