"""Mock GPUs' health: one file per card under `<plugin-dir>/mock-health/`, named after the card's
device (`gpu-1`), holding an XID number (`79`) or `lost`; no file, or an empty one, is a healthy
card. Unlike NVML's events these files say how the card is *now*: removing the file heals it.
A file that says anything else is logged and leaves the card as healthy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from vgpu_bridge.logs import get_logger
from vgpu_bridge.node.device_health.xids import LOST, meaning, reason_for_xid
from vgpu_bridge.node.files import read_regular
from vgpu_bridge.node.gpus import Gpu

DIR_NAME = "mock-health"
MAX_BYTES = 64
log = get_logger("vgpu_bridge.node.device_health")


class MockHealthFiles:
    def __init__(self, directory: Path, gpus: Sequence[Gpu]) -> None:
        self.directory = directory
        self._gpus = tuple(gpus)

    def unhealthy(self) -> dict[str, str]:
        reasons = {gpu.uuid: self._reason(gpu) for gpu in self._gpus}
        return {uuid: reason for uuid, reason in reasons.items() if reason is not None}

    def _reason(self, gpu: Gpu) -> str | None:
        path = self.directory / gpu.device_name
        try:
            text = read_regular(path, max_bytes=MAX_BYTES).decode(errors="replace").strip()
        except FileNotFoundError:
            return None
        except OSError as error:
            log.warning("mock health file unreadable; card left healthy", path=str(path),
                        error=str(error))  # fmt: skip
            return None
        return parse_condition(text, path=path)


def parse_condition(text: str, *, path: Path) -> str | None:
    """`""` → None, `"lost"` → `gpu-lost`, `"79"` → `xid-79`, `"13"` → None (an application's)."""
    if not text:
        return None
    if text.lower() == LOST.removeprefix("gpu-"):
        return LOST
    if not text.isdigit():
        log.warning("mock health file: expected an XID number or 'lost'; card left healthy",
                    path=str(path), content=text[:MAX_BYTES])  # fmt: skip
        return None
    xid = int(text)
    reason = reason_for_xid(xid)
    if reason is None:
        log.info("XID leaves the card healthy", path=str(path), xid=xid, meaning=meaning(xid))
    return reason
