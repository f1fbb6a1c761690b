"""What a ResourceClaim of our DeviceClass books, in the units HAMi's namespace quotas count:
devices, bytes of device memory and percent of a card's SMs, each summed over the devices.

Pure: the webhook lists the claims and compares the sums with the quotas. An allocated claim books
what the scheduler recorded (`consumedCapacity` of each result); one not yet allocated books what it
asks for, and where it offers alternatives (`firstAvailable`, a percentage on cards of several
sizes) the largest of them: over-counting beats escaping a quota. A request that leaves memory to
the device's default takes a whole card: it books the largest card size known, or, when none is
known, counts as `unsized` so the caller can refuse rather than guess.

On NVIDIA's driver (the `nvidia` profile) a claim books its cards, never our enforcer beside
them; memory left out is the mode's default (the whole card, or no memory); cores are the
percent its `shares` are of the card's N (left out: the policy's default, one share), or, in the
modes that book no SMs, the SM limit the enforcer's config holds (none: every SM).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any

from vgpu_bridge.core.opaque_config import ShareConfigError, parse_share_config
from vgpu_bridge.core.profiles import DriverProfile
from vgpu_bridge.core.quantity import QuantityError, parse_quantity

WHOLE_CARD_CORES = 100  # a capacity left unrequested takes the device's default: all of it


@dataclass(frozen=True, slots=True)
class Booking:
    """Sums over devices. `unsized` counts devices whose memory could not be sized;
    `takes_all` holds the spec paths of requests with `allocationMode: All`, which take every
    matching device: how many is known only once allocated, so they cannot be counted before
    (each is summed here as one device)."""

    devices: int = 0
    memory_bytes: int = 0
    cores: int = 0
    unsized: int = 0
    takes_all: tuple[str, ...] = ()

    def __add__(self, other: Booking) -> Booking:
        return Booking(
            self.devices + other.devices,
            self.memory_bytes + other.memory_bytes,
            self.cores + other.cores,
            self.unsized + other.unsized,
            self.takes_all + other.takes_all,
        )

    def larger(self, other: Booking) -> Booking:
        """Field by field, the larger of two alternatives (and either one's `takes_all`)."""
        return Booking(
            max(self.devices, other.devices),
            max(self.memory_bytes, other.memory_bytes),
            max(self.cores, other.cores),
            max(self.unsized, other.unsized),
            self.takes_all + other.takes_all,
        )


def total(bookings: Iterable[Booking]) -> Booking:
    return sum(bookings, Booking())


@dataclass(frozen=True, slots=True)
class Asked:
    """One device request (or subrequest, or allocated device) of ours reduced to what its
    booking reads: `count` devices of `memory` bytes and `cores` percent each (None: the
    capacity was left to the device's default, the whole card); `takes_all` the spec path of a
    request with `allocationMode: All`."""

    count: int
    memory: int | None
    cores: int | None
    takes_all: str | None = None

    def booking(self, largest_card: int | None) -> Booking:
        cores = WHOLE_CARD_CORES if self.cores is None else self.cores
        memory = largest_card if self.memory is None else self.memory
        takes_all = (self.takes_all,) if self.takes_all is not None else ()
        if memory is None:
            return Booking(self.count, 0, self.count * cores, self.count, takes_all)
        return Booking(self.count, self.count * memory, self.count * cores, 0, takes_all)


@dataclass(frozen=True, slots=True)
class Sizing:
    """A claim (or claim spec) reduced to what its booking reads, a few numbers per request
    however big its selectors and config: per request of our DeviceClass its alternatives (one
    unless `firstAvailable`), or, once allocated, one per device of our driver. The webhook's
    claim watch holds this, not the claim, for a claim whose booking waits for a card size."""

    requests: tuple[tuple[Asked, ...], ...] = ()

    def booking(self, largest_card: int | None) -> Booking:
        """What it books once whole cards are `largest_card` bytes (None: unknown)."""
        return total(
            reduce(Booking.larger, (a.booking(largest_card) for a in alternatives))
            for alternatives in self.requests
        )

    @property
    def weight(self) -> int:
        """How many requests it holds: what the watch bounds per namespace."""
        return sum(len(alternatives) for alternatives in self.requests)


def spec_sizing(spec: Mapping[str, Any], *, profile: DriverProfile) -> Sizing:
    """What a ResourceClaimSpec asks of `profile`'s DeviceClass, before allocation."""
    sized: list[tuple[Asked, ...]] = []
    sm_limit = _enforced_cores(spec, profile)
    for index, request in enumerate(_requests(spec)):
        path = f"devices.requests[{index}]"
        exact = _map(request.get("exactly"))
        if exact.get("deviceClassName") == profile.device_class:
            sized.append((_asked(exact, f"{path}.exactly", profile, sm_limit),))
            continue
        subrequests = enumerate(_map(s) for s in _list(request.get("firstAvailable")))
        ours = tuple(
            _asked(s, f"{path}.firstAvailable[{sub}]", profile, sm_limit)
            for sub, s in subrequests
            if s.get("deviceClassName") == profile.device_class
        )
        if ours:
            sized.append(ours)
    return Sizing(tuple(sized))


def claim_sizing(claim: Mapping[str, Any], *, profile: DriverProfile) -> Sizing:
    """What a ResourceClaim holds of `profile`'s driver once allocated (whatever DeviceClass
    it named: the chart may add classes of our driver), else what it asks of our DeviceClass."""
    spec = _map(claim.get("spec"))
    allocation = _map(_map(claim.get("status")).get("allocation"))
    if not allocation:
        return spec_sizing(spec, profile=profile)
    results = [_map(r) for r in _list(_map(allocation.get("devices")).get("results"))]
    sm_limit = _enforced_cores(spec, profile)
    return Sizing(
        tuple(
            (_consumed(r, profile, sm_limit),) for r in results if r.get("driver") == profile.driver
        )
    )


def spec_booking(
    spec: Mapping[str, Any], *, profile: DriverProfile, largest_card: int | None
) -> Booking:
    """What a ResourceClaimSpec asks of `profile`'s DeviceClass, before allocation; where it
    offers alternatives, the largest of them."""
    return spec_sizing(spec, profile=profile).booking(largest_card)


def claim_booking(
    claim: Mapping[str, Any], *, profile: DriverProfile, largest_card: int | None
) -> Booking:
    """What a ResourceClaim books (see `claim_sizing`)."""
    return claim_sizing(claim, profile=profile).booking(largest_card)


def _asked(
    body: Mapping[str, Any], path: str, profile: DriverProfile, sm_limit: int | None
) -> Asked:
    """One device request (or subrequest) at `path`: `count` devices, each with the capacity it
    asks; `allocationMode: All` as one device, marked as `takes_all`."""
    mode = body.get("allocationMode", "ExactCount")
    count = body.get("count", 1) if mode == "ExactCount" else 1
    count = count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1
    asked = _map(_map(body.get("capacity")).get("requests"))
    takes_all = f"{path}.allocationMode" if mode == "All" else None
    return _device(asked, profile, sm_limit, count=count, takes_all=takes_all)


def _consumed(result: Mapping[str, Any], profile: DriverProfile, sm_limit: int | None) -> Asked:
    return _device(_map(result.get("consumedCapacity")), profile, sm_limit)


def _device(
    capacity: Mapping[str, Any],
    profile: DriverProfile,
    sm_limit: int | None,
    *,
    count: int = 1,
    takes_all: str | None = None,
) -> Asked:
    """Devices holding `capacity`; what it leaves out is the device's default (the whole card,
    but no memory where the driver's default is none)."""
    memory = _amount(capacity.get(profile.memory_capacity))
    if memory is None and not profile.memory_default_whole_card:
        memory = 0
    return Asked(count, memory, _booked_cores(capacity, profile, sm_limit), takes_all)


def _booked_cores(
    capacity: Mapping[str, Any], profile: DriverProfile, sm_limit: int | None
) -> int | None:
    """The SM percent `capacity` books (None: the whole card's): NVIDIA's shares as percent,
    the default one share where left out; `sm_limit` where the driver books no SMs."""
    if profile.cores_capacity is None:
        return sm_limit
    booked = _amount(capacity.get(profile.cores_capacity))
    if booked is None and profile.shares_per_card is not None:
        booked = 1  # NVIDIA's request policy: a request without shares consumes one
    return None if booked is None else profile.cores_percent(booked)


def _enforced_cores(spec: Mapping[str, Any], profile: DriverProfile) -> int | None:
    """Where the driver books no SMs but our enforcer limits them: the SM limit of the last
    enforcer config that sets one; None when none does (every SM) or when SMs are booked."""
    if profile.enforcer_driver is None or profile.cores_capacity is not None:
        return None
    cores = None
    for entry in _list(_map(spec.get("devices")).get("config")):
        opaque = _map(_map(entry).get("opaque"))
        if opaque.get("driver") != profile.enforcer_driver:
            continue
        try:
            config = parse_share_config(opaque.get("parameters"))
        except ShareConfigError:
            continue  # the enforcer refuses such a claim; it books every SM meanwhile
        cores = config.cores if config.cores is not None else cores
    return cores


def _amount(value: object) -> int | None:
    """A whole number from a quantity (rounded up), None when absent or unreadable."""
    if value is None:
        return None
    try:
        amount = parse_quantity(value)
    except QuantityError:
        return None
    return int(amount.to_integral_value(rounding="ROUND_CEILING")) if amount >= 0 else None


def _requests(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [_map(r) for r in _list(_map(spec.get("devices")).get("requests"))]


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


#: kube-scheduler serves `<prefix><class>` from any DeviceClass (KEP-5004), beside the class's
#: own `extendedResourceName`
IMPLICIT_EXTENDED_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"


def extended_resource_sizing(pod: Mapping[str, Any], names: Iterable[str]) -> Sizing:
    """The whole cards kube-scheduler gives a pod no webhook translated for its requests of the
    extended resources `names` (KEP-5004: a claim of the class, one device per unit, capacity
    left to the card's default). Per name, as the scheduler builds that claim: the long-lived
    containers' requests (app containers and restartable init containers) summed, or a plain init
    container's if larger (it reuses theirs first). A request is read as `requests`, else
    `limits` (they are equal for extended resources); one that is no quantity counts 1."""
    spec = _map(pod.get("spec"))
    sized = []
    for name in names:
        long_lived, short_lived = 0, 0
        for container in _list(spec.get("initContainers")):
            asked = _units(container, name)
            if _map(container).get("restartPolicy") == "Always":
                long_lived += asked
            else:
                short_lived = max(short_lived, asked)
        long_lived += sum(_units(c, name) for c in _list(spec.get("containers")))
        if count := max(long_lived, short_lived):
            sized.append((Asked(count, None, None),))
    return Sizing(tuple(sized))


def _units(container: object, name: str) -> int:
    resources = _map(_map(container).get("resources"))
    value = _map(resources.get("requests")).get(name, _map(resources.get("limits")).get(name))
    if value is None:
        return 0
    amount = _amount(value)
    return 1 if amount is None else amount
