"""What the cluster's cards look like, learnt from ResourceSlices: memory sizes per driver."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpu_bridge.core.errors import FieldError, InvalidRequest
from vgpu_bridge.core.quantity import QuantityError, parse_quantity


@dataclass(frozen=True, slots=True)
class Inventory:
    """Distinct card memory sizes (bytes) by driver name."""

    memory_sizes: Mapping[str, frozenset[int]] = field(default_factory=dict)

    def sizes(self, driver: str) -> tuple[int, ...]:
        """The driver's card sizes, smallest first; () when none are known."""
        return tuple(sorted(self.memory_sizes.get(driver, ())))

    @classmethod
    def from_slices(
        cls, slices: Iterable[Mapping[str, Any]], *, memory_capacity: str = "memory"
    ) -> Inventory:
        """Read `resource.k8s.io` ResourceSlices (v1, or v1beta1 with `basic:` devices)."""
        sizes: dict[str, set[int]] = {}
        for index, obj in enumerate(slices):
            name = (obj.get("metadata") or {}).get("name") or f"#{index}"
            spec = obj.get("spec") or {}
            driver = spec.get("driver")
            for d, device in enumerate(spec.get("devices") or ()):
                size = _memory(device, driver, memory_capacity, f"ResourceSlice/{name}", d)
                if isinstance(driver, str) and size is not None:
                    sizes.setdefault(driver, set()).add(size)
        return cls({driver: frozenset(s) for driver, s in sizes.items()})


def _memory(
    device: Mapping[str, Any], driver: object, capacity_name: str, ref: str, index: int
) -> int | None:
    capacity = (device.get("basic") or device).get("capacity") or {}
    entry = capacity.get(capacity_name, capacity.get(f"{driver}/{capacity_name}"))
    if entry is None:
        return None
    value = entry.get("value") if isinstance(entry, Mapping) else entry
    path = f"spec.devices[{index}].capacity[{capacity_name}].value"
    try:
        size = parse_quantity(value)
    except QuantityError as exc:
        raise InvalidRequest(ref, [FieldError(path, str(exc))]) from None
    if size <= 0 or size != size.to_integral_value():
        raise InvalidRequest(
            ref, [FieldError(path, f"must be a positive byte count, got {value!r}")]
        )
    return int(size)
