"""Build one Go program of the e2e tier into the cache, or reuse it: what the control plane's,
Volcano's and helm's builds have in common.

A binary is reused while it exists and the stamp beside it records the digest of the module
files it was built from (``sources_digest``); the stamp also keeps how long its build took.
Builders of one directory take turns on a file lock (``build_lock``). ``go_build`` runs under a
progress line and writes ``<binary>.partial``, which replaces the binary only once the build
succeeded. Each caller keeps its own flags, environment, module directory and output path.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from e2e.progress import progress


@dataclass(frozen=True)
class BuildResult:
    binary: Path
    reused: bool
    seconds: float
    #: How long the ``go build`` that made this binary took (recorded in the stamp).
    build_seconds: float


@contextmanager
def build_lock(directory: Path) -> Iterator[None]:
    """Hold ``<directory>/build.lock`` (the directory made if missing): builders take turns."""
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def sources_digest(source_dir: Path, names: tuple[str, ...]) -> str:
    """A hash of a tools module's committed files: a build is reused while it matches."""
    sha = hashlib.sha256()
    for name in names:
        sha.update(name.encode() + b"\0" + (source_dir / name).read_bytes())
    return sha.hexdigest()


def read_stamp(stamp: Path) -> dict[str, object]:
    """What a build recorded next to its binary ({} when missing or unreadable)."""
    try:
        recorded = json.loads(stamp.read_text())
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def reuse_or_build(
    binary: Path, stamp: Path, *, digest: str, build: Callable[[], None], started: float
) -> BuildResult:
    """``binary`` as it is when ``stamp`` says it was built from ``digest``; otherwise ``build()``
    makes it and the stamp records the digest and the time taken since ``started``."""
    recorded = read_stamp(stamp)
    if binary.is_file() and recorded.get("digest") == digest:
        took = recorded.get("build_seconds")
        build_seconds = float(took) if isinstance(took, int | float) else 0.0
        elapsed = time.monotonic() - started
        return BuildResult(binary, reused=True, seconds=elapsed, build_seconds=build_seconds)
    build()
    elapsed = time.monotonic() - started
    stamp.write_text(json.dumps({"digest": digest, "build_seconds": round(elapsed, 1)}))
    return BuildResult(binary, reused=False, seconds=elapsed, build_seconds=elapsed)


def go_build(
    what: str,
    *,
    module: Path,
    binary: Path,
    ldflags: str,
    go_env: Mapping[str, str],
    error: type[Exception],
    package: str = ".",
) -> None:
    """``go build -trimpath -ldflags <ldflags> -o <binary>.partial <package>`` in ``module``, with
    ``go_env`` over this process's environment, under the progress line ``what``. The partial
    file replaces ``binary`` when the build succeeded; ``error`` carries its output's tail."""
    partial = binary.with_name(binary.name + ".partial")
    command = ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(partial), package]
    with progress(what):
        done = subprocess.run(
            command,
            cwd=module,
            env={**os.environ, **go_env},
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise error(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    partial.replace(binary)


def build_line(target: str, result: BuildResult, *, version: str | None = None) -> str:
    """One line for ``make <target>``: built or reused, the binary's size (after its ``version``,
    when given), and the time it took."""
    size = f"{result.binary.stat().st_size / 2**20:.0f} MiB"
    about = f"{result.binary} ({version}, {size})" if version else f"{result.binary} ({size})"
    if result.reused:
        return (
            f"{target}: warm, reused {about} in {result.seconds:.2f}s "
            f"(its go build took {result.build_seconds:.0f}s)"
        )
    return f"{target}: built {about} in {result.seconds:.1f}s"


class ModuleDownloadError(RuntimeError):
    """``go mod download`` could not fetch a module; the message holds the command and output."""


def download_module(
    module: str, version: str, *, env: Mapping[str, str], cwd: Path
) -> dict[str, str]:
    """``go mod download -json module@version``'s answer (``Dir``, ``GoMod``, ...): the module in
    the Go module cache, fetched through the proxy when it is not there yet. ``env`` is the whole
    environment the go command runs with."""
    command = ["go", "mod", "download", "-json", f"{module}@{version}"]
    done = subprocess.run(
        command, cwd=cwd, env=dict(env), capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-3000:]
        raise ModuleDownloadError(f"{' '.join(command)} failed:\n{tail}")
    answer = json.loads(done.stdout)
    return {key: value for key, value in answer.items() if isinstance(value, str)}
