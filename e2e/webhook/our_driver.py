"""Our driver's DeviceClass and ResourceSlices as the node agent will publish them (issue 5):
shareable GPUs with `memory` (min 1Mi, step 1Mi, default the whole card) and `cores` (0..100,
default 100). Until the node agent lands, e2e tests publish them through the API."""

from __future__ import annotations

from dataclasses import dataclass

from e2e.cluster.client import Json, KubeClient
from e2e.dra_objects import device_class, resource_slice
from vgpu_bridge.core import DEFAULT

RESOURCE = "/apis/resource.k8s.io/v1"


@dataclass(frozen=True)
class Card:
    name: str
    uuid: str
    product: str
    memory: str


def shareable_card(card: Card) -> Json:
    memory, cores = card.memory, "100"
    return {
        "name": card.name,
        "allowMultipleAllocations": True,
        "attributes": {"uuid": {"string": card.uuid}, "productName": {"string": card.product}},
        "capacity": {
            "memory": {
                "value": memory,
                "requestPolicy": {
                    "default": memory,
                    "validRange": {"min": "1Mi", "step": "1Mi", "max": memory},
                },
            },
            "cores": {
                "value": cores,
                "requestPolicy": {
                    "default": cores,
                    "validRange": {"min": "0", "step": "1", "max": cores},
                },
            },
        },
    }


def publish(kube: KubeClient, cards: dict[str, list[Card]]) -> list[str]:
    """Our DeviceClass plus one slice per node; returns the slice names."""
    kube.create(
        f"{RESOURCE}/deviceclasses", device_class(DEFAULT.device_class, driver=DEFAULT.driver)
    )
    names = []
    for node, node_cards in cards.items():
        name = f"{node}-{DEFAULT.driver}"
        body = resource_slice(
            name, driver=DEFAULT.driver, node=node, devices=[shareable_card(c) for c in node_cards]
        )
        kube.create(f"{RESOURCE}/resourceslices", body)
        names.append(name)
    return names


def withdraw(kube: KubeClient, slices: list[str]) -> None:
    for name in slices:
        kube.delete(f"{RESOURCE}/resourceslices/{name}")
    kube.delete(f"{RESOURCE}/deviceclasses/{DEFAULT.device_class}")
