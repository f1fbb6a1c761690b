"""A shared-GPU workload for the Prometheus e2e test: a CUDA program under libvgpu.so over the
fake driver (native/vgpu), given the environment the agent's CDI spec gives its container (as a
runtime would, the shared-region mount becomes its host path). It allocates the sizes it is given
(printing each CUDA result, so an allocation past the share is a refusal libvgpu counts), then
launches kernels until its stdin closes, so libvgpu measures and publishes its SM utilisation."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vgpu_bridge.node.cdi import CONTAINER_PRIORITY_DIR, CONTAINER_SHARED_DIR, CdiLayout

NATIVE = Path(__file__).resolve().parents[2] / "native" / "vgpu"
BUILT = ("build/libvgpu.so", "build/fake/libcuda.so.1", "build/fake/libnvidia-ml.so.1")
SOURCE = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
typedef int CUresult; typedef int CUdevice; typedef void *CUcontext; typedef void *CUmodule;
typedef void *CUfunction; typedef void *CUstream; typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned int); CUresult cuDeviceGet(CUdevice *, int);
CUresult cuCtxCreate_v2(CUcontext *, unsigned int, CUdevice);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                        unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
static volatile int done;
static void *wait_stdin(void *unused) {
    (void)unused;
    while (getchar() != EOF) {}
    done = 1;
    return 0;
}
int main(int argc, char **argv) {
    CUdevice dev; CUcontext ctx; CUdeviceptr p; CUmodule module; CUfunction kernel; pthread_t t;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuCtxCreate_v2(&ctx, 0, dev)) return 90;
    for (int i = 1; i < argc; i++)
        printf("%d\n", (int)cuMemAlloc_v2(&p, (size_t)atoll(argv[i]) << 20));
    fflush(stdout);
    if (cuModuleLoadData(&module, "e2e") || cuModuleGetFunction(&kernel, module, "spin")) return 91;
    pthread_create(&t, 0, wait_stdin, 0);
    while (!done)
        if (cuLaunchKernel(kernel, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0)) return 92;
    return 0;
}
"""


def build_workload(directory: Path) -> Path:
    """libvgpu and the fake driver (make), and the program linked against the fake libcuda."""
    subprocess.run(["make", "-s", "-C", str(NATIVE), *BUILT], check=True)
    (directory / "workload.c").write_text(SOURCE)
    binary = directory / "workload"
    subprocess.run(
        ["cc", str(directory / "workload.c"), "-o", str(binary), "-lpthread",
         f"-L{NATIVE / 'build' / 'fake'}", "-l:libcuda.so.1"],
        check=True,
    )  # fmt: skip
    return binary


def container_env(layout: CdiLayout, claim_uid: str) -> dict[str, str]:
    """The env the claim's CDI spec gives a container, with its mounts' host paths."""
    spec: dict[str, Any] = json.loads(layout.spec_path(claim_uid).read_text())
    edits = [spec["containerEdits"], *(d["containerEdits"] for d in spec["devices"])]
    env = dict(entry.split("=", 1) for e in edits for entry in e.get("env", []))
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = env["CUDA_DEVICE_MEMORY_SHARED_CACHE"].replace(
        CONTAINER_SHARED_DIR, str(layout.shared_dir(claim_uid))
    )
    if "CUDA_TASK_PRIORITY_DIR" in env:
        env["CUDA_TASK_PRIORITY_DIR"] = env["CUDA_TASK_PRIORITY_DIR"].replace(
            CONTAINER_PRIORITY_DIR, str(layout.priority_dir)
        )
    return env


@contextmanager
def running_workload(
    binary: Path, env: dict[str, str], *, allocations_mib: Sequence[int], sm_util: int
) -> Iterator[list[int]]:
    """The workload under libvgpu with `env`; yields the CUDA result of each allocation while it
    launches kernels (the fake NVML reports `sm_util` percent); stopped after."""
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "LD_"))},
        **env,
        "LD_PRELOAD": str(NATIVE / "build" / "libvgpu.so"),
        "LD_LIBRARY_PATH": str(NATIVE / "build" / "fake"),
        "FAKE_CUDA_MEMORY": "80G",
        "FAKE_NVML_UTIL": str(sm_util),
    }
    process = subprocess.Popen(
        [str(binary), *(str(size) for size in allocations_mib)],
        env=environ, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        lines = [process.stdout.readline().strip() for _ in allocations_mib]
        if not all(lines):
            process.kill()
            stderr = process.stderr.read().decode() if process.stderr else ""
            raise AssertionError(f"the workload stopped early ({lines}):\n{stderr[-3000:]}")
        yield [int(line) for line in lines]
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
