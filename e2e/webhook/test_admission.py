"""The webhook on the real control plane: workloads created through the API come out translated,
kube-controller-manager makes their claims, kube-scheduler allocates shares of our driver's
devices, dry runs write nothing, and the sweeper removes templates nothing uses any more."""

from __future__ import annotations

import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import ApiError, Json
from e2e.dra_objects import quantity
from e2e.pods import claim_of, only_result, running_pod
from e2e.waiting import wait_for
from e2e.webhook.helpers import create_pod, gpu_pod, templates
from e2e.webhook.our_driver import Card
from vgpu_bridge.core import TranslationContext, translate

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
RESOURCE = "/apis/resource.k8s.io/v1"


def test_pod_with_gpumem_is_translated_allocated_a_share_and_runs(
    kube: KubeClient, ns: str
) -> None:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}
    created = create_pod(kube, ns, gpu_pod("share", limits))
    container = created["spec"]["containers"][0]
    assert "limits" not in container["resources"]
    assert created["metadata"]["labels"]["vgpu-bridge.io/translated"] == "true"
    [template] = templates(kube, ns)
    assert created["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == template

    pod = running_pod(kube, ns, "share")
    result = only_result(claim_of(kube, ns, pod))
    assert result["driver"] == "gpu.vgpu-bridge.io"
    assert result["shareID"]
    assert quantity(result["consumedCapacity"]["memory"]) == quantity("3000Mi")
    assert quantity(result["consumedCapacity"]["cores"]) == 30


def test_two_gpus_land_on_distinct_cards(kube: KubeClient, ns: str) -> None:
    create_pod(kube, ns, gpu_pod("pair", {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1000}))
    pod = running_pod(kube, ns, "pair")
    results = claim_of(kube, ns, pod)["status"]["allocation"]["devices"]["results"]
    assert len({r["device"] for r in results}) == 2


def test_percentage_takes_its_share_of_the_card_it_lands_on(
    kube: KubeClient, ns: str, our_cards: dict[str, list[Card]]
) -> None:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 25}
    create_pod(kube, ns, gpu_pod("quarter", limits))
    pod = running_pod(kube, ns, "quarter")
    result = only_result(claim_of(kube, ns, pod))
    sizes = {c.name: c.memory for c in our_cards[pod["spec"]["nodeName"]]}
    card = quantity(sizes[result["device"]])
    assert quantity(result["consumedCapacity"]["memory"]) == card / 4


def test_deployment_pods_come_out_translated(kube: KubeClient, ns: str) -> None:
    template = gpu_pod("ignored", {"nvidia.com/gpumem": 2048})
    template["metadata"] = {"labels": {"app": "web"}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template},
    }
    created = kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", deployment)
    assert created["spec"]["template"]["spec"]["resourceClaims"]

    def two_running() -> list[Json] | None:
        pods = kube.items(f"/api/v1/namespaces/{ns}/pods", labelSelector="app=web")
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return running if len(running) == 2 else None

    for pod in wait_for(two_running, timeout_s=90, what="two deployment pods Running"):
        result = only_result(claim_of(kube, ns, pod))
        assert quantity(result["consumedCapacity"]["memory"]) == quantity("2Gi")


def test_dry_run_create_is_translated_but_leaves_no_template(kube: KubeClient, ns: str) -> None:
    pod = gpu_pod("dry", {"nvidia.com/gpumem": 777})
    answered = create_pod(kube, ns, pod, dry_run=True)
    assert answered["spec"]["resourceClaims"]
    assert templates(kube, ns) == []


def test_invalid_request_is_refused_with_its_field_path(kube: KubeClient, ns: str) -> None:
    with pytest.raises(ApiError) as refused:
        create_pod(kube, ns, gpu_pod("bad", {"nvidia.com/gpucores": 150}))
    assert "spec.containers[0].resources.limits[nvidia.com/gpucores]" in refused.value.body
    assert templates(kube, ns) == []


def test_existing_template_with_another_spec_is_not_overwritten(kube: KubeClient, ns: str) -> None:
    pod = gpu_pod("clash", {"nvidia.com/gpumem": 500}, namespace=ns)
    [ours] = translate(pod, context=TranslationContext()).templates
    impostor = {**ours, "spec": {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.vgpu-bridge.io"}}]}}}}  # fmt: skip
    kube.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", impostor)
    with pytest.raises(ApiError) as refused:
        create_pod(kube, ns, pod)
    assert "exists with a different spec" in refused.value.body


def test_deleting_the_pod_leaves_nothing_after_the_sweepers_grace(
    kube: KubeClient, ns: str
) -> None:
    create_pod(kube, ns, gpu_pod("brief", {"nvidia.com/gpumem": 1234}))
    running_pod(kube, ns, "brief")
    assert templates(kube, ns)
    kube.delete(f"/api/v1/namespaces/{ns}/pods/brief", grace_period_s=0)
    wait_for(
        lambda: not kube.items(f"{RESOURCE}/namespaces/{ns}/resourceclaims"),
        timeout_s=60,
        what="the pod's claim to be garbage-collected",
    )
    wait_for(
        lambda: templates(kube, ns) == [], timeout_s=30, what="the sweeper to delete the template"
    )
