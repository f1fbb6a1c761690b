"""Kubernetes resource quantities: parse to exact decimals, format bytes canonically.

Kubernetes holds a quantity as at most 2^63-1 units, rounded up to whole nano-units
(apimachinery's `maxAllowed` and its `Nano` rounding). We refuse what lies beyond that bound
instead of capping it, and we decide so from the exponent alone, before any arithmetic: a text such
as `1e999999` would otherwise cost seconds of big-number work.
"""

from __future__ import annotations

import re
from decimal import ROUND_UP, Context, Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_BINARY_EXPONENT = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
MiB = 2**20
MAX_QUANTITY = 2**63 - 1  # the largest magnitude a Kubernetes quantity holds
MAX_QUANTITY_CHARS = 64  # 19 digits, 9 decimals, sign and suffix fit with room to spare
NANO = Decimal("1e-9")  # Kubernetes rounds every non-zero quantity up to whole nano-units
_EXACT = Context(prec=120, Emax=200, Emin=-200)  # enough for any text that passes the checks


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity, or one beyond what Kubernetes can hold."""


def parse_quantity(value: object) -> Decimal:
    """Parse `3000`, `"3000"`, `"10Gi"`, `"500m"`, `1.5e3` into an exact `Decimal`.

    YAML hands us ints, floats or strings; booleans and anything else are refused, and so is any
    magnitude above 2^63-1. Fractions finer than 1n are rounded up to 1n, as Kubernetes does.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise QuantityError(f"expected a quantity, got {type(value).__name__}")
    text = str(value).strip() if not isinstance(value, int) else _int_text(value)
    if len(text) > MAX_QUANTITY_CHARS:
        raise QuantityError(f"a quantity of {len(text)} characters is beyond what Kubernetes holds")
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity")
    try:
        number = Decimal(match["number"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid numbers
        raise QuantityError(f"{text!r} is not a quantity") from exc
    suffix = match["suffix"] or ""
    return _scaled(number, suffix, text)


def _int_text(value: int) -> str:
    """An int's digits, or a placeholder too long to pass when it has too many to print."""
    return str(value) if abs(value) <= 10**MAX_QUANTITY_CHARS else "9" * (MAX_QUANTITY_CHARS + 1)


def _scaled(number: Decimal, suffix: str, text: str) -> Decimal:
    """`number` times its suffix, checked against the bound by its order of magnitude first."""
    if not number:
        return Decimal(0)
    if suffix in _BINARY:
        # log10(2^k) < 0.302 k + 1: the product's decimal exponent is at most this
        magnitude = number.adjusted() + _BINARY_EXPONENT[suffix] * 302 // 1000 + 1
    else:
        exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])
        magnitude = number.adjusted() + exponent
    if magnitude > 19:
        raise QuantityError(f"{text!r} is beyond the largest quantity Kubernetes holds (2^63-1)")
    if magnitude < -10:  # far below 1n: Kubernetes rounds it up to 1n
        return NANO.copy_sign(number)
    if suffix in _BINARY:
        scaled = _EXACT.multiply(number, Decimal(_BINARY[suffix]))
    else:
        scaled = _EXACT.scaleb(number, Decimal(exponent))
    if abs(scaled) > MAX_QUANTITY:
        raise QuantityError(f"{text!r} is beyond the largest quantity Kubernetes holds (2^63-1)")
    if scaled.as_tuple().exponent < -9:  # type: ignore[operator]
        scaled = scaled.quantize(NANO, rounding=ROUND_UP, context=_EXACT)
    return scaled


def format_bytes(count: int) -> str:
    """Canonical binary form, as the API server would print it: 1024Mi -> "1Gi", 1000 -> "1000"."""
    for suffix, unit in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
        if count >= unit and count % unit == 0:
            return f"{count // unit}{suffix}"
    return str(count)
