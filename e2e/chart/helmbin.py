"""Build (or reuse) helm from its Go module into the ignored cache: ``make helm-bin``.

``e2e/chart/helmtool`` is a Go module with one ``tool helm.sh/helm/v4/cmd/helm`` line; its
``go.sum`` pins every dependency. The binary goes to ``<cache>/helm-<version>/bin/helm``
(``VGPU_BRIDGE_CACHE`` moves the cache, as for the control plane) and is rebuilt only when
``go.mod`` or ``go.sum`` change. Module and build caches are the control plane's, so a machine
that built the cluster already holds the shared downloads.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from e2e import gobuild
from e2e.cluster.settings import Settings

HELMTOOL_DIR = Path(__file__).resolve().parent / "helmtool"
HELM_PACKAGE = "helm.sh/helm/v4/cmd/helm"
_SOURCES = ("go.mod", "go.sum")
_REQUIRE = re.compile(r"^\s*helm\.sh/helm/v4 (v\d+\.\d+\.\d+)\b", re.MULTILINE)


class HelmBuildError(RuntimeError):
    """``go build`` of helm failed; the message carries the tail of its output."""


@dataclass(frozen=True)
class HelmBuild(gobuild.BuildResult):
    """The build, and the helm release it is."""

    version: str


def helm_version(tool_dir: Path = HELMTOOL_DIR) -> str:
    """The helm release ``go.mod`` pins, e.g. ``v4.3.2``."""
    match = _REQUIRE.search((tool_dir / "go.mod").read_text())
    if match is None:
        raise HelmBuildError(f"{tool_dir / 'go.mod'} requires no helm.sh/helm/v4 release")
    return match.group(1)


def helm_bin_dir(settings: Settings, version: str) -> Path:
    return settings.cache_root / f"helm-{version}" / "bin"


def ensure_helm(settings: Settings, tool_dir: Path = HELMTOOL_DIR) -> HelmBuild:
    """helm for the pinned release, built if missing or stale; concurrent callers take turns."""
    version = helm_version(tool_dir)
    bin_dir = helm_bin_dir(settings, version)
    with gobuild.build_lock(bin_dir):
        return _ensure_locked(settings, tool_dir, version, bin_dir)


def _ensure_locked(settings: Settings, tool_dir: Path, version: str, bin_dir: Path) -> HelmBuild:
    started = time.monotonic()
    binary, stamp = bin_dir / "helm", bin_dir / "helm.stamp"
    built = gobuild.reuse_or_build(
        binary,
        stamp,
        digest=gobuild.sources_digest(tool_dir, _SOURCES),
        build=lambda: _go_build(settings, tool_dir, version, binary),
        started=started,
    )
    return HelmBuild(built.binary, built.reused, built.seconds, built.build_seconds, version)


def _go_build(settings: Settings, tool_dir: Path, version: str, binary: Path) -> None:
    gobuild.go_build(
        f"go build helm {version}",
        module=tool_dir,
        binary=binary,
        ldflags=f"-s -w -X helm.sh/helm/v4/internal/version.version={version}",
        go_env=settings.go_env,
        error=HelmBuildError,
        package=HELM_PACKAGE,
    )


def report(build: HelmBuild) -> str:
    """One line for ``make helm-bin``: built or reused, and the time it took."""
    return gobuild.build_line("helm-bin", build, version=build.version)
