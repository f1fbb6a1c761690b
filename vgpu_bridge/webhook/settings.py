"""Webhook settings: every flag is also an env var `VGPU_BRIDGE_<FLAG>`; flags win over env.

Read once, at start-up, from an injectable environment mapping; nothing else reads `os.environ`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ENV_PREFIX = "VGPU_BRIDGE_"


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    listen: str = Field(default="0.0.0.0:8443", description="HOST:PORT to serve HTTPS on")
    tls_cert_file: str = Field(description="PEM certificate (reloaded when it changes)")
    tls_key_file: str = Field(description="PEM private key")
    kubeconfig: str | None = Field(default=None, description="kubeconfig; in-cluster if unset")
    profile: str = Field(default="default", description="driver profile: default or hami")
    scheduler: str = Field(default="auto", description="adapter: auto or a name")
    namespace: str = Field(default="vgpu-bridge", description="our own namespace (never mutated)")
    excluded_namespaces: str = Field(default="kube-system", description="comma list, never mutated")
    opt_out_label: str = Field(default="vgpu-bridge.io/ignore", description="label=true skips")
    sweep_grace_seconds: int = Field(default=600, ge=0, description="unreferenced template age")
    sweep_interval_seconds: int = Field(default=120, ge=1, description="how often to sweep")
    max_body_bytes: int = Field(default=3 * 2**20, ge=1024, description="largest request body")
    default_memory: int = Field(default=0, ge=0, description="MiB; 0 = whole card")
    default_cores: int = Field(default=0, ge=0, le=100, description="SM percent of a share")
    default_gpu_num: int = Field(default=1, ge=1, description="GPUs when no count is given")
    memory_factor: int = Field(default=1, ge=1, description="gpumem unit in MiB")
    volcano_scheduler_names: str = Field(
        default="volcano", description="vc-scheduler names, comma list"
    )
    volcano_version: str | None = Field(default=None, description="Volcano release, e.g. v1.15.1")
    kai_scheduler_names: str = Field(default="kai-scheduler", description="KAI scheduler names")
    kai_version: str | None = Field(default=None, description="KAI build, e.g. v0.18.0")
    kai_without_capacity: Literal["warn", "refuse"] = Field(
        default="warn", description="what to do when the KAI build has no consumable capacity"
    )

    @property
    def host_port(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)

    def volcano_names(self) -> tuple[str, ...]:
        return _names(self.volcano_scheduler_names)

    def kai_names(self) -> tuple[str, ...]:
        return _names(self.kai_scheduler_names)

    def excluded(self) -> frozenset[str]:
        names = {n.strip() for n in self.excluded_namespaces.split(",") if n.strip()}
        return frozenset({*names, self.namespace})

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Settings from `VGPU_BRIDGE_*` variables alone."""
        return cls.from_args([], environ)

    @classmethod
    def from_args(cls, argv: Sequence[str], environ: Mapping[str, str]) -> Settings:
        parser = argparse.ArgumentParser(prog="vgpu-bridge webhook")
        add_arguments(parser)
        return cls.from_namespace(parser.parse_args(list(argv)), environ)

    @classmethod
    def from_namespace(cls, args: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
        values: dict[str, object] = {}
        for name in cls.model_fields:
            flag_value = getattr(args, name, None)
            env_value = environ.get(ENV_PREFIX + name.upper())
            value = flag_value if flag_value is not None else env_value
            if value is not None:
                values[name] = value
        return cls.model_validate(values)


def _names(comma_list: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in comma_list.split(",") if n.strip())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per field; unset flags fall back to the env var, then the default."""
    for name, field in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        env = ENV_PREFIX + name.upper()
        default = "required" if field.is_required() else f"default {field.default}"
        parser.add_argument(
            flag, dest=name, default=None, help=f"{field.description} ({env}; {default})"
        )
