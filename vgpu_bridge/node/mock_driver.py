"""The stand-in CUDA driver for mock cards (`--mock-driver DIR`): native/vgpu's fake libcuda and
NVML, laid out in the agent's image as a driver install, given to every claim's containers.

At start the agent copies DIR (its image's `/opt/vgpu-bridge/mock-driver`) to the host, under
its vgpu dir (`<vgpu-dir>/mock-driver`, which the agent sees at the same path), and uses the copy
as its driver root: `driver_root.discover` finds `libcuda.so.<version>` and the other libraries
there, and each claim's spec mounts them at their SONAMEs (libcuda.so.1, libnvidia-ml.so.1), as
for a real driver (`cdi.py`), with the fake's settings for the claim's cards in its env
(`CdiLayout.mock_driver`). The mock cards' driver version is the `<version>` in that file name.

The copy takes DIR's regular files only: a link, FIFO or device anywhere in DIR is refused (the
agent does not start: DIR is the image's, and a link there is a broken image, never followed),
and so is a tree over MAX_FILES files, MAX_DEPTH levels or MAX_FILE_BYTES per file. Each file
is written atomically (temp file, fsync, rename): a container starting meanwhile mounts the old
file or the new one. A file that already holds the same bytes and mode is left alone, so a
restart rewrites nothing and running containers keep the very inode they mapped. Files of an
older image stay (a prepared claim's spec may still name them) until the uninstall removes the
whole dir. A link or non-dir in the way on the host side is refused, never followed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from vgpu_bridge.atomic_files import holds, write_atomic
from vgpu_bridge.node.driver_root import (
    CUDA_LIBRARY,
    DRIVER_VERSION,
    DriverRootError,
)
from vgpu_bridge.node.files import UnsafeFile, read_regular
from vgpu_bridge.node.gpus import Gpu

MOCK_DRIVER_DIR = "mock-driver"  # in the vgpu dir: the copy, removed at uninstall
IMAGE_MOCK_DRIVER = Path("/opt/vgpu-bridge/mock-driver")  # where the agent image has it
MAX_FILES = 64
MAX_DEPTH = 8
MAX_FILE_BYTES = 256 * 2**20
DIR_MODE = 0o755
NVML_UUID = re.compile(r"GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")
CUDA_VERSIONED = re.compile(rf"{CUDA_LIBRARY}\.so\.({DRIVER_VERSION.pattern})")


class MockDriverError(DriverRootError):
    """The stand-in driver cannot be given to containers; the agent does not start."""


@dataclass(frozen=True, slots=True)
class MockDriverCopy:
    """The copy on the host: where, at which driver version, and what this start wrote."""

    root: Path  # <vgpu-dir>/mock-driver, the same path on the host and here
    version: str
    written: tuple[str, ...]  # relative paths rewritten now (empty on a restart)
    unchanged: tuple[str, ...]


def mock_driver_dir(vgpu_dir: Path) -> Path:
    """Where the copy lives on the host (and where the agent sees it)."""
    return vgpu_dir / MOCK_DRIVER_DIR


def install(source: Path, vgpu_dir: Path) -> MockDriverCopy:
    """Copy `source`'s regular files to `<vgpu_dir>/mock-driver` (see the module's docstring)."""
    files = list(_regular_files(source))
    versions = sorted(
        {m.group(1) for rel in files if (m := CUDA_VERSIONED.fullmatch(Path(rel).name))}
    )
    if len(versions) != 1:
        found = f"found {versions}" if versions else "found none"
        raise MockDriverError(
            f"mock driver {source}: expected one libcuda.so.<version> (the driver version), {found}"
        )
    root = mock_driver_dir(vgpu_dir)
    try:
        vgpu_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise MockDriverError(f"mock driver: cannot make {vgpu_dir}: {error.strerror}") from None
    written, unchanged = [], []
    for relative in files:
        data, mode = _read(source / relative)
        target = root / relative
        _ensure_dirs(vgpu_dir, target.parent)
        if holds(target, data, mode):
            unchanged.append(relative)
            continue
        try:
            write_atomic(target, data, mode=mode)
        except OSError as error:  # a dir in the way, a full or read-only disk
            raise MockDriverError(f"mock driver: cannot write {target}: {error.strerror}") from None
        written.append(relative)
    return MockDriverCopy(root, versions[0], tuple(written), tuple(unchanged))


def for_mock_driver(gpus: tuple[Gpu, ...], version: str) -> tuple[Gpu, ...]:
    """The mock cards at the stand-in driver's version. MockDriverError for a card whose UUID is
    not of NVML's shape (the fake presents only such UUIDs: a container would see another card,
    which libvgpu refuses), or that names another driver version (a mock list's driverVersion),
    whose spec would mount no libcuda of that version."""
    odd = [gpu.uuid for gpu in gpus if not NVML_UUID.fullmatch(gpu.uuid)]
    if odd:
        raise MockDriverError(
            f"mock GPUs {', '.join(odd)}: the mock driver presents cards by UUIDs of NVML's "
            "shape, GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex digits): give the mock list "
            "such UUIDs, or use --mock-gpus-node-label, whose cards have them"
        )
    other = [gpu.uuid for gpu in gpus if gpu.driver_version not in (None, version)]
    if other:
        raise MockDriverError(
            f"mock GPUs {', '.join(other)} name another driver version than the mock driver's "
            f"{version}: leave driverVersion out of the mock list, or set it to {version}"
        )
    return tuple(dataclasses.replace(gpu, driver_version=version) for gpu in gpus)


def _regular_files(source: Path) -> list[str]:
    """DIR's regular files (relative paths, sorted); MockDriverError for anything else there."""
    found: list[str] = []
    pending = [(source, 0)]
    while pending:
        directory, depth = pending.pop()
        info = _lstat(directory)
        if not stat.S_ISDIR(info.st_mode):
            raise MockDriverError(f"mock driver: {directory} is {_kind(info)}, not a dir")
        if depth > MAX_DEPTH:
            raise MockDriverError(f"mock driver {source}: deeper than {MAX_DEPTH} levels")
        for entry in sorted(os.listdir(directory)):
            path = directory / entry
            mode = _lstat(path).st_mode
            if stat.S_ISDIR(mode):
                pending.append((path, depth + 1))
            elif stat.S_ISREG(mode):
                found.append(str(path.relative_to(source)))
            else:
                raise MockDriverError(
                    f"mock driver: {path} is {_kind(_lstat(path))}: only regular files are "
                    "copied (the image lays the driver out as files, never as links)"
                )
            if len(found) > MAX_FILES:
                raise MockDriverError(f"mock driver {source}: more than {MAX_FILES} files")
    return sorted(found)


def _read(path: Path) -> tuple[bytes, int]:
    """The file's bytes (never through a link, at most MAX_FILE_BYTES) and its copy's mode."""
    try:
        data = read_regular(path, max_bytes=MAX_FILE_BYTES)
        mode = os.lstat(path).st_mode
    except UnsafeFile as error:  # "<path>: too big (over N bytes)"; an OSError too
        raise MockDriverError(f"mock driver: {error}") from None
    except OSError as error:
        raise MockDriverError(f"mock driver: {path}: {error.strerror}") from None
    return data, 0o755 if mode & 0o111 else 0o644


def _ensure_dirs(base: Path, directory: Path) -> None:
    """`directory` and every dir between `base` and it, made where missing; a link or a file
    in the way is refused (MockDriverError), never followed."""
    path = base
    for part in directory.relative_to(base).parts:
        path = path / part
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass
        except OSError as error:
            raise MockDriverError(f"mock driver: cannot make {path}: {error.strerror}") from None
        info = _lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            raise MockDriverError(f"mock driver: {path} on the host is {_kind(info)}, not a dir")


def _lstat(path: Path) -> os.stat_result:
    try:
        return os.lstat(path)
    except OSError as error:
        raise MockDriverError(f"mock driver: {path}: {error.strerror}") from None


def _kind(info: os.stat_result) -> str:
    if stat.S_ISLNK(info.st_mode):
        return "a link"
    if stat.S_ISDIR(info.st_mode):
        return "a dir"
    return "not a regular file"
