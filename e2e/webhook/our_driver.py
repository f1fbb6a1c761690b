"""Our driver's DeviceClass and ResourceSlices: shareable GPUs with `memory` (min 1Mi, step 1Mi,
default the whole card), `cores` (0..100, default 100) and the core booking `milliCores`
(node.slices). `serve_cards` runs the real node agent (`vgpu-bridge node` with mock GPUs) for
each node; `publish` writes the same shape by hand, for tests that need slices no agent would
make."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.client import Json, KubeClient
from e2e.dra_objects import device_class, resource_slice
from e2e.node.agent import AgentProcess, running_agent
from e2e.waiting import wait_for
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node.slices import core_booking

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
            "milliCores": core_booking(),
        },
    }


def publish(
    kube: KubeClient, cards: dict[str, list[Card]], *, driver: str = DEFAULT.driver
) -> list[str]:
    """Our DeviceClass plus one slice per node; returns the slice names. `driver` names both,
    as an install with `--driver-name` does."""
    kube.create(f"{RESOURCE}/deviceclasses", device_class(driver, driver=driver))
    names = []
    for node, node_cards in cards.items():
        name = f"{node}-{driver}"
        body = resource_slice(
            name, driver=driver, node=node, devices=[shareable_card(c) for c in node_cards]
        )
        kube.create(f"{RESOURCE}/resourceslices", body)
        names.append(name)
    return names


def withdraw(kube: KubeClient, slices: list[str], *, driver: str = DEFAULT.driver) -> None:
    for name in slices:
        kube.delete(f"{RESOURCE}/resourceslices/{name}")
    kube.delete(f"{RESOURCE}/deviceclasses/{driver}")


@contextmanager
def serve_cards(
    kube: KubeClient, kubeconfig: Path, cards: dict[str, list[Card]]
) -> Iterator[list[AgentProcess]]:
    """Our DeviceClass, and one node agent per node publishing `cards` (named gpu-<i> in order)."""
    kube.create(
        f"{RESOURCE}/deviceclasses", device_class(DEFAULT.device_class, driver=DEFAULT.driver)
    )
    try:
        with ExitStack() as stack:
            agents = [
                stack.enter_context(running_agent(node, kubeconfig, _mock_gpus(node_cards)))
                for node, node_cards in cards.items()
            ]
            wait_for(
                lambda: all(_published(kube, node) == len(c) for node, c in cards.items()),
                timeout_s=60,
                what="the node agents' slices",
            )
            yield agents
    finally:
        kube.delete(f"{RESOURCE}/deviceclasses/{DEFAULT.device_class}")


def _mock_gpus(cards: list[Card]) -> list[dict[str, str]]:
    assert [c.name for c in cards] == [f"gpu-{i}" for i in range(len(cards))], "gpu-<i> in order"
    return [{"uuid": c.uuid, "productName": c.product, "memory": c.memory} for c in cards]


def _published(kube: KubeClient, node: str) -> int:
    selector = f"spec.nodeName={node},spec.driver={DEFAULT.driver}"
    slices = kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector)
    return sum(len(s["spec"].get("devices") or []) for s in slices)
