"""`vgpu-bridge node install-libvgpu`: both files land whole (or not at all), a rerun changes
nothing, running containers keep the copy they mapped, and bad input is refused by name."""

from __future__ import annotations

import _ctypes
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_runner import CliResult, run_cli
from vgpu_bridge.node.library import native_header

REAL_LIBRARY = Path(_ctypes.__file__)  # an ELF shared object of this machine
PRELOAD = b"/usr/local/vgpu/libvgpu.so\n"  # the path CDI mounts libvgpu.so at in containers
SOURCE_FLAG = "--libvgpu-source (VGPU_BRIDGE_LIBVGPU_SOURCE)"
DIR_FLAG = "--vgpu-dir (VGPU_BRIDGE_VGPU_DIR)"


def elf(*, file_type: int = 3, machine: int | None = None, interpreter: bool = False) -> bytes:
    """A 64-bit little-endian ELF header and one program header (PT_INTERP or PT_LOAD)."""
    native = native_header()
    assert native is not None
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = struct.pack(
        "<HHIQQQIHHHHHH", file_type, native.machine if machine is None else machine,
        1, 0, 64, 0, 0, 64, 56, 1, 64, 0, 0,
    )  # fmt: skip
    program = struct.pack("<IIQQQQQQ", 3 if interpreter else 1, 5, 0, 0, 0, 0, 0, 4096)
    return ident + header + program


def install(vgpu_dir: Path, source: Path) -> CliResult:
    args = ["--vgpu-dir", str(vgpu_dir), "--libvgpu-source", str(source)]
    return run_cli(["node", "install-libvgpu", *args])


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_it_installs_the_library_and_the_preload_file_with_their_modes(tmp_path: Path) -> None:
    vgpu = tmp_path / "vgpu"
    done = install(vgpu, REAL_LIBRARY)
    assert (done.code, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [
        f"{vgpu}/libvgpu.so: written",
        f"{vgpu}/ld.so.preload: written",
    ]
    assert (vgpu / "libvgpu.so").read_bytes() == REAL_LIBRARY.read_bytes()
    assert (vgpu / "ld.so.preload").read_bytes() == PRELOAD
    assert (vgpu / "libvgpu.so").stat().st_mode & 0o777 == 0o755
    assert (vgpu / "ld.so.preload").stat().st_mode & 0o777 == 0o644
    assert listing(vgpu) == ["claims", "ld.so.preload", "libvgpu.so"]


def test_a_rerun_changes_nothing(tmp_path: Path) -> None:
    install(tmp_path, REAL_LIBRARY)
    inodes = {name: (tmp_path / name).stat().st_ino for name in ("libvgpu.so", "ld.so.preload")}
    again = install(tmp_path, REAL_LIBRARY)
    assert again.code == 0
    assert again.stdout.splitlines() == [
        f"{tmp_path}/libvgpu.so: unchanged", f"{tmp_path}/ld.so.preload: unchanged"
    ]  # fmt: skip
    assert {name: (tmp_path / name).stat().st_ino for name in inodes} == inodes


def test_a_wrong_mode_is_put_right(tmp_path: Path) -> None:
    install(tmp_path, REAL_LIBRARY)
    (tmp_path / "libvgpu.so").chmod(0o600)
    assert f"{tmp_path}/libvgpu.so: written" in install(tmp_path, REAL_LIBRARY).stdout
    assert (tmp_path / "libvgpu.so").stat().st_mode & 0o777 == 0o755


def test_a_new_library_is_renamed_in_and_the_old_copy_stays_readable(tmp_path: Path) -> None:
    old = tmp_path / "old.so"
    old.write_bytes(elf() + b"old")
    vgpu = tmp_path / "vgpu"
    install(vgpu, old)
    with (vgpu / "libvgpu.so").open("rb") as mapped:  # as a running container holds it
        assert install(vgpu, REAL_LIBRARY).code == 0
        assert mapped.read() == old.read_bytes()
    assert (vgpu / "libvgpu.so").read_bytes() == REAL_LIBRARY.read_bytes()
    assert listing(vgpu) == ["claims", "ld.so.preload", "libvgpu.so"]


BAD_SOURCES = [
    pytest.param(None, "No such file or directory", id="missing"),
    pytest.param(b"#!/bin/sh\n", "not an ELF file", id="a-script"),
    pytest.param(elf()[:40], "not an ELF file", id="truncated"),
    pytest.param(elf(file_type=2), "not an ELF shared object (ELF type 2", id="an-executable"),
    pytest.param(elf(interpreter=True), "names a program interpreter", id="a-pie-executable"),
    pytest.param(elf(machine=0x1234), "built for another machine", id="another-machine"),
]  # fmt: skip


@pytest.mark.parametrize(("content", "reason"), BAD_SOURCES)
def test_a_bad_source_is_refused_by_name_and_nothing_is_written(
    tmp_path: Path, content: bytes | None, reason: str
) -> None:
    source = tmp_path / "libvgpu.so"
    if content is not None:
        source.write_bytes(content)
    vgpu = tmp_path / "vgpu"
    refused = install(vgpu, source)
    assert refused.code == 1
    assert refused.stderr.startswith(f"vgpu-bridge node install-libvgpu: {SOURCE_FLAG}: {source}: ")
    assert reason in refused.stderr
    assert refused.stdout == ""
    assert not vgpu.exists()


def test_a_vgpu_dir_under_a_file_is_refused_by_name(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    refused = install(blocker / "vgpu", REAL_LIBRARY)
    assert refused.code == 1
    assert refused.stderr.strip().endswith(f"{DIR_FLAG}: {blocker}/vgpu: Not a directory")


def test_a_failed_rename_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    (tmp_path / "ld.so.preload").mkdir()  # in the way: the rename onto it fails
    refused = install(tmp_path, REAL_LIBRARY)
    assert refused.code == 1
    assert f"{DIR_FLAG}: cannot write {tmp_path}/ld.so.preload: Is a directory" in refused.stderr
    assert listing(tmp_path) == ["claims", "ld.so.preload", "libvgpu.so"]  # libvgpu.so went first
    assert (tmp_path / "ld.so.preload").is_dir()


def test_a_write_cut_short_by_a_full_disk_leaves_the_old_install_whole(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes write(2) fail with EFBIG past 64 KiB, as a full disk fails it."""
    old = tmp_path / "old.so"
    old.write_bytes(elf() + b"old")
    vgpu = tmp_path / "vgpu"
    install(vgpu, old)
    before = {name: (vgpu / name).read_bytes() for name in ("libvgpu.so", "ld.so.preload")}
    assert REAL_LIBRARY.stat().st_size > 64 * 1024

    # The limit is set by the child itself: a preexec_fn runs in a fork of this test process,
    # whose gRPC threads (other tests loaded it) can abort that fork before it execs.
    limited = (
        "import resource, runpy, sys; "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024)); "
        "sys.argv = ['vgpu-bridge', *sys.argv[1:]]; "
        "runpy.run_module('vgpu_bridge.cli', run_name='__main__')"
    )
    command = [sys.executable, "-c", limited, "node", "install-libvgpu"]
    args = ["--vgpu-dir", str(vgpu), "--libvgpu-source", str(REAL_LIBRARY)]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("VGPU_BRIDGE_")}
    done = subprocess.run(
        [*command, *args], capture_output=True, text=True, env=environ, check=False
    )
    assert done.returncode == 1, done.stderr
    assert f"{DIR_FLAG}: cannot write {vgpu}/libvgpu.so: File too large" in done.stderr
    assert "Traceback" not in done.stderr
    assert {name: (vgpu / name).read_bytes() for name in before} == before
    assert listing(vgpu) == ["claims", "ld.so.preload", "libvgpu.so"]


def test_settings_come_from_env_vars_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VGPU_BRIDGE_VGPU_DIR", str(tmp_path))
    monkeypatch.setenv("VGPU_BRIDGE_LIBVGPU_SOURCE", str(REAL_LIBRARY))
    assert run_cli(["node", "install-libvgpu"]).code == 0
    assert (tmp_path / "ld.so.preload").read_bytes() == PRELOAD


def test_a_read_only_vgpu_dir_is_refused_by_name(tmp_path: Path) -> None:
    vgpu = tmp_path / "vgpu"
    (vgpu / "claims").mkdir(parents=True)
    if os.geteuid() == 0:  # root writes through modes: make the file system read-only instead
        mount = ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(vgpu)]
        if subprocess.run(mount, capture_output=True, check=False).returncode:
            pytest.skip("root, and cannot mount a read-only tmpfs here")
        reason = "Read-only file system"
    else:
        vgpu.chmod(0o555)
        reason = "Permission denied"
    try:
        refused = install(vgpu, REAL_LIBRARY)
    finally:
        subprocess.run(["umount", str(vgpu)], capture_output=True, check=False)
        vgpu.chmod(0o755)
    assert refused.code == 1
    assert DIR_FLAG in refused.stderr
    assert reason in refused.stderr
    assert not (vgpu / "libvgpu.so").exists()
