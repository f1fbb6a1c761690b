"""NVIDIA's DRA driver on the local control plane, as far as the API sees it: its DeviceClass and
its slices for chosen nodes (no plugin process runs; e2e/nvidia/slices.py has the shapes), our
enforcer's DeviceClass as the chart makes it, and the limits file our agent writes per claim."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from e2e.cluster.client import Json, KubeClient, created_unless_present
from e2e.dra_objects import device_class
from e2e.nvidia.slices import NVIDIA_DEVICE_CLASS, NvidiaCard, nvidia_device_class
from e2e.nvidia.slices import nvidia_resource_slice as nvidia_slice_body

RESOURCE = "/apis/resource.k8s.io/v1"
ENFORCER_DRIVER = "enforcer.vgb.io"  # shared.md: the enforcer's driver and DeviceClass name
ENFORCER_DEVICE = "enforcer"


@contextmanager
def nvidia_and_enforcer_classes(kube: KubeClient) -> Iterator[None]:
    """NVIDIA's chart's ``gpu.nvidia.com`` and our chart's enforcer class, while the block runs."""
    classes = f"{RESOURCE}/deviceclasses"
    with (
        created_unless_present(kube, classes, nvidia_device_class()),
        created_unless_present(
            kube, classes, device_class(ENFORCER_DRIVER, driver=ENFORCER_DRIVER)
        ),
    ):
        yield


def publish_nvidia_cards(
    kube: KubeClient, node: str, cards: list[NvidiaCard], consumable_shares: str
) -> str:
    """NVIDIA's slice of `node` (owned by the Node, as its plugin's is); its name."""
    node_uid = kube.get(f"/api/v1/nodes/{node}")["metadata"]["uid"]
    body = nvidia_slice_body(node, cards, consumable_shares, node_uid=node_uid)
    created = kube.create(f"{RESOURCE}/resourceslices", body)
    name: str = created["metadata"]["name"]
    return name


def slices_of(kube: KubeClient, node: str, driver: str) -> list[Json]:
    selector = f"spec.nodeName={node},spec.driver={driver}"
    return kube.items(f"{RESOURCE}/resourceslices", fieldSelector=selector)


def remove_slices(kube: KubeClient, node: str, *drivers: str) -> None:
    for driver in drivers:
        for item in slices_of(kube, node, driver):
            kube.delete(f"{RESOURCE}/resourceslices/{item['metadata']['name']}")


def results_by_driver(claim: Json) -> dict[str, list[Json]]:
    """The claim's allocation results grouped by driver."""
    grouped: dict[str, list[Json]] = {}
    for result in claim["status"]["allocation"]["devices"]["results"]:
        grouped.setdefault(result["driver"], []).append(result)
    return grouped


def parse_limits(text: str) -> dict[str, str]:
    """A limits file (`vgpu-bridge-limits 2`, then KEY=VALUE lines) as a mapping."""
    lines = text.splitlines()
    assert lines[0] == "vgpu-bridge-limits 2", lines
    return dict(line.split("=", 1) for line in lines[1:] if line)


__all__ = [
    "ENFORCER_DEVICE",
    "ENFORCER_DRIVER",
    "NVIDIA_DEVICE_CLASS",
    "nvidia_and_enforcer_classes",
    "parse_limits",
    "publish_nvidia_cards",
    "remove_slices",
    "results_by_driver",
    "slices_of",
]
