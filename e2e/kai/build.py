"""Build (or reuse) KAI's scheduler and binder from a KAI source tree the user provides.

The Go module proxy these machines reach refuses KAI's module, so `make test` never builds KAI;
``python -m e2e.kai build --source DIR`` (or ``make e2e-kai KAI_SOURCE=DIR``) builds it from any
checkout or release tarball, as the Volcano tier builds Volcano: into
``<cache>/kai-<digest>/`` (``bin/scheduler``, ``bin/binder``, ``crds/``, ``build.json``) with the
control plane's Go caches, and ``<cache>/kai-current.json`` names the newest build, which
`make e2e-kai` runs (``KaiBuild.from_env``). A tree whose files have not changed is not built
again. Nothing of KAI's source is copied into the repository.

Whether a tree includes KAI PR #2102 (the DRA allocator gets the scheduler's feature gates,
without which it places none of our shares) is read from the tree itself: the allocator file
must no longer hand ``structured.Features{}`` to ``structured.NewAllocator``.
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
from e2e.cluster import Settings
from e2e.cluster.build import BuildError

#: KAI's module paths: today's and the one before the project moved out of NVIDIA's organisation.
MODULES = ("github.com/kai-scheduler/KAI-scheduler", "github.com/NVIDIA/KAI-scheduler")
COMMANDS = ("scheduler", "binder")
CRD_DIR = Path("deployments/kai-scheduler/crds")
ALLOCATOR_FILE = Path("pkg/scheduler/plugins/dynamicresources/dynamicresources.go")
CURRENT = "kai-current.json"
_MODULE_LINE = re.compile(r"^module\s+(\S+)", re.MULTILINE)
_FEATURELESS_ALLOCATOR = re.compile(
    r"structured\.NewAllocator\(\s*[^,]+,\s*structured\.Features\{\}"
)
#: What the tree digest skips: version control and editor state, not sources.
_SKIPPED_DIRS = frozenset({".git", ".idea", ".vscode"})


class KaiSourceError(BuildError):
    """The directory is not a KAI source tree this build can use; the message says why."""


@dataclass(frozen=True)
class KaiSource:
    root: Path
    module: str
    version: str
    digest: str
    has_pr2102: bool

    @classmethod
    def read(cls, root: Path, *, version: str | None = None) -> KaiSource:
        root = root.resolve()
        gomod = root / "go.mod"
        if not gomod.is_file():
            raise KaiSourceError(f"--source {root}: no go.mod (not a KAI source tree)")
        match = _MODULE_LINE.search(gomod.read_text())
        module = match.group(1) if match else ""
        if module not in MODULES:
            raise KaiSourceError(
                f"--source {root}: go.mod names module {module or '(none)'}, not KAI's "
                f"({' or '.join(MODULES)})"
            )
        missing = [
            str(path)
            for path in (*(Path("cmd") / c for c in COMMANDS), CRD_DIR, ALLOCATOR_FILE)
            if not (root / path).exists()
        ]
        if missing:
            raise KaiSourceError(f"--source {root}: missing {', '.join(missing)}")
        digest = tree_digest(root)
        return cls(
            root=root,
            module=module,
            version=version or _describe(root) or f"source-{digest[:12]}",
            digest=digest,
            has_pr2102=includes_pr2102((root / ALLOCATOR_FILE).read_text()),
        )


def includes_pr2102(allocator_source: str) -> bool:
    """Whether KAI's DRA plugin builds its allocator with features (PR #2102) rather than with
    the empty ``structured.Features{}``, which turns every DRA feature off."""
    return (
        "structured.NewAllocator(" in allocator_source
        and _FEATURELESS_ALLOCATOR.search(allocator_source) is None
    )


def tree_digest(root: Path) -> str:
    """A hash of every file's path and contents under ``root`` (version control skipped)."""
    sha = hashlib.sha256()
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
        for name in sorted(files):
            path = Path(directory) / name
            if path.is_symlink():
                sha.update(b"L" + str(path.relative_to(root)).encode() + b"\0")
                sha.update(os.readlink(path).encode() + b"\0")
                continue
            sha.update(b"F" + str(path.relative_to(root)).encode() + b"\0")
            sha.update(hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()


def _describe(root: Path) -> str | None:
    """``git describe`` of a checkout (None for a tarball or when git cannot tell)."""
    if not (root / ".git").exists():
        return None
    done = subprocess.run(
        ["git", "-C", str(root), "describe", "--tags", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


@dataclass(frozen=True)
class KaiBuildDir:
    """Where one tree's build lives in the cache."""

    root: Path

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def crd_dir(self) -> Path:
        return self.root / "crds"

    @property
    def record(self) -> Path:
        return self.root / "build.json"


def build_dir(cache_root: Path, source: KaiSource) -> KaiBuildDir:
    return KaiBuildDir(cache_root / f"kai-{source.digest[:16]}")


def ensure_build(source: KaiSource, settings: Settings | None = None) -> dict[str, object]:
    """The scheduler, binder and CRDs of ``source``, built unless this tree's build exists; the
    build's record (also written to ``<cache>/kai-current.json``)."""
    settings = settings or Settings.from_env()
    where = build_dir(settings.cache_root, source)
    with gobuild.build_lock(where.root):
        record = gobuild.read_stamp(where.record)
        binaries = [where.bin_dir / c for c in COMMANDS]
        reused = record.get("digest") == source.digest and all(b.is_file() for b in binaries)
        if not reused:
            record = _build(source, where, settings)
        record = {**record, "reused": reused}
    current = settings.cache_root / CURRENT
    partial = current.with_name(current.name + ".partial")
    partial.write_text(json.dumps({**record, "dir": str(where.root)}, indent=2) + "\n")
    partial.replace(current)
    return record


def _build(source: KaiSource, where: KaiBuildDir, settings: Settings) -> dict[str, object]:
    started = time.monotonic()
    where.record.unlink(missing_ok=True)
    where.bin_dir.mkdir(parents=True, exist_ok=True)
    for command in COMMANDS:
        gobuild.go_build(
            f"go build KAI {command} ({source.version})",
            module=source.root,
            binary=where.bin_dir / command,
            ldflags="-s -w",
            go_env=settings.go_env,
            error=BuildError,
            package=f"./cmd/{command}",
        )
    crds = where.crd_dir.with_name("crds.partial")
    shutil.rmtree(crds, ignore_errors=True)
    crds.mkdir()
    for crd in sorted((source.root / CRD_DIR).glob("*.yaml")):
        shutil.copyfile(crd, crds / crd.name)
    shutil.rmtree(where.crd_dir, ignore_errors=True)
    crds.replace(where.crd_dir)
    record: dict[str, object] = {
        "source": str(source.root),
        "module": source.module,
        "version": source.version,
        "digest": source.digest,
        "has_pr2102": source.has_pr2102,
        "go": _go_version(settings),
        "build_seconds": round(time.monotonic() - started, 1),
    }
    partial = where.record.with_name("build.json.partial")
    partial.write_text(json.dumps(record, indent=2) + "\n")
    partial.replace(where.record)
    return record


def _go_version(settings: Settings) -> str:
    done = subprocess.run(
        ["go", "env", "GOVERSION"],
        env={**os.environ, **settings.go_env},
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip()


def current_build(cache_root: Path) -> dict[str, object] | None:
    """The record of the newest build (``kai-current.json``), or None when none was made."""
    record = gobuild.read_stamp(cache_root / CURRENT)
    return record or None


def report(record: dict[str, object]) -> str:
    """One line: built or reused, which tree, whether it has #2102, how long the build took."""
    verb = "reused" if record.get("reused") else "built"
    pr = "with" if record.get("has_pr2102") else "WITHOUT"
    return (
        f"kai-bin: {verb} KAI {record.get('version')} from {record.get('source')} "
        f"({pr} PR #2102; its go build took {record.get('build_seconds')}s)"
    )
