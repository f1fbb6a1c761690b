"""Build (or reuse) the Volcano binary, and find Volcano's module (for its CRDs) in the Go cache.

``gotools/`` is a Go tools module of ours that requires ``volcano.sh/volcano`` (the version pinned
in its go.mod) with Volcano's own replace block copied, and builds vc-scheduler and
vc-controller-manager into one multi-call binary, ``vgpu-volcano scheduler|controller-manager``,
under ``<cache>/volcano-<version>/bin`` (``VGPU_BRIDGE_CACHE`` moves the cache, as for the control
plane). The binary is rebuilt only when the module's sources change (a stamp keyed on their hash).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster import BuildResult, Settings
from e2e.cluster.build import BuildError, read_stamp, sources_digest
from e2e.progress import progress

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


def ensure_binary(build: VolcanoBuild) -> BuildResult:
    """The multi-call binary, built if missing or stale; concurrent callers take turns."""
    build.bin_dir.mkdir(parents=True, exist_ok=True)
    with (build.bin_dir / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_binary_locked(build)


def _ensure_binary_locked(build: VolcanoBuild) -> BuildResult:
    started = time.monotonic()
    stamp = build.bin_dir / "vgpu-volcano.stamp"
    digest = sources_digest(GOTOOLS_DIR, _SOURCES)
    recorded = read_stamp(stamp)
    if build.binary.is_file() and recorded.get("digest") == digest:
        seconds = recorded.get("build_seconds")
        build_seconds = float(seconds) if isinstance(seconds, int | float) else 0.0
        elapsed = time.monotonic() - started
        return BuildResult(build.binary, reused=True, seconds=elapsed, build_seconds=build_seconds)
    _go_build(build)
    elapsed = time.monotonic() - started
    stamp.write_text(json.dumps({"digest": digest, "build_seconds": round(elapsed, 1)}))
    return BuildResult(build.binary, reused=False, seconds=elapsed, build_seconds=elapsed)


def _go_build(build: VolcanoBuild) -> None:
    partial = build.bin_dir / "vgpu-volcano.partial"
    ldflags = f"-s -w -X {MODULE}/pkg/version.Version={build.version}"
    workspace = _workspace(build)
    command = ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(partial), "."]
    with progress(f"go build vgpu-volcano (Volcano {build.version})"):
        _go(build, command, GOWORK=str(workspace))
    partial.replace(build.binary)


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
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        cwd=build.cache_root,
        env={**os.environ, **build.go_env, "GOWORK": "off", "GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BuildError(f"go mod download {module}@{version}: {done.stdout} {done.stderr}".strip())
    return Path(json.loads(done.stdout)["Dir"])


def _make_writable(root: Path) -> None:
    for path in (root, *root.rglob("*")):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _go(build: VolcanoBuild, command: list[str], **env: str) -> None:
    done = subprocess.run(
        command,
        cwd=GOTOOLS_DIR,
        env={**os.environ, **build.go_env, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BuildError(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")


def report(result: BuildResult) -> str:
    """One line for ``make scheduler-bin``: built or reused, size, and the time it took."""
    size_mib = result.binary.stat().st_size / 2**20
    if result.reused:
        return (
            f"volcano-bin: warm, reused {result.binary} ({size_mib:.0f} MiB) in "
            f"{result.seconds:.2f}s (its go build took {result.build_seconds:.0f}s)"
        )
    return f"volcano-bin: built {result.binary} ({size_mib:.0f} MiB) in {result.seconds:.1f}s"
