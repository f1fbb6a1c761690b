"""Small ELF shared objects made in tests: just the headers the SONAME reader follows.

Layout: the ELF header, two program headers (a PT_LOAD of the whole file loaded at LOAD_ADDRESS,
and the PT_DYNAMIC), the dynamic section (DT_STRTAB, DT_STRSZ, DT_SONAME, DT_NULL), then the
string table.
"""

from __future__ import annotations

import struct

from vgpu_bridge.node.elf import (
    DT_NULL,
    DT_SONAME,
    DT_STRSZ,
    DT_STRTAB,
    DYNAMIC_ENTRY,
    HEADER,
    MACHINES,
    PROGRAM_HEADER,
    PT_DYNAMIC,
    PT_LOAD,
)

LOAD_ADDRESS = 0x10000  # the string table's address is not its file offset


def shared_object(
    soname: str,
    *,
    machine: str = "x86_64",
    e_type: int = 3,
    elf_class: int = 2,
    dynamic_tags: tuple[int, ...] = (DT_STRTAB, DT_STRSZ, DT_SONAME, DT_NULL),
) -> bytes:
    """An ELF64 little-endian shared object whose SONAME is `soname`."""
    strings = b"\0" + soname.encode() + b"\0"
    phoff = HEADER.size
    dynamic_offset = phoff + 2 * PROGRAM_HEADER.size
    dynamic_size = len(dynamic_tags) * DYNAMIC_ENTRY.size
    strtab_offset = dynamic_offset + dynamic_size
    total = strtab_offset + len(strings)
    values = {DT_STRTAB: LOAD_ADDRESS + strtab_offset, DT_STRSZ: len(strings), DT_SONAME: 1}
    ident = b"\x7fELF" + bytes([elf_class, 1, 1]) + bytes(9)
    header = HEADER.pack(ident, e_type, MACHINES[machine], 1, 0, phoff, 0, 0, HEADER.size,
                         PROGRAM_HEADER.size, 2, 64, 0, 0)  # fmt: skip
    load = PROGRAM_HEADER.pack(PT_LOAD, 4, 0, LOAD_ADDRESS, LOAD_ADDRESS, total, total, 0x1000)
    dynamic_address = LOAD_ADDRESS + dynamic_offset
    dynamic = PROGRAM_HEADER.pack(PT_DYNAMIC, 4, dynamic_offset, dynamic_address, dynamic_address,
                                  dynamic_size, dynamic_size, 8)  # fmt: skip
    entries = b"".join(DYNAMIC_ENTRY.pack(tag, values.get(tag, 0)) for tag in dynamic_tags)
    return header + load + dynamic + entries + strings


def with_u16(data: bytes, offset: int, value: int) -> bytes:
    """`data` with the little-endian 16-bit field at `offset` set to `value`."""
    return data[:offset] + struct.pack("<H", value) + data[offset + 2 :]
