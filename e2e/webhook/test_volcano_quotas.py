"""Volcano's vGPU quotas on the real API server (issue 16): a ResourceQuota on
`requests.volcano.sh/vgpu-memory`, `vgpu-cores` and `vgpu-number` (the extended resources Kubernetes
itself would count under Volcano's device plugin) holds translated pods as HAMi's keys do, per
device, against every claim of our class in the namespace; the next pod is refused naming the
quota and the numbers. Each pod's claim is awaited before the next pod is created."""

from __future__ import annotations

import pytest

from e2e.cluster import KubeClient
from e2e.webhook.helpers import gpu_pod
from e2e.webhook.test_quotas import admitted, create_quota, refusal

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]


def test_volcano_memory_quota_admits_until_its_limit_and_refuses_the_next(
    kube: KubeClient, ns: str
) -> None:
    create_quota(kube, ns, "vc-memory", {"requests.volcano.sh/vgpu-memory": "8192"})
    admitted(kube, ns, "pair", {"volcano.sh/vgpu-number": 2, "volcano.sh/vgpu-memory": 2048})
    admitted(kube, ns, "hami", {"nvidia.com/gpumem": 2048})  # HAMi's names book the same claims
    admitted(kube, ns, "last", {"volcano.sh/vgpu-memory": 2048})  # exactly at the limit

    body = refusal(kube, ns, gpu_pod("over", {"volcano.sh/vgpu-memory": 1}))
    assert (
        "exceeded quota vc-memory: requests.volcano.sh/vgpu-memory: requested 1, used 8192, "
        "limited 8192"
    ) in body


def test_volcano_cores_and_card_count_quotas_are_summed_over_devices(
    kube: KubeClient, ns: str
) -> None:
    hard = {"limits.volcano.sh/vgpu-cores": "100", "requests.volcano.sh/vgpu-number": "3"}
    create_quota(kube, ns, "vc-cards", hard)
    admitted(kube, ns, "pair", {"volcano.sh/vgpu-number": 2, "volcano.sh/vgpu-memory": 1024,
                                "volcano.sh/vgpu-cores": 30})  # fmt: skip

    busy = gpu_pod("busy", {"volcano.sh/vgpu-memory": 1024, "volcano.sh/vgpu-cores": 50})
    body = refusal(kube, ns, busy)
    assert "exceeded quota vc-cards: limits.volcano.sh/vgpu-cores: requested 50, used 60, " \
        "limited 100" in body  # fmt: skip
    assert "vgpu-number" not in body  # 3 cards fit the count

    two = gpu_pod("two-more", {"volcano.sh/vgpu-number": 2, "volcano.sh/vgpu-memory": 1024,
                               "volcano.sh/vgpu-cores": 10})  # fmt: skip
    body = refusal(kube, ns, two)
    assert "exceeded quota vc-cards: requests.volcano.sh/vgpu-number: requested 2, used 2, " \
        "limited 3" in body  # fmt: skip
