"""The exception hierarchy of the translator.

An `InvalidRequest` is the user's mistake: it is answered with a denial naming each field and the
reason. Anything else raised from core is a bug of ours and is reported as an internal failure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

SHOWN_CHARS = 60


def shown(value: object) -> str:
    """A user's value as an error message may quote it: short strings and numbers as written,
    long strings cut, maps and lists by their kind only (they may be huge or deeply nested)."""
    if isinstance(value, str):
        return repr(value) if len(value) <= SHOWN_CHARS else repr(value[:SHOWN_CHARS]) + "…"
    if value is None or isinstance(value, bool | int | float):
        text = repr(value)
        return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"
    return f"a {type(value).__name__}"


@dataclass(frozen=True, slots=True)
class FieldError:
    """One problem with one field, e.g. `spec.containers[0].resources.limits[nvidia.com/gpu]`."""

    path: str
    reason: str


class TranslationError(Exception):
    """Base class of everything core raises on purpose."""


class InvalidRequest(TranslationError):
    """The object asks for something we must refuse; `errors` says where and why."""

    def __init__(self, object_ref: str, errors: Iterable[FieldError]) -> None:
        self.object_ref = object_ref
        self.errors = tuple(errors)
        super().__init__("; ".join(self.lines()))

    def lines(self) -> list[str]:
        """`<object>: <field path>: <reason>`, one line per problem."""
        return [f"{self.object_ref}: {e.path}: {e.reason}" for e in self.errors]
