"""Read one container's HAMi or Volcano extended resources: limits first, then requests."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from vgpu_bridge.core.errors import shown
from vgpu_bridge.core.models import Problems, RawRequest
from vgpu_bridge.core.names import RESOURCE_FAMILIES, ResourceNames
from vgpu_bridge.core.quantity import MAX_QUANTITY, MiB, QuantityError, parse_quantity

MAX_DEVICES = 32  # a DRA allocation holds at most 32 results (AllocationResultsMaxSize)
MAX_MEMORY_MIB = MAX_QUANTITY // MiB  # a claim's memory request is a quantity of bytes


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


# (field of RawRequest, attribute of ResourceNames, low, high, unit)
_FIELDS = (
    ("count", "count", 0, MAX_DEVICES, " of GPUs"),
    ("memory_mib", "memory", 1, MAX_MEMORY_MIB, " of MiB"),
    ("memory_percent", "memory_percentage", 1, 100, " (percent)"),
    ("cores", "cores", 0, 100, " (percent of SMs)"),
    ("priority", "priority", 0, 1, " (0 high, 1 low)"),
)


def _family(limits: Mapping[str, Any], requests: Mapping[str, Any]) -> list[ResourceNames]:
    return [f for f in RESOURCE_FAMILIES if any(n in limits or n in requests for n in f.all())]


def _as_map(value: object, *, path: str, problems: Problems) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.add(path, "must be a map of resource names to quantities")
        return {}
    return value


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


def read_container(
    container: Mapping[str, Any], *, path: str, problems: Problems
) -> RawRequest | None:
    """The container's GPU request, or None when it names none of our resources."""
    resources = _as_map(container.get("resources"), path=f"{path}.resources", problems=problems)
    limits = _as_map(resources.get("limits"), path=f"{path}.resources.limits", problems=problems)
    requests = _as_map(
        resources.get("requests"), path=f"{path}.resources.requests", problems=problems
    )
    families = _family(limits, requests)
    if not families:
        return None
    if len(families) > 1:
        mixed = " and ".join(f"{f.family} ({f.count}, …)" for f in families)
        problems.add(f"{path}.resources", f"mixes {mixed}; state a share one way")
        return None
    names = families[0]
    raw = RawRequest(resource_keys=tuple(n for n in names.all() if n in limits or n in requests))
    _read_fields(raw, names, limits, requests, path=f"{path}.resources", problems=problems)
    return raw


def _read_fields(
    raw: RawRequest,
    names: ResourceNames,
    limits: Mapping[str, Any],
    requests: Mapping[str, Any],
    *,
    path: str,
    problems: Problems,
) -> None:
    """Each field of `raw` from its limit, else its request; a request beside a limit must
    equal it."""
    for field, attr, low, high, unit in _FIELDS:
        name = getattr(names, attr)
        if name is None or (name not in limits and name not in requests):
            continue
        section, source = ("limits", limits) if name in limits else ("requests", requests)
        field_path = f"{path}.{section}[{name}]"
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
        setattr(raw, field, Decimal(number) if field == "memory_percent" else number)
        raw.sources[field] = field_path
