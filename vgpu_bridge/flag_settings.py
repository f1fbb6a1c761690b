"""Settings of a binary, read once: every field is a flag `--field-name` and an env var
`VGPU_BRIDGE_FIELD_NAME`; a flag wins over its env var, which wins over the default.

Nothing else of ours reads `os.environ`: the environment is passed in, so tests inject theirs.

A binary's settings are a frozen dataclass of `setting(...)` fields. Flags and env vars are text;
each is converted by the field's type (`str`, `int`, `float`, `bool`, a `Literal` of strings,
a type built from text such as `Path`, or one of them `| None`) and checked against the field's
bounds. Every problem is
collected, so a bad deployment is told all of them at once, each naming its flag and env var.
Plain dataclasses, not a model library: the webhook's start is on the path of every restart under
`failurePolicy: Fail`, and this module is all of its settings.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, ClassVar, Literal, Self, get_args, get_origin, get_type_hints

ENV_PREFIX = "VGPU_BRIDGE_"
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


class _Required:
    """The default of a setting that has none."""

    def __repr__(self) -> str:
        return "required"


REQUIRED: Any = _Required()


class SettingsError(ValueError):
    """Invalid settings: `problems` holds one (field, reason) per problem; the message names each
    field."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{name}: {reason}" for name, reason in self.problems))


def comma_list(text: str) -> tuple[str, ...]:
    """`"a, b,,c"` → `("a", "b", "c")`."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def split_host_port(listen: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:8443` too); an empty host means every address."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def host_port_problem(value: str) -> str | None:
    """Why `value` is not a `HOST:PORT` that `split_host_port` can use; empty (off) passes."""
    if value:
        try:
            port = split_host_port(value)[1]
        except ValueError:
            port = -1
        if not 0 <= port <= 65535:
            return f"{_quoted(value)} is not HOST:PORT"
    return None


def flag_of(field: str) -> str:
    """`node_name` → `--node-name (VGPU_BRIDGE_NODE_NAME)`: the two ways to set a field."""
    return f"--{field.replace('_', '-')} ({ENV_PREFIX}{field.upper()})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """What a setting's value must be, beyond its type. `check` returns why a value is refused,
    or None."""

    description: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    check: Callable[[Any], str | None] | None = None

    def problem(self, value: object) -> str | None:
        """Why `value` (already of the field's type) is refused, or None."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            return self._number_problem(value)
        if isinstance(value, str):
            return self._text_problem(value)
        return None

    def _number_problem(self, value: float) -> str | None:
        if self.ge is not None and not value >= self.ge:
            return f"must be at least {_shown(self.ge)}, got {_shown(value)}"
        if self.gt is not None and not value > self.gt:
            return f"must be more than {_shown(self.gt)}, got {_shown(value)}"
        if self.le is not None and not value <= self.le:
            return f"must be at most {_shown(self.le)}, got {_shown(value)}"
        return None

    def _text_problem(self, value: str) -> str | None:
        if self.min_length is not None and len(value) < self.min_length:
            return "must not be empty" if self.min_length == 1 else "is too short"
        if self.max_length is not None and len(value) > self.max_length:
            return f"must be at most {self.max_length} characters, got {len(value)}"
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            return f"must match the pattern {self.pattern}, got {_quoted(value)}"
        return self.check(value) if self.check is not None else None


def setting(
    default: Any = REQUIRED,
    *,
    description: str,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    min_length: int | None = None,
    max_length: int | None = None,
    pattern: str | None = None,
    check: Callable[[Any], str | None] | None = None,
) -> Any:  # Any: what a dataclass field declaration takes, as with dataclasses.field()
    """A settings field: its default (none: required), what it is for, and its bounds."""
    rule = Rule(description=description, ge=ge, gt=gt, le=le, min_length=min_length,
                max_length=max_length, pattern=pattern, check=check)  # fmt: skip
    return field(default=default, metadata={"rule": rule})


def host_port(default: str, *, description: str) -> Any:
    """A `HOST:PORT` setting (empty: off)."""
    return setting(default, description=description, check=host_port_problem)


class FlagSettings:
    """Subclasses are `@dataclass(frozen=True, kw_only=True)` classes of `setting()` fields; the
    flags and env vars follow from them."""

    prog: ClassVar[str] = "vgpu-bridge"

    def __post_init__(self) -> None:
        problems = []
        for name, (kind, rule) in self._specs().items():
            value = getattr(self, name)
            if value is REQUIRED:
                problems.append((name, "required"))
                continue
            try:
                value = _typed(kind, value)
            except ValueError as error:
                problems.append((name, str(error)))
                continue
            object.__setattr__(self, name, value)
            if value is not None and (reason := rule.problem(value)) is not None:
                problems.append((name, reason))
        if problems:
            raise SettingsError(problems)

    @classmethod
    def _fields(cls) -> tuple[Field[Any], ...]:
        return fields(cls)  # type: ignore[arg-type]  # subclasses are dataclasses

    @classmethod
    def _specs(cls) -> dict[str, tuple[Any, Rule]]:
        """Each field's type and rule, by name, resolved once per class."""
        cached: dict[str, tuple[Any, Rule]] | None = cls.__dict__.get("_resolved_specs")
        if cached is None:
            hints = get_type_hints(cls)
            cached = {f.name: (hints[f.name], f.metadata["rule"]) for f in cls._fields()}
            type.__setattr__(cls, "_resolved_specs", cached)
        return cached

    @classmethod
    def setting_names(cls) -> tuple[str, ...]:
        return tuple(cls._specs())

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """One flag per field; an unset flag falls back to the env var, then the default."""
        for spec in cls._fields():
            env = ENV_PREFIX + spec.name.upper()
            default = (
                "required" if spec.default in (REQUIRED, MISSING) else f"default {spec.default}"
            )
            parser.add_argument(
                "--" + spec.name.replace("_", "-"),
                dest=spec.name,
                default=None,
                help=f"{spec.metadata['rule'].description} ({env}; {default})",
            )

    @classmethod
    def from_values(cls, values: Mapping[str, object]) -> Self:
        """Settings from values by field name: text is converted by the field's type; an unknown
        name is refused like a bad value."""
        unknown = [(name, "unknown setting") for name in values if name not in cls._specs()]
        if unknown:
            raise SettingsError(unknown)
        return cls(**values)

    @classmethod
    def from_namespace(cls, args: argparse.Namespace, environ: Mapping[str, str]) -> Self:
        values: dict[str, Any] = {}
        for name in cls._specs():
            flag_value = getattr(args, name, None)
            value = flag_value if flag_value is not None else environ.get(ENV_PREFIX + name.upper())
            if value is not None:
                values[name] = value
        return cls.from_values(values)

    @classmethod
    def from_namespace_or_report(
        cls, args: argparse.Namespace, environ: Mapping[str, str]
    ) -> Self | None:
        """The settings, or None after one `prog: --flag (ENV): reason` line per invalid
        setting on stderr (the binaries then exit 2)."""
        try:
            return cls.from_namespace(args, environ)
        except SettingsError as error:
            for name, reason in error.problems:
                print(f"{cls.prog}: {flag_of(name)}: {reason}", file=sys.stderr)
            return None

    @classmethod
    def from_args(cls, argv: Sequence[str], environ: Mapping[str, str]) -> Self:
        parser = argparse.ArgumentParser(prog=cls.prog)
        cls.add_arguments(parser)
        return cls.from_namespace(parser.parse_args(list(argv)), environ)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Self:
        """Settings from `VGPU_BRIDGE_*` variables alone."""
        return cls.from_args([], environ)


def _typed(kind: Any, value: object) -> Any:
    """`value` as a `kind`: text converted, a value of the type kept; ValueError says why not."""
    if isinstance(kind, types.UnionType):  # `X | None`: None only as the default
        (kind,) = (arg for arg in get_args(kind) if arg is not type(None))
        if value is None:
            return None
    if get_origin(kind) is Literal:
        choices = get_args(kind)
        if value not in choices:
            raise ValueError(
                f"must be one of {', '.join(map(repr, choices))}, got {_quoted(value)}"
            )
        return value
    if isinstance(value, str) and kind is not str:
        return _converted(kind, value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    exact = kind in _NAMES  # no subclass of these: a bool is no int here
    if not (type(value) is kind if exact else isinstance(value, kind)):
        raise ValueError(f"must be {_name(kind)}, got {_quoted(value)}")
    if kind is float and not math.isfinite(value):  # type: ignore[arg-type]
        raise ValueError(f"must be a finite number, got {_quoted(value)}")
    return value


def _converted(kind: type, text: str) -> object:
    """A flag's or env var's text as a `kind`: `int`, `float`, `bool`, or a type built from
    text (`Path`)."""
    if kind not in _NAMES:
        return kind(text)
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in _TRUE | _FALSE:
            return lowered in _TRUE
    else:
        try:
            number = kind(text.strip())
        except ValueError:
            pass
        else:
            if kind is int or math.isfinite(number):
                return number
    raise ValueError(f"must be {_name(kind)}, got {_quoted(text)}")


_NAMES: dict[object, str] = {
    str: "text",
    int: "an integer",
    float: "a finite number",
    bool: "true or false",
}


def _name(kind: type) -> str:
    return _NAMES.get(kind) or f"a {kind.__name__}"


def _shown(number: float) -> str:
    """An integer in full (2000000, not 2e+06), a float as short as it reads."""
    return str(number) if isinstance(number, int) else f"{number:g}"


def _quoted(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
