"""Build (or reuse) the control-plane binary into a version-keyed cache directory.

``python -m e2e.cluster build`` (also ``make cluster-bin``) prints how long it took. The binary is
rebuilt only when the Go sources of the tools module changed (a stamp keyed on their hash).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from e2e.cluster.gomod import write_gomod
from e2e.cluster.settings import DEFAULT_K8S_VERSION, GOTOOLS_DIR, Settings
from e2e.gobuild import BuildResult as BuildResult  # e2e.cluster names it from here
from e2e.gobuild import build_line, build_lock, go_build, reuse_or_build, sources_digest

_SOURCES = ("go.mod", "go.sum", "main.go")


class BuildError(RuntimeError):
    """``go build`` failed; the message carries the tail of its output."""


def ensure_binary(settings: Settings) -> BuildResult:
    """The multi-call binary for ``settings.k8s_version``, built if missing or stale.

    Concurrent callers (two test sessions, ``make`` in two shells) take turns on a file lock.
    """
    with build_lock(settings.bin_dir):
        return _ensure_binary_locked(settings)


def _ensure_binary_locked(settings: Settings) -> BuildResult:
    started = time.monotonic()
    source_dir = _source_dir(settings)
    return reuse_or_build(
        settings.binary,
        settings.bin_dir / "vgpu-k8s.stamp",
        digest=sources_digest(source_dir, _SOURCES),
        build=lambda: _go_build(settings, source_dir),
        started=started,
    )


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


def _go_build(settings: Settings, source_dir: Path) -> None:
    settings.bin_dir.mkdir(parents=True, exist_ok=True)
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
    go_build(
        f"go build vgpu-k8s (Kubernetes {settings.k8s_version})",
        module=source_dir,
        binary=settings.binary,
        ldflags=ldflags,
        go_env=settings.go_env,
        error=BuildError,
    )


def report(result: BuildResult) -> str:
    """One line for ``make cluster-bin``: built or reused, size, and the time it took."""
    return build_line("cluster-bin", result)
