"""A watch-backed cache of our driver's ResourceSlices, so percentages and fractions know the
card sizes. Only our driver's slices are read (a field selector, checked again here); one that
cannot be read is logged, counted in `vgpu_bridge_inventory_unreadable_slices` and skipped, so
no slice can keep the webhook from becoming ready."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from vgpu_bridge.core import InvalidRequest, Inventory
from vgpu_bridge.kube import Json, KubeApi
from vgpu_bridge.logs import get_logger
from vgpu_bridge.webhook.watching import WATCH_TIMEOUT_S, follow

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
log = get_logger("vgpu_bridge.webhook.inventory")


class InventoryCache:
    """`current()` is the latest Inventory; `synced` is set after the first full list and never
    cleared: it is the webhook's readiness, which must not follow the API server once the first
    list is in (an outage would turn every replica unready, and the API server, back, would find
    no endpoint to call). While the watch fails, the last inventory is kept; the list is tried
    again every second while the server refuses connections (`watching`), so it is fresh again
    about a second after the server's return. `unreadable()` names the skipped slices."""

    def __init__(
        self,
        api: KubeApi,
        *,
        driver: str,
        memory_capacity: str,
        watch_timeout_s: int = WATCH_TIMEOUT_S,
    ) -> None:
        self._api, self._driver, self._memory_capacity = api, driver, memory_capacity
        self._watch_timeout_s = watch_timeout_s
        self._sizes: dict[str, frozenset[int] | None] = {}  # slice name → sizes; None: unreadable
        self._inventory = Inventory()
        self._lock = threading.Lock()
        self.synced = threading.Event()

    def current(self) -> Inventory:
        with self._lock:
            return self._inventory

    def unreadable(self) -> list[str]:
        with self._lock:
            return sorted(name for name, sizes in self._sizes.items() if sizes is None)

    def run(self, stop: threading.Event) -> None:
        """List, then watch, until `stop`; any failure relists after an exponential backoff."""
        follow(self._api, SLICES, stop=stop, on_list=self.replace, on_event=self.apply,
               what="inventory", watch_timeout_s=self._watch_timeout_s,
               fieldSelector=f"spec.driver={self._driver}")  # fmt: skip

    def replace(self, slices: Iterable[Json]) -> None:
        """All of the slices at once (a list)."""
        sizes = {_name(s): self._read(s) for s in slices if self._ours(s)}
        self._publish(sizes)
        self.synced.set()

    def apply(self, kind: str, obj: Json) -> None:
        """One watch event."""
        sizes = dict(self._sizes)
        if kind == "DELETED" or not self._ours(obj):
            sizes.pop(_name(obj), None)
        else:
            sizes[_name(obj)] = self._read(obj)
        self._publish(sizes)

    def _ours(self, obj: Json) -> bool:
        return bool((obj.get("spec") or {}).get("driver") == self._driver)

    def _read(self, obj: Json) -> frozenset[int] | None:
        try:
            inventory = Inventory.from_slices([obj], memory_capacity=self._memory_capacity)
        except InvalidRequest as exc:
            log.warning("ResourceSlice skipped: it cannot be read", slice=_name(obj),
                        reason="; ".join(exc.lines()))  # fmt: skip
            return None
        return frozenset(inventory.sizes(self._driver))

    def _publish(self, sizes: dict[str, frozenset[int] | None]) -> None:
        cards = frozenset().union(*(s for s in sizes.values() if s is not None))
        inventory = Inventory({self._driver: cards} if cards else {})
        with self._lock:
            self._sizes, self._inventory = sizes, inventory


def _name(obj: Json) -> str:
    return str((obj.get("metadata") or {}).get("name"))
