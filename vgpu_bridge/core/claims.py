"""Build `resource.k8s.io/v1` ResourceClaimTemplates for a normalised request (DESIGN §3)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from vgpu_bridge.core.cel import card_memory_selector, filter_selectors
from vgpu_bridge.core.dialects.kai import FRACTION as KAI_FRACTION
from vgpu_bridge.core.dialects.kai import MEMORY as KAI_MEMORY
from vgpu_bridge.core.inventory import Inventory
from vgpu_bridge.core.models import DeviceFilter, GpuRequest, Problems
from vgpu_bridge.core.names import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from vgpu_bridge.core.opaque_config import GpuShareConfig
from vgpu_bridge.core.profiles import ENFORCER_REQUEST, DriverProfile
from vgpu_bridge.core.quantity import MiB, format_bytes

REQUEST_NAME = "gpu"
MAX_SUBREQUESTS = 8  # firstAvailable limit of resource.k8s.io/v1
TEMPLATE_PREFIX = "vgpu-"


def claim_spec(
    request: GpuRequest,
    device_filter: DeviceFilter,
    *,
    profile: DriverProfile,
    inventory: Inventory,
    percent_path: str,
    problems: Problems,
    first_available: bool = True,
) -> dict[str, Any] | None:
    """The ResourceClaimSpec for one container, or None after recording why it cannot be built.

    `first_available=False` is for schedulers that cannot take `firstAvailable` (KAI): a
    percentage then needs a cluster with a single card size.
    """
    selectors = filter_selectors(device_filter, profile)
    whole_by_default = request.whole_card_memory and profile.memory_default_whole_card
    if request.memory_percent is None or whole_by_default:
        memory = None if request.memory_mib is None else request.memory_mib * MiB
        exact = _device_request(request, profile, selectors, memory)
        device_request: dict[str, Any] = {"name": REQUEST_NAME, "exactly": exact}
    else:
        alternatives = _per_card_size(
            request, profile, selectors, inventory, percent_path, problems
        )
        if alternatives is None:
            return None
        if len(alternatives) == 1:  # one card size: no alternatives to choose from
            exact = {k: v for k, v in alternatives[0].items() if k != "name"}
            device_request = {"name": REQUEST_NAME, "exactly": exact}
        elif first_available:
            device_request = {"name": REQUEST_NAME, "firstAvailable": alternatives}
        else:
            share = _ShareWords.of(request, percent_path)
            problems.add(
                percent_path,
                f"the cluster has {len(alternatives)} card memory sizes, and this scheduler "
                f"cannot choose among alternatives (firstAvailable): {share.stated} needs one "
                f"card size; ask for {share.in_mib} instead",
            )
            return None
    devices: dict[str, Any] = {"requests": [device_request]}
    if request.count > 1:  # HAMi puts each of N vGPUs on a different card
        devices["constraints"] = [
            {
                "requests": [REQUEST_NAME],
                "distinctAttribute": profile.qualified(profile.uuid_attribute),
            }
        ]
    if profile.enforcer_driver is not None:
        devices["requests"].append(enforcer_request(profile.enforcer_driver))
        devices["config"] = [_enforcer_config(request, profile.enforcer_driver)]
    elif request.priority is not None and profile.share_config:
        parameters = GpuShareConfig(priority=request.priority).to_parameters()
        devices["config"] = [
            {
                "requests": [REQUEST_NAME],
                "opaque": {"driver": profile.driver, "parameters": parameters},
            }
        ]
    return {"devices": devices}


def enforcer_request(enforcer_driver: str) -> dict[str, Any]:
    """The request for the node's enforcer device, beside the cards of a driver that enforces
    nothing (NVIDIA's): one per claim, on the same node as the cards, as node-local devices are.
    Where no enforcer runs the claim fits no node, so no share runs without its limits."""
    return {
        "name": ENFORCER_REQUEST,
        "exactly": {"deviceClassName": enforcer_driver, "allocationMode": "ExactCount", "count": 1},
    }


def _enforcer_config(request: GpuRequest, enforcer_driver: str) -> dict[str, Any]:
    """What the enforcer applies beyond the booked memory: the SM limit asked (always written,
    0 for none) and the priority."""
    config = GpuShareConfig(cores=request.cores, priority=request.priority)
    return {
        "requests": [ENFORCER_REQUEST],
        "opaque": {"driver": enforcer_driver, "parameters": config.to_parameters()},
    }


def _device_request(
    request: GpuRequest, profile: DriverProfile, selectors: list[str], memory_bytes: int | None
) -> dict[str, Any]:
    """An ExactCount request. A share asks for memory and cores: an unrequested one would consume
    the driver's default, the whole card. A whole-card request leaves memory to that default.
    The core booking (`profiles`) keeps `gpucores: 100` alone on its card."""
    capacity: dict[str, str] = {}
    if memory_bytes is not None:
        capacity[profile.memory_capacity] = format_bytes(memory_bytes)
    capacity.update(profile.cores_request(request.cores))
    capacity.update(profile.core_booking(request.cores))
    body: dict[str, Any] = {
        "deviceClassName": profile.device_class,
        "allocationMode": "ExactCount",
        "count": request.count,
    }
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if capacity:
        body["capacity"] = {"requests": capacity}
    return body


@dataclass(frozen=True, slots=True)
class _ShareWords:
    """A share of each card's memory in the user's own words: a KAI fraction or a percentage."""

    stated: str  # e.g. "a gpu-fraction of 0.5", "a share of 50%"
    in_mib: str  # what to ask for instead, e.g. "gpu-memory in MiB"

    @classmethod
    def of(cls, request: GpuRequest, path: str) -> _ShareWords:
        percent = request.memory_percent
        if path.endswith(f"[{KAI_FRACTION}]") and percent is not None:
            fraction = format(percent / 100, "f")
            return cls(f"a {KAI_FRACTION} of {fraction}", f"{KAI_MEMORY} in MiB")
        if request.whole_card_memory:  # a driver whose default is no memory (NVIDIA's)
            return cls("a whole card", "memory in MiB")
        return cls(f"a share of {percent}%", "memory in MiB")


def _per_card_size(
    request: GpuRequest,
    profile: DriverProfile,
    selectors: list[str],
    inventory: Inventory,
    percent_path: str,
    problems: Problems,
) -> list[dict[str, Any]] | None:
    """A percentage becomes one `firstAvailable` alternative per card memory size."""
    sizes = inventory.sizes(profile.driver)
    share = _ShareWords.of(request, percent_path)
    if not sizes:
        problems.add(
            percent_path,
            f"{share.stated} needs the cluster's card sizes, and no ResourceSlice of driver "
            f"{profile.driver} is known (translate: --card-memory SIZE or --inventory SLICES)",
        )
        return None
    if len(sizes) > MAX_SUBREQUESTS:
        problems.add(
            percent_path,
            f"the cluster has {len(sizes)} card memory sizes; a claim can list at most "
            f"{MAX_SUBREQUESTS}: ask for {share.in_mib} instead",
        )
        return None
    assert request.memory_percent is not None
    alternatives = []
    for size in sizes:
        share_bytes = max(MiB, int(size * request.memory_percent / 100) // MiB * MiB)
        sized = [*selectors, card_memory_selector(profile, size)]
        alternative = _device_request(request, profile, sized, share_bytes)
        name = f"card-{format_bytes(size).lower()}"
        alternatives.append({"name": name, **alternative})
    return alternatives


def template_name(spec: dict[str, Any], *, prefix: str = TEMPLATE_PREFIX) -> str:
    """A name that is a function of the spec: pods of the same shape share one template."""
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode())
    return prefix + digest.hexdigest()[:16]


def claim_template(spec: dict[str, Any], *, name: str, namespace: str | None) -> dict[str, Any]:
    """The ResourceClaimTemplate object, labelled as ours (and so are the claims made from it)."""
    labels = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = dict(labels)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": metadata,
        "spec": {"metadata": {"labels": dict(labels)}, "spec": spec},
    }
