"""Build (or reuse) helm from its Go module into the ignored cache: ``make helm-bin``.

``e2e/chart/helmtool`` is a Go module with one ``tool helm.sh/helm/v4/cmd/helm`` line; its
``go.sum`` pins every dependency. The binary goes to ``<cache>/helm-<version>/bin/helm``
(``VGPU_BRIDGE_CACHE`` moves the cache, as for the control plane) and is rebuilt only when
``go.mod`` or ``go.sum`` change. Module and build caches are the control plane's, so a machine
that built the cluster already holds the shared downloads.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.build import read_stamp, sources_digest
from e2e.cluster.settings import Settings
from e2e.progress import progress

HELMTOOL_DIR = Path(__file__).resolve().parent / "helmtool"
HELM_PACKAGE = "helm.sh/helm/v4/cmd/helm"
_SOURCES = ("go.mod", "go.sum")
_REQUIRE = re.compile(r"^\s*helm\.sh/helm/v4 (v\d+\.\d+\.\d+)\b", re.MULTILINE)


class HelmBuildError(RuntimeError):
    """``go build`` of helm failed; the message carries the tail of its output."""


@dataclass(frozen=True)
class HelmBuild:
    binary: Path
    version: str
    reused: bool
    seconds: float
    #: How long the ``go build`` that made this binary took (recorded in the stamp).
    build_seconds: float


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
    bin_dir.mkdir(parents=True, exist_ok=True)
    with (bin_dir / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_locked(settings, tool_dir, version, bin_dir)


def _ensure_locked(settings: Settings, tool_dir: Path, version: str, bin_dir: Path) -> HelmBuild:
    started = time.monotonic()
    binary, stamp = bin_dir / "helm", bin_dir / "helm.stamp"
    digest = sources_digest(tool_dir, _SOURCES)
    recorded = read_stamp(stamp)
    if binary.is_file() and recorded.get("digest") == digest:
        took = recorded.get("build_seconds")
        build_seconds = float(took) if isinstance(took, int | float) else 0.0
        return HelmBuild(binary, version, True, time.monotonic() - started, build_seconds)
    _go_build(settings, tool_dir, version, binary)
    elapsed = time.monotonic() - started
    stamp.write_text(json.dumps({"digest": digest, "build_seconds": round(elapsed, 1)}))
    return HelmBuild(binary, version, False, elapsed, elapsed)


def _go_build(settings: Settings, tool_dir: Path, version: str, binary: Path) -> None:
    partial = binary.with_name("helm.partial")
    ldflags = f"-s -w -X helm.sh/helm/v4/internal/version.version={version}"
    command = ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(partial), HELM_PACKAGE]
    with progress(f"go build helm {version}"):
        done = subprocess.run(
            command,
            cwd=tool_dir,
            env={**os.environ, **settings.go_env},
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise HelmBuildError(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    partial.replace(binary)


def report(build: HelmBuild) -> str:
    """One line for ``make helm-bin``: built or reused, and the time it took."""
    size_mib = build.binary.stat().st_size / 2**20
    if build.reused:
        return (
            f"helm-bin: warm, reused {build.binary} ({build.version}, {size_mib:.0f} MiB) in "
            f"{build.seconds:.2f}s (its go build took {build.build_seconds:.0f}s)"
        )
    return (
        f"helm-bin: built {build.binary} ({build.version}, {size_mib:.0f} MiB) "
        f"in {build.seconds:.1f}s"
    )
