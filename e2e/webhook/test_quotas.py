"""HAMi's namespace GPU quotas on the real API server: a ResourceQuota with hard limits on
`limits.nvidia.com/gpumem`, `limits.nvidia.com/gpucores` and the card count admits translated pods
until the namespace's claims of our class reach it; the next pod is refused with the quota and the
numbers, and so is a pod that names the translated template directly (as a Deployment's pods do).

Each pod's claim is awaited before the next pod is created: the webhook counts the claims that
exist, and kube-controller-manager makes a pod's claim just after the pod (docs/webhook.md)."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.cluster import KubeClient
from e2e.cluster.client import ApiError, Json
from e2e.waiting import wait_for
from e2e.webhook.helpers import create_pod, gpu_pod

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
RESOURCE = "/apis/resource.k8s.io/v1"


def create_quota(kube: KubeClient, ns: str, name: str, hard: dict[str, str]) -> None:
    body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name},
            "spec": {"hard": hard}}  # fmt: skip
    kube.create(f"/api/v1/namespaces/{ns}/resourcequotas", body)


def admitted(kube: KubeClient, ns: str, name: str, limits: dict[str, Any]) -> Json:
    """Create a GPU pod and wait for the claim the controller makes for it."""
    created = create_pod(kube, ns, gpu_pod(name, limits))

    def claim_made() -> bool:
        pod = kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        return bool(pod["status"].get("resourceClaimStatuses"))

    wait_for(claim_made, timeout_s=30, what=f"the claim of pod {ns}/{name}")
    return created


def refusal(kube: KubeClient, ns: str, pod: Json) -> str:
    with pytest.raises(ApiError) as refused:
        create_pod(kube, ns, pod)
    assert refused.value.status == 403, refused.value
    return refused.value.body


def test_pods_are_admitted_until_the_gpumem_quota_and_the_next_is_refused(
    kube: KubeClient, ns: str
) -> None:
    create_quota(kube, ns, "team-gpu", {"limits.nvidia.com/gpumem": "10240"})
    first = admitted(kube, ns, "share-1", {"nvidia.com/gpumem": 4096})
    admitted(kube, ns, "share-2", {"nvidia.com/gpumem": 3072})
    admitted(kube, ns, "share-3", {"nvidia.com/gpumem": 3072})  # exactly at the limit

    body = refusal(kube, ns, gpu_pod("share-4", {"nvidia.com/gpumem": 1}))
    assert (
        "exceeded quota team-gpu: limits.nvidia.com/gpumem: requested 1, used 10240, limited 10240"
    ) in body

    template = first["spec"]["resourceClaims"][0]["resourceClaimTemplateName"]
    replica = gpu_pod("replica", {"cpu": "100m"})
    replica["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    replica["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    body = refusal(kube, ns, replica)
    assert "limits.nvidia.com/gpumem: requested 4096, used 10240, limited 10240" in body


def test_gpucores_and_the_card_count_are_summed_over_devices(kube: KubeClient, ns: str) -> None:
    hard = {"limits.nvidia.com/gpucores": "100", "requests.nvidia.com/gpu": "3"}
    create_quota(kube, ns, "cards", hard)
    admitted(kube, ns, "pair", {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1024,
                                "nvidia.com/gpucores": 30})  # fmt: skip

    body = refusal(kube, ns, gpu_pod("busy", {"nvidia.com/gpumem": 1024,
                                              "nvidia.com/gpucores": 50}))  # fmt: skip
    assert "exceeded quota cards: limits.nvidia.com/gpucores: requested 50, used 60, " \
        "limited 100" in body  # fmt: skip
    assert "requests.nvidia.com/gpu" not in body  # 3 cards fit the count

    body = refusal(kube, ns, gpu_pod("two-more", {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1024,
                                                  "nvidia.com/gpucores": 10}))  # fmt: skip
    assert "exceeded quota cards: requests.nvidia.com/gpu: requested 2, used 2, limited 3" in body
    assert "gpucores" not in body  # 60 + 20 fit

    admitted(kube, ns, "last", {"nvidia.com/gpumem": 1024, "nvidia.com/gpucores": 40})


def test_a_namespace_without_a_gpu_quota_is_not_limited(kube: KubeClient, ns: str) -> None:
    create_quota(kube, ns, "cpu-only", {"limits.cpu": "8"})
    for index in range(3):
        pod = gpu_pod(f"share-{index}", {"nvidia.com/gpumem": 30720, "cpu": "1"})
        assert create_pod(kube, ns, pod)["spec"]["resourceClaims"]
