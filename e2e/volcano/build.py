"""Build (or reuse) the Volcano binary, and find Volcano's module (for its CRDs) in the Go cache.

``gotools/`` is a Go tools module of ours that requires ``volcano.sh/volcano`` (the version pinned
in its go.mod) with Volcano's own replace block copied, and builds vc-scheduler and
vc-controller-manager into one multi-call binary, ``vgpu-volcano scheduler|controller-manager``,
under ``<cache>/volcano-<version>/bin`` (``VGPU_BRIDGE_CACHE`` moves the cache, as for the control
plane). The binary is rebuilt only when the module's sources change (a stamp keyed on their hash).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from e2e import gobuild
from e2e.cluster import Settings
from e2e.cluster.build import BuildError

GOTOOLS_DIR = Path(__file__).resolve().parent / "gotools"
MODULE = "volcano.sh/volcano"
#: Where Volcano's Helm chart keeps the apiextensions/v1 CRDs, inside its module.
CRD_DIR = Path("installer/helm/chart/volcano/crd/bases")
_SOURCES = ("go.mod", "go.sum", "main.go", "apishim/scheduling_v1beta1.go.shim")
#: Volcano v1.15.1 builds against volcano.sh/apis v1.15.1, which the module proxy here does not
#: serve; the newest it serves is v1.14.0, which lacks one constant. The build uses a copy of
#: v1.14.0 from the module cache plus our one-constant file (``apishim/``), made under the cache
#: and swapped in by a generated go.work (``GOWORK``): nothing of upstream is committed.
APIS = ("volcano.sh/apis", "v1.14.0")
_SHIM = ("apishim/scheduling_v1beta1.go.shim", "pkg/apis/scheduling/v1beta1/zz_vgpu_bridge_shim.go")
_REQUIRE = re.compile(r"^\s*(?:require\s+)?volcano\.sh/volcano\s+(v\S+)", re.MULTILINE)


def pinned_version(gotools: Path = GOTOOLS_DIR) -> str:
    """The Volcano release ``gotools/go.mod`` requires, e.g. ``v1.15.1``."""
    match = _REQUIRE.search((gotools / "go.mod").read_text())
    if match is None:
        raise BuildError(f"{gotools / 'go.mod'} does not require {MODULE}")
    return match.group(1)


@dataclass(frozen=True)
class VolcanoBuild:
    """Where the Volcano binary of one release lives; Go caches are the control plane's."""

    version: str
    cache_root: Path
    go_env: dict[str, str]

    @classmethod
    def from_env(cls, settings: Settings | None = None) -> VolcanoBuild:
        settings = settings or Settings.from_env()
        return cls(pinned_version(), settings.cache_root, settings.go_env)

    @property
    def bin_dir(self) -> Path:
        return self.cache_root / f"volcano-{self.version}" / "bin"

    @property
    def binary(self) -> Path:
        """``vgpu-volcano scheduler|controller-manager [flags]``."""
        return self.bin_dir / "vgpu-volcano"

    def module_dir(self) -> Path:
        """Volcano's module in the Go module cache (downloaded through the proxy if missing)."""
        return _download(self, MODULE, self.version)

    def crd_files(self) -> list[Path]:
        files = sorted((self.module_dir() / CRD_DIR).glob("*.yaml"))
        if not files:
            raise BuildError(f"no CRDs under {self.module_dir() / CRD_DIR}")
        return files


def ensure_binary(build: VolcanoBuild) -> gobuild.BuildResult:
    """The multi-call binary, built if missing or stale; concurrent callers take turns."""
    with gobuild.build_lock(build.bin_dir):
        return _ensure_binary_locked(build)


def _ensure_binary_locked(build: VolcanoBuild) -> gobuild.BuildResult:
    started = time.monotonic()
    return gobuild.reuse_or_build(
        build.binary,
        build.bin_dir / "vgpu-volcano.stamp",
        digest=gobuild.sources_digest(GOTOOLS_DIR, _SOURCES),
        build=lambda: _go_build(build),
        started=started,
    )


def _go_build(build: VolcanoBuild) -> None:
    workspace = _workspace(build)
    gobuild.go_build(
        f"go build vgpu-volcano (Volcano {build.version})",
        module=GOTOOLS_DIR,
        binary=build.binary,
        ldflags=f"-s -w -X {MODULE}/pkg/version.Version={build.version}",
        go_env={**build.go_env, "GOWORK": str(workspace)},
        error=BuildError,
    )


def _workspace(build: VolcanoBuild) -> Path:
    """A go.work using our module, with volcano.sh/apis replaced by the shimmed copy."""
    src = build.bin_dir.parent / "src"
    apis = src / f"apis-{APIS[1]}-shim"
    if apis.exists():
        _make_writable(apis)
        shutil.rmtree(apis)
    shutil.copytree(_download(build, *APIS), apis)
    _make_writable(apis)
    shutil.copyfile(GOTOOLS_DIR / _SHIM[0], apis / _SHIM[1])
    go_line = re.search(r"^go\s+(\S+)", (GOTOOLS_DIR / "go.mod").read_text(), re.MULTILINE)
    work = src / "go.work"
    work.write_text(
        f"go {go_line.group(1) if go_line else '1.25.0'}\n\n"
        f"use {GOTOOLS_DIR}\n\n"
        f"replace {APIS[0]} => {apis}\n"
    )
    return work


def _download(build: VolcanoBuild, module: str, version: str) -> Path:
    """``module@version`` in the Go module cache, fetched through the proxy if missing."""
    env = {**os.environ, **build.go_env, "GOWORK": "off", "GOFLAGS": "-mod=mod"}
    try:
        return Path(gobuild.download_module(module, version, env=env, cwd=build.cache_root)["Dir"])
    except gobuild.ModuleDownloadError as error:
        raise BuildError(str(error)) from None


def _make_writable(root: Path) -> None:
    for path in (root, *root.rglob("*")):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def report(result: gobuild.BuildResult) -> str:
    """One line for ``make scheduler-bin``: built or reused, size, and the time it took."""
    return gobuild.build_line("volcano-bin", result)
