"""Settings of the local control plane, read once from an injectable environment mapping."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: The Kubernetes release the committed Go tools module (``gotools/go.mod``) is pinned to.
DEFAULT_K8S_VERSION = "v1.36.3"
#: The current Kubernetes release: ``make e2e-k8s137`` runs the e2e DRA scenarios on it as well
#: (a generated module under the cache, ``build.py``); docs/kubernetes-versions.md.
CURRENT_K8S_VERSION = "v1.37.2"
#: The releases ``make test`` runs the e2e DRA scenarios on.
TESTED_K8S_VERSIONS = (DEFAULT_K8S_VERSION, CURRENT_K8S_VERSION)
GOTOOLS_DIR = Path(__file__).resolve().parent / "gotools"
REPO_ROOT = Path(__file__).resolve().parents[2]
_VERSION = re.compile(r"^v1\.(\d+)\.(\d+)$")


class SettingsError(ValueError):
    """An environment variable holds a value the launcher cannot use."""


@dataclass(frozen=True)
class Settings:
    """Where binaries and Go caches live and which Kubernetes release to run.

    ``K8S_VERSION``        release to build and run, e.g. ``v1.36.3`` (>= 1.36; default above)
    ``VGPU_BRIDGE_CACHE``  cache root (default ``$XDG_CACHE_HOME/vgpu-bridge``, else
                           ``~/.cache/vgpu-bridge``)
    ``VGPU_BRIDGE_STATE``  state directory of the cluster that ``up``/``down``/``status`` manage
    ``E2E_ARTIFACTS``      where failed e2e tests dump objects and logs (default
                           ``<repo>/.cache/e2e-artifacts``, ignored by git)
    """

    k8s_version: str
    cache_root: Path
    state_dir: Path
    artifacts_dir: Path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        version = env.get("K8S_VERSION", DEFAULT_K8S_VERSION).strip()
        if not version.startswith("v"):
            version = "v" + version
        match = _VERSION.match(version)
        if match is None or int(match.group(1)) < 36:
            raise SettingsError(f"K8S_VERSION: {version!r} is not a Kubernetes release >= v1.36.0")
        home_cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        cache_root = Path(env.get("VGPU_BRIDGE_CACHE") or home_cache / "vgpu-bridge")
        state_dir = Path(env.get("VGPU_BRIDGE_STATE") or cache_root / "state" / "cluster")
        artifacts = Path(env.get("E2E_ARTIFACTS") or REPO_ROOT / ".cache" / "e2e-artifacts")
        return cls(
            k8s_version=version,
            cache_root=cache_root,
            state_dir=state_dir,
            artifacts_dir=artifacts,
        )

    @property
    def minor(self) -> str:
        """``"1.36"`` for ``v1.36.3``."""
        return ".".join(self.k8s_version.lstrip("v").split(".")[:2])

    @property
    def bin_dir(self) -> Path:
        return self.cache_root / f"k8s-{self.k8s_version}" / "bin"

    @property
    def binary(self) -> Path:
        """The multi-call binary: ``vgpu-k8s etcd|kube-apiserver|kube-controller-manager|...``."""
        return self.bin_dir / "vgpu-k8s"

    @property
    def go_env(self) -> dict[str, str]:
        """Go caches under the cache root, never in the repository; no toolchain downloads."""
        go = self.cache_root / "go"
        return {
            "GOMODCACHE": str(go / "mod"),
            "GOCACHE": str(go / "build"),
            "GOPATH": str(go / "path"),
            "GOTOOLCHAIN": "local",
            "CGO_ENABLED": "0",
            "GOFLAGS": "-buildvcs=false",
        }
