"""A fake DRA driver's published state: a DeviceClass and one ResourceSlice per fake node.

No driver process runs; the objects are what a node agent would publish. Each install gets its
own driver name and class, so tests sharing the session's nodes never see each other's devices.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from e2e.cluster.client import KubeClient
from e2e.dra_objects import device_class, resource_slice, shareable_gpu

RESOURCE = "/apis/resource.k8s.io/v1"


class ConsumableCapacityOffError(AssertionError):
    """The apiserver dropped ``allowMultipleAllocations``: DRAConsumableCapacity is off."""


@dataclass(frozen=True)
class FakeGpuDriver:
    name: str
    device_class: str
    #: node name → device names, in slice order
    devices: Mapping[str, tuple[str, ...]]
    slices: tuple[str, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self.devices)


def install_fake_gpu_driver(
    kube: KubeClient, devices: Mapping[str, Sequence[str]], *, memory: str = "40Gi"
) -> FakeGpuDriver:
    """Publish shareable GPUs (``memory`` each, 100 cores) on the given nodes."""
    token = secrets.token_hex(3)
    name, class_name = f"gpu-{token}.e2e.vgpu-bridge.io", f"e2e-gpu-{token}"
    kube.create(f"{RESOURCE}/deviceclasses", device_class(class_name, driver=name))
    slices = []
    for node, names in devices.items():
        body = resource_slice(
            f"{node}-{token}",
            driver=name,
            node=node,
            devices=[shareable_gpu(device, memory=memory) for device in names],
        )
        created = kube.create(f"{RESOURCE}/resourceslices", body)
        slices.append(created["metadata"]["name"])
        if created["spec"]["devices"][0].get("allowMultipleAllocations") is not True:
            raise ConsumableCapacityOffError(created["metadata"]["name"])
    published = {node: tuple(names) for node, names in devices.items()}
    return FakeGpuDriver(name, class_name, published, tuple(slices))


def remove_fake_gpu_driver(kube: KubeClient, driver: FakeGpuDriver) -> None:
    for name in driver.slices:
        kube.delete(f"{RESOURCE}/resourceslices/{name}")
    kube.delete(f"{RESOURCE}/deviceclasses/{driver.device_class}")
