"""The real KAI scheduler and binder with our driver and DeviceClass named without "gpu"
(`--driver-name`, the chart's `driverName`): what changes when KAI does not count our claims as
whole GPUs (docs/kai.md). A node of its own with one 80Gi card of that driver, and our webhook
under that name; the same KAI build and queues as test_real_kai.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from e2e.cluster import KubeClient, KubeletStandIn
from e2e.cluster.nodes import create_fake_node
from e2e.dra_objects import quantity
from e2e.kai.conftest import H100, HALF_GPU, ONE_GPU, PLAIN_DRIVER, UNLIMITED
from e2e.kai.kai_pods import (
    assert_pending_without_allocation,
    emptied,
    needs_shares,
    placed,
    submit,
)
from e2e.kai.real_kai import KaiBuild
from e2e.webhook.our_driver import Card, publish, withdraw

pytestmark = [pytest.mark.e2e, pytest.mark.needs_kai_build]
NODE = "e2e-kai-plain-0"


@pytest.fixture(scope="module")
def plain_node(kube: KubeClient, real_kai: KaiBuild) -> Iterator[str]:
    """One node with one 80Gi card of `PLAIN_DRIVER`, its pods marked Running when bound."""
    needs_shares(real_kai)
    create_fake_node(kube, NODE)
    slices = publish(kube, {NODE: [Card("gpu-0", "GPU-kai-plain-0", *H100)]}, driver=PLAIN_DRIVER)
    try:
        with KubeletStandIn(kube, [NODE]):
            yield NODE
    finally:
        withdraw(kube, slices, driver=PLAIN_DRIVER)
        kube.delete(f"/api/v1/nodes/{NODE}")


@pytest.fixture
def plain_ns(
    plain_node: str, kube: KubeClient, kai_namespace: Callable[[str], str]
) -> Iterator[str]:
    ns = kai_namespace("plain-name")
    yield ns
    emptied(kube, ns)


def test_a_one_card_node_packs_shares_up_to_the_cards_memory(
    kube: KubeClient, plain_ns: str, plain_node: str
) -> None:
    """Three 25,000 MiB shares on the one card (75,000 of 81,920 MiB); the fourth does not fit
    and waits: placement by the allocator's capacity alone, no idle-GPU count."""
    devices = set()
    for name in ("pack-a", "pack-b", "pack-c"):
        submit(kube, plain_ns, name, UNLIMITED, annotations={"gpu-memory": "25000"},
               node=plain_node)  # fmt: skip
        node, device, result = placed(kube, plain_ns, name)
        assert node == plain_node
        assert result["shareID"]
        assert quantity(result["consumedCapacity"]["memory"]) == quantity("25000Mi")
        devices.add(device)
    assert devices == {"gpu-0"}
    submit(kube, plain_ns, "pack-d", UNLIMITED, annotations={"gpu-memory": "25000"},
           node=plain_node)  # fmt: skip
    assert_pending_without_allocation(kube, plain_ns, "pack-d")


def test_queue_gpu_limits_count_none_of_the_shares(
    kube: KubeClient, plain_ns: str, plain_node: str
) -> None:
    """A queue limited to half a GPU runs a share, and one limited to one GPU runs two at once:
    KAI's GPU quota, limit and fair share see no GPU in these claims."""
    submit(kube, plain_ns, "half", HALF_GPU, annotations={"gpu-memory": "1024"}, node=plain_node)
    submit(kube, plain_ns, "one-a", ONE_GPU, annotations={"gpu-memory": "1024"}, node=plain_node)
    submit(kube, plain_ns, "one-b", ONE_GPU, annotations={"gpu-memory": "1024"}, node=plain_node)
    for name in ("half", "one-a", "one-b"):
        assert placed(kube, plain_ns, name)[1] == "gpu-0"


def test_a_whole_gpu_pod_waits_for_a_card_without_shares(
    kube: KubeClient, plain_ns: str, plain_node: str
) -> None:
    """Whole-card exclusivity still holds, by capacity: next to a share the whole-GPU pod has no
    card; once the share is gone it gets the card, all of its memory."""
    submit(kube, plain_ns, "share", UNLIMITED, annotations={"gpu-memory": "1024"}, node=plain_node)
    placed(kube, plain_ns, "share")
    submit(kube, plain_ns, "whole", UNLIMITED, limits={"nvidia.com/gpu": "1"}, node=plain_node)
    assert_pending_without_allocation(kube, plain_ns, "whole")
    kube.delete(f"/api/v1/namespaces/{plain_ns}/pods/share", grace_period_s=0)
    result = placed(kube, plain_ns, "whole")[2]
    assert quantity(result["consumedCapacity"]["memory"]) == quantity("80Gi"), result
