"""The check `make images` runs in the agent image on its stand-in driver for mock cards
(images/check.py's MOCK_DRIVER_CHECK), run here on a root of our own holding native/vgpu's
`make mock-driver` layout: it passes on that layout and names what is wrong with a broken one."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from images import build, check
from tests.native_workload import NATIVE

Problems = Callable[[str, int], list[str]]
LAYOUT = NATIVE / "build" / "mock-driver"


@pytest.fixture(scope="module")
def problems() -> Problems:
    namespace: dict[str, object] = {}
    exec(check.MOCK_DRIVER_CHECK, namespace)  # our own constant, as the image runs it
    found = namespace["mock_driver_problems"]
    assert callable(found)
    return found


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An image root with the layout at the agent image's path."""
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("needs make and a C compiler to build native/vgpu")
    subprocess.run(["make", "-s", "-C", str(NATIVE), "mock-driver"], check=True)
    shutil.copytree(LAYOUT, tmp_path / check.MOCK_DRIVER, symlinks=True)
    return tmp_path


def _library_dir(root: Path) -> Path:
    (found,) = (root / check.MOCK_DRIVER / "usr" / "lib").iterdir()
    return found


def _machine() -> int:
    (arch,) = [a for a in build.ARCHES.values() if a.qemu is None]  # this machine's
    return arch.elf_machine


def test_the_built_layout_passes(problems: Problems, root: Path) -> None:
    assert problems(str(root), _machine()) == []


def test_a_layout_of_another_architecture_is_named(problems: Problems, root: Path) -> None:
    (other,) = [a for a in build.ARCHES.values() if a.qemu is not None]
    (found,) = problems(str(root), other.elf_machine)
    assert "libcuda.so" in found


def test_a_missing_stand_in_driver_is_named(problems: Problems, tmp_path: Path) -> None:
    (found,) = problems(str(tmp_path), _machine())
    assert "0 files usr/lib/<triplet>/libcuda.so.<version>, not 1" in found


def test_a_library_that_is_a_link_is_named(problems: Problems, root: Path) -> None:
    libs = _library_dir(root)
    (nvml,) = libs.glob("libnvidia-ml.so.*")
    nvml.unlink()
    nvml.symlink_to(next(libs.glob("libcuda.so.*")).name)
    (found,) = problems(str(root), _machine())
    assert "libnvidia-ml" in found
