"""Node agent settings: every flag is also an env var `VGPU_BRIDGE_<FLAG>`; flags win over env.

Read once, at start-up, from an injectable environment mapping; nothing else reads `os.environ`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from vgpu_bridge.core.profiles import DEFAULT

ENV_PREFIX = "VGPU_BRIDGE_"
KUBELET_PLUGINS = Path("/var/lib/kubelet/plugins")


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    node_name: str = Field(min_length=1, description="this node's name (the pool's name)")
    driver_name: str = Field(default=DEFAULT.driver, description="DRA driver name")
    plugin_dir: Path | None = Field(
        default=None, description="DRA socket and checkpoint dir; /var/lib/kubelet/plugins/<driver>"
    )
    registry_dir: Path = Field(
        default=Path("/var/lib/kubelet/plugins_registry"), description="kubelet plugin registry"
    )
    cdi_dir: Path = Field(default=Path("/var/run/cdi"), description="where CDI specs are written")
    mock_gpus: str | None = Field(
        default=None,
        description="YAML file (or inline list) of {uuid, productName, memory}; NVML if unset",
    )
    kubeconfig: str | None = Field(default=None, description="kubeconfig; in-cluster if unset")
    vgpu_dir: Path = Field(
        default=Path("/usr/local/vgpu"),
        description="host dir with libvgpu.so, ld.so.preload and claims/ (shared regions)",
    )
    metrics_listen: str = Field(
        default="0.0.0.0:9401", description="HOST:PORT of /metrics; empty to disable"
    )
    resync_seconds: float = Field(default=30, gt=0, description="how often slices are checked")
    cleanup_seconds: float = Field(
        default=600, gt=0, description="how often prepared claims that are gone are cleaned"
    )

    @property
    def plugin_path(self) -> Path:
        return self.plugin_dir or KUBELET_PLUGINS / self.driver_name

    @property
    def dra_socket(self) -> Path:
        return self.plugin_path / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{self.driver_name}-reg.sock"

    @property
    def checkpoint_file(self) -> Path:
        return self.plugin_path / "checkpoint.json"

    @property
    def metrics_host_port(self) -> tuple[str, int] | None:
        if not self.metrics_listen:
            return None
        host, _, port = self.metrics_listen.rpartition(":")
        return host.strip("[]") or "0.0.0.0", int(port)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Settings from `VGPU_BRIDGE_*` variables alone."""
        return cls.from_args([], environ)

    @classmethod
    def from_args(cls, argv: Sequence[str], environ: Mapping[str, str]) -> Settings:
        parser = argparse.ArgumentParser(prog="vgpu-bridge node")
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One flag per field; unset flags fall back to the env var, then the default."""
    for name, field in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        env = ENV_PREFIX + name.upper()
        default = "required" if field.is_required() else f"default {field.default}"
        parser.add_argument(
            flag, dest=name, default=None, help=f"{field.description} ({env}; {default})"
        )
