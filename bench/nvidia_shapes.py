"""The objects of a node pool on NVIDIA's DRA driver with our enforcer, for the nvidia-mode
benchmarks (``bench/nvidia.py``); pure, no I/O.

NVIDIA's slices and DeviceClass come from ``e2e/nvidia/slices.py`` (the stand-in's builders: its
v0.5.0 shapes, ``docs/reference/nvidia-dra-driver.md`` §1-2): one slice per node, pool = node
name, every card ``gpu-<minor>`` in it. Here: fake cards for a node, our enforcer's one device per
node as the agent publishes it in enforcer mode, and the allocation the scheduler writes for a
translated claim (NVIDIA's share and the enforcer device), for claims allocated without a
scheduler.
"""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from e2e.dra_objects import resource_slice
from e2e.nvidia.slices import NVIDIA_DRIVER, NvidiaCard
from vgpu_bridge.core import ENFORCER_DRIVER

Json = dict[str, Any]

RESOURCE_V1 = "resource.k8s.io/v1"
ENFORCER_DEVICE = "enforcer"


def node_cards(node: str, count: int, *, memory_bytes: int) -> list[NvidiaCard]:
    """`count` cards of `node`, each with a UUID of its own across the cluster."""
    return [NvidiaCard(minor, card_uuid(node, minor), memory_bytes) for minor in range(count)]


def card_uuid(node: str, minor: int) -> str:
    """A stable NVML-looking UUID for card `minor` of `node`."""
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{node}/{minor}"))


def enforcer_slice(node: str) -> Json:
    """Our agent's one device in enforcer mode: no capacity, shared by every claim of the node."""
    device = {
        "name": ENFORCER_DEVICE,
        "attributes": {"enforces": {"string": NVIDIA_DRIVER}},
        "allowMultipleAllocations": True,
    }
    return resource_slice(
        f"{node}-{ENFORCER_DRIVER}", driver=ENFORCER_DRIVER, node=node, devices=[device]
    )


def _device_class(name: str, expression: str, **spec: Any) -> Json:
    return {
        "apiVersion": RESOURCE_V1,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}], **spec},
    }


def enforcer_device_class() -> Json:
    """The enforcer's class, as our chart writes it in nvidia mode."""
    expression = f'device.driver == "{ENFORCER_DRIVER}" && device.allowMultipleAllocations == true'
    return _device_class(ENFORCER_DRIVER, expression)


def allocation_results(node: str, spec: Json, *, device: str) -> list[Json]:
    """What the scheduler writes for `spec` (a translated nvidia claim: request ``gpu`` on
    NVIDIA's class, request ``vgpu-limits`` on the enforcer's) placed on `device` of `node`:
    NVIDIA's result consumes the capacities its request asks for, the enforcer's none."""
    results = []
    for request in spec["devices"]["requests"]:
        exactly = request["exactly"]
        enforcer = exactly["deviceClassName"] == ENFORCER_DRIVER
        result: Json = {
            "request": request["name"],
            "driver": ENFORCER_DRIVER if enforcer else NVIDIA_DRIVER,
            "pool": node,
            "device": ENFORCER_DEVICE if enforcer else device,
            "shareID": str(uuidlib.uuid4()),
        }
        asked = (exactly.get("capacity") or {}).get("requests")
        if not enforcer and asked:
            result["consumedCapacity"] = dict(asked)
        results.append(result)
    return results


def allocation(node: str, spec: Json, *, device: str) -> Json:
    """The claim's whole ``status.allocation``: results, the claim's configs, the node."""
    selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    devices: Json = {"results": allocation_results(node, spec, device=device)}
    configs = [{"source": "FromClaim", **config} for config in spec["devices"].get("config") or []]
    if configs:
        devices["config"] = configs
    return {"devices": devices, "nodeSelector": {"nodeSelectorTerms": [selector]}}
