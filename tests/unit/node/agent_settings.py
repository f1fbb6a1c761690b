"""The agent's settings for tests that build it: every dir under a temp dir, no metrics port."""

from __future__ import annotations

from pathlib import Path

from tests.unit.node.claims import NODE
from vgpu_bridge.node.settings import Settings


def agent_settings(tmp_path: Path, **extra: object) -> Settings:
    """Settings of an agent on NODE with its dirs under `tmp_path`; `extra` on top."""
    return Settings.from_values(
        {"node_name": NODE, "plugin_dir": tmp_path, "registry_dir": tmp_path,
         "cdi_dir": tmp_path / "cdi", "vgpu_dir": tmp_path / "vgpu", "metrics_listen": "",
         **extra}
    )  # fmt: skip
