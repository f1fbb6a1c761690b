"""The node's ResourceSlices, built from its GPUs (pure: no I/O).

One pool per node, named after the node; each GPU one device that many claims may share
(`allowMultipleAllocations`), with capacities `memory` (bytes; a share asks 1Mi steps, the default
is the whole card), `cores` (SM percent 0..100, default 100) and, where the profile has one, the
core booking (`milliCores`: 100k, 1 per step, default 1; see `core.profiles`). An unhealthy card
carries a device taint (`DeviceTaint`, from `device_health`). At most 128 devices per slice, 64
while any card of the pool is tainted (the API server's limit for slices with taints); every slice
of the pool carries the same generation and the pool's slice count.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from vgpu_bridge.core.profiles import DriverProfile, core_booking_quantity
from vgpu_bridge.core.quantity import MiB, format_bytes
from vgpu_bridge.node.gpus import Gpu

Json = dict[str, Any]
API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES_PER_SLICE = 128
MAX_TAINTED_DEVICES_PER_SLICE = 64
MAX_ATTRIBUTE_LENGTH = 64
MAX_NAME_LENGTH = 253
CORES = 100
_SEMVER = re.compile(r"^(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*))?(?:\.(0|[1-9][0-9]*))?$")


TaintEffect = Literal["NoSchedule", "NoExecute", "None"]


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A taint on one device: `key`/`value` label name and value, `time_added` RFC 3339 in whole
    seconds (sent by us: the API server would otherwise stamp its own on every write)."""

    key: str
    value: str
    effect: TaintEffect
    time_added: str

    def to_json(self) -> Json:
        return {"key": self.key, "value": self.value, "effect": self.effect,
                "timeAdded": self.time_added}  # fmt: skip


def device(gpu: Gpu, profile: DriverProfile, taints: Sequence[DeviceTaint] = ()) -> Json:
    """One shareable GPU: its attributes, its consumable capacities and its taints, if any."""
    memory = format_bytes(gpu.memory // MiB * MiB)  # a whole number of steps: default = the card
    cores = str(CORES)
    capacity = {
        profile.memory_capacity: _shareable(memory, minimum="1Mi", step="1Mi"),
        profile.cores_capacity: _shareable(cores, minimum="0", step="1"),
    }
    if profile.core_booking_capacity is not None:
        capacity[profile.core_booking_capacity] = core_booking()
    return {
        "name": gpu.device_name,
        "allowMultipleAllocations": True,
        "attributes": attributes(gpu, profile),
        "capacity": capacity,
        **({"taints": [taint.to_json() for taint in taints]} if taints else {}),
    }


def core_booking() -> Json:
    """The whole card's core booking; a claim that does not ask for it books 1 (no SM limit), so
    claims written by hand or by an older webhook still share as before."""
    whole = core_booking_quantity(CORES)
    return _shareable(whole, minimum="1", step="1", default="1")


def attributes(gpu: Gpu, profile: DriverProfile) -> Json:
    """Attributes CEL selectors may use; optional ones only where known."""
    result: Json = {
        profile.uuid_attribute: {"string": gpu.uuid[:MAX_ATTRIBUTE_LENGTH]},
        profile.product_attribute: {"string": gpu.product_name[:MAX_ATTRIBUTE_LENGTH]},
        "index": {"int": gpu.index},
    }
    if gpu.architecture:
        result["architecture"] = {"string": gpu.architecture[:MAX_ATTRIBUTE_LENGTH]}
    for name, value in (
        ("cudaComputeCapability", gpu.compute_capability),
        ("driverVersion", gpu.driver_version),
    ):
        version = semver(value)
        if version is not None:
            result[name] = {"version": version}
    return result


def semver(value: str | None) -> str | None:
    """`"9.0"` → `"9.0.0"`, `"570.124.06"` → `"570.124.6"`; None when not a version."""
    if not value:
        return None
    parts = [part.lstrip("0") or "0" for part in value.strip().split(".")]
    if not 1 <= len(parts) <= 3 or not all(part.isdigit() for part in parts):
        return None
    candidate = ".".join([*parts, "0", "0"][:3])
    return candidate if _SEMVER.match(candidate) else None


def _shareable(value: str, *, minimum: str, step: str, default: str | None = None) -> Json:
    return {
        "value": value,
        "requestPolicy": {
            "default": value if default is None else default,
            "validRange": {"min": minimum, "step": step, "max": value},
        },
    }


def slice_name(node: str, driver: str, index: int) -> str:
    """`<node>-<driver>-<index>`, shortened with a hash where that passes 253 characters."""
    name = f"{node}-{driver}-{index}"
    if len(name) <= MAX_NAME_LENGTH:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:10]
    return f"{name[: MAX_NAME_LENGTH - len(digest) - 1]}-{digest}"


def build_slices(
    gpus: Sequence[Gpu],
    *,
    node: str,
    profile: DriverProfile,
    generation: int,
    node_uid: str | None = None,
    taints: Mapping[str, DeviceTaint] | None = None,
    fixed_devices: Sequence[Json] = (),
) -> list[Json]:
    """The pool of `node` as ResourceSlices; an empty pool (one slice, no devices) for no GPUs.
    `taints`: the taint of each unhealthy card, by uuid. `fixed_devices` come first, as given
    (enforcer mode: the node's one enforcer device, and no GPU)."""
    taints = taints or {}
    devices = [dict(entry) for entry in fixed_devices] + [
        device(gpu, profile, [taints[gpu.uuid]] if gpu.uuid in taints else [])
        for gpu in sorted(gpus, key=lambda g: g.index)
    ]
    tainted = any("taints" in entry for entry in devices)
    per_slice = MAX_TAINTED_DEVICES_PER_SLICE if tainted else MAX_DEVICES_PER_SLICE
    chunks = [
        devices[start : start + per_slice] for start in range(0, len(devices), per_slice)
    ] or [[]]
    owner = [] if node_uid is None else [_node_owner(node, node_uid)]
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {
                "name": slice_name(node, profile.driver, index),
                **({"ownerReferences": owner} if owner else {}),
            },
            "spec": {
                "driver": profile.driver,
                "nodeName": node,
                "pool": {
                    "name": node,
                    "generation": generation,
                    "resourceSliceCount": len(chunks),
                },
                **({"devices": chunk} if chunk else {}),  # the API server drops an empty list
            },
        }
        for index, chunk in enumerate(chunks)
    ]


def _node_owner(node: str, uid: str) -> Json:
    """The Node owns its slices: they go with it (garbage collection)."""
    return {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid, "controller": True}
