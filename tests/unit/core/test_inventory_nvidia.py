"""Card sizes read from NVIDIA's slices: only full GPUs are cards a percentage is of; its MIG
(and VFIO) devices, published in the same slice, are not."""

from __future__ import annotations

import yaml

from tests.cli_runner import DATA
from vgpu_bridge.core import Inventory

GiB = 1024**3


def test_nvidia_slices_give_the_full_gpus_sizes_not_the_mig_devices() -> None:
    slices = list(yaml.safe_load_all((DATA / "inventory-nvidia.yaml").read_text()))
    assert Inventory.from_slices(slices).sizes("gpu.nvidia.com") == (80 * GiB,)


def test_a_device_typed_under_its_driver_domain_is_read_the_same() -> None:
    device = {"name": "d", "attributes": {"gpu.nvidia.com/type": {"string": "vfio"}},
              "capacity": {"memory": {"value": "8Gi"}}}  # fmt: skip
    slices = [{"spec": {"driver": "gpu.nvidia.com", "devices": [device]}}]
    assert Inventory.from_slices(slices).sizes("gpu.nvidia.com") == ()
