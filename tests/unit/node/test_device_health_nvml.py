"""NVML's side of device health over a fake NVML with pynvml's API: XID events (queued in the
event set, drained without waiting) and lost GPUs."""

# ruff: noqa: N802, N815  (the fake keeps pynvml's camelCase names: the source calls those)

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest

from vgpu_bridge.node.device_health.nvml_source import (
    NvmlHealthEvents,
    NvmlHealthOnFirstUse,
    NvmlUnavailable,
)
from vgpu_bridge.node.gpus import Gpu

GPUS = (
    Gpu(index=0, uuid="GPU-a", product_name="NVIDIA H100", memory=80 * 2**30, minor=0),
    Gpu(index=1, uuid="GPU-b", product_name="NVIDIA H100", memory=80 * 2**30, minor=1),
)
XID_CRITICAL = 0x8
POINTER_ADDRESSES = {"GPU-a": 0x1000, "GPU-b": 0x2000}


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNvml:
    """The calls device health makes, with pynvml's names, error class and constants."""

    NVMLError = NVMLError
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_GPU_IS_LOST = 15
    nvmlEventTypeXidCriticalError = XID_CRITICAL

    def __init__(self, *, without_driver: bool = False) -> None:
        self.without_driver = without_driver
        self.inits = 0
        self.queued: list[SimpleNamespace] = []
        self.lost: set[str] = set()
        self.registered: list[tuple[str, int]] = []
        self.wait_error: int | None = None

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.without_driver:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid in self.lost:
            raise NVMLError(self.NVML_ERROR_GPU_IS_LOST)
        return f"handle-{uuid}"

    def nvmlDeviceRegisterEvents(self, handle: str, types: int, event_set: str) -> None:
        assert event_set == "event-set"
        self.registered.append((handle, types))

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        assert timeout_ms == 0  # never blocks the health check
        if self.wait_error is not None:
            raise NVMLError(self.wait_error)
        if not self.queued:
            raise NVMLError(self.NVML_ERROR_TIMEOUT)
        return self.queued.pop(0)

    def nvmlDeviceGetUUID(self, handle: str) -> bytes:
        uuid = handle.removeprefix("handle-")
        if uuid in self.lost:  # a card that fell off the bus answers nothing about itself
            raise NVMLError(self.NVML_ERROR_GPU_IS_LOST)
        return uuid.encode()

    def xid(self, xid: int, uuid: str | None) -> None:
        device = None if uuid is None else f"handle-{uuid}"
        self.queued.append(SimpleNamespace(eventType=XID_CRITICAL, eventData=xid, device=device))


def test_every_card_is_registered_for_xid_critical_errors() -> None:
    nvml = FakeNvml()
    NvmlHealthEvents(GPUS, nvml=nvml)
    assert nvml.registered == [("handle-GPU-a", XID_CRITICAL), ("handle-GPU-b", XID_CRITICAL)]


def test_a_card_xid_marks_its_card_until_the_agent_restarts() -> None:
    nvml = FakeNvml()
    source = NvmlHealthEvents(GPUS, nvml=nvml)
    nvml.xid(79, "GPU-b")
    nvml.xid(48, "GPU-b")
    assert source.unhealthy() == {"GPU-b": "xid-79"}
    assert source.unhealthy() == {"GPU-b": "xid-79"}  # NVML tells no recovery


def test_application_xids_leave_the_card_healthy() -> None:
    nvml = FakeNvml()
    source = NvmlHealthEvents(GPUS, nvml=nvml)
    for xid in (13, 31, 43, 45):
        nvml.xid(xid, "GPU-a")
    assert source.unhealthy() == {}
    assert nvml.queued == []


def test_a_card_xid_without_a_device_marks_every_card() -> None:
    nvml = FakeNvml()
    source = NvmlHealthEvents(GPUS, nvml=nvml)
    nvml.xid(95, None)
    assert source.unhealthy() == {"GPU-a": "xid-95", "GPU-b": "xid-95"}


def test_a_lost_cards_xid_marks_that_card_only_not_its_healthy_neighbours() -> None:
    nvml = FakeNvml()
    source = NvmlHealthEvents(GPUS, nvml=nvml)
    nvml.lost = {"GPU-a"}
    nvml.xid(79, "GPU-a")
    assert source.unhealthy() == {"GPU-a": "gpu-lost"}
    nvml.lost = set()  # back on the bus: the XID it sent still marks it, and only it
    assert source.unhealthy() == {"GPU-a": "xid-79"}


class PointerHandles(FakeNvml):
    """Handles as pynvml gives them: a new ctypes device pointer for every answer, the same
    address for the same card (pointer objects compare by identity, not by address)."""

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> object:  # type: ignore[override]
        super().nvmlDeviceGetHandleByUUID(uuid)
        return ctypes.cast(ctypes.c_void_p(POINTER_ADDRESSES[uuid]), ctypes.POINTER(ctypes.c_char))

    def nvmlDeviceGetUUID(self, handle: object) -> bytes:
        raise NVMLError(self.NVML_ERROR_GPU_IS_LOST)

    def xid(self, xid: int, uuid: str | None) -> None:
        device = None if uuid is None else self.nvmlDeviceGetHandleByUUID(uuid)
        self.queued.append(SimpleNamespace(eventType=XID_CRITICAL, eventData=xid, device=device))


def test_an_events_pointer_handle_names_the_card_registered_at_its_address() -> None:
    nvml = PointerHandles()
    source = NvmlHealthEvents(GPUS, nvml=nvml)
    nvml.xid(79, "GPU-b")
    assert source.unhealthy() == {"GPU-b": "xid-79"}


def test_an_xid_of_a_handle_none_of_ours_and_unnamed_marks_no_card() -> None:
    nvml = FakeNvml()
    source = NvmlHealthEvents(GPUS, nvml=nvml)
    nvml.lost = {"GPU-z"}
    nvml.xid(79, "GPU-z")
    assert source.unhealthy() == {}


def test_a_lost_gpu_is_unhealthy_while_nvml_cannot_find_it() -> None:
    nvml = FakeNvml()
    source = NvmlHealthEvents(GPUS, nvml=nvml)
    nvml.lost = {"GPU-a"}
    assert source.unhealthy() == {"GPU-a": "gpu-lost"}
    nvml.lost = set()
    assert source.unhealthy() == {}


def test_a_failing_wait_keeps_what_is_known_and_still_probes_lost_cards() -> None:
    nvml = FakeNvml()
    source = NvmlHealthEvents(GPUS, nvml=nvml)
    nvml.xid(64, "GPU-a")
    assert source.unhealthy() == {"GPU-a": "xid-64"}
    nvml.wait_error, nvml.lost = 999, {"GPU-b"}
    assert source.unhealthy() == {"GPU-a": "xid-64", "GPU-b": "gpu-lost"}


def test_without_nvml_the_source_says_so_and_the_lazy_one_reports_healthy_cards() -> None:
    with pytest.raises(NvmlUnavailable, match="cannot open shared object"):
        NvmlHealthEvents(GPUS, nvml=FakeNvml(without_driver=True))
    nvml = FakeNvml(without_driver=True)
    lazy = NvmlHealthOnFirstUse(GPUS, nvml=nvml)
    assert nvml.inits == 0  # building the agent starts nothing
    assert lazy.unhealthy() == {}
    assert lazy.unhealthy() == {}
    assert nvml.inits == 1  # tried once, not on every check


def test_the_lazy_source_starts_nvml_on_first_use_and_then_watches() -> None:
    nvml = FakeNvml()
    lazy = NvmlHealthOnFirstUse(GPUS, nvml=nvml)
    assert nvml.registered == []
    assert lazy.unhealthy() == {}
    nvml.xid(119, "GPU-a")
    assert lazy.unhealthy() == {"GPU-a": "xid-119"}
    assert nvml.inits == 1
