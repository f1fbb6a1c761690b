"""A stand-in NVIDIA driver install for the real node (issue 36), and the places it is put.

The real node has no GPU and no NVIDIA runtime. What a claimed container needs from a driver
install is what our agent's CDI spec mounts from the node's driver root (shared36: the library dir
holding ``libcuda.so.<driver version>``, the libraries at their SONAMEs, ``usr/bin/nvidia-smi``),
so the stand-in is the fake driver of native/vgpu's tests laid out as the NVIDIA installer lays out
a driver of ``DRIVER_VERSION``: regular files ``libcuda.so.<version>`` and
``libnvidia-ml.so.<version>`` in ``usr/lib/x86_64-linux-gnu``, the installer's ``.so.1`` links
(and ``libcuda.so``) to them, and ``usr/bin/nvidia-smi`` (csrc/nvidia_smi.c, which dlopens
``libnvidia-ml.so.1`` as the real tool does).

Layouts: a host install, a tier directory playing ``/`` (we never write the host's /usr/lib);
GPU Operator's driver container, the driver root at ``/run/nvidia/driver``
(``Layout.operator_driver_root``; ``claim_directory``
creates it only where nothing is, refuses one that is not ours, and ``release_directories`` puts
the host back), seen by the agent through a read-only bind mount as the chart's ``/driver-root``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from e2e.realnode.host import mounts_under

#: the mock GPU's driverVersion: the suffix of the stand-in's library files
DRIVER_VERSION = "555.42.06"
#: the driver root's library dir on x86_64 Debian (the first one the agent looks in)
LIBRARY_DIR = "usr/lib/x86_64-linux-gnu"
BINARY_DIR = "usr/bin"
#: a file in every directory this tier created outside its own state dirs
MARKER = ".vgpu-bridge-realnode"


class DriverRootInUse(RuntimeError):
    """The path the tier would create already exists and is not the tier's."""


@dataclass(frozen=True)
class DriverRootFlags:
    """The agent's view of a driver root: ``root`` as containerd and the kubelet see it (CDI
    hostPaths), ``mount`` where the agent reads it (None: at ``root`` itself)."""

    root: Path
    mount: Path | None = None

    def args(self) -> list[str]:
        args = ["--driver-root", str(self.root)]
        if self.mount is not None:
            args += ["--driver-root-mount", str(self.mount)]
        return args


def install(top: Path, *, libraries: Mapping[str, Path], binaries: Mapping[str, Path]) -> Path:
    """Lay the driver out under ``top`` (made if missing): each ``libraries`` entry, SONAME ->
    host file, as the regular file ``<stem>.so.<DRIVER_VERSION>`` plus the link named by its
    SONAME; ``libcuda.so`` -> ``libcuda.so.1``; each of ``binaries`` in ``usr/bin``. Returns the
    library dir."""
    library_dir = top / LIBRARY_DIR
    library_dir.mkdir(parents=True, exist_ok=True)
    for soname, source in libraries.items():
        stem = soname.split(".so", 1)[0]
        versioned = f"{stem}.so.{DRIVER_VERSION}"
        shutil.copyfile(source, library_dir / versioned)
        (library_dir / versioned).chmod(0o755)
        _symlink(library_dir / soname, versioned)
    if "libcuda.so.1" in libraries:
        _symlink(library_dir / "libcuda.so", "libcuda.so.1")
    binary_dir = top / BINARY_DIR
    binary_dir.mkdir(parents=True, exist_ok=True)
    for name, source in binaries.items():
        shutil.copyfile(source, binary_dir / name)
        (binary_dir / name).chmod(0o755)
    return library_dir


def _symlink(link: Path, target: str) -> None:
    link.unlink(missing_ok=True)
    link.symlink_to(target)


# --- a directory outside the tier's own ---------------------------------------------------------


def claim_directory(path: Path, *, record: Path) -> None:
    """Make ``path`` the tier's: create it and its missing parents (named in ``record`` before
    any is made, so a crash leaves nothing ``release_directories`` cannot find) with ``MARKER``
    in it. One already marked (a crashed run's) is taken as it is; anything else that exists
    raises DriverRootInUse: a real driver root or another tool's directory is never touched."""
    if path.exists() or path.is_symlink():
        if path.is_dir() and not path.is_symlink() and (path / MARKER).is_file():
            return
        raise DriverRootInUse(
            f"{path} exists and is not this tier's (no {MARKER} in it): a GPU Operator driver "
            "container or another tool may own it; the tier will not use or remove it"
        )
    missing = [path, *(parent for parent in path.parents if not parent.exists())]
    created = _recorded(record) + [str(p) for p in reversed(missing)]
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(created))
    for directory in reversed(missing):
        directory.mkdir()
    (path / MARKER).write_text("made by e2e/realnode; `python -m e2e.realnode down` removes it\n")


def release_directories(record: Path) -> list[str]:
    """Remove what ``claim_directory`` made (the marked directory with its content, then each
    parent it created if empty), deepest first; nothing with a mount at or below it is removed
    (that would delete through the mount). Returns notes on what was kept."""
    notes = []
    for name in reversed(_recorded(record)):
        directory = Path(name)
        if not directory.is_dir() or directory.is_symlink():
            continue
        if mounts_under(directory):
            notes.append(f"{directory} kept: mounts below it")
        elif (directory / MARKER).is_file():
            shutil.rmtree(directory)
        else:
            with contextlib.suppress(OSError):  # a parent we made, now holding others' files
                directory.rmdir()
    if not notes:
        record.unlink(missing_ok=True)
    return notes


def _recorded(record: Path) -> list[str]:
    try:
        names = json.loads(record.read_text())
    except (OSError, ValueError):
        return []
    return [str(name) for name in names] if isinstance(names, list) else []


# --- the agent's read-only view -----------------------------------------------------------------


def bind_read_only(source: Path, target: Path) -> None:
    """``target`` shows ``source`` read-only (a bind mount, then its read-only remount), as the
    chart's hostPath volume shows the host's driver root at /driver-root."""
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
    except subprocess.CalledProcessError:
        subprocess.run(["umount", str(target)], check=False)
        raise


def unmount(target: Path) -> None:
    subprocess.run(["umount", str(target)], check=True, capture_output=True)
