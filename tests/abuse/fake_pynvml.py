"""A stand-in for `pynvml` that the real agent imports (tests/abuse/test_node_lost_card.py puts
it in `sys.modules` before the entry point runs): CARDS cards, and what happens to them read from
a JSON file named by $VB_FAKE_NVML_STATE, replaced whole by the test so that a card falls off the
bus and sends its XID at one instant: `{"lost": [index, ...], "xids": [[index, xid], ...]}` (each
XID delivered once, in order). Handles are ctypes device pointers, a new object for every
answer, as pynvml's are; a lost card answers GPU_IS_LOST to every question about itself."""

# ruff: noqa: N802, N816  (pynvml's names: the agent calls those)

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

CARDS = 8
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
NVML_DEVICE_ARCH_HOPPER = 9
nvmlEventTypeXidCriticalError = 0x8
_BASE_ADDRESS = 0x7F0000001000
_delivered = 0


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def uuid(index: int) -> str:
    return f"GPU-0000000{index}-0000-4000-8000-00000000000{index}"


def _state() -> dict[str, Any]:
    path = Path(os.environ["VB_FAKE_NVML_STATE"])
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return {}


def _handle(index: int) -> Any:
    address = ctypes.c_void_p(_BASE_ADDRESS + 0x100 * index)
    return ctypes.cast(address, ctypes.POINTER(ctypes.c_char))


def _index(handle: Any) -> int:
    address = ctypes.cast(handle, ctypes.c_void_p).value or 0
    index = (address - _BASE_ADDRESS) // 0x100
    if index in _state().get("lost", []):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    return index


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


def nvmlSystemGetDriverVersion() -> str:
    return "580.65.06"


def nvmlDeviceGetCount() -> int:
    return CARDS


def nvmlDeviceGetHandleByIndex(index: int) -> Any:
    return _handle(index)


def nvmlDeviceGetHandleByUUID(wanted: bytes | str) -> Any:
    text = wanted.decode() if isinstance(wanted, bytes) else wanted
    for index in range(CARDS):
        if uuid(index) == text:
            if index in _state().get("lost", []):
                raise NVMLError(NVML_ERROR_GPU_IS_LOST)
            return _handle(index)
    raise NVMLError(13)  # NOT_FOUND


def nvmlDeviceGetUUID(handle: Any) -> str:
    return uuid(_index(handle))


def nvmlDeviceGetName(handle: Any) -> str:
    _index(handle)
    return "NVIDIA H100 80GB HBM3"


def nvmlDeviceGetMemoryInfo(handle: Any) -> SimpleNamespace:
    _index(handle)
    return SimpleNamespace(total=80 * 2**30)


def nvmlDeviceGetMinorNumber(handle: Any) -> int:
    return _index(handle)


def nvmlDeviceGetCudaComputeCapability(handle: Any) -> tuple[int, int]:
    _index(handle)
    return 9, 0


def nvmlDeviceGetArchitecture(handle: Any) -> int:
    _index(handle)
    return NVML_DEVICE_ARCH_HOPPER


def nvmlEventSetCreate() -> str:
    return "event-set"


def nvmlDeviceRegisterEvents(handle: Any, types: int, event_set: str) -> None:
    _index(handle)


def nvmlEventSetWait_v2(event_set: str, timeout_ms: int) -> SimpleNamespace:
    global _delivered
    xids = _state().get("xids", [])
    if _delivered >= len(xids):
        raise NVMLError(NVML_ERROR_TIMEOUT)
    index, xid = xids[_delivered]
    _delivered += 1
    return SimpleNamespace(eventType=nvmlEventTypeXidCriticalError, eventData=xid,
                           device=_handle(index))  # fmt: skip
