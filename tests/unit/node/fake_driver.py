"""native/vgpu's fake driver libraries, built with its Makefile: real ELF files with the driver's
SONAMEs (`libcuda.so.1`, `libnvidia-ml.so.1`), for the tests that read or load them."""

from __future__ import annotations

import subprocess
from pathlib import Path

NATIVE = Path(__file__).resolve().parents[3] / "native" / "vgpu"


def fake_library(soname: str) -> Path:
    """The fake driver library `soname` (`libcuda.so.1` or `libnvidia-ml.so.1`), built if needed."""
    target = f"build/fake/{soname}"
    subprocess.run(["make", "-s", "-C", str(NATIVE), target], check=True)
    return NATIVE / target
