"""CEL string literals: a value never escapes its literal."""

from __future__ import annotations

import pytest

from vgpu_bridge.core.cel import cel_string


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("A100", '"A100"'),
        ('a") || true || ("', '"a\\") || true || (\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("line\nbreak\x01", '"line\\nbreak\\x01"'),
    ],
)
def test_cel_string_keeps_every_value_inside_one_literal(value: str, literal: str) -> None:
    assert cel_string(value) == literal
