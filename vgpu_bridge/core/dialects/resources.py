"""Extended resources as HAMi and Volcano use them: a family of names, limits read first, then
requests, each a whole number within its range."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from vgpu_bridge.core.errors import shown
from vgpu_bridge.core.models import Problems, RawRequest
from vgpu_bridge.core.quantity import MAX_QUANTITY, MiB, QuantityError, parse_quantity

MAX_DEVICES = 32  # a DRA allocation holds at most 32 results (AllocationResultsMaxSize)
MAX_MEMORY_MIB = MAX_QUANTITY // MiB  # a claim's memory request is a quantity of bytes
MAX_GPUMEM_MIB = 2**31 - 1  # HAMi keeps gpumem (after its memory factor) in an int32


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """One family of extended-resource names that describe a GPU share."""

    family: str
    count: str
    memory: str
    memory_percentage: str
    cores: str
    priority: str | None

    def all(self) -> tuple[str, ...]:
        names = (self.count, self.memory, self.memory_percentage, self.cores, self.priority)
        return tuple(n for n in names if n is not None)


@dataclass(frozen=True, slots=True)
class Resources:
    """A container's `resources.limits` and `resources.requests`, as maps."""

    limits: Mapping[str, Any]
    requests: Mapping[str, Any]

    def names_any(self, names: tuple[str, ...]) -> bool:
        return any(n in self.limits or n in self.requests for n in names)


def whole_number(
    value: object, *, path: str, low: int, high: int | None, unit: str, problems: Problems
) -> int | None:
    """`value` as an int within [low, high], or None after recording why not."""
    bounds = f"at least {low}" if high is None else f"between {low} and {high}"
    reason = f"must be a whole number{unit}, {bounds}, got {shown(value)}"
    try:
        number = parse_quantity(value)
    except QuantityError:
        problems.add(path, reason)
        return None
    if number != number.to_integral_value() or number < low or (high is not None and number > high):
        problems.add(path, reason)
        return None
    return int(number)


def _as_map(value: object, *, path: str, problems: Problems) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.add(path, "must be a map of resource names to quantities")
        return {}
    return value


def resources_of(container: Mapping[str, Any], *, path: str, problems: Problems) -> Resources:
    """The container's limits and requests; an empty map for each one absent or not a map."""
    resources = _as_map(container.get("resources"), path=f"{path}.resources", problems=problems)
    limits = _as_map(resources.get("limits"), path=f"{path}.resources.limits", problems=problems)
    requests = _as_map(
        resources.get("requests"), path=f"{path}.resources.requests", problems=problems
    )
    return Resources(limits, requests)


# (field of RawRequest, attribute of ResourceNames, low, high, unit); a memory or a percentage
# of 0 means "not given", as in HAMi (its webhook and scheduler fall back to the defaults)
_FIELDS = (
    ("count", "count", 0, MAX_DEVICES, " of GPUs"),
    ("memory_mib", "memory", 0, MAX_GPUMEM_MIB, " of MiB"),
    ("memory_percent", "memory_percentage", 0, 100, " (percent)"),
    ("cores", "cores", 0, 100, " (percent of SMs)"),
    ("priority", "priority", 0, 1, " (0 high, 1 low)"),
)


def _check_request_equals_limit(
    request: object, limit: int, *, path: str, problems: Problems
) -> None:
    """Kubernetes requires an extended resource's request to equal its limit; a request that does
    not would be refused by the API server after translation removed it, so say so now."""
    try:
        equal = parse_quantity(request) == limit
    except QuantityError:
        equal = False
    if not equal:
        problems.add(
            path,
            f"must equal the limit ({limit}), as Kubernetes requires for extended resources, "
            f"got {shown(request)}",
        )


def read_family(
    names: ResourceNames,
    resources: Resources,
    *,
    path: str,
    problems: Problems,
    memory_factor: int = 1,
) -> RawRequest:
    """Each field of the request from its limit, else its request; a request beside a limit must
    equal it. `path` is the container's `resources`; `memory_factor` only shapes the hint given
    for a gpumem written with a unit."""
    limits, requests = resources.limits, resources.requests
    raw = RawRequest(resource_keys=tuple(n for n in names.all() if n in limits or n in requests))
    for field, attr, low, high, unit in _FIELDS:
        name = getattr(names, attr)
        if name is None or (name not in limits and name not in requests):
            continue
        section, source = ("limits", limits) if name in limits else ("requests", requests)
        field_path = f"{path}.{section}[{name}]"
        if field == "memory_mib" and not plain_mib(
            source[name], name=name, factor=memory_factor, path=field_path, problems=problems
        ):
            continue
        number = whole_number(
            source[name], path=field_path, low=low, high=high, unit=unit, problems=problems
        )
        if number is None:
            continue
        if name in limits and name in requests:
            request_path = f"{path}.requests[{name}]"
            _check_request_equals_limit(
                requests[name], number, path=request_path, problems=problems
            )
        raw.sources[field] = field_path
        if number == 0 and field in _ZERO_IS_UNSET:
            continue
        setattr(raw, field, Decimal(number) if field == "memory_percent" else number)
    return raw


_ZERO_IS_UNSET = ("memory_mib", "memory_percent")


# Suffixes that make a quantity bytes or a fraction, never a count of MiB: `16Gi`, `1500m`.
UNIT_SUFFIXES = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "m", "u", "n")


def plain_mib(value: object, *, name: str, factor: int, path: str, problems: Problems) -> bool:
    """gpumem is a plain number of MiB (times the memory factor): a unit (`16Gi`) or a byte count
    (`17179869184`) is refused with the number to write; HAMi drops such a request as no GPU.
    Decimal suffixes and exponents are numbers, not units: the API server stores `3000` as `3k`
    before the webhook sees it."""
    try:
        number = parse_quantity(value)
    except QuantityError:
        return True  # whole_number says what is wrong with it
    has_unit = isinstance(value, str) and value.strip().endswith(UNIT_SUFFIXES)
    if not has_unit and number <= MAX_GPUMEM_MIB:
        return True
    what = "with a unit" if has_unit else f"more than {MAX_GPUMEM_MIB} MiB; bytes?"
    short = name.rsplit("/", 1)[-1]
    unit = "MiB" if factor == 1 else f"in units of {factor} MiB"
    units = number / (MiB * factor)
    hint = f"write {int(units)}" if units == units.to_integral_value() and units >= 1 else ""
    problems.add(
        path,
        f"takes a plain number, got {shown(value)} ({what}): {short} is {unit}"
        + (f": {hint}" if hint else ""),
    )
    return False
