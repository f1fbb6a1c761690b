"""A watch-backed cache of ResourceSlices, so percentages and fractions know the card sizes."""

from __future__ import annotations

import threading
from typing import Any

import structlog
from tenacity import Retrying, retry_if_exception_type, wait_exponential

from vgpu_bridge.core import Inventory
from vgpu_bridge.kube import Json, KubeApi

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
log = structlog.get_logger("vgpu_bridge.webhook.inventory")


class InventoryCache:
    """`current()` is the latest Inventory; `synced` is set after the first full list."""

    def __init__(self, api: KubeApi, *, memory_capacity: str, watch_timeout_s: int = 300) -> None:
        self._api = api
        self._memory_capacity = memory_capacity
        self._watch_timeout_s = watch_timeout_s
        self._slices: dict[str, Json] = {}
        self._inventory = Inventory()
        self._lock = threading.Lock()
        self.synced = threading.Event()

    def current(self) -> Inventory:
        with self._lock:
            return self._inventory

    def run(self, stop: threading.Event) -> None:
        """List, then watch, until `stop`; any failure relists after an exponential backoff."""

        def pause(seconds: float) -> None:
            stop.wait(seconds)

        retrying = Retrying(
            retry=retry_if_exception_type(Exception),
            wait=wait_exponential(multiplier=0.5, max=30),
            sleep=pause,
            before_sleep=lambda state: log.warning(
                "inventory watch failed; retrying",
                error=str(state.outcome and state.outcome.exception()),
            ),
        )
        while not stop.is_set():
            for attempt in retrying:
                with attempt:
                    self._list_and_watch(stop)
            if stop.is_set():
                return

    def _list_and_watch(self, stop: threading.Event) -> None:
        listed = self._api.list(SLICES)
        self._replace({s["metadata"]["name"]: s for s in listed.get("items", [])})
        self.synced.set()
        version = listed["metadata"]["resourceVersion"]
        for event in self._api.watch(
            SLICES, resource_version=version, timeout_s=self._watch_timeout_s
        ):
            if stop.is_set():
                return
            self._apply(event)

    def _apply(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
        slices = dict(self._slices)
        name = obj.get("metadata", {}).get("name")
        if kind == "DELETED":
            slices.pop(name, None)
        elif kind in ("ADDED", "MODIFIED"):
            slices[name] = obj
        self._replace(slices)

    def _replace(self, slices: dict[str, Json]) -> None:
        inventory = Inventory.from_slices(slices.values(), memory_capacity=self._memory_capacity)
        with self._lock:
            self._slices, self._inventory = slices, inventory
