"""NVIDIA-shaped slices match the reference table (docs/reference/nvidia-dra-driver.md §1.2-1.3,
seen on NVIDIA's plugin at 95932046 over its mock H100): no cluster needed."""

from __future__ import annotations

import re

import pytest

from e2e.nvidia.slices import (
    NVIDIA_CLASS_SELECTOR,
    NvidiaCard,
    mock_uuid,
    nvidia_device_class,
    nvidia_gpu_device,
    nvidia_resource_slice,
)
from vgpu_bridge.node.enforcer import ENFORCER_DEVICE, enforcer_device

H100 = NvidiaCard(minor=0, uuid=mock_uuid(0))
WHOLE_CARD_POLICY = {"default": "80Gi", "validRange": {"min": "1Mi", "max": "80Gi", "step": "1Mi"}}
ZERO_DEFAULT_POLICY = {"default": "0", "validRange": {"min": "0", "max": "80Gi", "step": "1Mi"}}
HUNDRED_SHARES = {
    "value": "100",
    "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "100", "step": "1"}},
}
#: The §1.3 table: mode → (allowMultipleAllocations, memory capacity, shares capacity).
TABLE = {
    "disabled": (None, {"value": "80Gi"}, None),
    "unlimited": (True, {"value": "80Gi", "requestPolicy": ZERO_DEFAULT_POLICY}, None),
    "memory": (True, {"value": "80Gi", "requestPolicy": WHOLE_CARD_POLICY}, None),
    "100": (True, {"value": "80Gi", "requestPolicy": ZERO_DEFAULT_POLICY}, HUNDRED_SHARES),
}


@pytest.mark.parametrize("mode", list(TABLE))
def test_each_consumable_shares_mode_publishes_the_reference_capacities(mode: str) -> None:
    allow, memory, shares = TABLE[mode]

    device = nvidia_gpu_device(H100, mode)

    assert device.get("allowMultipleAllocations") == allow
    capacity = device["capacity"]
    assert capacity["memory"] == memory
    assert capacity.get("shares") == shares


def test_a_card_of_odd_size_is_rounded_down_to_whole_mebibytes_once_shares_are_on() -> None:
    odd = NvidiaCard(minor=1, uuid=mock_uuid(1), memory_bytes=2**30 + 2**20 + 512)

    assert nvidia_gpu_device(odd, "disabled")["capacity"] == {
        "memory": {"value": str(odd.memory_bytes)}
    }
    memory = nvidia_gpu_device(odd, "4")["capacity"]["memory"]
    assert memory["value"] == "1025Mi"
    assert memory["requestPolicy"]["validRange"]["max"] == "1025Mi"


def test_the_device_is_gpu_minor_with_the_attributes_of_gpuinfo() -> None:
    device = nvidia_gpu_device(NvidiaCard(minor=3, uuid=mock_uuid(3)), "memory")

    assert device["name"] == "gpu-3"
    assert device["attributes"] == {
        "type": {"string": "gpu"},
        "uuid": {"string": "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadae03"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "550.163.1"},
        "cudaDriverVersion": {"version": "12.4.0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:13:00.0"},
    }


def test_our_enforcer_device_never_matches_nvidias_mig_regex() -> None:
    """NVIDIA's partial-prepare rollback runs every result's device name, whatever its driver,
    through its MIG regex (reference §6, item 2): the device our agent publishes must not match
    it."""
    name = enforcer_device()["name"]
    assert name == ENFORCER_DEVICE
    assert not re.match(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$", name)


@pytest.mark.parametrize("mode", ["off", "0", "-1", "", "100 "])
def test_a_mode_nvidias_plugin_refuses_is_refused(mode: str) -> None:
    with pytest.raises(ValueError, match="consumable-shares"):
        nvidia_gpu_device(H100, mode)


def test_one_pool_named_after_the_node_holds_one_slice_owned_by_the_node() -> None:
    cards = [NvidiaCard(minor=0, uuid=mock_uuid(0)), NvidiaCard(minor=1, uuid=mock_uuid(1))]

    body = nvidia_resource_slice("n1", cards, "unlimited", node_uid="u-1")

    assert body["metadata"] == {
        "generateName": "00000-gpu.nvidia.com-n1-",
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u-1", "controller": True}
        ],
    }
    spec = body["spec"]
    assert (spec["driver"], spec["nodeName"]) == ("gpu.nvidia.com", "n1")
    assert spec["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    assert not {"bindsToNode", "allNodes", "nodeSelector", "perDeviceNodeSelection"} & set(spec)


def test_the_device_class_is_the_charts_with_nvidia_com_gpu_as_its_extended_resource() -> None:
    assert nvidia_device_class() == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {
            "selectors": [{"cel": {"expression": NVIDIA_CLASS_SELECTOR}}],
            "extendedResourceName": "nvidia.com/gpu",
        },
    }
    assert NVIDIA_CLASS_SELECTOR == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
