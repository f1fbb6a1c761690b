"""The stand-in driver install and the directories the tier makes outside its own (issue 36)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from e2e.realnode.driver_root import (
    DRIVER_VERSION,
    LIBRARY_DIR,
    MARKER,
    DriverRootFlags,
    DriverRootInUse,
    claim_directory,
    install,
    release_directories,
)
from e2e.realnode.host import Layout
from e2e.realnode.node import down


def _file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_install_lays_the_driver_out_as_the_installer_does(tmp_path: Path) -> None:
    cuda = _file(tmp_path / "fake-cuda", "cuda")
    nvml = _file(tmp_path / "fake-nvml", "nvml")
    smi = _file(tmp_path / "fake-smi", "smi")
    top = tmp_path / "root"
    libraries = install(
        top,
        libraries={"libcuda.so.1": cuda, "libnvidia-ml.so.1": nvml},
        binaries={"nvidia-smi": smi},
    )
    assert libraries == top / LIBRARY_DIR
    for soname, content in (("libcuda.so.1", "cuda"), ("libnvidia-ml.so.1", "nvml")):
        versioned = libraries / f"{soname[: -len('.1')]}.{DRIVER_VERSION}"
        assert stat.S_ISREG(versioned.lstat().st_mode)  # the version's file is a regular file
        assert versioned.read_text() == content
        assert os.readlink(libraries / soname) == versioned.name
    assert os.readlink(libraries / "libcuda.so") == "libcuda.so.1"
    assert (top / "usr/bin/nvidia-smi").read_text() == "smi"
    assert os.access(top / "usr/bin/nvidia-smi", os.X_OK)


def test_install_again_replaces_the_links(tmp_path: Path) -> None:
    cuda = _file(tmp_path / "fake-cuda", "cuda")
    for _ in range(2):
        install(tmp_path / "root", libraries={"libcuda.so.1": cuda}, binaries={})
    assert (tmp_path / "root" / LIBRARY_DIR / "libcuda.so.1").read_text() == "cuda"


def test_a_claimed_directory_and_its_missing_parents_are_removed_again(tmp_path: Path) -> None:
    existing = tmp_path / "run"
    existing.mkdir()
    target = existing / "nvidia" / "driver"
    record = tmp_path / "state" / "created.json"
    claim_directory(target, record=record)
    assert (target / MARKER).is_file()
    assert json.loads(record.read_text()) == [str(existing / "nvidia"), str(target)]
    (target / "usr").mkdir()  # what the stand-in puts there
    assert release_directories(record) == []
    assert not (existing / "nvidia").exists()
    assert existing.is_dir()  # not ours: kept
    assert not record.exists()


@pytest.mark.parametrize("kind", ["directory", "file", "symlink"])
def test_a_path_that_is_not_ours_is_refused_and_left_alone(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "driver"
    if kind == "directory":
        target.mkdir()
        _file(target / "libcuda.so.1", "a real driver")
    elif kind == "file":
        _file(target, "x")
    else:
        target.symlink_to(tmp_path)
    record = tmp_path / "created.json"
    with pytest.raises(DriverRootInUse, match="is not this tier's"):
        claim_directory(target, record=record)
    assert not record.exists()
    assert release_directories(record) == []
    assert target.exists()
    if kind == "directory":
        assert (target / "libcuda.so.1").read_text() == "a real driver"


def test_a_crashed_runs_directory_is_taken_as_it_is(tmp_path: Path) -> None:
    target = tmp_path / "driver"
    record = tmp_path / "created.json"
    claim_directory(target, record=record)
    claim_directory(target, record=record)  # a second start before any down
    assert json.loads(record.read_text()) == [str(target)]
    release_directories(record)
    assert not target.exists()


def test_a_parent_made_by_the_tier_that_now_holds_other_files_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "nvidia" / "driver"
    record = tmp_path / "created.json"
    claim_directory(target, record=record)
    _file(tmp_path / "nvidia" / "toolkit.sock", "someone else's")
    assert release_directories(record) == []
    assert not target.exists()
    assert (tmp_path / "nvidia" / "toolkit.sock").is_file()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_nothing_is_removed_through_a_mount(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    _file(outside / "precious", "keep")
    target = tmp_path / "driver"
    record = tmp_path / "created.json"
    claim_directory(target, record=record)
    (target / "mnt").mkdir()
    subprocess.run(["mount", "--bind", str(outside), str(target / "mnt")], check=True)
    try:
        notes = release_directories(record)
    finally:
        subprocess.run(["umount", str(target / "mnt")], check=True)
    assert notes == [f"{target} kept: mounts below it"]
    assert (outside / "precious").read_text() == "keep"
    assert record.exists()  # the next down tries again
    assert release_directories(record) == []
    assert not target.exists()


def test_flags_name_the_mount_only_when_the_agent_sees_the_root_elsewhere() -> None:
    assert DriverRootFlags(Path("/d")).args() == ["--driver-root", "/d"]
    assert DriverRootFlags(Path("/run/nvidia/driver"), Path("/m")).args() == [
        "--driver-root",
        "/run/nvidia/driver",
        "--driver-root-mount",
        "/m",
    ]


def test_down_removes_the_operator_driver_root_the_tier_made(tmp_path: Path) -> None:
    """``down`` (also from a fresh process after a crash) puts back /run/nvidia/driver."""
    layout = Layout(
        root=tmp_path / "state",
        run=tmp_path / "run",
        cgroup_name="vgpu-realnode-test-no-such-cgroup",
        operator_driver_root=tmp_path / "run-nvidia" / "driver",
    )
    claim_directory(layout.operator_driver_root, record=layout.created_dirs)
    (layout.operator_driver_root / "usr").mkdir()
    result = down(layout, tmp_path / "bin", client=None)
    assert result.clean, result.lines()
    assert not (tmp_path / "run-nvidia").exists()
    assert not layout.root.exists()
