"""The stand-in driver laid out as the agent image has it (`/opt/vgpu-bridge/mock-driver`):
native/vgpu's fake libcuda and NVML as versioned regular files in the library dir, for the
tests of `--mock-driver`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.unit.node.fake_driver import NATIVE, fake_library

VERSION = "570.124.06"  # what the fake NVML reports by default
LIBS = "usr/lib/x86_64-linux-gnu"


def lay_out_mock_driver(directory: Path, *, version: str = VERSION) -> Path:
    """The fake's two libraries under `directory` as a driver install (regular files)."""
    libraries = directory / LIBS
    libraries.mkdir(parents=True)
    for name, soname in (("libcuda", "libcuda.so.1"), ("libnvidia-ml", "libnvidia-ml.so.1")):
        shutil.copyfile(fake_library(soname), libraries / f"{name}.so.{version}")
        (libraries / f"{name}.so.{version}").chmod(0o755)
    return directory


def built_mock_driver() -> Path:
    """native/vgpu's own layout (`make mock-driver`), the dir the agent image ships."""
    subprocess.run(["make", "-s", "-C", str(NATIVE), "mock-driver"], check=True)
    return NATIVE / "build" / "mock-driver"
