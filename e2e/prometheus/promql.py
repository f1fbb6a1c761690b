"""Just enough PromQL text handling to evaluate an alert's expression for its series: its one
comparison outside parentheses (the threshold) gets the `bool` modifier, so the expression
returns a 0/1 sample for every series it compares instead of only those past the threshold."""

from __future__ import annotations

import re

_COMPARISON = re.compile(r"==|!=|>=|<=|>|<")
_OPENING, _CLOSING = "([{", ")]}"


class PromqlShapeError(ValueError):
    """The expression has not exactly one comparison outside parentheses, brackets and quotes."""


def top_level_comparisons(expr: str) -> list[re.Match[str]]:
    """The comparison operators of `expr` outside (), [], {} and string literals."""
    found, depth, quote, i = [], 0, "", 0
    while i < len(expr):
        char = expr[i]
        if quote:
            i += 2 if char == "\\" else 1
            quote = "" if char == quote else quote
            continue
        if char in "\"'`":
            quote = char
        depth += (char in _OPENING) - (char in _CLOSING)
        match = _COMPARISON.match(expr, i) if depth == 0 else None
        if match:
            found.append(match)
            i = match.end()
            continue
        i += 1
    return found


def with_bool_threshold(expr: str) -> str:
    """`expr` with `bool` after its one top-level comparison: `up == 0` -> `up == bool 0`."""
    found = top_level_comparisons(expr)
    if len(found) != 1:
        operators = [m.group() for m in found]
        raise PromqlShapeError(f"{expr!r}: {len(found)} top-level comparisons {operators}, need 1")
    end = found[0].end()
    return f"{expr[:end]} bool{expr[end:]}"
