"""NVIDIA's cards (e2e/nvidia/slices.py: as its kubelet plugin publishes them) and our enforcer
device beside them, published for the scheduler tests of the `nvidia` profile (Volcano here,
KAI's admission in e2e/kai). Published by hand: these tests are about placement and admission,
not about either kubelet plugin.

The enforcer is what our node agent publishes in enforcer mode: one device `enforcer` per node,
shared by many claims, no capacity, in the pool named after the node; its DeviceClass as the
chart makes it. The wire names are spelled out, not imported: they are what these tests check.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from e2e.cluster.client import Json, KubeClient
from e2e.dra_objects import RESOURCE_V1, resource_slice
from e2e.nvidia.slices import (
    NVIDIA_DRIVER,
    NvidiaCard,
    nvidia_device_class,
    nvidia_resource_slice,
)

RESOURCE = "/apis/resource.k8s.io/v1"
ENFORCER_DRIVER = "enforcer.vgb.io"
ENFORCER_CLASS = "enforcer.vgb.io"
ENFORCER_DEVICE = "enforcer"
#: The claim request names the `nvidia` profile writes: NVIDIA's share and our enforcer.
GPU_REQUEST = "gpu"
ENFORCER_REQUEST = "vgpu-limits"
H100_MEMORY = "80Gi"


def h100s(prefix: str, count: int) -> list[NvidiaCard]:
    """`count` 80Gi H100s, minors 0.., uuids `GPU-<prefix>-<minor>`."""
    return [NvidiaCard(minor=minor, uuid=f"GPU-{prefix}-{minor:04d}") for minor in range(count)]


def enforcer_device_class() -> Json:
    expression = f'device.driver == "{ENFORCER_DRIVER}" && device.allowMultipleAllocations == true'
    return {
        "apiVersion": RESOURCE_V1,
        "kind": "DeviceClass",
        "metadata": {"name": ENFORCER_CLASS},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def enforcer_device() -> Json:
    return {
        "name": ENFORCER_DEVICE,
        "allowMultipleAllocations": True,
        "attributes": {"enforces": {"string": NVIDIA_DRIVER}},
    }


@contextmanager
def published(
    kube: KubeClient, cards: Mapping[str, Sequence[NvidiaCard]], *, enforced: Sequence[str]
) -> Iterator[None]:
    """Both DeviceClasses, NVIDIA's slice of `cards` on each node (`--consumable-shares=100`),
    and the enforcer's slice on the `enforced` nodes only (where our agent runs); all of it
    removed afterwards."""
    bodies = [
        (f"{RESOURCE}/deviceclasses", nvidia_device_class()),
        (f"{RESOURCE}/deviceclasses", enforcer_device_class()),
        *[
            (f"{RESOURCE}/resourceslices", nvidia_resource_slice(node, list(node_cards)))
            for node, node_cards in cards.items()
        ],
        *[
            (
                f"{RESOURCE}/resourceslices",
                resource_slice(
                    f"{node}-{ENFORCER_DRIVER}",
                    driver=ENFORCER_DRIVER,
                    node=node,
                    devices=[enforcer_device()],
                ),
            )
            for node in enforced
        ],
    ]
    created: list[str] = []
    try:
        for collection, body in bodies:
            made = kube.create(collection, body)
            created.append(f"{collection}/{made['metadata']['name']}")
        yield
    finally:
        for path in reversed(created):
            kube.delete(path)
