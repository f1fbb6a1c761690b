"""What the cluster's cards look like, learnt from ResourceSlices: memory sizes per driver.

Only full GPUs are cards: NVIDIA's driver publishes its MIG and VFIO devices in the same slice as
its GPUs, typed `mig` and `vfio` (its `type` attribute; HAMi's driver types its GPUs `hami-gpu`),
and those give no card size, as a percentage of a card is of a full GPU's memory."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_bridge.core.errors import FieldError, InvalidRequest, shown
from vgpu_bridge.core.quantity import QuantityError, parse_quantity

NOT_CARDS = frozenset({"mig", "vfio"})  # `type` attributes of devices that are no full GPU


@dataclass(frozen=True, slots=True)
class Inventory:
    """Distinct card memory sizes (bytes) by driver name."""

    memory_sizes: Mapping[str, frozenset[int]] = field(default_factory=dict)

    def sizes(self, driver: str) -> tuple[int, ...]:
        """The driver's card sizes, smallest first; () when none are known."""
        return tuple(sorted(self.memory_sizes.get(driver, ())))

    def with_sizes(self, driver: str, sizes: frozenset[int]) -> Inventory:
        """This inventory with `sizes` added to `driver`'s (`translate --card-memory`)."""
        merged = dict(self.memory_sizes)
        merged[driver] = frozenset(merged.get(driver, frozenset())) | sizes
        return Inventory(merged)

    @classmethod
    def from_slices(
        cls, slices: Iterable[Mapping[str, Any]], *, memory_capacity: str = "memory"
    ) -> Inventory:
        """Read `resource.k8s.io` ResourceSlices (v1, or v1beta1 with `basic:` devices); a slice of
        the wrong shape or with a bad size raises `InvalidRequest` naming it and the field."""
        sizes: dict[str, set[int]] = {}
        for index, obj in enumerate(slices):
            ref = f"ResourceSlice/{_name(obj, index)}"
            spec = _map(obj.get("spec"), ref, "spec")
            driver = spec.get("driver")
            devices = spec.get("devices") or []
            if not isinstance(devices, list):
                raise InvalidRequest(ref, [FieldError("spec.devices", "must be a list")])
            for d, device in enumerate(devices):
                size = _memory(device, memory_capacity, ref, f"spec.devices[{d}]", driver)
                if isinstance(driver, str) and size is not None:
                    sizes.setdefault(driver, set()).add(size)
        return cls({driver: frozenset(s) for driver, s in sizes.items()})


def _name(obj: Mapping[str, Any], index: int) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else f"#{index}"


def _map(value: object, ref: str, path: str) -> Mapping[str, Any]:
    """`value` when it is a map, {} when absent; else `InvalidRequest` naming `path`."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRequest(ref, [FieldError(path, f"must be a map, got {type(value).__name__}")])
    return value


def is_full_gpu(device: Mapping[str, Any], driver: object) -> bool:
    """False for a device typed as one of `NOT_CARDS` (a MIG or VFIO device); any other type is
    a card (NVIDIA's `gpu`, HAMi's `hami-gpu`; ours carry none). The status view reads cards
    by it too."""
    attributes = device.get("attributes")
    if not isinstance(attributes, Mapping):
        return True
    typed = attributes.get("type", attributes.get(f"{driver}/type"))
    kind = typed.get("string") if isinstance(typed, Mapping) else None
    return kind not in NOT_CARDS


def _memory(device: object, capacity_name: str, ref: str, path: str, driver: object) -> int | None:
    device = _map(device, ref, path)
    if "basic" in device:
        device, path = _map(device["basic"], ref, f"{path}.basic"), f"{path}.basic"
    if not is_full_gpu(device, driver):
        return None
    capacity = _map(device.get("capacity"), ref, f"{path}.capacity")
    entry = capacity.get(capacity_name, capacity.get(f"{driver}/{capacity_name}"))
    if entry is None:
        return None
    value = entry.get("value") if isinstance(entry, Mapping) else entry
    path = f"{path}.capacity[{capacity_name}].value"
    try:
        size = parse_quantity(value)
    except QuantityError as exc:
        raise InvalidRequest(ref, [FieldError(path, str(exc))]) from None
    if size <= 0 or size != size.to_integral_value():
        raise InvalidRequest(
            ref, [FieldError(path, f"must be a positive byte count, got {shown(value)}")]
        )
    return int(size)
