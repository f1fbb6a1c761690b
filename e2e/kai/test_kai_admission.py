"""KAI pods through the real API server with our webhook registered the way docs/kai.md says,
next to a recording stand-in for KAI's mutating webhook (`mutating-kai-admission`, registered
as KAI's operator registers it).

What these tests prove: the order the API server calls the two in (KAI's mutator only ever sees
the translated pod, never `gpu-fraction`/`gpu-memory`), the translation KAI's scheduler would be
handed (exact requests of one device each, never `firstAvailable`, templates, queue label and
schedulerName kept), the claims kube-controller-manager makes from it (which KAI's accounting
reads), no-op on UPDATE (KAI's podgrouper and binder patch pods), and the version gate.
What they do not prove: placement, shares and quota under the real KAI scheduler and binder,
whose Go module the module proxy refuses to serve here (docs/kai.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import ApiError, Json
from e2e.dra_objects import quantity
from e2e.kai.gpu_counting import claim_gpus, node_gpus
from e2e.kai.webhooks import KaiAdmissionRecorder, create_with_warnings
from e2e.waiting import wait_for
from e2e.webhook.our_driver import Card, shareable_card
from vgpu_bridge.core import DEFAULT

pytestmark = [pytest.mark.e2e]
RESOURCE = "/apis/resource.k8s.io/v1"
KAI_SHARING = ("gpu-fraction", "gpu-memory", "gpu-fraction-num-devices")
QUEUE = "kai.scheduler/queue"


def kai_pod(name: str, annotations: dict[str, str], *, queue: str = "team-a") -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {QUEUE: queue}, "annotations": annotations},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "main", "image": "registry.invalid/e2e/no-image:never"}],
            "terminationGracePeriodSeconds": 0,
        },
    }


def create(kube: KubeClient, namespace: str, pod: Json) -> Json:
    return kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)


def template_of(kube: KubeClient, namespace: str, pod: Json) -> Json:
    [claim] = pod["spec"]["resourceClaims"]
    name = claim["resourceClaimTemplateName"]
    return kube.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates/{name}")


def requests_of(spec: Json) -> list[Json]:
    requests: list[Json] = spec["devices"]["requests"]
    return requests


def assert_handed_to_kai(pod: Json) -> None:
    """What KAI must see: no sharing annotation, a claim template, KAI's own fields intact."""
    annotations = pod["metadata"].get("annotations") or {}
    assert not set(KAI_SHARING) & set(annotations), annotations
    assert pod["spec"]["schedulerName"] == "kai-scheduler"
    assert pod["metadata"]["labels"][QUEUE] == "team-a"
    [claim] = pod["spec"]["resourceClaims"]
    assert "resourceClaimTemplateName" in claim  # templates: KAI's queue-label check skips them


def test_gpu_memory_pods_reach_kai_translated_and_share_a_template(
    kube: KubeClient, kai_namespace: Callable[[str], str], kai_admission: KaiAdmissionRecorder
) -> None:
    ns = kai_namespace("first")
    first = create(kube, ns, kai_pod("mem-a", {"gpu-memory": "20480"}))
    second = create(kube, ns, kai_pod("mem-b", {"gpu-memory": "20480"}))
    for pod in (first, second):
        assert_handed_to_kai(pod)
        seen = kai_admission.pods_named(ns, pod["metadata"]["name"])
        assert seen, "KAI's mutating webhook was never called"
        for version in seen:  # every call, first and reinvocations alike
            assert_handed_to_kai(version)
    assert template_of(kube, ns, first) == template_of(kube, ns, second)
    [request] = requests_of(template_of(kube, ns, first)["spec"]["spec"])
    assert "firstAvailable" not in request
    exactly = request["exactly"]
    assert exactly["deviceClassName"] == DEFAULT.device_class
    assert exactly["count"] == 1
    assert quantity(exactly["capacity"]["requests"]["memory"]) == quantity("20480Mi")


def test_a_configuration_sorting_after_kai_shows_kai_the_raw_pod(
    kube: KubeClient, kai_namespace: Callable[[str], str], kai_admission: KaiAdmissionRecorder
) -> None:
    """The hazard the naming rule avoids (kai.md §4.2): registered as `vgpu-bridge-*`, which
    sorts after `mutating-kai-admission`, KAI's mutator is called first with `gpu-memory` still
    on the pod (the real one would add its fraction ConfigMap volumes there), and again after
    our translation only because of its reinvocation policy."""
    ns = kai_namespace("late")
    created = create(kube, ns, kai_pod("mem-late", {"gpu-memory": "1024"}))
    assert_handed_to_kai(created)
    seen = kai_admission.pods_named(ns, "mem-late")
    assert len(seen) == 2, [s["metadata"].get("annotations") for s in seen]
    assert seen[0]["metadata"]["annotations"]["gpu-memory"] == "1024"
    assert "resourceClaims" not in seen[0]["spec"]
    assert_handed_to_kai(seen[1])


def test_gpu_fraction_with_one_card_size_is_an_exact_share_of_that_size(
    kube: KubeClient, kai_namespace: Callable[[str], str], kai_cards: dict[str, list[Card]]
) -> None:
    ns = kai_namespace("first")
    pod = create(kube, ns, kai_pod("frac", {"gpu-fraction": "0.25"}))
    assert_handed_to_kai(pod)
    [request] = requests_of(template_of(kube, ns, pod)["spec"]["spec"])
    assert "firstAvailable" not in request
    exactly = request["exactly"]
    assert exactly["count"] == 1
    sizes = {card.memory for cards in kai_cards.values() for card in cards}
    assert sizes == {"80Gi"}
    assert quantity(exactly["capacity"]["requests"]["memory"]) == quantity("80Gi") / 4
    [selector] = exactly["selectors"]  # pinned to the one size, so the share is exact
    assert 'quantity("80Gi")' in selector["cel"]["expression"]


@pytest.fixture
def second_card_size(
    kube: KubeClient, fake_nodes: list[str], kai_cards: dict[str, list[Card]]
) -> Iterator[None]:
    """A 40Gi card next to the 80Gi ones, in a slice of its own (withdrawn afterwards)."""
    node = fake_nodes[1]
    name = f"{node}-{DEFAULT.driver}-extra"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DEFAULT.driver,
            "nodeName": node,
            "pool": {"name": f"{node}-extra", "generation": 1, "resourceSliceCount": 1},
            "devices": [_small_card()],
        },
    }
    kube.create(f"{RESOURCE}/resourceslices", body)
    yield
    kube.delete(f"{RESOURCE}/resourceslices/{name}")


def _small_card() -> Json:
    return shareable_card(Card("gpu-9", "GPU-kai-small", "NVIDIA A100-PCIE-40GB", "40Gi"))


@pytest.mark.usefixtures("second_card_size")
def test_gpu_fraction_with_two_card_sizes_is_refused_not_first_available(
    kube: KubeClient, kai_namespace: Callable[[str], str]
) -> None:
    ns = kai_namespace("first")

    def refused() -> ApiError | None:
        try:
            kube.request(
                "POST",
                f"/api/v1/namespaces/{ns}/pods",
                body=kai_pod("frac", {"gpu-fraction": "0.5"}),
                query={"dryRun": "All"},
            )
        except ApiError as error:
            return error
        return None  # the webhook's inventory watch has not seen the 40Gi card yet

    error = wait_for(refused, timeout_s=20, what="a fraction refused with two card sizes")
    assert error.status in (400, 403, 422), error
    assert "size" in error.body, error.body
    # gpu-memory is an absolute size: it still works with mixed cards, as an exact request
    pod = create(kube, ns, kai_pod("mem", {"gpu-memory": "4096"}))
    [request] = requests_of(template_of(kube, ns, pod)["spec"]["spec"])
    assert "firstAvailable" not in request


def test_claims_carry_what_kai_accounting_counts_one_gpu_per_share(
    kube: KubeClient, kai_namespace: Callable[[str], str], kai_cards: dict[str, list[Card]]
) -> None:
    """KAI's accounting (kai.md §1.5), applied to the claims kube-controller-manager really made:
    a claim counts `exactly.count` GPUs when its class name contains "gpu"; a node's GPUs are the
    devices of slices whose driver name contains "gpu". Two 8Gi shares are 2 GPUs of quota."""
    ns = kai_namespace("first")
    for name in ("small-a", "small-b"):
        create(kube, ns, kai_pod(name, {"gpu-memory": "8192"}))

    def claims() -> list[Json] | None:
        pods = kube.items(f"/api/v1/namespaces/{ns}/pods")
        statuses = [s for p in pods for s in p["status"].get("resourceClaimStatuses") or []]
        if len(statuses) != 2:
            return None  # KAI resolves template claims through this status, so wait for it
        return [
            kube.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims/{s['resourceClaimName']}")
            for s in statuses
        ]

    made = wait_for(claims, timeout_s=30, what="claims for both pods")
    assert sum(claim_gpus(c["spec"]) for c in made) == 2
    memory = sum(
        quantity(r["exactly"]["capacity"]["requests"]["memory"])
        for c in made
        for r in requests_of(c["spec"])
    )
    assert memory == quantity("16Gi")  # a fifth of one card, counted as two whole GPUs
    slices = kube.items(f"{RESOURCE}/resourceslices")
    gpus = {node: node_gpus(slices, node) for node in kai_cards}
    assert gpus == {node: len(cards) for node, cards in kai_cards.items()}


def test_updates_from_kai_podgrouper_and_binder_are_left_alone(
    kube: KubeClient, kai_namespace: Callable[[str], str]
) -> None:
    """The podgrouper annotates `pod-group-name`, the binder adds labels: a webhook that
    re-mutated on UPDATE would make those patches fail (claims are immutable)."""
    ns = kai_namespace("first")
    created = create(kube, ns, kai_pod("grouped", {"gpu-memory": "2048"}))
    patch = {
        "metadata": {
            "annotations": {"pod-group-name": "pg-grouped-1"},
            "labels": {"kai.scheduler/subgroup-name": "default"},
        }
    }
    patched = kube.patch(f"/api/v1/namespaces/{ns}/pods/grouped", patch)
    assert patched["metadata"]["annotations"]["pod-group-name"] == "pg-grouped-1"
    assert patched["spec"] == created["spec"]


def test_old_kai_build_gets_a_warning(
    kube: KubeClient, kai_namespace: Callable[[str], str]
) -> None:
    ns = kai_namespace("old-warn")
    pod, warnings = create_with_warnings(
        kube, f"/api/v1/namespaces/{ns}/pods", kai_pod("old", {"gpu-memory": "4096"})
    )
    assert_handed_to_kai(pod)  # still translated: a warning, not a refusal
    assert any("KAI v0.17.0 allocates without consumable capacity" in w for w in warnings), warnings


def test_old_kai_build_is_refused_when_told_so(
    kube: KubeClient, kai_namespace: Callable[[str], str]
) -> None:
    ns = kai_namespace("old-refuse")
    with pytest.raises(ApiError) as refused:
        create(kube, ns, kai_pod("old", {"gpu-fraction": "0.5"}))
    assert "KAI v0.17.0 allocates without consumable capacity" in refused.value.body
    assert kube.items(f"/api/v1/namespaces/{ns}/pods") == []
    assert kube.items(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates") == []


def test_kai_build_with_capacity_gets_no_warning(
    kube: KubeClient, kai_namespace: Callable[[str], str]
) -> None:
    ns = kai_namespace("capacity")
    pod, warnings = create_with_warnings(
        kube, f"/api/v1/namespaces/{ns}/pods", kai_pod("new", {"gpu-fraction": "0.5"})
    )
    assert_handed_to_kai(pod)
    assert not [w for w in warnings if "KAI" in w], warnings


def test_deployment_pods_reach_kai_translated(
    kube: KubeClient, kai_namespace: Callable[[str], str], kai_admission: KaiAdmissionRecorder
) -> None:
    """A workload is translated at its pod template (annotations there removed too), so the pods
    its ReplicaSet makes, the ones KAI's podgrouper groups by their top owner, are already
    translated when KAI's mutator sees them."""
    ns = kai_namespace("first")
    template = kai_pod("ignored", {"gpu-memory": "4096"})
    template["metadata"] = {
        "labels": {"app": "infer", QUEUE: "team-a"},
        "annotations": template["metadata"]["annotations"],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "infer", "labels": {QUEUE: "team-a"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "infer"}},
            "template": template,
        },
    }
    created = kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", deployment)
    assert_handed_to_kai(created["spec"]["template"])

    def two_pods() -> list[Json] | None:
        pods = kube.items(f"/api/v1/namespaces/{ns}/pods", labelSelector="app=infer")
        return pods if len(pods) == 2 else None

    pods = wait_for(two_pods, timeout_s=60, what="the deployment's two pods")
    for pod in pods:
        assert_handed_to_kai(pod)
    # Admission sees a ReplicaSet's pods before their names are generated.
    [prefix] = {pod["metadata"]["generateName"] for pod in pods}
    seen = kai_admission.pods_named(ns, "")
    seen = [p for p in seen if p["metadata"].get("generateName") == prefix]
    assert len(seen) >= 2, "KAI's mutating webhook was not called for both pods"
    for version in seen:
        assert_handed_to_kai(version)
    kube.delete(f"/apis/apps/v1/namespaces/{ns}/deployments/infer")  # no pods recreated later
