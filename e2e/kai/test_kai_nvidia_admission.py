"""KAI pods through the real API server with our webhook in profile `nvidia` (NVIDIA's DRA driver
`gpu.nvidia.com` with `--consumable-shares=100`, our enforcer beside it), next to the recording
stand-in for KAI's mutating webhook, as e2e/kai/test_kai_admission.py does for our own driver.

What they prove: what KAI's scheduler would be handed on such a cluster (KAI's annotations gone,
queue label and schedulerName kept, templates; one exact request of NVIDIA's class per share,
never `firstAvailable`, a fraction pinned to the one card size, plus the enforcer request), and
what KAI's GPU accounting (kai.md §1.5) makes of the claims kube-controller-manager created:
`gpu.nvidia.com` contains "gpu", so each share counts as one whole GPU in quota and fit, and each
NVIDIA card as one node GPU; `enforcer.vgb.io` does not, so the enforcer request and the node's
enforcer device count as nothing. No KAI binary is needed (placement is for `make e2e-kai`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from e2e.cluster import KubeClient, LocalCluster
from e2e.cluster.client import Json
from e2e.dra_objects import quantity
from e2e.kai.gpu_counting import claim_gpus, is_gpu_class, node_gpus
from e2e.kai.webhooks import (
    OUR_CONFIG_PREFIX,
    KaiAdmissionRecorder,
    label_namespace,
    our_webhook,
)
from e2e.node.agent import running_agent
from e2e.nvidia.cluster import (
    ENFORCER_DRIVER,
    nvidia_and_enforcer_classes,
    publish_nvidia_cards,
    remove_slices,
    slices_of,
)
from e2e.nvidia.slices import NVIDIA_DEVICE_CLASS, NVIDIA_DRIVER, NvidiaCard
from e2e.waiting import wait_for
from e2e.webhook.process import WebhookProcess

pytestmark = [pytest.mark.e2e]
RESOURCE = "/apis/resource.k8s.io/v1"
KAI_SHARING = ("gpu-fraction", "gpu-memory", "gpu-fraction-num-devices")
QUEUE = "kai.scheduler/queue"
ENFORCER_CLASS = "enforcer.vgb.io"
#: The claim request names the `nvidia` profile writes: NVIDIA's share and our enforcer.
GPU_REQUEST, ENFORCER_REQUEST = "gpu", "vgpu-limits"
#: The value of e2e/kai/webhooks.py's namespace label that selects this module's webhook.
WEBHOOK = "nvidia"


@pytest.fixture(scope="module")
def nvidia_cards(
    kube: KubeClient, e2e_cluster: LocalCluster, fake_nodes: list[str]
) -> Iterator[dict[str, list[NvidiaCard]]]:
    """One card size (what `gpu-fraction` needs) on both nodes, NVIDIA's classes, and our agent
    in enforcer mode on each node, publishing its enforcer device there."""
    layout = {
        node: [NvidiaCard(minor=i, uuid=f"GPU-kai-{n}-{i:04d}") for i in range(2 - n)]
        for n, node in enumerate(fake_nodes)
    }
    enforce = {"VGPU_BRIDGE_ENFORCE_DRIVER": NVIDIA_DRIVER}
    with ExitStack() as stack:
        stack.enter_context(nvidia_and_enforcer_classes(kube))
        for node in layout:  # last out: after the agents have stopped
            stack.callback(remove_slices, kube, node, NVIDIA_DRIVER, ENFORCER_DRIVER)
        for node, cards in layout.items():
            publish_nvidia_cards(kube, node, cards, "100")
            stack.enter_context(
                running_agent(
                    node, e2e_cluster.kubeconfig, None, driver=ENFORCER_DRIVER, extra_env=enforce
                )
            )
        wait_for(
            lambda: all(slices_of(kube, node, ENFORCER_DRIVER) for node in layout),
            what="the enforcers' slices",
        )
        yield layout


@pytest.fixture(scope="module")
def nvidia_webhook(
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    nvidia_cards: dict[str, list[NvidiaCard]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebhookProcess]:
    """Registered the way docs/kai.md prescribes (sorting before KAI's), in profile nvidia."""
    with our_webhook(
        kube,
        e2e_cluster.kubeconfig,
        tmp_path_factory.mktemp("webhook-kai-nvidia"),
        config_name=f"{OUR_CONFIG_PREFIX}-kai-e2e-nvidia",
        namespace_value=WEBHOOK,
        args=("--profile", "nvidia", "--nvidia-consumable-shares", "100"),
    ) as process:
        yield process
        print(f"--- webhook {WEBHOOK}\n{process.log()[-3000:]}")  # shown for failed tests


@pytest.fixture
def kai_nvidia_ns(
    kube: KubeClient,
    namespace: str,
    kai_admission: KaiAdmissionRecorder,
    nvidia_webhook: WebhookProcess,
) -> str:
    label_namespace(kube, namespace, WEBHOOK, kai_admission)
    return namespace


def kai_pod(
    name: str, *, annotations: dict[str, str] | None = None, limits: dict[str, Any] | None = None
) -> Json:
    container: Json = {"name": "main", "image": "registry.invalid/e2e/no-image:never"}
    if limits:
        container["resources"] = {"limits": limits}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {QUEUE: "team-a"}, "annotations": annotations or {}},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [container],
            "terminationGracePeriodSeconds": 0,
        },
    }


def create(kube: KubeClient, namespace: str, pod: Json) -> Json:
    return kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)


def claim_spec_of(kube: KubeClient, namespace: str, pod: Json) -> Json:
    """The claim spec of the pod's one template, checked to be what KAI should be handed."""
    [claim] = pod["spec"]["resourceClaims"]
    name = claim["resourceClaimTemplateName"]  # templates: KAI's queue-label check skips them
    template = kube.get(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates/{name}")
    spec: Json = template["spec"]["spec"]
    assert all("firstAvailable" not in r for r in spec["devices"]["requests"]), spec
    return spec


def requests_by_name(spec: Json) -> dict[str, Json]:
    return {r["name"]: r["exactly"] for r in spec["devices"]["requests"]}


def assert_handed_to_kai(pod: Json) -> None:
    annotations = pod["metadata"].get("annotations") or {}
    assert not set(KAI_SHARING) & set(annotations), annotations
    assert pod["spec"]["schedulerName"] == "kai-scheduler"
    assert pod["metadata"]["labels"][QUEUE] == "team-a"
    for container in pod["spec"]["containers"]:
        assert not (container.get("resources") or {}).get("limits"), container
        for entry in container["resources"]["claims"]:
            assert "request" not in entry, entry  # every container gets the enforcer's edits


def assert_share_and_enforcer(spec: Json, *, memory: str, count: int = 1) -> Json:
    """The claim asks for `count` shares of NVIDIA's class of `memory` each and one enforcer;
    returns NVIDIA's request."""
    requests = requests_by_name(spec)
    assert set(requests) == {GPU_REQUEST, ENFORCER_REQUEST}, requests
    gpu, enforcer = requests[GPU_REQUEST], requests[ENFORCER_REQUEST]
    assert (gpu["deviceClassName"], gpu["count"]) == (NVIDIA_DEVICE_CLASS, count), gpu
    assert quantity(gpu["capacity"]["requests"]["memory"]) == quantity(memory)
    assert enforcer == {
        "deviceClassName": ENFORCER_CLASS,
        "allocationMode": "ExactCount",
        "count": 1,
    }
    [config] = spec["devices"]["config"]
    assert config["requests"] == [ENFORCER_REQUEST]
    assert config["opaque"]["driver"] == ENFORCER_DRIVER
    return gpu


def test_gpu_memory_pod_reaches_kai_as_an_nvidia_share_with_the_enforcer(
    kube: KubeClient, kai_nvidia_ns: str, kai_admission: KaiAdmissionRecorder
) -> None:
    ns = kai_nvidia_ns
    pod = create(kube, ns, kai_pod("mem", annotations={"gpu-memory": "20480"}))
    assert_handed_to_kai(pod)
    seen = kai_admission.pods_named(ns, "mem")
    assert seen, "KAI's mutating webhook was never called"
    for version in seen:  # KAI's mutator only ever sees the translated pod
        assert_handed_to_kai(version)
    gpu = assert_share_and_enforcer(claim_spec_of(kube, ns, pod), memory="20480Mi")
    assert "shares" not in gpu["capacity"]["requests"]  # no gpucores: NVIDIA's default, 1 share


def test_gpu_fraction_is_an_exact_share_of_the_one_card_size(
    kube: KubeClient, kai_nvidia_ns: str
) -> None:
    pod = create(kube, kai_nvidia_ns, kai_pod("frac", annotations={"gpu-fraction": "0.25"}))
    assert_handed_to_kai(pod)
    gpu = assert_share_and_enforcer(claim_spec_of(kube, kai_nvidia_ns, pod), memory="20Gi")
    expressions = [s["cel"]["expression"] for s in gpu.get("selectors") or []]
    assert any(
        f'device.capacity["{NVIDIA_DRIVER}"].memory' in e and 'quantity("80Gi")' in e
        for e in expressions
    ), expressions  # pinned to the size, so a quarter is a quarter


def test_hami_whole_card_under_kai_is_the_one_card_size_not_first_available(
    kube: KubeClient, kai_nvidia_ns: str
) -> None:
    """In the `<N>` mode NVIDIA's policy default is 0 bytes, so a whole card asks for the card's
    memory; KAI takes no `firstAvailable`, so that is the one card size."""
    pod = create(kube, kai_nvidia_ns, kai_pod("whole", limits={"nvidia.com/gpu": 1}))
    assert_handed_to_kai(pod)
    assert_share_and_enforcer(claim_spec_of(kube, kai_nvidia_ns, pod), memory="80Gi")


def test_hami_gpucores_under_kai_books_nvidia_shares_and_tells_the_enforcer(
    kube: KubeClient, kai_nvidia_ns: str
) -> None:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 10000, "nvidia.com/gpucores": 30}
    pod = create(kube, kai_nvidia_ns, kai_pod("cores", limits=limits))
    assert_handed_to_kai(pod)
    spec = claim_spec_of(kube, kai_nvidia_ns, pod)
    gpu = assert_share_and_enforcer(spec, memory="10000Mi")
    assert quantity(gpu["capacity"]["requests"]["shares"]) == 30
    [config] = spec["devices"]["config"]
    assert config["opaque"]["parameters"]["cores"] == 30


def made_claims(kube: KubeClient, ns: str, count: int) -> list[Json]:
    """The claims kube-controller-manager made for the namespace's pods (KAI resolves template
    claims through the pods' status, so wait for that)."""

    def claims() -> list[Json] | None:
        pods = kube.items(f"/api/v1/namespaces/{ns}/pods")
        statuses = [s for p in pods for s in p["status"].get("resourceClaimStatuses") or []]
        if len(statuses) != count:
            return None
        return [
            kube.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims/{s['resourceClaimName']}")
            for s in statuses
        ]

    return wait_for(claims, timeout_s=30, what=f"{count} claims")


def test_kai_counts_each_nvidia_share_as_a_gpu_and_the_enforcer_as_none(
    kube: KubeClient, kai_nvidia_ns: str, nvidia_cards: dict[str, list[NvidiaCard]]
) -> None:
    """KAI's accounting on the claims really made: two 8Gi shares and one two-card claim are
    4 GPUs of quota (over-counting beats escaping quota); the enforcer requests add nothing.
    Node GPUs: NVIDIA's cards, and no enforcer device."""
    ns = kai_nvidia_ns
    for name in ("small-a", "small-b"):
        create(kube, ns, kai_pod(name, annotations={"gpu-memory": "8192"}))
    two_cards = {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 4096}
    pair = create(kube, ns, kai_pod("pair", limits=two_cards))
    pair_spec = claim_spec_of(kube, ns, pair)
    assert_share_and_enforcer(pair_spec, memory="4096Mi", count=2)
    [constraint] = pair_spec["devices"]["constraints"]
    assert constraint == {"requests": [GPU_REQUEST], "distinctAttribute": f"{NVIDIA_DRIVER}/uuid"}

    made = made_claims(kube, ns, 3)
    assert sum(claim_gpus(c["spec"]) for c in made) == 4
    classes = {
        r["exactly"]["deviceClassName"] for c in made for r in c["spec"]["devices"]["requests"]
    }
    assert classes == {NVIDIA_DEVICE_CLASS, ENFORCER_CLASS}
    assert is_gpu_class(NVIDIA_DEVICE_CLASS)
    assert not is_gpu_class(ENFORCER_CLASS)
    slices = kube.items(f"{RESOURCE}/resourceslices")
    enforced = {s["spec"]["nodeName"] for s in slices if s["spec"]["driver"] == ENFORCER_DRIVER}
    assert enforced == set(nvidia_cards)  # the enforcer is there, and counted as no GPU:
    for node, cards in nvidia_cards.items():
        assert node_gpus(slices, node, driver=NVIDIA_DRIVER) == len(cards)
        assert node_gpus(slices, node, driver=ENFORCER_DRIVER) == 0
