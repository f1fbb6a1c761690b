"""Settings of a binary, read once: every field is a flag `--field-name` and an env var
`VGPU_BRIDGE_FIELD_NAME`; a flag wins over its env var, which wins over the default.

Nothing else of ours reads `os.environ`: the environment is passed in, so tests inject theirs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

ENV_PREFIX = "VGPU_BRIDGE_"


def comma_list(text: str) -> tuple[str, ...]:
    """`"a, b,,c"` → `("a", "b", "c")`."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def split_host_port(listen: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:8443` too); an empty host means every address."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def check_host_port(value: str) -> str:
    """A `HOST:PORT` setting that `split_host_port` can use; empty (off) passes."""
    if value:
        try:
            port = split_host_port(value)[1]
        except ValueError:
            port = -1
        if not 0 <= port <= 65535:
            raise ValueError(f"{value!r} is not HOST:PORT")
    return value


#: a field of `HOST:PORT` (or empty), checked when the settings are read
HostPort = Annotated[str, AfterValidator(check_host_port)]


def flag_of(field: str) -> str:
    """`node_name` → `--node-name (VGPU_BRIDGE_NODE_NAME)`: the two ways to set a field."""
    return f"--{field.replace('_', '-')} ({ENV_PREFIX}{field.upper()})"


def problems(error: ValidationError) -> list[str]:
    """One `--flag (ENV): reason` line per invalid setting."""
    return [
        f"{flag_of('.'.join(map(str, problem['loc'])))}: {problem['msg']}"
        for problem in error.errors()
    ]


class FlagSettings(BaseModel):
    """Subclasses declare fields with `description`s; the flags and env vars follow from them."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    prog: ClassVar[str] = "vgpu-bridge"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """One flag per field; an unset flag falls back to the env var, then the default."""
        for name, field in cls.model_fields.items():
            env = ENV_PREFIX + name.upper()
            default = "required" if field.is_required() else f"default {field.default}"
            parser.add_argument(
                "--" + name.replace("_", "-"),
                dest=name,
                default=None,
                help=f"{field.description} ({env}; {default})",
            )

    @classmethod
    def from_namespace(cls, args: argparse.Namespace, environ: Mapping[str, str]) -> Self:
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            flag_value = getattr(args, name, None)
            value = flag_value if flag_value is not None else environ.get(ENV_PREFIX + name.upper())
            if value is not None:
                values[name] = value
        return cls.model_validate(values)

    @classmethod
    def from_namespace_or_report(
        cls, args: argparse.Namespace, environ: Mapping[str, str]
    ) -> Self | None:
        """The settings, or None after one `prog: --flag (ENV): reason` line per invalid
        setting on stderr (the binaries then exit 2)."""
        try:
            return cls.from_namespace(args, environ)
        except ValidationError as error:
            for problem in problems(error):
                print(f"{cls.prog}: {problem}", file=sys.stderr)
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
