"""`--profile hami`: HAMi's `gpucores: 100` is a card of its own on HAMi's own DRA driver too,
decided by the real kube-scheduler. That driver publishes only `cores` (0..100) and `memory`, both
with the whole card as their default (hami.md §4.1), and writes what a claim consumed of them into
the container as its limits; it has no core booking. So core books the whole card for
`gpucores: 100` (memory left to the driver's default, the whole card): no share fits beside it
(every share asks some memory), and it fits on no card in use. The slices below have the shape
that driver publishes (two 80Gi cards on one node, under a driver name of this test's own); the
pods are HAMi pods translated by core under that profile and created as the webhook creates them.
The allocator keeps shares on the first card with room, so a pod on the second card is one that
the rule kept off the first."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import replace

import pytest

from e2e.cluster import KubeClient
from e2e.dra_objects import device_class, quantity, resource_slice
from e2e.pods import RESOURCE, claim_of, create_hami_pod, get_pod, only_result
from e2e.test_core_booking import card_of, stays_pending
from vgpu_bridge.core import DriverProfile
from vgpu_bridge.core.profiles import HAMI

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("kubelet_standin")]
CARD = "80Gi"


def hami_card(minor: int) -> dict[str, object]:
    """One device as HAMi's kubelet plugin publishes it in its HAMi-core mode."""
    cores = {"value": "100", "requestPolicy": {
        "default": "100", "validRange": {"min": "0", "max": "100", "step": "1"}}}  # fmt: skip
    memory = {"value": CARD, "requestPolicy": {
        "default": CARD, "validRange": {"min": "1Mi", "max": CARD, "step": "1Mi"}}}  # fmt: skip
    return {
        "name": f"hami-gpu-{minor}",
        "allowMultipleAllocations": True,
        "attributes": {
            "type": {"string": "hami-gpu"},
            "uuid": {"string": f"GPU-hami-{minor}"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
        },
        "capacity": {"cores": cores, "memory": memory},
    }


@pytest.fixture
def hami_cards(kube: KubeClient, fake_nodes: list[str]) -> Iterator[DriverProfile]:
    """hami-gpu-0 and hami-gpu-1 on the first fake node; the hami profile under this driver."""
    driver = f"hami-{secrets.token_hex(3)}.e2e.vgpu-bridge.io"
    profile = replace(HAMI, driver=driver, device_class=driver)
    kube.create(f"{RESOURCE}/deviceclasses", device_class(driver, driver=driver))
    devices = [hami_card(0), hami_card(1)]
    piece = resource_slice(driver, driver=driver, node=fake_nodes[0], devices=devices)
    kube.create(f"{RESOURCE}/resourceslices", piece)
    yield profile
    kube.delete(f"{RESOURCE}/resourceslices/{driver}")
    kube.delete(f"{RESOURCE}/deviceclasses/{driver}")


def test_gpucores_100_gets_a_card_of_its_own_on_hamis_driver(
    kube: KubeClient, namespace: str, hami_cards: DriverProfile
) -> None:
    create_hami_pod(kube, namespace, "exclusive", hami_cards, gpu="1", gpumem="1000",
                    gpucores="100")  # fmt: skip
    assert card_of(kube, namespace, "exclusive") == "hami-gpu-0"
    held = only_result(claim_of(kube, namespace, get_pod(kube, namespace, "exclusive")))
    assert quantity(held["consumedCapacity"]["memory"]) == quantity(CARD)  # the limit it gets

    for name in ("memory-only", "half-cores"):  # kept off hami-gpu-0, they share hami-gpu-1
        cores = "50" if name == "half-cores" else "0"
        create_hami_pod(kube, namespace, name, hami_cards, gpumem="1000", gpucores=cores)
        assert card_of(kube, namespace, name) == "hami-gpu-1"

    # hami-gpu-0 is taken whole, hami-gpu-1 is in use: no card for a second exclusive pod
    create_hami_pod(kube, namespace, "exclusive-too", hami_cards, gpu="1", gpumem="1000",
                    gpucores="100")  # fmt: skip
    stays_pending(kube, namespace, "exclusive-too")
