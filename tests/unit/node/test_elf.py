"""A library's SONAME from its ELF headers: real files read, odd ones refused, reads bounded."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from tests.unit.node.elf_files import shared_object, with_u16
from tests.unit.node.fake_driver import fake_library
from vgpu_bridge.node.elf import (
    DT_NULL,
    DT_SONAME,
    DT_STRTAB,
    ElfError,
    Read,
    read_soname,
    soname,
)

HERE = platform.machine()


def _reads(data: bytes, log: list[tuple[int, int]]) -> Read:
    def read(offset: int, size: int) -> bytes:
        log.append((offset, size))
        if offset + size > len(data):
            raise ElfError("truncated")
        return data[offset : offset + size]

    return read


def test_the_fake_driver_libraries_name_their_sonames() -> None:
    """Files the linker made (-Wl,-soname), as a driver install has them."""
    assert read_soname(fake_library("libcuda.so.1"), machine=HERE) == "libcuda.so.1"
    assert read_soname(fake_library("libnvidia-ml.so.1"), machine=HERE) == "libnvidia-ml.so.1"


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_a_shared_object_built_for_the_machine_names_its_soname(
    tmp_path: Path, machine: str
) -> None:
    path = tmp_path / "libnvidia-nvvm.so.555.42.06"
    path.write_bytes(shared_object("libnvidia-nvvm.so.4", machine=machine))
    assert read_soname(path, machine=machine) == "libnvidia-nvvm.so.4"


def test_reads_go_only_where_the_headers_point_and_are_small() -> None:
    data = shared_object("libcuda.so.1") + bytes(1 << 20)  # a big library: its tail is never read
    log: list[tuple[int, int]] = []
    assert soname(_reads(data, log), machine="x86_64") == "libcuda.so.1"
    assert len(log) == 5
    assert sum(size for _, size in log) < 512


def test_a_library_for_another_machine_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "libcuda.so.1"
    path.write_bytes(shared_object("libcuda.so.1", machine="aarch64"))
    with pytest.raises(ElfError, match=f"{path}: built for ELF machine 183, not x86_64"):
        read_soname(path, machine="x86_64")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"#!/bin/sh\necho not a library\n" + bytes(64), "not an ELF file"),
        (shared_object("libcuda.so.1")[:40], "truncated"),
        (shared_object("libcuda.so.1")[:200], "truncated"),
        (shared_object("libcuda.so.1", elf_class=1), "not a 64-bit little-endian ELF file"),
        (shared_object("libcuda.so.1", e_type=2), r"not a shared object \(e_type 2\)"),
        (with_u16(shared_object("libcuda.so.1"), 56, 0xFFFF), "65535 program headers"),
        (with_u16(shared_object("libcuda.so.1"), 54, 32), "of 32 bytes is not plausible"),
        (shared_object("x", dynamic_tags=(DT_STRTAB, DT_NULL)), "no DT_STRSZ, DT_SONAME"),
        (shared_object("x", dynamic_tags=(5, 10, DT_SONAME)), "no DT_NULL end"),
        (shared_object("libcuda.so.1")[:-1], "truncated"),
    ],
    ids=[
        "script",
        "short-header",
        "short-program-headers",
        "elf32",
        "executable",
        "many-program-headers",
        "odd-program-header-size",
        "no-soname",
        "no-end",
        "cut-string-table",
    ],
)
def test_anything_but_a_plain_elf64_shared_object_is_refused_naming_the_file(
    tmp_path: Path, data: bytes, reason: str
) -> None:
    path = tmp_path / "libcuda.so.555.42.06"
    path.write_bytes(data)
    with pytest.raises(ElfError, match=f"^{path}: .*{reason}"):
        read_soname(path, machine="x86_64")


def test_a_soname_with_no_end_is_refused_after_a_bounded_read(tmp_path: Path) -> None:
    path = tmp_path / "libcuda.so.555.42.06"
    path.write_bytes(shared_object("lib" + "x" * 4000)[:-1])
    with pytest.raises(ElfError, match="has no end within 256 bytes"):
        read_soname(path, machine="x86_64")


def test_a_link_or_a_fifo_is_refused_not_followed_or_opened_blocking(tmp_path: Path) -> None:
    real = tmp_path / "libcuda.so.555.42.06"
    real.write_bytes(shared_object("libcuda.so.1"))
    (tmp_path / "libcuda.so.1").symlink_to(real.name)
    with pytest.raises(ElfError, match="cannot open"):
        read_soname(tmp_path / "libcuda.so.1", machine="x86_64")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ElfError, match="not a regular file"):
        read_soname(tmp_path / "fifo", machine="x86_64")
