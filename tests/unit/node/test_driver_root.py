"""The driver's files under a driver root: found as the toolkit finds them, odd ones refused."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from tests.unit.node.claims import BY_NAME
from tests.unit.node.driver_install import VERSION, install_driver
from tests.unit.node.elf_files import shared_object
from tests.unit.node.fake_driver import fake_library
from vgpu_bridge.node.driver_root import (
    DriverLibrary,
    DriverRootError,
    discover,
    driver_version,
)

LIB = "usr/lib/x86_64-linux-gnu"


def test_a_host_install_is_found_by_the_version_nvml_reports(tmp_path: Path) -> None:
    install_driver(tmp_path)
    stack = discover(root=tmp_path, mount=tmp_path, version=VERSION, machine="x86_64")
    assert stack.libraries == (
        DriverLibrary(f"{LIB}/libcuda.so.{VERSION}", "libcuda.so.1", "libcuda"),
        DriverLibrary(f"{LIB}/libnvidia-ptxjitcompiler.so.{VERSION}",
                      "libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler"),
        DriverLibrary(f"{LIB}/libnvidia-nvvm.so.{VERSION}", "libnvidia-nvvm.so.4",
                      "libnvidia-nvvm"),
        DriverLibrary(f"{LIB}/libnvidia-ml.so.{VERSION}", "libnvidia-ml.so.1", "libnvidia-ml"),
        DriverLibrary(f"{LIB}/libnvcuvid.so.{VERSION}", "libnvcuvid.so.1", "libnvcuvid"),
    )  # fmt: skip
    assert stack.binaries == ("usr/bin/nvidia-smi", "usr/bin/nvidia-debugdump")
    assert (stack.root, stack.version, stack.triplet) == (tmp_path, VERSION, "x86_64-linux-gnu")
    assert not stack.devices_in_root


def test_the_host_root_slash_takes_device_nodes_from_dev_as_ever(tmp_path: Path) -> None:
    """`/` as the root: its dev/nvidiactl is the host's own; the spec stays as without a root."""
    install_driver(tmp_path, device_nodes=True)
    stack = discover(root=Path("/"), mount=tmp_path, version=VERSION, machine="x86_64")
    assert not stack.devices_in_root
    assert stack.device_node("/dev/nvidia0") == {"path": "/dev/nvidia0"}
    assert stack.host_path(stack.libraries[0].path) == f"/{LIB}/libcuda.so.{VERSION}"


def test_an_operator_driver_root_seen_elsewhere_writes_host_paths_under_the_root(
    tmp_path: Path,
) -> None:
    """GPU Operator's driver container: /run/nvidia/driver on the host, /driver-root here."""
    mount = tmp_path / "driver-root"
    install_driver(mount, library_dir="usr/lib64", device_nodes=True)
    root = Path("/run/nvidia/driver")
    stack = discover(root=root, mount=mount, version=VERSION, machine="x86_64")
    assert stack.host_path(stack.libraries[0].path) == (
        f"/run/nvidia/driver/usr/lib64/libcuda.so.{VERSION}"
    )
    assert stack.host_path(stack.binaries[0]) == "/run/nvidia/driver/usr/bin/nvidia-smi"
    assert stack.devices_in_root
    assert stack.device_node("/dev/nvidia0") == {
        "path": "/dev/nvidia0",
        "hostPath": "/run/nvidia/driver/dev/nvidia0",
    }


def test_aarch64_looks_in_its_own_triplet_dir(tmp_path: Path) -> None:
    install_driver(tmp_path, library_dir="usr/lib/aarch64-linux-gnu", machine="aarch64")
    install_driver(tmp_path, library_dir="usr/lib/x86_64-linux-gnu", binaries=())  # not this one
    stack = discover(root=Path("/"), mount=tmp_path, version=VERSION, machine="aarch64")
    assert stack.triplet == "aarch64-linux-gnu"
    assert stack.libraries[0].path == f"usr/lib/aarch64-linux-gnu/libcuda.so.{VERSION}"
    assert stack.container_library_dirs == ("/usr/lib/aarch64-linux-gnu", "/usr/lib64")


def test_the_first_dir_holding_libcuda_at_the_version_wins(tmp_path: Path) -> None:
    install_driver(tmp_path, library_dir=LIB, version="550.1.1", binaries=())  # an old driver
    install_driver(tmp_path, library_dir="lib64", binaries=("bin/nvidia-smi",))
    stack = discover(root=tmp_path, mount=tmp_path, version=VERSION, machine="x86_64")
    assert stack.libraries[0].path == f"lib64/libcuda.so.{VERSION}"
    assert stack.binaries == ("bin/nvidia-smi",)


def test_a_linked_library_dir_is_passed_over_for_the_real_one(tmp_path: Path) -> None:
    """Merged-/usr hosts link lib64 -> usr/lib64: the files are found in usr/lib64."""
    install_driver(tmp_path, library_dir="usr/lib64")
    (tmp_path / "lib64").symlink_to("usr/lib64")
    (tmp_path / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (tmp_path / "usr/lib/x86_64-linux-gnu/libcuda.so.1").symlink_to("/usr/lib64/libcuda.so.1")
    stack = discover(root=tmp_path, mount=tmp_path, version=VERSION, machine="x86_64")
    assert {library.path.rsplit("/", 1)[0] for library in stack.libraries} == {"usr/lib64"}


def test_without_libcuda_at_the_version_the_error_names_the_root_version_and_dirs(
    tmp_path: Path,
) -> None:
    install_driver(tmp_path / "mnt", version="550.54.15")
    with pytest.raises(DriverRootError) as raised:
        discover(root=Path("/run/nvidia/driver"), mount=tmp_path / "mnt", version=VERSION,
                 machine="x86_64")  # fmt: skip
    message = str(raised.value)
    assert f"driver root /run/nvidia/driver (seen at {tmp_path / 'mnt'})" in message
    assert f"no libcuda.so.{VERSION} (driver version {VERSION})" in message
    assert (
        "in any of usr/lib/x86_64-linux-gnu, usr/lib64, lib/x86_64-linux-gnu, lib64, usr/lib, lib"
        in message
    )


@pytest.mark.parametrize("name", ["libcuda", "libnvidia-ml"])
def test_a_link_at_a_versioned_name_is_refused_not_followed(tmp_path: Path, name: str) -> None:
    libraries = install_driver(tmp_path)
    versioned = libraries / f"{name}.so.{VERSION}"
    versioned.rename(libraries / "elsewhere")
    versioned.symlink_to("elsewhere")
    with pytest.raises(DriverRootError, match=f"{versioned} is a link; the driver installs a"):
        discover(root=tmp_path, mount=tmp_path, version=VERSION, machine="x86_64")


def test_a_fifo_at_a_binarys_name_is_passed_over_with_its_reason(tmp_path: Path) -> None:
    install_driver(tmp_path, binaries=())
    (tmp_path / "usr/bin").mkdir()
    os.mkfifo(tmp_path / "usr/bin/nvidia-smi")
    stack = discover(root=tmp_path, mount=tmp_path, version=VERSION, machine="x86_64")
    assert stack.binaries == ()
    [reason] = stack.passed_over
    assert "nvidia-smi is not a regular file" in reason


def test_an_odd_optional_library_is_passed_over_and_the_rest_is_given(tmp_path: Path) -> None:
    """A link or a foreign object at an optional library's name (OpenCL, say) must not keep the
    agent, and every CUDA pod of the node, from starting: only libcuda and NVML are required."""
    libraries = install_driver(tmp_path)
    (libraries / "elsewhere").write_bytes(b"")
    (libraries / f"libnvidia-opencl.so.{VERSION}").symlink_to("elsewhere")
    (libraries / f"libnvidia-ptxjitcompiler.so.{VERSION}").write_bytes(b"INPUT(-lcuda)\n")
    stack = discover(root=tmp_path, mount=tmp_path, version=VERSION, machine="x86_64")
    names = {library.name for library in stack.libraries}
    assert {"libcuda", "libnvidia-ml"} <= names
    assert not names & {"libnvidia-opencl", "libnvidia-ptxjitcompiler"}
    assert len(stack.passed_over) == 2
    assert any("libnvidia-opencl" in reason and "a link" in reason for reason in stack.passed_over)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"INPUT(-lcuda)\n", "not an ELF file"),
        (shared_object("libcuda.so.1")[:100], "truncated"),
        (shared_object("libcuda.so.1", machine="aarch64"), "built for ELF machine 183"),
        (shared_object("libc.so.6"), "SONAME 'libc.so.6' is not libcuda.so"),
        (shared_object("libcuda.so.1/../../etc"), "SONAME 'libcuda.so.1/../../etc' is not"),
    ],
    ids=["linker-script", "truncated", "other-machine", "foreign-soname", "path-in-soname"],
)
def test_a_library_that_is_not_a_plain_shared_object_of_its_name_is_refused(
    tmp_path: Path, data: bytes, reason: str
) -> None:
    libraries = install_driver(tmp_path)
    (libraries / f"libcuda.so.{VERSION}").write_bytes(data)
    with pytest.raises(DriverRootError, match=f"libcuda.so.{VERSION}: .*{reason}"):
        discover(root=tmp_path, mount=tmp_path, version=VERSION, machine="x86_64")


def test_the_fake_driver_built_by_make_reads_as_a_driver_install(tmp_path: Path) -> None:
    """Real linker output at the versioned names (what the real-node tier lays out)."""
    libraries = tmp_path / LIB
    libraries.mkdir(parents=True)
    for soname in ("libcuda.so.1", "libnvidia-ml.so.1"):
        name = soname.removesuffix(".so.1")
        (libraries / f"{name}.so.{VERSION}").write_bytes(fake_library(soname).read_bytes())
    stack = discover(root=Path("/"), mount=tmp_path, version=VERSION, machine=os.uname().machine)
    assert [library.soname for library in stack.libraries] == ["libcuda.so.1", "libnvidia-ml.so.1"]
    assert stack.binaries == ()


def test_an_unknown_machine_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DriverRootError, match="machine 'ppc64le'"):
        discover(root=tmp_path, mount=tmp_path, version=VERSION, machine="ppc64le")


def test_the_driver_version_is_the_one_every_gpu_reports() -> None:
    gpus = [replace(gpu, driver_version=VERSION) for gpu in BY_NAME.values()]
    assert driver_version(gpus) == VERSION
    with pytest.raises(DriverRootError, match=r"reports no driver version.*set driverVersion"):
        driver_version([*gpus, replace(gpus[0], uuid="GPU-x", driver_version=None)])
    with pytest.raises(DriverRootError, match="2 driver versions"):
        driver_version([*gpus, replace(gpus[0], driver_version="550.1.1")])
    with pytest.raises(DriverRootError, match=r"'\.\./\.\./x' is not like"):
        driver_version([replace(gpus[0], driver_version="../../x")])
