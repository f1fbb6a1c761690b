"""Build (or reuse) NVIDIA's GPU kubelet plugin and the mock NVML from checkouts the user gives.

The plugin is ``go build ./cmd/gpu-kubelet-plugin`` in ``NVIDIA_DRA_SOURCE`` with cgo and the
checkout's own ``vendor/`` (no module proxy); the mock is ``make NO_PADDING=1`` in
``pkg/gpu/mocknvml`` of a copy of ``NVML_MOCK_SOURCE`` (the Makefile writes into its own
directory; the user's checkout is never written to). Each lands in the cache under a directory
named by a digest of the files its build reads (every ``*.go``, ``go.mod``, ``go.sum``,
``vendor/modules.txt`` and Makefile), and is reused while that digest is unchanged.
``<cache>/nvidia-current.json`` records the newest pair for the run's record.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from e2e import gobuild
from e2e.cluster.build import BuildError
from e2e.cluster.settings import Settings
from e2e.progress import progress

PLUGIN_MODULE = "sigs.k8s.io/dra-driver-nvidia-gpu"
MOCK_MODULE = "github.com/NVIDIA/k8s-test-infra"
PLUGIN_PACKAGE = Path("cmd/gpu-kubelet-plugin")
MOCK_DIR = Path("pkg/gpu/mocknvml")
#: the mock's library version (its Makefile's LIB_VERSION default; NVIDIA's CI uses it for h100)
NVML_VERSION = "550.163.01"
NVML_LIBRARY = f"libnvidia-ml.so.{NVML_VERSION}"
CURRENT = "nvidia-current.json"
_MODULE_LINE = re.compile(r"^module\s+(\S+)", re.MULTILINE)
#: what a build reads: Go sources, the module files, the vendor list, Makefiles
_BUILD_INPUT_NAMES = frozenset({"go.mod", "go.sum", "modules.txt", "Makefile"})
_SKIPPED_DIRS = frozenset({".git", ".idea", ".vscode"})
#: version control, and a library an earlier ``make`` left in the checkout (else make reuses it)
_NOT_COPIED = shutil.ignore_patterns(".git", "libnvidia-ml.so*")


class NvidiaSourceError(BuildError):
    """A directory is not the checkout this build needs; the message names the variable."""


@dataclass(frozen=True)
class Checkout:
    """One source tree the user gave: where, which module, its version and its build digest."""

    root: Path
    module: str
    version: str
    digest: str


def read_checkout(root: Path, *, variable: str, module: str, needs: tuple[Path, ...]) -> Checkout:
    """``root`` as a checkout of ``module`` holding ``needs`` and a ``vendor/`` directory (the
    build is offline), or NvidiaSourceError naming ``variable``."""
    root = root.resolve()
    gomod = root / "go.mod"
    if not gomod.is_file():
        raise NvidiaSourceError(f"{variable}={root}: no go.mod (not a checkout of {module})")
    match = _MODULE_LINE.search(gomod.read_text())
    found = match.group(1) if match else "(none)"
    if found != module:
        raise NvidiaSourceError(f"{variable}={root}: go.mod names module {found}, not {module}")
    missing = [str(p) for p in (*needs, Path("vendor/modules.txt")) if not (root / p).exists()]
    if missing:
        raise NvidiaSourceError(f"{variable}={root}: missing {', '.join(missing)}")
    digest = build_inputs_digest(root)
    return Checkout(root, module, describe(root) or f"tree-{digest[:12]}", digest)


def plugin_checkout(root: Path) -> Checkout:
    return read_checkout(
        root, variable="NVIDIA_DRA_SOURCE", module=PLUGIN_MODULE, needs=(PLUGIN_PACKAGE,)
    )


def mock_checkout(root: Path) -> Checkout:
    needs = (MOCK_DIR / "Makefile", MOCK_DIR / "configs")
    return read_checkout(root, variable="NVML_MOCK_SOURCE", module=MOCK_MODULE, needs=needs)


def build_input(relative: Path) -> bool:
    """Whether a file is read by the Go build (an output such as a built binary or a header the
    mock's build wrote in place is not, so building in a checkout does not change its digest)."""
    return relative.suffix == ".go" or relative.name in _BUILD_INPUT_NAMES


def build_inputs_digest(root: Path) -> str:
    """A hash of the path and contents of every build input under ``root``."""
    sha = hashlib.sha256()
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        for name in sorted(files):
            path = Path(directory) / name
            relative = path.relative_to(root)
            if path.is_file() and not path.is_symlink() and build_input(relative):
                sha.update(str(relative).encode() + b"\0")
                sha.update(hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()


def describe(root: Path) -> str | None:
    """``git describe`` of a checkout, else the ``VERSION`` file (None when neither tells)."""
    if (root / ".git").exists():
        done = subprocess.run(
            ["git", "-C", str(root), "describe", "--tags", "--always", "--dirty"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    version = root / "VERSION"
    return version.read_text().strip() or None if version.is_file() else None


def cgo_env(settings: Settings) -> dict[str, str]:
    """The tier's Go caches, with cgo (the plugin loads NVML, the mock is a C shared library)
    and the checkout's vendor directory."""
    return {**settings.go_env, "CGO_ENABLED": "1", "GOFLAGS": "-mod=vendor -buildvcs=false"}


@dataclass(frozen=True)
class NvidiaBuild:
    plugin: Path
    nvml: Path
    record: dict[str, object]


def ensure_build(settings: Settings, plugin_root: Path, mock_root: Path) -> NvidiaBuild:
    """Both pieces, each built unless its checkout's build is cached; the record written."""
    plugin_source, mock_source = plugin_checkout(plugin_root), mock_checkout(mock_root)
    plugin = ensure_plugin(settings, plugin_source)
    nvml = ensure_mock(settings, mock_source)
    record: dict[str, object] = {
        "nvidia_dra_source": str(plugin_source.root),
        "nvidia_dra_version": plugin_source.version,
        "nvidia_dra_digest": plugin_source.digest,
        "plugin": str(plugin.binary),
        "plugin_reused": plugin.reused,
        "plugin_build_seconds": round(plugin.build_seconds, 1),
        "nvml_mock_source": str(mock_source.root),
        "nvml_mock_version": mock_source.version,
        "nvml_mock_digest": mock_source.digest,
        "nvml": str(nvml.binary),
        "nvml_reused": nvml.reused,
        "nvml_build_seconds": round(nvml.build_seconds, 1),
        "go": go_version(settings),
    }
    current = settings.cache_root / CURRENT
    partial = current.with_name(current.name + ".partial")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    partial.replace(current)
    return NvidiaBuild(plugin.binary, nvml.binary, record)


def ensure_plugin(settings: Settings, source: Checkout) -> gobuild.BuildResult:
    where = settings.cache_root / f"nvidia-dra-{source.digest[:16]}"
    binary = where / "gpu-kubelet-plugin"
    started = time.monotonic()
    with gobuild.build_lock(where):
        return gobuild.reuse_or_build(
            binary, where / "build.json", digest=source.digest, started=started,
            build=lambda: gobuild.go_build(
                f"go build NVIDIA's gpu-kubelet-plugin ({source.version})",
                module=source.root, binary=binary, ldflags="-s -w",
                go_env=cgo_env(settings), error=BuildError, package=f"./{PLUGIN_PACKAGE}",
            ),
        )  # fmt: skip


def ensure_mock(settings: Settings, source: Checkout) -> gobuild.BuildResult:
    where = settings.cache_root / f"nvml-mock-{source.digest[:16]}"
    library = where / NVML_LIBRARY
    started = time.monotonic()
    with gobuild.build_lock(where):
        return gobuild.reuse_or_build(
            library, where / "build.json", digest=source.digest, started=started,
            build=lambda: build_mock(settings, source, library),
        )  # fmt: skip


def build_mock(settings: Settings, source: Checkout, library: Path) -> None:
    """``make NO_PADDING=1`` in a scratch copy of the checkout; the library copied out."""
    scratch = library.parent / "src.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        shutil.copytree(source.root, scratch, symlinks=True, ignore=_NOT_COPIED)
        command = ["make", "NO_PADDING=1", f"LIB_VERSION={NVML_VERSION}"]
        with progress(f"make the mock NVML ({source.version})"):
            done = subprocess.run(
                command, cwd=scratch / MOCK_DIR, env={**os.environ, **cgo_env(settings)},
                capture_output=True, text=True, check=False,
            )  # fmt: skip
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-4000:]
            raise BuildError(f"{' '.join(command)} in {MOCK_DIR} failed:\n{tail}")
        partial = library.with_name(library.name + ".partial")
        shutil.copyfile(scratch / MOCK_DIR / NVML_LIBRARY, partial)
        partial.replace(library)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def go_version(settings: Settings) -> str:
    done = subprocess.run(
        ["go", "env", "GOVERSION"], env={**os.environ, **settings.go_env},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip()


def current_record(settings: Settings) -> dict[str, object]:
    """What the newest ``ensure_build`` recorded ({} before any)."""
    return gobuild.read_stamp(settings.cache_root / CURRENT)
