"""The cards' health turned into device taints: `check()` asks the source which cards are
unhealthy now, and when that changed, hands the new taints to `on_change` (the agent's: set them
on the publisher and publish at once). A card keeps its taint's `timeAdded` while its reason stays
the same; a new reason is a new taint. Taints `on_change` failed to take (the API server down)
are handed over again at each check until it takes them: no other publication comes before the
agent's next resync period."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol

from vgpu_bridge.logs import get_logger
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.slices import DeviceTaint, TaintEffect

log = get_logger("vgpu_bridge.node.device_health")


class HealthSource(Protocol):
    def unhealthy(self) -> dict[str, str]:
        """uuid → reason (a label value, e.g. `xid-79`) of every card that is unhealthy now."""
        ...


def taint_key(driver: str) -> str:
    """`<driver>/unhealthy`: under the driver's name, so a renamed driver has its own key."""
    return f"{driver}/unhealthy"


def utc_now() -> datetime:
    return datetime.now(UTC)


class DeviceHealthWatcher:
    def __init__(
        self,
        source: HealthSource,
        *,
        gpus: Sequence[Gpu],
        driver: str,
        effect: TaintEffect,
        on_change: Callable[[Mapping[str, DeviceTaint]], object],
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.source = source
        self._names = {gpu.uuid: gpu.device_name for gpu in gpus}
        self._key = taint_key(driver)
        self._effect: TaintEffect = effect
        self._on_change = on_change
        self._clock = clock
        self._taints: dict[str, DeviceTaint] = {}
        self._handed_over = True  # `on_change` took the taints

    @property
    def taints(self) -> dict[str, DeviceTaint]:
        """The taint of each unhealthy card, by uuid."""
        return dict(self._taints)

    def check(self) -> bool:
        """Ask the source; True (after `on_change`) when a card's taint changed, or when the
        last taints were not taken yet."""
        reasons = {u: r for u, r in self.source.unhealthy().items() if u in self._names}
        unchanged = reasons == {uuid: taint.value for uuid, taint in self._taints.items()}
        if unchanged and self._handed_over:
            return False
        if not unchanged:
            taints = {uuid: self._taint(uuid, reason) for uuid, reason in reasons.items()}
            self._log_changes(taints)
            self._taints = taints
        self._handed_over = False
        self._on_change(dict(self._taints))
        self._handed_over = True
        return True

    def _taint(self, uuid: str, reason: str) -> DeviceTaint:
        known = self._taints.get(uuid)
        if known is not None and known.value == reason:
            return known
        added = self._clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return DeviceTaint(key=self._key, value=reason, effect=self._effect, time_added=added)

    def _log_changes(self, taints: Mapping[str, DeviceTaint]) -> None:
        for uuid in sorted(set(self._taints) | set(taints)):
            before, after = self._taints.get(uuid), taints.get(uuid)
            device = self._names[uuid]
            if after is None:
                log.info("card healthy again; taint removed", device=device, uuid=uuid)
            elif before is None or before.value != after.value:
                log.warning("card unhealthy; tainted", device=device, uuid=uuid,
                            reason=after.value, effect=after.effect)  # fmt: skip
