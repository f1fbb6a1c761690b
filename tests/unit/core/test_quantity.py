"""Kubernetes quantities: parsed as the API server does, bytes written canonically."""

from __future__ import annotations

from decimal import Decimal

import pytest

from vgpu_bridge.core.quantity import QuantityError, format_bytes, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (3000, Decimal(3000)),
        ("3000", Decimal(3000)),
        ("10Gi", Decimal(10 * 2**30)),
        ("1.5Ki", Decimal(1536)),
        ("500m", Decimal("0.5")),
        ("2k", Decimal(2000)),
        ("1e3", Decimal(1000)),
        (0.25, Decimal("0.25")),
        ("-4", Decimal(-4)),
    ],
)
def test_parse_quantity_reads_kubernetes_quantities(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["abc", "", "1GB", "Gi", "1.2.3", True, None, [1]])
def test_parse_quantity_refuses_what_kubernetes_refuses(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("count", "text"),
    [(2**30, "1Gi"), (1536 * 2**20, "1536Mi"), (80 * 2**30, "80Gi"), (1000, "1000"), (0, "0")],
)
def test_format_bytes_is_canonical(count: int, text: str) -> None:
    assert format_bytes(count) == text
