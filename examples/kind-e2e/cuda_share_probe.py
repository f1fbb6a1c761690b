"""What a container on a GPU share sees through the CUDA driver API and NVML, with ctypes only.

Runs in any image with Python 3 (no CUDA toolkit, no pip packages): the driver libraries come
from the claim (libcuda.so.1, libnvidia-ml.so.1; on a mock card, vgpu-bridge's stand-in driver).

    python3 cuda_share_probe.py PAST_BYTES [--hold SECONDS]

On device 0 it creates a context, reads cuMemGetInfo_v2 (free, total), allocates half the free
memory (`within`, expected 0 = CUDA_SUCCESS), reads cuMemGetInfo_v2 again, then asks for what is
still free plus PAST_BYTES (`past`, expected 2 = CUDA_ERROR_OUT_OF_MEMORY on a share that holds).
Then NVML: nvmlDeviceGetMemoryInfo of index 0 (total, used), its name and UUID, the driver
version. It prints one JSON line (keys below), flushed, and with --hold keeps the memory
allocated for SECONDS (so the node agent's metrics can be read meanwhile), then exits 0. A
library that cannot be loaded or a call that fails before the allocations is reported in the
line's "error" (exit 1); the assertions are the caller's.

    {"cuInit": 0, "ctx": 0, "total": 4294967296, "free": ..., "within": {"bytes": .., "result": 0},
     "free_after": ..., "past": {"bytes": .., "result": 2},
     "nvml": {"init": 0, "total": .., "used": .., "name": "..", "uuid": "GPU-..",
              "driver_version": ".."}, "error": null}
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
from collections.abc import Callable

NVML_BUFFER = 96


def _cuda(report: dict[str, object], past_bytes: int) -> bool:
    cuda = ctypes.CDLL("libcuda.so.1")
    report["cuInit"] = cuda.cuInit(ctypes.c_uint(0))
    device = ctypes.c_int(-1)
    context = ctypes.c_void_p()
    if report["cuInit"] != 0 or cuda.cuDeviceGet(ctypes.byref(device), ctypes.c_int(0)) != 0:
        return False
    report["ctx"] = cuda.cuCtxCreate_v2(ctypes.byref(context), ctypes.c_uint(0), device)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    if report["ctx"] != 0 or cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) != 0:
        return False
    report["free"], report["total"] = free.value, total.value
    held = ctypes.c_uint64()
    within = free.value // 2
    report["within"] = {
        "bytes": within,
        "result": cuda.cuMemAlloc_v2(ctypes.byref(held), ctypes.c_size_t(within)),
    }
    if cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) != 0:
        return False
    report["free_after"] = free.value
    past = free.value + past_bytes
    refused = ctypes.c_uint64()
    report["past"] = {
        "bytes": past,
        "result": cuda.cuMemAlloc_v2(ctypes.byref(refused), ctypes.c_size_t(past)),
    }
    return True


class _NvmlMemory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


def _text(call: Callable[..., int], *head: object) -> str | None:
    buffer = ctypes.create_string_buffer(NVML_BUFFER)
    if call(*head, buffer, ctypes.c_uint(NVML_BUFFER)) != 0:
        return None
    return buffer.value.decode(errors="replace")


def _nvml() -> dict[str, object]:
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    seen: dict[str, object] = {"init": nvml.nvmlInit_v2()}
    handle = ctypes.c_void_p()
    if (
        seen["init"] != 0
        or nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(0), ctypes.byref(handle)) != 0
    ):
        return seen
    memory = _NvmlMemory()
    if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == 0:
        seen["total"], seen["used"] = memory.total, memory.used
    seen["name"] = _text(nvml.nvmlDeviceGetName, handle)
    seen["uuid"] = _text(nvml.nvmlDeviceGetUUID, handle)
    seen["driver_version"] = _text(nvml.nvmlSystemGetDriverVersion)
    return seen


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("past_bytes", type=int, help="bytes to ask for past what is free")
    parser.add_argument("--hold", type=float, default=0.0, help="seconds to keep the memory")
    args = parser.parse_args(argv)
    report: dict[str, object] = {"past_bytes": args.past_bytes, "error": None}
    try:
        if not _cuda(report, args.past_bytes):
            report["error"] = "a CUDA call before the allocations failed"
        report["nvml"] = _nvml()
    except OSError as failure:  # a library that is not there
        report["error"] = str(failure)
    print(json.dumps(report), flush=True)
    time.sleep(args.hold)
    return 1 if report["error"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
