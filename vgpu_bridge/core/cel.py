"""CEL device selectors. Every user value enters CEL only as a quoted string literal."""

from __future__ import annotations

from collections.abc import Iterable

from vgpu_bridge.core.models import DeviceFilter
from vgpu_bridge.core.profiles import DriverProfile
from vgpu_bridge.core.quantity import format_bytes

MAX_EXPRESSION_CHARS = 10 * 1024  # CELSelectorExpressionMaxLength of resource.k8s.io/v1
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def cel_string(text: str) -> str:
    """A CEL double-quoted string literal whose value is exactly `text`."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _any_of(expressions: list[str]) -> str:
    return expressions[0] if len(expressions) == 1 else "(" + " || ".join(expressions) + ")"


def _product_matches(profile: DriverProfile, names: Iterable[str]) -> str:
    product = profile.attribute(profile.product_attribute)
    return _any_of([f"{product}.lowerAscii().contains({cel_string(n.lower())})" for n in names])


def _uuid_in(profile: DriverProfile, uuids: Iterable[str]) -> str:
    listed = ", ".join(cel_string(u) for u in uuids)
    return f"{profile.attribute(profile.uuid_attribute)} in [{listed}]"


def selectors_by_choice(device_filter: DeviceFilter, profile: DriverProfile) -> dict[str, str]:
    """One CEL expression per kind of choice made, keyed by the DeviceFilter field it comes from."""
    selectors = {}
    if device_filter.use_types:
        selectors["use_types"] = _product_matches(profile, device_filter.use_types)
    if device_filter.avoid_types:
        selectors["avoid_types"] = "!" + _wrap(_product_matches(profile, device_filter.avoid_types))
    if device_filter.use_uuids:
        selectors["use_uuids"] = _uuid_in(profile, device_filter.use_uuids)
    if device_filter.avoid_uuids:
        selectors["avoid_uuids"] = f"!({_uuid_in(profile, device_filter.avoid_uuids)})"
    return selectors


def filter_selectors(device_filter: DeviceFilter, profile: DriverProfile) -> list[str]:
    """One CEL expression per kind of choice; a request ANDs its selectors."""
    return list(selectors_by_choice(device_filter, profile).values())


def _wrap(expression: str) -> str:
    return expression if expression.startswith("(") else f"({expression})"


def card_memory_selector(profile: DriverProfile, size_bytes: int) -> str:
    """True for cards whose total memory is exactly `size_bytes`."""
    memory = profile.capacity(profile.memory_capacity)
    return f"{memory}.compareTo(quantity({cel_string(format_bytes(size_bytes))})) == 0"
