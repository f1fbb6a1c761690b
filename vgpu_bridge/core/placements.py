"""Where an allocated ResourceClaim's devices of our driver are and what each one took: one
`Placement` per allocation result of the driver, with the `consumedCapacity` the scheduler
recorded against the card. Pure; the status view and the webhook's per-card sums read claims
through it, so both count a card's bookings the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_bridge.core.profiles import DriverProfile
from vgpu_bridge.core.quantity import QuantityError, parse_quantity


@dataclass(frozen=True, slots=True)
class Placement:
    """One allocated device: the pool (the node, for our slices) and device it is on, the
    request it answers (`request` or `request/subrequest`), and the bytes of memory and SM
    percent it consumed (None: not recorded, not a quantity, or a driver that books no cores)."""

    pool: str
    device: str
    request: str
    memory: int | None
    cores: int | None
    # the units of the profile's cores capacity it consumed (NVIDIA's shares of N: a card's
    # are summed, then converted to percent once); None where not recorded
    cores_units: int | None = None


def placements(claim: Mapping[str, Any], *, profile: DriverProfile) -> list[Placement]:
    """The allocation results of `profile`'s driver in `claim` (none while unallocated)."""
    allocation = _map(_map(claim.get("status")).get("allocation"))
    results = _map(allocation.get("devices")).get("results")
    found = []
    for result in results if isinstance(results, list) else ():
        if not isinstance(result, Mapping) or result.get("driver") != profile.driver:
            continue
        consumed = _map(result.get("consumedCapacity"))
        found.append(
            Placement(
                pool=str(result.get("pool", "")),
                device=str(result.get("device", "")),
                request=str(result.get("request", "")),
                memory=_consumed(consumed, profile.memory_capacity, profile),
                cores=_consumed_percent(consumed, profile),
                cores_units=_consumed(consumed, profile.cores_capacity, profile)
                if profile.cores_capacity
                else None,
            )
        )
    return found


def _consumed_percent(consumed: Mapping[str, Any], profile: DriverProfile) -> int | None:
    """The SM percent a result booked (NVIDIA's shares of N as percent), None where unbooked."""
    if profile.cores_capacity is None:
        return None
    booked = _consumed(consumed, profile.cores_capacity, profile)
    return None if booked is None else profile.cores_percent(booked)


def _consumed(consumed: Mapping[str, Any], name: str, profile: DriverProfile) -> int | None:
    return quantity_or_none(consumed.get(name, consumed.get(profile.qualified(name))))


def quantity_or_none(value: object) -> int | None:
    """A quantity as a whole number, None when absent or not a quantity."""
    if value is None:
        return None
    try:
        return int(parse_quantity(value))
    except QuantityError:
        return None


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
