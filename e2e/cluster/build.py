"""Build (or reuse) the control-plane binary into a version-keyed cache directory.

``python -m e2e.cluster build`` (also ``make cluster-bin``) prints how long it took. The binary is
rebuilt only when the Go sources of the tools module changed (a stamp keyed on their hash).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster.gomod import write_gomod
from e2e.cluster.settings import DEFAULT_K8S_VERSION, GOTOOLS_DIR, Settings
from e2e.progress import progress

_SOURCES = ("go.mod", "go.sum", "main.go")


class BuildError(RuntimeError):
    """``go build`` failed; the message carries the tail of its output."""


@dataclass(frozen=True)
class BuildResult:
    binary: Path
    reused: bool
    seconds: float
    #: How long the ``go build`` that made this binary took (recorded in the stamp).
    build_seconds: float


def ensure_binary(settings: Settings) -> BuildResult:
    """The multi-call binary for ``settings.k8s_version``, built if missing or stale.

    Concurrent callers (two test sessions, ``make`` in two shells) take turns on a file lock.
    """
    settings.bin_dir.mkdir(parents=True, exist_ok=True)
    with (settings.bin_dir / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_binary_locked(settings)


def _ensure_binary_locked(settings: Settings) -> BuildResult:
    started = time.monotonic()
    source_dir = _source_dir(settings)
    stamp = settings.bin_dir / "vgpu-k8s.stamp"
    digest = sources_digest(source_dir)
    recorded = read_stamp(stamp)
    if settings.binary.is_file() and recorded.get("digest") == digest:
        seconds = recorded.get("build_seconds")
        build_seconds = float(seconds) if isinstance(seconds, int | float) else 0.0
        elapsed = time.monotonic() - started
        return BuildResult(
            settings.binary, reused=True, seconds=elapsed, build_seconds=build_seconds
        )
    _go_build(settings, source_dir)
    elapsed = time.monotonic() - started
    stamp.write_text(json.dumps({"digest": digest, "build_seconds": round(elapsed, 1)}))
    return BuildResult(settings.binary, reused=False, seconds=elapsed, build_seconds=elapsed)


def read_stamp(stamp: Path) -> dict[str, object]:
    """What a build recorded next to its binary ({} when missing or unreadable)."""
    try:
        recorded = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def _source_dir(settings: Settings) -> Path:
    """The committed module for the pinned release; a generated copy in the cache for any other."""
    if settings.k8s_version == DEFAULT_K8S_VERSION:
        return GOTOOLS_DIR
    work = settings.cache_root / f"k8s-{settings.k8s_version}" / "src"
    work.mkdir(parents=True, exist_ok=True)
    main_go = (GOTOOLS_DIR / "main.go").read_bytes()
    tidied = work / "tidied-for.sha256"  # the main.go that go.mod/go.sum were resolved for
    digest = hashlib.sha256(main_go).hexdigest()
    if not tidied.is_file() or tidied.read_text() != digest:
        (work / "main.go").write_bytes(main_go)  # new imports need go mod tidy again
        write_gomod(work, settings.k8s_version, go_env=settings.go_env)
        tidied.write_text(digest)
    return work


def sources_digest(source_dir: Path, names: tuple[str, ...] = _SOURCES) -> str:
    """A hash of a tools module's committed files: a build is reused while it matches."""
    sha = hashlib.sha256()
    for name in names:
        sha.update(name.encode() + b"\0" + (source_dir / name).read_bytes())
    return sha.hexdigest()


def _go_build(settings: Settings, source_dir: Path) -> None:
    settings.bin_dir.mkdir(parents=True, exist_ok=True)
    partial = settings.bin_dir / "vgpu-k8s.partial"
    stamp_version = "k8s.io/component-base/version"
    major, minor = settings.minor.split(".")
    ldflags = " ".join(
        [
            "-s -w",
            f"-X {stamp_version}.gitVersion={settings.k8s_version}",
            f"-X {stamp_version}.gitMajor={major}",
            f"-X {stamp_version}.gitMinor={minor}",
        ]
    )
    command = ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(partial), "."]
    with progress(f"go build vgpu-k8s (Kubernetes {settings.k8s_version})"):
        done = subprocess.run(
            command,
            cwd=source_dir,
            env={**os.environ, **settings.go_env},
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise BuildError(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    partial.replace(settings.binary)


def report(result: BuildResult) -> str:
    """One line for ``make cluster-bin``: built or reused, size, and the time it took."""
    size_mib = result.binary.stat().st_size / 2**20
    if result.reused:
        return (
            f"cluster-bin: warm, reused {result.binary} ({size_mib:.0f} MiB) in "
            f"{result.seconds:.2f}s (its go build took {result.build_seconds:.0f}s)"
        )
    return f"cluster-bin: built {result.binary} ({size_mib:.0f} MiB) in {result.seconds:.1f}s"
