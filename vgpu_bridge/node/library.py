"""`vgpu-bridge node install-libvgpu`: put libvgpu.so, and the ld.so.preload that CDI mounts as a
claimed container's /etc/ld.so.preload, into the host's vgpu dir (the chart's init container).

Each file is replaced atomically (temp file in the same dir, fsync, rename, fsync the dir): a
container started meanwhile sees the old file or the new one, and running containers keep the
copy they mapped. A file that already has the wanted bytes and mode is left alone, so a rerun
changes nothing. The source must be an ELF shared object for this node's machine: a library the
dynamic loader cannot preload is skipped with a warning, and the container runs without limits.
The host's own /etc/ld.so.preload is never touched.
"""

from __future__ import annotations

import argparse
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from vgpu_bridge.atomic_files import holds, write_atomic
from vgpu_bridge.flag_settings import flag_of
from vgpu_bridge.node.cdi import CLAIMS_DIR, CONTAINER_LIBRARY, LIBRARY_FILE, PRELOAD_FILE
from vgpu_bridge.node.settings import InstallSettings

ELF_MAGIC = b"\x7fELF"
ET_DYN = 3
PT_INTERP = 3
#: per ELF class: the width and offset of e_phoff, and the offset of e_phentsize + e_phnum
_PROGRAM_HEADERS = {1: ("I", 28, 42), 2: ("Q", 32, 54)}
SELF = Path("/proc/self/exe")  # this interpreter: an ELF file of the node's machine


class InstallError(Exception):
    """Bad input or an unwritable dir; the message names the setting and the reason."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{flag_of(field)}: {reason}")


@dataclass(frozen=True)
class ElfHeader:
    elf_class: int  # 1: 32-bit, 2: 64-bit
    byte_order: int  # 1: little-endian, 2: big-endian
    file_type: int
    machine: int
    segment_types: tuple[int, ...]  # of the program headers within the data read

    @classmethod
    def parse(cls, data: bytes) -> ElfHeader | None:
        """The fields we check; None when `data` does not start like an ELF file."""
        if (
            data[:4] != ELF_MAGIC
            or len(data) < 64
            or data[4] not in (1, 2)
            or data[5] not in (1, 2)
        ):
            return None
        order = "<" if data[5] == 1 else ">"
        file_type, machine = struct.unpack_from(f"{order}HH", data, 16)
        width, at_table, at_counts = _PROGRAM_HEADERS[data[4]]
        (table,) = struct.unpack_from(order + width, data, at_table)
        entry, count = struct.unpack_from(f"{order}HH", data, at_counts)
        offsets = (table + i * entry for i in range(count if entry >= 4 else 0))
        types = tuple(
            struct.unpack_from(f"{order}I", data, at)[0] for at in offsets if at + 4 <= len(data)
        )
        return cls(data[4], data[5], file_type, machine, types)


def shared_object_problem(data: bytes, *, native: ElfHeader | None) -> str | None:
    """Why `data` is not a shared library the node's loader can preload, or None."""
    header = ElfHeader.parse(data)
    if header is None:
        return "not an ELF file"
    if header.file_type != ET_DYN:
        return f"not an ELF shared object (ELF type {header.file_type}, a shared object is 3)"
    if PT_INTERP in header.segment_types:
        return "names a program interpreter (PT_INTERP): an executable, not a library to preload"
    if native is not None and (header.elf_class, header.byte_order, header.machine) != (
        native.elf_class,
        native.byte_order,
        native.machine,
    ):
        return (
            f"built for another machine (ELF class {header.elf_class}, machine "
            f"{header.machine}; this node: class {native.elf_class}, machine {native.machine})"
        )
    return None


def native_header() -> ElfHeader | None:
    """The node's own ELF header (from this interpreter); None where it cannot be read."""
    try:
        with SELF.open("rb") as handle:
            return ElfHeader.parse(handle.read(64))
    except OSError:
        return None


def read_library(source: Path) -> bytes:
    try:
        data = source.read_bytes()
    except OSError as error:
        raise InstallError("libvgpu_source", f"{source}: {_reason(error)}") from None
    problem = shared_object_problem(data, native=native_header())
    if problem is not None:
        raise InstallError("libvgpu_source", f"{source}: {problem}")
    return data


def install(source: Path, vgpu_dir: Path) -> list[str]:
    """Install into `vgpu_dir` (and make its claims/ dir); one `<path>: written|unchanged` line
    per file. Raises InstallError before writing anything when the source is bad."""
    library = read_library(source)
    try:
        (vgpu_dir / CLAIMS_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InstallError("vgpu_dir", f"{vgpu_dir}: {_reason(error)}") from None
    wanted = (
        (LIBRARY_FILE, library, 0o755),
        (PRELOAD_FILE, f"{CONTAINER_LIBRARY}\n".encode(), 0o644),
    )
    return [_put(vgpu_dir / name, data, mode) for name, data, mode in wanted]


def _put(path: Path, data: bytes, mode: int) -> str:
    if holds(path, data, mode):
        return f"{path}: unchanged"
    try:
        write_atomic(path, data, mode=mode)
    except OSError as error:
        raise InstallError("vgpu_dir", f"cannot write {path}: {_reason(error)}") from None
    return f"{path}: written"


def _reason(error: OSError) -> str:
    return error.strerror or str(error)


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Exit 0 when installed (or already), 1 with the reason on stderr, 2 for bad settings."""
    settings = InstallSettings.from_namespace_or_report(args, environ)
    if settings is None:
        return 2
    try:
        done = install(settings.libvgpu_source, settings.vgpu_dir)
    except InstallError as error:
        print(f"{InstallSettings.prog}: {error}", file=sys.stderr)
        return 1
    for line in done:
        print(line)
    return 0
