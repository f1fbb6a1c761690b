"""A shared library's SONAME, read from its ELF dynamic section with bounded reads.

The agent mounts each driver library into containers under its SONAME (`libcuda.so.1`), the
name the container's loader asks for. The SONAME is the `DT_SONAME` entry of the `PT_DYNAMIC`
segment: an offset into the string table `DT_STRTAB` points at, whose virtual address is mapped
to a file offset through the `PT_LOAD` segment that holds it. Only 64-bit little-endian shared
objects (x86_64, aarch64: the machines the agent runs on) are read; anything else, and any
header that points outside the file or past the caps below, is refused with `ElfError`. Every
read is of a size the caps bound (never the whole file): a library is read in at most
64 + MAX_PROGRAM_HEADERS * 56 + MAX_DYNAMIC_BYTES + MAX_SONAME_BYTES bytes.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Callable
from pathlib import Path

from vgpu_bridge.node.files import UNTRUSTED_OPEN

ELF_MAGIC = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB = 1
ET_DYN = 3
PT_LOAD = 1
PT_DYNAMIC = 2
DT_NULL = 0
DT_STRTAB = 5
DT_STRSZ = 10
DT_SONAME = 14
MACHINES = {"x86_64": 62, "aarch64": 183}  # uname's machine -> e_machine
HEADER = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr
PROGRAM_HEADER = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr
DYNAMIC_ENTRY = struct.Struct("<qQ")  # Elf64_Dyn
MAX_PROGRAM_HEADERS = 64  # a driver library has about ten
MAX_DYNAMIC_BYTES = 64 * 1024  # libcuda's dynamic section is well under 1 KiB
MAX_SONAME_BYTES = 256

Read = Callable[[int, int], bytes]  # (offset, size) -> exactly `size` bytes, or ElfError


class ElfError(ValueError):
    """Not a shared library this reader accepts; the message says what is wrong."""


def read_soname(path: Path, *, machine: str) -> str:
    """The SONAME of the regular file at `path` (a link is refused, not followed), built for
    `machine`; ElfError (naming the file) when it has none or is not such a library."""
    try:
        fd = os.open(path, UNTRUSTED_OPEN)
    except OSError as error:
        raise ElfError(f"{path}: cannot open: {error.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ElfError(f"{path}: not a regular file")
        return soname(_reader(fd, info.st_size), machine=machine)
    except ElfError as error:
        raise ElfError(f"{path}: {error}") from None
    finally:
        os.close(fd)


def _reader(fd: int, size: int) -> Read:
    def read(offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or offset + length > size:
            raise ElfError(f"truncated: {length} bytes at {offset} are past its {size} bytes")
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise ElfError(f"truncated while read: {len(data)} of {length} bytes at {offset}")
        return data

    return read


def soname(read: Read, *, machine: str) -> str:
    """The SONAME of the ELF image `read` reads from (see the module docstring)."""
    segments = _program_headers(read, machine=machine)
    dynamic = [s for s in segments if s[0] == PT_DYNAMIC]
    if len(dynamic) != 1:
        raise ElfError(f"{len(dynamic)} PT_DYNAMIC segments, expected 1")
    entries = _dynamic_entries(read, offset=dynamic[0][1], size=dynamic[0][3])
    missing = [name for tag, name in _NEEDED_TAGS.items() if tag not in entries]
    if missing:
        raise ElfError(f"no {', '.join(missing)} in its dynamic section")
    strtab = _file_offset(segments, entries[DT_STRTAB])
    return _string(read, table=strtab, table_size=entries[DT_STRSZ], index=entries[DT_SONAME])


_NEEDED_TAGS = {DT_STRTAB: "DT_STRTAB", DT_STRSZ: "DT_STRSZ", DT_SONAME: "DT_SONAME"}
Segment = tuple[int, int, int, int]  # p_type, p_offset, p_vaddr, p_filesz


def _program_headers(read: Read, *, machine: str) -> list[Segment]:
    try:
        magic = read(0, len(ELF_MAGIC))
    except ElfError:
        magic = b""
    if magic != ELF_MAGIC:
        raise ElfError("not an ELF file")
    header = HEADER.unpack(read(0, HEADER.size))
    ident, e_type, e_machine = header[0], header[1], header[2]
    phoff, phentsize, phnum = header[5], header[9], header[10]
    if ident[4] != ELFCLASS64 or ident[5] != ELFDATA2LSB:
        raise ElfError("not a 64-bit little-endian ELF file")
    if e_type != ET_DYN:
        raise ElfError(f"not a shared object (e_type {e_type})")
    if e_machine != MACHINES.get(machine):
        raise ElfError(f"built for ELF machine {e_machine}, not {machine}")
    if phentsize != PROGRAM_HEADER.size or not 0 < phnum <= MAX_PROGRAM_HEADERS:
        raise ElfError(f"{phnum} program headers of {phentsize} bytes is not plausible")
    table = read(phoff, phnum * phentsize)
    return [
        (p_type, p_offset, p_vaddr, p_filesz)
        for p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _align in (
            PROGRAM_HEADER.iter_unpack(table)
        )
    ]


def _dynamic_entries(read: Read, *, offset: int, size: int) -> dict[int, int]:
    """The dynamic section's tags up to DT_NULL (the first of a repeated tag)."""
    if not 0 < size <= MAX_DYNAMIC_BYTES or size % DYNAMIC_ENTRY.size:
        raise ElfError(f"a dynamic section of {size} bytes is not plausible")
    entries: dict[int, int] = {}
    for tag, value in DYNAMIC_ENTRY.iter_unpack(read(offset, size)):
        if tag == DT_NULL:
            return entries
        entries.setdefault(tag, value)
    raise ElfError("its dynamic section has no DT_NULL end")


def _file_offset(segments: list[Segment], address: int) -> int:
    """Where the loaded address `address` comes from in the file."""
    for p_type, p_offset, p_vaddr, p_filesz in segments:
        if p_type == PT_LOAD and p_vaddr <= address < p_vaddr + p_filesz:
            return p_offset + (address - p_vaddr)
    raise ElfError(f"its string table address {address:#x} is in no PT_LOAD segment")


def _string(read: Read, *, table: int, table_size: int, index: int) -> str:
    if index >= table_size:
        raise ElfError(f"DT_SONAME {index} is past its string table's {table_size} bytes")
    raw = read(table + index, min(MAX_SONAME_BYTES, table_size - index))
    name, nul, _ = raw.partition(b"\0")
    if not nul:
        raise ElfError(f"its SONAME has no end within {MAX_SONAME_BYTES} bytes")
    try:
        return name.decode("ascii")
    except UnicodeDecodeError:
        raise ElfError(f"its SONAME {name!r} is not ASCII") from None
