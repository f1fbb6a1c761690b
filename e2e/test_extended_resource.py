"""Whole GPUs without the webhook (KEP-5004 DRAExtendedResource, GA in Kubernetes 1.37).

Our DeviceClass carries ``extendedResourceName: nvidia.com/gpu`` as the chart renders it with
``deviceClass.extendedResourceName`` (e2e/chart/test_extended_resource_name.py checks that the
two agree). A plain pod asking ``nvidia.com/gpu`` in a namespace no webhook serves is then
handled by the real kube-scheduler: it makes a claim of our class for the pod, allocates it on
the node agent's mock cards and names it in the pod's ``status.extendedResourceClaimStatus``; the
kubelet stand-in hands that claim to the agent's ``NodePrepareResources``, and the CDI spec the
agent writes carries whole-card limits. A pod the webhook translates in the same cluster keeps
the one claim the webhook gave it: the scheduler makes no second one.

Runs on 1.37 and later only (``make e2e-k8s137``): the chart refuses the value before 1.37.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from e2e.cluster import KubeClient, KubeletStandIn, LocalCluster, Settings, create_fake_node
from e2e.cluster.client import ApiError, Json
from e2e.dra_objects import device_class, quantity
from e2e.node.agent import AgentProcess, GrpcPreparer, running_agent
from e2e.pods import get_pod, is_unbound, running_pod, unschedulable_condition
from e2e.waiting import stays, wait_for
from e2e.webhook.helpers import gpu_pod, serve_namespace
from e2e.webhook.process import WebhookProcess, running_webhook
from vgpu_bridge.core import DEFAULT

RESOURCE = "/apis/resource.k8s.io/v1"
EXTENDED = "nvidia.com/gpu"
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
WEBHOOK_LABEL = "e2e.vgpu-bridge.io/webhook-extended-resource"
CARDS = [
    {"uuid": "GPU-ext-0000", "productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"},
    {"uuid": "GPU-ext-0001", "productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"},
]
WHOLE_CARD_ENV = ["CUDA_DEVICE_MEMORY_LIMIT_{i}=81920m", "CUDA_DEVICE_SM_LIMIT_{i}=100"]


SESSION = Settings.from_env()  # the release this pytest session's control plane runs

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        tuple(int(part) for part in SESSION.minor.split(".")) < (1, 37),
        reason=f"DeviceClass.extendedResourceName needs Kubernetes 1.37 or later (GA there; the "
        f"chart refuses it before), and this session runs {SESSION.k8s_version}: "
        "`make e2e-k8s137` runs it on v1.37.2",
    ),
]


@pytest.fixture(scope="module")
def extended_class(kube: KubeClient) -> Iterator[Json]:
    """Our DeviceClass with ``extendedResourceName``: created, or (when the webhook's agents of
    this session made it already) given the field and restored afterwards."""
    path = f"{RESOURCE}/deviceclasses/{DEFAULT.device_class}"
    body = device_class(
        DEFAULT.device_class, driver=DEFAULT.driver, extended_resource_name=EXTENDED
    )
    try:
        made = kube.create(f"{RESOURCE}/deviceclasses", body)
        created = True
    except ApiError as error:
        if error.status != 409:
            raise
        made = kube.patch(path, {"spec": {"extendedResourceName": EXTENDED}})
        created = False
    assert made["spec"].get("extendedResourceName") == EXTENDED, made  # not dropped by the API
    yield made
    if created:
        kube.delete(path)
    else:
        kube.patch(path, {"spec": {"extendedResourceName": None}})


@dataclass
class AgentNode:
    node: str
    agent: AgentProcess
    preparer: GrpcPreparer

    def spec(self, claim_uid: str) -> Json:
        spec: Json = json.loads(self.agent.layout.spec_path(claim_uid).read_text())
        return spec


@pytest.fixture(scope="module")
def our_node(
    kube: KubeClient, e2e_cluster: LocalCluster, extended_class: Json
) -> Iterator[AgentNode]:
    """A fake node with no `nvidia.com/gpu` in its capacity (a DRA node, not a device-plugin
    one), the real node agent publishing two 80Gi cards for it, and a kubelet stand-in that
    prepares its pods through the agent's socket."""
    node = f"e2e-extended-{secrets.token_hex(3)}"
    create_fake_node(kube, node)
    selector = f"spec.nodeName={node},spec.driver={DEFAULT.driver}"
    try:
        with running_agent(node, e2e_cluster.kubeconfig, CARDS) as agent:
            wait_for(
                lambda: len(_devices(kube, selector)) == len(CARDS),
                timeout_s=30,
                what="the agent's slices",
            )
            preparer = GrpcPreparer(agent.dra_socket)
            with KubeletStandIn(kube, [node], preparer=preparer):
                yield AgentNode(node, agent, preparer)
            preparer.close()
    finally:
        kube.delete(f"/api/v1/nodes/{node}")
        for item in kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector):
            kube.delete(f"{RESOURCE}/resourceslices/{item['metadata']['name']}")


def _devices(kube: KubeClient, selector: str) -> list[Json]:
    slices = kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector)
    return [d for s in slices for d in s["spec"].get("devices") or []]


def _plain_pod(kube: KubeClient, namespace: str, name: str, node: str, gpus: int) -> None:
    """A pod as a device-plugin user writes it: `nvidia.com/gpu` in its limits, nothing else."""
    pod = gpu_pod(name, {EXTENDED: gpus})
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)


def _extended_claim(kube: KubeClient, namespace: str, pod: Json) -> Json:
    status = pod["status"]["extendedResourceClaimStatus"]
    return kube.get(
        f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{status['resourceClaimName']}"
    )


def _whole_card_env(count: int) -> list[list[str]]:
    return [[line.format(i=i) for line in WHOLE_CARD_ENV] for i in range(count)]


def test_a_whole_gpu_pod_no_webhook_saw_gets_a_whole_card_of_our_driver(
    kube: KubeClient, namespace: str, our_node: AgentNode
) -> None:
    _plain_pod(kube, namespace, "plain", our_node.node, gpus=1)

    pod = running_pod(kube, namespace, "plain")  # Running: the agent prepared its claim

    assert pod["spec"]["nodeName"] == our_node.node
    assert "resourceClaims" not in pod["spec"]  # nobody translated it
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {EXTENDED: "1"}
    status = pod["status"]["extendedResourceClaimStatus"]
    assert status["requestMappings"] == [
        {"containerName": "main", "resourceName": EXTENDED, "requestName": "container-0-request-0"}
    ]
    claim = _extended_claim(kube, namespace, pod)
    meta = claim["metadata"]
    assert meta["name"].startswith("plain-extended-resources-")
    assert meta["annotations"][EXTENDED_CLAIM_ANNOTATION] == "true"
    assert "labels" not in meta  # not one of ours: no template, no label
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "Pod",
        pod["metadata"]["uid"],
        True,
    )
    [request] = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == DEFAULT.device_class
    assert request["exactly"]["count"] == 1
    assert "capacity" not in request["exactly"]  # so each card consumes the slice's defaults
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (DEFAULT.driver, our_node.node)
    assert quantity(result["consumedCapacity"]["memory"]) == quantity("80Gi")
    assert quantity(result["consumedCapacity"]["cores"]) == 100
    assert pod["metadata"]["uid"] in {r["uid"] for r in claim["status"]["reservedFor"]}

    spec = our_node.spec(meta["uid"])
    assert [d["containerEdits"]["env"] for d in spec["devices"]] == _whole_card_env(1)
    card = CARDS[int(result["device"].removeprefix("gpu-"))]
    assert f"NVIDIA_VISIBLE_DEVICES={card['uuid']}" in spec["containerEdits"]["env"]
    [prepared] = our_node.preparer.answers[meta["uid"]].devices
    assert list(prepared.request_names) == ["container-0-request-0"]  # what the mapping names
    assert prepared.share_id == result["shareID"]

    kube.delete(f"/api/v1/namespaces/{namespace}/pods/plain")  # graceful: the stand-in unprepares
    layout = our_node.agent.layout
    wait_for(lambda: not layout.spec_path(meta["uid"]).exists(), timeout_s=30, what="spec gone")
    claims = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    wait_for(lambda: not kube.items(claims), timeout_s=30, what="the claim collected with the pod")


def test_two_gpus_take_both_cards_whole_and_the_next_pod_waits_for_one(
    kube: KubeClient, namespace: str, our_node: AgentNode
) -> None:
    _plain_pod(kube, namespace, "pair", our_node.node, gpus=2)
    pair = running_pod(kube, namespace, "pair")
    claim = _extended_claim(kube, namespace, pair)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]  # distinct cards
    assert {quantity(r["consumedCapacity"]["memory"]) for r in results} == {quantity("80Gi")}
    spec = our_node.spec(claim["metadata"]["uid"])
    assert [d["containerEdits"]["env"] for d in spec["devices"]] == _whole_card_env(2)

    _plain_pod(kube, namespace, "next", our_node.node, gpus=1)
    wait_for(
        lambda: unschedulable_condition(kube, namespace, "next"),
        what="next marked Unschedulable while both cards are taken whole",
    )
    stays(lambda: is_unbound(kube, namespace, "next"), for_s=3, what="next unbound")

    kube.delete(f"/api/v1/namespaces/{namespace}/pods/pair")
    nxt = running_pod(kube, namespace, "next", timeout_s=90)
    assert nxt["spec"]["nodeName"] == our_node.node


@pytest.fixture(scope="module")
def extended_webhook(
    kube: KubeClient,
    e2e_cluster: LocalCluster,
    our_node: AgentNode,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebhookProcess]:
    """Our webhook, registered for namespaces labelled WEBHOOK_LABEL only, told the extended
    resource our class serves as the chart tells it (`deviceClass.extendedResourceName`)."""
    workdir = tmp_path_factory.mktemp("webhook-extended")
    with running_webhook(
        kube,
        e2e_cluster.kubeconfig,
        workdir,
        grace_s=None,
        namespace_label=WEBHOOK_LABEL,
        extra_args=("--extended-resource-name", EXTENDED),
    ) as process:
        yield process
        print(process.log()[-4000:])  # shown by pytest for failed tests


def test_a_pod_the_webhook_translates_keeps_its_one_claim_and_gets_the_same_limits(
    kube: KubeClient, namespace: str, our_node: AgentNode, extended_webhook: WebhookProcess
) -> None:
    serve_namespace(kube, namespace, WEBHOOK_LABEL)
    _plain_pod(kube, namespace, "translated", our_node.node, gpus=1)

    pod = running_pod(kube, namespace, "translated")

    [container] = pod["spec"]["containers"]
    assert EXTENDED not in (container["resources"].get("limits") or {})  # the webhook took it
    assert EXTENDED not in (container["resources"].get("requests") or {})
    assert "extendedResourceClaimStatus" not in pod["status"]  # so no second, scheduler's claim
    [claim] = kube.items(f"{RESOURCE}/namespaces/{namespace}/resourceclaims")
    assert EXTENDED_CLAIM_ANNOTATION not in (claim["metadata"].get("annotations") or {})
    [status] = pod["status"]["resourceClaimStatuses"]
    assert status["resourceClaimName"] == claim["metadata"]["name"]
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert quantity(result["consumedCapacity"]["memory"]) == quantity("80Gi")
    spec = our_node.spec(claim["metadata"]["uid"])
    assert [d["containerEdits"]["env"] for d in spec["devices"]] == _whole_card_env(1)
    assert get_pod(kube, namespace, "translated")["spec"]["nodeName"] == our_node.node


def _refusal(kube: KubeClient, namespace: str, pod: Json) -> str:
    with pytest.raises(ApiError) as refused:
        kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    assert refused.value.status == 403, refused.value
    return refused.value.body


def _claim_made(kube: KubeClient, namespace: str, name: str) -> None:
    wait_for(lambda: get_pod(kube, namespace, name)["status"].get("resourceClaimStatuses"),
             timeout_s=30, what=f"the claim of pod {name}")  # fmt: skip


def _largest_card_mib(kube: KubeClient) -> int:
    """The largest card of our driver the webhook knows: what a whole card books before it is
    bound (other modules' agents may publish bigger ones than this module's)."""
    slices = kube.items(f"{RESOURCE}/resourceslices", fieldSelector=f"spec.driver={DEFAULT.driver}")
    sizes = [quantity(d["capacity"]["memory"]["value"])
             for s in slices for d in s["spec"].get("devices") or []]  # fmt: skip
    return int(max(sizes)) // 2**20


def test_whole_cards_asked_past_the_webhook_count_once_against_the_gpumem_quota(
    kube: KubeClient, namespace: str, our_node: AgentNode, extended_webhook: WebhookProcess
) -> None:
    """Issue 35, item 4: an opted-out pod's `nvidia.com/gpu` is a whole card of our class, which
    Kubernetes' own quota cannot count in HAMi's `gpumem`. Refused past the quota beside a share;
    admitted alone, and once bound its claim (80Gi consumed) counts for the next pod, the pod
    itself not again."""
    serve_namespace(kube, namespace, WEBHOOK_LABEL)
    limit = _largest_card_mib(kube) + 10000
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team-gpu"},
             "spec": {"hard": {"limits.nvidia.com/gpumem": str(limit)}}}  # fmt: skip
    kube.create(f"/api/v1/namespaces/{namespace}/resourcequotas", quota)
    share = gpu_pod("share", {EXTENDED: 1, "nvidia.com/gpumem": 30000})
    share["spec"]["nodeSelector"] = {"kubernetes.io/hostname": our_node.node}
    kube.create(f"/api/v1/namespaces/{namespace}/pods", share)
    _claim_made(kube, namespace, "share")

    whole = gpu_pod("whole", {EXTENDED: 1}, labels={"vgpu-bridge.io/ignore": "true"})
    whole["spec"]["nodeSelector"] = {"kubernetes.io/hostname": our_node.node}
    body = _refusal(kube, namespace, whole)
    assert "exceeded quota team-gpu: limits.nvidia.com/gpumem: requested " in body
    assert f"used 30000, limited {limit}" in body

    kube.delete(f"/api/v1/namespaces/{namespace}/pods/share")
    claims = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    wait_for(lambda: not kube.items(claims), timeout_s=30, what="the share's claim gone")
    kube.create(f"/api/v1/namespaces/{namespace}/pods", whole)
    pod = running_pod(kube, namespace, "whole")
    assert "resourceClaims" not in pod["spec"]  # not translated: kube-scheduler made its claim
    assert _extended_claim(kube, namespace, pod)["status"]["allocation"]

    past = limit - 81920 + 1  # just past the quota with the bound card counted once
    body = _refusal(kube, namespace, gpu_pod("next", {EXTENDED: 1, "nvidia.com/gpumem": past}))
    assert (
        f"exceeded quota team-gpu: limits.nvidia.com/gpumem: requested {past}, used 81920, "
        f"limited {limit}"
    ) in body


def _admitted_then_removed(kube: KubeClient, namespace: str, pod: Json) -> str | None:
    """The refusal of `pod`, or None when it was admitted (then deleted at once, so a retry
    asks again: it waits on a node that does not exist and is never bound)."""
    try:
        kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    except ApiError as error:
        if error.status != 403:
            raise
        return error.body
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}")
    return None


def test_a_whole_card_pod_not_yet_bound_counts_for_the_next_admission(
    kube: KubeClient, namespace: str, our_node: AgentNode, extended_webhook: WebhookProcess
) -> None:
    """Issue 35, item 4: kube-scheduler makes a whole-card pod's claim only when it binds it.
    Pod `first` waits for a node that does not exist (no claim, ever): the webhook's watch of
    unbound pods (`spec.nodeName=` on the real API server) counts its card for `second`, which
    the quota, room for one card, refuses. Only the claims counted, `second` was admitted. The
    webhook learns of `first` through its watch, a moment after the create: `second` is asked
    again (and removed) until refused."""
    serve_namespace(kube, namespace, WEBHOOK_LABEL)
    largest = _largest_card_mib(kube)
    limit = largest + 10000
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team-gpu"},
             "spec": {"hard": {"limits.nvidia.com/gpumem": str(limit)}}}  # fmt: skip
    kube.create(f"/api/v1/namespaces/{namespace}/resourcequotas", quota)
    nowhere = {"kubernetes.io/hostname": f"e2e-nowhere-{secrets.token_hex(3)}"}
    opted_out = {"vgpu-bridge.io/ignore": "true"}
    first = gpu_pod("first", {EXTENDED: 1}, labels=opted_out)
    first["spec"]["nodeSelector"] = nowhere
    kube.create(f"/api/v1/namespaces/{namespace}/pods", first)

    second = gpu_pod("second", {EXTENDED: 1}, labels=opted_out)
    second["spec"]["nodeSelector"] = nowhere
    body = wait_for(lambda: _admitted_then_removed(kube, namespace, second), timeout_s=30,
                    what="second refused while first waits unbound")  # fmt: skip
    assert (
        f"exceeded quota team-gpu: limits.nvidia.com/gpumem: requested {largest}, "
        f"used {largest}, limited {limit}"
    ) in body
    assert is_unbound(kube, namespace, "first")
    claims = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    assert not kube.items(claims)  # first is counted as a pod waiting, not through a claim
    assert "unbound pod watch failed" not in extended_webhook.log()  # the server takes its selector

    kube.delete(f"/api/v1/namespaces/{namespace}/pods/first")  # gone: its card is free again
    wait_for(lambda: _admitted_then_removed(kube, namespace, second) is None, timeout_s=30,
             what="second admitted once first is gone")  # fmt: skip
