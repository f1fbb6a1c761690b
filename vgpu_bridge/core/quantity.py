"""Kubernetes resource quantities: parse to exact decimals, format bytes canonically."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
MiB = 2**20


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """Parse `3000`, `"3000"`, `"10Gi"`, `"500m"`, `1.5e3` into an exact `Decimal`.

    YAML hands us ints, floats or strings; booleans and anything else are refused.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise QuantityError(f"expected a quantity, got {type(value).__name__}")
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid numbers
        raise QuantityError(f"{text!r} is not a quantity") from exc
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number.scaleb(_DECIMAL[suffix])
    return number.scaleb(int(suffix[1:]))


def format_bytes(count: int) -> str:
    """Canonical binary form, as the API server would print it: 1024Mi -> "1Gi", 1000 -> "1000"."""
    for suffix, unit in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
        if count >= unit and count % unit == 0:
            return f"{count // unit}{suffix}"
    return str(count)
