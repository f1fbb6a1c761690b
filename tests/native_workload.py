"""A CUDA workload for the tests that run libvgpu for real: native/vgpu's library and fake
driver built with its Makefile, and a C program (the test's own source) linked against the fake
libcuda.so.1, so that the real code path runs under LD_PRELOAD without a GPU."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[1] / "native" / "vgpu"
#: The driver API a workload calls, declared as the fake libcuda.so.1 exports it (no CUDA headers).
CUDA_DECLARATIONS = """\
#include <stdio.h>
#include <stdlib.h>
typedef int CUresult; typedef int CUdevice; typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned int); CUresult cuDeviceGet(CUdevice *, int);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
"""
LIBRARY_AND_FAKE_DRIVER = (
    "build/libvgpu.so",
    "build/fake/libcuda.so.1",
    "build/fake/libnvidia-ml.so.1",
)


def build_workload(directory: Path, source: str, *, also: Sequence[str] = ()) -> Path:
    """Build libvgpu, the fake driver and `also` (Makefile targets), then `source` into
    `directory`; the workload binary. Skips without make or a C compiler."""
    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("needs make and a C compiler to build native/vgpu")
    subprocess.run(["make", "-s", "-C", str(NATIVE), *LIBRARY_AND_FAKE_DRIVER, *also], check=True)
    (directory / "workload.c").write_text(source)
    binary = directory / "workload"
    subprocess.run(
        ["cc", str(directory / "workload.c"), "-o", str(binary),
         f"-L{NATIVE / 'build' / 'fake'}", "-l:libcuda.so.1"],
        check=True,
    )  # fmt: skip
    return binary
