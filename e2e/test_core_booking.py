"""HAMi's exclusivity rules, decided by the real kube-scheduler on what vgpu-bridge writes.

`gpucores: 100` is a card of its own: nothing joins it, and it joins no card in use (HAMi's
ExclusiveDeviceAllocateConflict). A share without an SM limit does not join a card whose cores
are fully booked (CardComputeUnitsExhausted). The node publishes what the agent publishes
(`node.slices.build_slices`: two 80Gi cards on one node, under a driver name of this test's own),
the pods are HAMi pods translated by core (`translate`), and their templates and pods are created
as the webhook creates them. The allocator keeps shares on the first card with room, so a pod on
the second card is one that the rule kept off the first.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from e2e.cluster import KubeClient
from e2e.dra_objects import device_class, quantity
from e2e.pods import (
    RESOURCE,
    claim_of,
    create_hami_pod,
    get_pod,
    is_unbound,
    only_result,
    running_pod,
    unschedulable_condition,
)
from e2e.waiting import stays, wait_for
from vgpu_bridge.core import DriverProfile
from vgpu_bridge.core.profiles import our_profile
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.slices import build_slices

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
CARD_MEMORY = 80 * 2**30


@pytest.fixture
def cards(kube: KubeClient, fake_nodes: list[str]) -> Iterator[DriverProfile]:
    """Two of our cards, gpu-0 and gpu-1, on the first fake node; the profile names the driver."""
    profile = our_profile(f"gpu-{secrets.token_hex(3)}.e2e.vgpu-bridge.io")
    body = device_class(profile.device_class, driver=profile.driver)
    kube.create(f"{RESOURCE}/deviceclasses", body)
    gpus = [Gpu(i, f"GPU-booking-{i}", "NVIDIA H100 80GB HBM3", CARD_MEMORY) for i in range(2)]
    slices = build_slices(gpus, node=fake_nodes[0], profile=profile, generation=1)
    for piece in slices:
        kube.create(f"{RESOURCE}/resourceslices", piece)
    yield profile
    for piece in slices:
        kube.delete(f"{RESOURCE}/resourceslices/{piece['metadata']['name']}")
    kube.delete(f"{RESOURCE}/deviceclasses/{profile.device_class}")


def card_of(kube: KubeClient, namespace: str, name: str) -> str:
    pod = running_pod(kube, namespace, name)
    device: str = only_result(claim_of(kube, namespace, pod))["device"]
    return device


def stays_pending(kube: KubeClient, namespace: str, name: str) -> None:
    wait_for(
        lambda: unschedulable_condition(kube, namespace, name),
        what=f"{name} marked Unschedulable",
    )
    stays(lambda: is_unbound(kube, namespace, name), for_s=3, what=f"{name} unbound")
    claim = claim_of(kube, namespace, get_pod(kube, namespace, name))
    assert not (claim.get("status") or {}).get("allocation")


def test_gpucores_100_and_a_share_without_an_sm_limit_never_share_a_card(
    kube: KubeClient, namespace: str, cards: DriverProfile
) -> None:
    create_hami_pod(kube, namespace, "exclusive", cards, gpu="1", gpumem="1000", gpucores="100")
    assert card_of(kube, namespace, "exclusive") == "gpu-0"

    for name in ("memory-only-a", "memory-only-b"):  # they share gpu-1, and not gpu-0
        create_hami_pod(kube, namespace, name, cards, gpumem="1000")
        assert card_of(kube, namespace, name) == "gpu-1"

    # gpu-0 is exclusive, gpu-1 in use by shares without an SM limit: no card for a second one
    create_hami_pod(kube, namespace, "exclusive-too", cards, gpu="1", gpumem="1000", gpucores="100")
    stays_pending(kube, namespace, "exclusive-too")


def test_a_share_without_an_sm_limit_does_not_join_a_card_whose_cores_are_fully_booked(
    kube: KubeClient, namespace: str, cards: DriverProfile
) -> None:
    for name, cores in (("sixty", "60"), ("forty", "40")):
        create_hami_pod(kube, namespace, name, cards, gpumem="1000", gpucores=cores)
        assert card_of(kube, namespace, name) == "gpu-0"

    create_hami_pod(kube, namespace, "memory-only", cards, gpumem="1000")
    assert card_of(kube, namespace, "memory-only") == "gpu-1"
    result = only_result(claim_of(kube, namespace, get_pod(kube, namespace, "memory-only")))
    assert quantity(result["consumedCapacity"]["cores"]) == 0
    assert quantity(result["consumedCapacity"]["milliCores"]) == 1
