"""Real cards' health from NVML (`pynvml`, ctypes over libnvidia-ml, loaded only here).

- XID critical-error events: one event set, every card registered for them; each `unhealthy()`
  drains what arrived without waiting. A card XID (`xids.CARD_XIDS`) marks its card until the
  agent restarts: NVML tells no recovery, a reset or a replacement does (restart the agent
  after it). An event names its card by the handle it was registered with (kept at registration:
  a card that fell off the bus answers GPU_IS_LOST when asked its UUID, and must not take its
  healthy neighbours with it). A card XID NVML reports without a device marks every card, as it
  cannot say which; one whose handle is none of ours and cannot be named marks none (logged).
- A lost GPU: `nvmlDeviceGetHandleByUUID` failing with GPU_IS_LOST marks the card while it lasts.
"""

from __future__ import annotations

import ctypes
from collections.abc import Hashable, Sequence
from typing import Any

from vgpu_bridge.logs import get_logger
from vgpu_bridge.node.device_health.xids import LOST, meaning, reason_for_xid
from vgpu_bridge.node.gpus import Gpu

MAX_EVENTS_PER_CHECK = 1000
log = get_logger("vgpu_bridge.node.device_health")


class NvmlUnavailable(RuntimeError):
    """NVML could not be started or watched (the agent then runs without device health)."""


class NvmlHealthEvents:
    def __init__(self, gpus: Sequence[Gpu], *, nvml: Any = None) -> None:
        """`nvml`: the module to use (`pynvml` unless a test passes an object with its API)."""
        if nvml is None:
            import pynvml  # only on nodes that use NVML

            nvml = pynvml
        self._nvml = nvml
        self._gpus = tuple(gpus)
        self._xids: dict[str, str] = {}
        self._uuid_by_handle: dict[Hashable, str] = {}
        try:
            nvml.nvmlInit()
            self._events = nvml.nvmlEventSetCreate()
        except Exception as error:  # NVMLError subclasses, or OSError without a driver
            raise NvmlUnavailable(f"NVML is unavailable for device health: {error}") from None
        for gpu in self._gpus:
            self._register(gpu)

    def _register(self, gpu: Gpu) -> None:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
            nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._events)
            self._uuid_by_handle[handle_key(handle)] = gpu.uuid
        except nvml.NVMLError as error:
            log.warning("cannot watch the card's XID events", device=gpu.device_name,
                        uuid=gpu.uuid, error=str(error))  # fmt: skip

    def unhealthy(self) -> dict[str, str]:
        self._drain()
        lost = {gpu.uuid: LOST for gpu in self._gpus if self._is_lost(gpu)}
        return {**self._xids, **lost}

    def _drain(self) -> None:
        nvml = self._nvml
        for _ in range(MAX_EVENTS_PER_CHECK):
            try:
                event = nvml.nvmlEventSetWait_v2(self._events, 0)
            except nvml.NVMLError as error:
                if error.value != nvml.NVML_ERROR_TIMEOUT:  # timeout: nothing (more) arrived
                    log.warning("waiting for NVML events failed", error=str(error))
                return
            if event.eventType == nvml.nvmlEventTypeXidCriticalError:
                self._record(int(event.eventData), event.device)

    def _record(self, xid: int, handle: object) -> None:
        uuids = self._uuids_of(handle)
        reason = reason_for_xid(xid)
        log.warning("XID event", xid=xid, meaning=meaning(xid), uuids=uuids,
                    marks_card=reason is not None)  # fmt: skip
        if reason is not None:
            for uuid in uuids:
                self._xids.setdefault(uuid, reason)  # the first card XID stays the reason

    def _uuids_of(self, handle: object) -> list[str]:
        """The uuid of the event's card (the one registered with its handle, else NVML's answer);
        every card's when NVML names no device; none when a handle of no card of ours is unnamed."""
        if not handle:
            return [gpu.uuid for gpu in self._gpus]
        registered = self._uuid_by_handle.get(handle_key(handle))
        if registered is not None:
            return [registered]
        try:
            uuid = self._nvml.nvmlDeviceGetUUID(handle)
        except self._nvml.NVMLError as error:
            log.warning("XID event of a card NVML cannot name; no card marked", error=str(error))
            return []
        return [uuid.decode() if isinstance(uuid, bytes) else str(uuid)]

    def _is_lost(self, gpu: Gpu) -> bool:
        try:
            self._nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)
        except self._nvml.NVMLError as error:
            return bool(error.value == self._nvml.NVML_ERROR_GPU_IS_LOST)
        return False


def handle_key(handle: object) -> Hashable:
    """What names a device handle across calls: pynvml gives a new ctypes pointer object for each
    answer (they compare by identity), so its address; any other handle (a test's) as it is."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle if isinstance(handle, Hashable) else id(handle)


class NvmlHealthOnFirstUse:
    """`NvmlHealthEvents` started by the first `unhealthy()` (building the agent starts nothing);
    without NVML, logged once, and every card is reported healthy from then on."""

    def __init__(self, gpus: Sequence[Gpu], *, nvml: Any = None) -> None:
        self._gpus = tuple(gpus)
        self._nvml = nvml
        self._source: NvmlHealthEvents | None = None
        self._failed = False

    def unhealthy(self) -> dict[str, str]:
        if self._source is None and not self._failed:
            try:
                self._source = NvmlHealthEvents(self._gpus, nvml=self._nvml)
            except NvmlUnavailable as error:
                log.error("device health is off: no NVML", error=str(error))
                self._failed = True
        return {} if self._source is None else self._source.unhealthy()
