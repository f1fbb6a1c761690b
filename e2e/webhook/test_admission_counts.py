"""Issue 26's reduced admission run: GPU admissions into a namespace with a GPU quota and many
claims make no LIST (a count, not a time). The webhook reads what the namespace's claims book from
its watch on every ResourceClaim; before, each admission listed the namespace's claims whole.

The API server's ``apiserver_request_total`` does not say who asked (``bench/scaling/
api_counts.py``); in this session nothing but the webhook lists a namespace's claims, quotas or
claim templates, so those are counted exactly, once no namespace is being deleted (the namespace
controller lists every kind of a namespace it deletes, as earlier tests' namespaces go). The pods
name a scheduler nobody runs: they stay unscheduled, and kube-controller-manager still makes each
one's claim.
"""

from __future__ import annotations

import pytest

from bench.scaling.api_counts import counted
from bench.scaling.bulk import ApiConnection, in_threads
from bench.scaling.fleet import share_spec
from e2e.cluster import KubeClient
from e2e.cluster.client import ApiError, Json
from e2e.waiting import wait_for
from e2e.webhook.helpers import create_pod, gpu_pod

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
RESOURCE = "/apis/resource.k8s.io/v1"
HELD_CLAIMS, PODS, POD_MIB = 300, 20, 1000
CLAIM_MIB = 10 * 1024  # share_spec(8.0): an eighth of an 80 GiB card
NAMESPACED_LISTS = ("resourceclaims", "resourcequotas", "resourceclaimtemplates")


def held_claims(kube: KubeClient, ns: str, count: int) -> None:
    path, spec = f"{RESOURCE}/namespaces/{ns}/resourceclaims", share_spec(8.0)

    def create(connection: ApiConnection, number: int) -> None:
        body: Json = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                      "metadata": {"name": f"held-{number:04d}"}, "spec": spec}  # fmt: skip
        connection.send("POST", path, body)

    in_threads(kube, range(count), create, threads=4)


def unscheduled(name: str, mib: int) -> Json:
    """A GPU pod nobody schedules, named by `generateName` as a controller's pods are: it gets no
    Event of its own (no name to look up, no owner), so the next test's Events do not queue
    behind this one's lookups of pods already deleted with the namespace."""
    pod = gpu_pod("", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mib})
    pod["metadata"] = {"generateName": f"{name}-"}
    pod["spec"]["schedulerName"] = "e2e-nobody-schedules"
    return pod


def test_gpu_admissions_into_a_namespace_with_a_quota_and_300_claims_list_nothing(
    kube: KubeClient, ns: str
) -> None:
    held = HELD_CLAIMS * CLAIM_MIB
    hard = held + PODS * POD_MIB + 5_000  # room for the pods below, not for the big one after
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team-gpu"},
             "spec": {"hard": {"limits.nvidia.com/gpumem": str(hard)}}}  # fmt: skip
    kube.create(f"/api/v1/namespaces/{ns}/resourcequotas", quota)
    held_claims(kube, ns, HELD_CLAIMS)
    wait_for(lambda: not kube.terminating_namespaces(), timeout_s=120,
             what="earlier tests' namespaces gone")  # fmt: skip

    def admit_pods() -> list[Json]:
        return [create_pod(kube, ns, unscheduled(f"share-{i}", POD_MIB)) for i in range(PODS)]

    created, requests = counted(kube, admit_pods)
    assert all(pod["spec"].get("resourceClaims") for pod in created)  # translated
    lists = {r: requests.lists(r, scope="namespace") for r in NAMESPACED_LISTS}
    assert lists == dict.fromkeys(NAMESPACED_LISTS, 0), requests.counts

    # the quota still counts the claims it did not list: the held ones and the pods' own
    with pytest.raises(ApiError) as refused:
        create_pod(kube, ns, unscheduled("too-big", 20_000))
    assert refused.value.status == 403
    assert (
        "exceeded quota team-gpu: limits.nvidia.com/gpumem: requested 20000" in refused.value.body
    )
    used = int(refused.value.body.split("used ")[1].split(",")[0])
    assert held <= used <= held + PODS * POD_MIB
