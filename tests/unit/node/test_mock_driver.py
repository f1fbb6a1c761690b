"""The stand-in driver (`--mock-driver`): native/vgpu's fake libcuda and NVML, laid out as a
driver install, copied to the host's vgpu dir (regular files only, atomically, nothing rewritten
when unchanged) and found there as a driver root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.node.mock_driver_files import LIBS, VERSION, built_mock_driver, lay_out_mock_driver
from vgpu_bridge.node.driver_root import discover
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.mock_cards import parse_label
from vgpu_bridge.node.mock_driver import (
    MAX_FILES,
    MockDriverError,
    for_mock_driver,
    install,
    mock_driver_dir,
)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return lay_out_mock_driver(tmp_path / "image" / "mock-driver")


def test_the_copy_holds_the_images_files_and_names_the_driver_version(
    source: Path, tmp_path: Path
) -> None:
    copy = install(source, tmp_path / "vgpu")
    assert copy.root == tmp_path / "vgpu" / "mock-driver" == mock_driver_dir(tmp_path / "vgpu")
    assert copy.version == VERSION
    assert copy.written == (f"{LIBS}/libcuda.so.{VERSION}", f"{LIBS}/libnvidia-ml.so.{VERSION}")
    for relative in copy.written:
        assert (copy.root / relative).read_bytes() == (source / relative).read_bytes()
        assert (copy.root / relative).stat().st_mode & 0o777 == 0o755


def test_a_restart_rewrites_nothing_so_running_containers_keep_their_files(
    source: Path, tmp_path: Path
) -> None:
    first = install(source, tmp_path / "vgpu")
    inodes = [os.stat(first.root / relative).st_ino for relative in first.written]
    again = install(source, tmp_path / "vgpu")
    assert again.written == ()
    assert again.unchanged == first.written
    assert [os.stat(again.root / relative).st_ino for relative in first.written] == inodes


def test_a_changed_file_is_replaced_by_rename_and_an_open_copy_keeps_the_old_bytes(
    source: Path, tmp_path: Path
) -> None:
    first = install(source, tmp_path / "vgpu")
    nvml = f"{LIBS}/libnvidia-ml.so.{VERSION}"
    old = (first.root / nvml).read_bytes()
    with (first.root / nvml).open("rb") as mapped:  # a running container's view
        (source / nvml).write_bytes(old + b"\0new build")
        again = install(source, tmp_path / "vgpu")
        assert again.written == (nvml,)
        assert mapped.read() == old
    assert (again.root / nvml).read_bytes() == old + b"\0new build"
    assert [p.name for p in (again.root / LIBS).iterdir() if p.name.startswith(".")] == []


def test_a_link_in_the_images_dir_is_refused_and_never_followed(
    source: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("not for containers")
    (source / LIBS / "libnvidia-cfg.so.1").symlink_to(secret)
    with pytest.raises(MockDriverError, match=r"libnvidia-cfg.so.1 is a link: only regular"):
        install(source, tmp_path / "vgpu")
    assert not (tmp_path / "vgpu" / "mock-driver" / LIBS / "libnvidia-cfg.so.1").exists()


def test_a_fifo_in_the_images_dir_is_refused(source: Path, tmp_path: Path) -> None:
    os.mkfifo(source / LIBS / "pipe")
    with pytest.raises(MockDriverError, match="pipe is not a regular file"):
        install(source, tmp_path / "vgpu")


def test_a_link_in_the_way_on_the_host_is_refused_never_followed(
    source: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "vgpu").mkdir()
    (tmp_path / "vgpu" / "mock-driver").symlink_to(elsewhere)
    with pytest.raises(MockDriverError, match="mock-driver on the host is a link, not a dir"):
        install(source, tmp_path / "vgpu")
    assert list(elsewhere.iterdir()) == []


def test_a_dir_in_a_files_place_on_the_host_is_refused_with_the_reason(
    source: Path, tmp_path: Path
) -> None:
    first = sorted(p for p in source.rglob("*") if p.is_file())[0]
    in_the_way = mock_driver_dir(tmp_path / "vgpu") / first.relative_to(source)
    in_the_way.mkdir(parents=True)
    with pytest.raises(MockDriverError, match=f"cannot write {in_the_way}: Is a directory"):
        install(source, tmp_path / "vgpu")
    assert in_the_way.is_dir()


def test_a_link_planted_at_a_files_place_on_the_host_is_replaced_not_written_through(
    source: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "host-file"
    victim.write_text("host")
    libraries = tmp_path / "vgpu" / "mock-driver" / LIBS
    libraries.mkdir(parents=True)
    (libraries / f"libcuda.so.{VERSION}").symlink_to(victim)
    install(source, tmp_path / "vgpu")
    assert victim.read_text() == "host"
    assert not (libraries / f"libcuda.so.{VERSION}").is_symlink()


@pytest.mark.parametrize(
    ("versions", "found"),
    [((), "found none"), (("570.124.06", "575.51.03"), "found ['570.124.06', '575.51.03']")],
    ids=["none", "two"],
)
def test_the_dir_must_hold_one_libcuda_version(
    versions: tuple[str, ...], found: str, tmp_path: Path
) -> None:
    source = tmp_path / "mock-driver"
    (source / LIBS).mkdir(parents=True)
    for version in versions:
        (source / LIBS / f"libcuda.so.{version}").write_bytes(b"\x7fELF")
    with pytest.raises(MockDriverError) as refused:
        install(source, tmp_path / "vgpu")
    assert str(refused.value).endswith(
        f"expected one libcuda.so.<version> (the driver version), {found}"
    )


def test_a_tree_of_too_many_files_is_refused(source: Path, tmp_path: Path) -> None:
    for index in range(MAX_FILES):
        (source / f"extra-{index}").write_text("x")
    with pytest.raises(MockDriverError, match=f"more than {MAX_FILES} files"):
        install(source, tmp_path / "vgpu")


def test_a_file_over_the_size_bound_is_refused_and_nothing_is_copied(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("vgpu_bridge.node.mock_driver.MAX_FILE_BYTES", 64)
    big = next(path for path in source.rglob("libcuda.so.*") if path.is_file())
    big.write_bytes(b"x" * 65)
    with pytest.raises(MockDriverError, match=f"mock driver: {big}: too big \\(over 64 bytes\\)"):
        install(source, tmp_path / "vgpu")
    assert not any((tmp_path / "vgpu").rglob("libcuda*"))


def test_the_copy_is_found_as_a_driver_root_with_the_fakes_sonames(
    source: Path, tmp_path: Path
) -> None:
    copy = install(source, tmp_path / "vgpu")
    found = discover(root=copy.root, mount=copy.root, version=copy.version, machine="x86_64")
    assert found.root == copy.root
    assert {(lib.name, lib.soname) for lib in found.libraries} == {
        ("libcuda", "libcuda.so.1"),
        ("libnvidia-ml", "libnvidia-ml.so.1"),
    }
    assert not found.devices_in_root


def test_the_mock_cards_take_the_mock_drivers_version() -> None:
    gpus = for_mock_driver(parse_label("2xh100-80gb", node="n", label="l"), VERSION)
    assert {gpu.driver_version for gpu in gpus} == {VERSION}
    assert {gpu.sm_count for gpu in gpus} == {132}


def test_mock_cards_with_uuids_the_fake_cannot_present_are_refused() -> None:
    gpus = (Gpu(index=0, uuid="GPU-0", product_name="X", memory=2**30),)
    with pytest.raises(MockDriverError, match="GPU-0: the mock driver presents cards by UUIDs"):
        for_mock_driver(gpus, VERSION)


def test_mock_cards_of_another_driver_version_are_refused() -> None:
    uuid = "GPU-e2e00000-c1d0-4000-8000-000000000000"
    gpus = (Gpu(index=0, uuid=uuid, product_name="X", memory=2**30, driver_version="555.42.06"),)
    with pytest.raises(MockDriverError, match=f"{uuid} name another driver version"):
        for_mock_driver(gpus, VERSION)


def test_the_layout_native_vgpu_builds_for_the_image_is_taken_as_it_is(tmp_path: Path) -> None:
    copy = install(built_mock_driver(), tmp_path / "vgpu")
    assert copy.version == VERSION
    found = discover(root=copy.root, mount=copy.root, version=copy.version, machine="x86_64")
    assert sorted(lib.soname for lib in found.libraries) == ["libcuda.so.1", "libnvidia-ml.so.1"]
