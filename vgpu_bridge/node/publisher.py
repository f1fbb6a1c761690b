"""Keeps the node's ResourceSlices equal to what its GPUs should publish.

`sync()` reads the Node (its uid owns the slices) and the slices of our driver and pool (named
after the node) on this node, and changes nothing when they already match; slices of other pools
are left alone. Otherwise it bumps the pool's generation and rewrites
the pool: obsolete slices are deleted first (uid + resourceVersion preconditions), the rest
updated or created. A conflict (someone else wrote meanwhile) starts the sync over. The agent
calls `sync()` at start (republish on every start: the kubelet wipes a node's slices when it
starts) and every resync period after that, and the device-health watcher calls it at once
when a card's taint changes (`set_taints`); one `sync()` runs at a time. The outcome of the last
finished `sync()` is kept in `last` (read by /healthz). After a failed `sync()` the agent tries
again sooner than a resync period (`failing`, `retry_in_s`: 1 s, doubling up to the period):
a change made while the API server was down (a card's taint) is published soon after its
return, not a whole period later, and an API server that keeps failing is not hammered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_bridge.core.profiles import DriverProfile
from vgpu_bridge.kube import KubeApi, KubeError, api_path
from vgpu_bridge.logs import get_logger
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.slices import DeviceTaint, build_slices

Json = dict[str, Any]
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CONFLICT_ATTEMPTS = 5
#: the first retry after a failed sync; each failure in a row doubles it (capped by the caller)
FIRST_RETRY_S = 1.0
log = get_logger("vgpu_bridge.node.publisher")


class PublishError(RuntimeError):
    """The slices could not be published (the next resync tries again)."""


@dataclass(frozen=True)
class SyncResult:
    generation: int
    changed: bool
    created: int = 0
    updated: int = 0
    deleted: int = 0


@dataclass(frozen=True)
class Publication:
    """How the last `sync()` ended: when (the publisher's clock), why not if it failed, and when
    the last one that succeeded ended (None: none yet)."""

    finished_at: float
    error: str | None = None
    succeeded_at: float | None = None


class SlicePublisher:
    def __init__(
        self,
        api: KubeApi,
        *,
        node: str,
        profile: DriverProfile,
        gpus: Sequence[Gpu],
        clock: Callable[[], float] = time.monotonic,
        fixed_devices: Sequence[Json] = (),
    ) -> None:
        """`fixed_devices`: published beside the GPUs, always (enforcer mode's one device)."""
        self._api = api
        self._fixed_devices = tuple(fixed_devices)
        self._node = node
        self._profile = profile
        self._gpus = tuple(gpus)
        self._clock = clock
        self._taints: dict[str, DeviceTaint] = {}
        self._syncing = threading.Lock()
        self._failures = 0  # failed syncs in a row
        self.last: Publication | None = None  # None until the first sync() ends

    def failing(self) -> bool:
        """Whether the last `sync()` failed (what it meant to publish is not published yet)."""
        return self._failures > 0

    def retry_in_s(self) -> float:
        """How long to wait before the next try after the failures in a row: 1, 2, 4 … s."""
        doublings = min(max(self._failures - 1, 0), 16)
        return FIRST_RETRY_S * float(2**doublings)

    def set_gpus(self, gpus: Sequence[Gpu]) -> None:
        """A new list of GPUs; published by the next `sync()`."""
        self._gpus = tuple(gpus)

    def set_taints(self, taints: Mapping[str, DeviceTaint]) -> None:
        """The taints of the unhealthy cards, by uuid; published by the next `sync()`."""
        self._taints = dict(taints)

    def sync(self) -> SyncResult:
        """Publish; `last` records how it ended, whatever the exception."""
        with self._syncing:
            return self._sync_and_record()

    def _sync_and_record(self) -> SyncResult:
        try:
            result = self._sync_with_retries()
        except Exception as error:
            succeeded_at = None if self.last is None else self.last.succeeded_at
            reason = str(error) or type(error).__name__
            self.last = Publication(self._clock(), reason, succeeded_at)
            self._failures += 1
            raise
        now = self._clock()
        self.last = Publication(now, None, now)
        self._failures = 0
        return result

    def _sync_with_retries(self) -> SyncResult:
        for _ in range(CONFLICT_ATTEMPTS):
            try:
                return self._sync_once()
            except KubeError as error:
                if error.status not in (404, 409):  # 404/409: a precondition lost a race
                    raise PublishError(f"publishing ResourceSlices failed: {error}") from None
                log.info("slices changed while publishing; starting over", error=str(error))
        raise PublishError(f"slices kept changing under us ({CONFLICT_ATTEMPTS} attempts)")

    def existing(self) -> list[Json]:
        """Our driver's slices on this node, as the API server has them."""
        return node_slices(self._api, node=self._node, driver=self._profile.driver)

    def _sync_once(self) -> SyncResult:
        node_uid = self._node_uid()
        existing = {
            s["metadata"]["name"]: s
            for s in self.existing()
            if s["spec"]["pool"]["name"] == self._node  # other pools are not this agent's
        }
        generation = max((s["spec"]["pool"]["generation"] for s in existing.values()), default=0)
        desired = self._desired(max(generation, 1), node_uid)
        if generation and _same(existing, desired):
            return SyncResult(generation=generation, changed=False)
        desired = self._desired(generation + 1, node_uid)
        wanted = {s["metadata"]["name"] for s in desired}
        deleted = 0
        for name, obsolete in existing.items():
            if name not in wanted:
                meta = obsolete["metadata"]
                preconditions = {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}
                self._api.delete(api_path(SLICES, name), preconditions=preconditions)
                deleted += 1
        created = updated = 0
        for body in desired:
            name = body["metadata"]["name"]
            if name in existing:
                body["metadata"]["resourceVersion"] = existing[name]["metadata"]["resourceVersion"]
                written = self._api.replace(api_path(SLICES, name), body)
                updated += 1
            else:
                written = self._api.create(SLICES, body)
                created += 1
            _check_kept(body, written)
        log.info(
            "published slices",
            node=self._node,
            generation=generation + 1,
            devices=len(self._fixed_devices) + len(self._gpus),
            tainted=sorted(self._taints),
            created=created,
            updated=updated,
            deleted=deleted,
        )
        return SyncResult(generation + 1, True, created, updated, deleted)

    def _node_uid(self) -> str:
        try:
            uid: str = self._api.get(api_path("/api/v1/nodes", self._node))["metadata"]["uid"]
        except KubeError as error:
            if error.status == 404:
                raise PublishError(f"node {self._node} does not exist (yet)") from None
            raise
        return uid

    def _desired(self, generation: int, node_uid: str) -> list[Json]:
        return build_slices(
            self._gpus,
            node=self._node,
            profile=self._profile,
            generation=generation,
            node_uid=node_uid,
            taints=self._taints,
            fixed_devices=self._fixed_devices,
        )


def node_slices(api: KubeApi, *, node: str, driver: str) -> list[Json]:
    """The ResourceSlices of `driver` on `node`, as the API server has them."""
    selector = f"spec.nodeName={node},spec.driver={driver}"
    items: list[Json] = api.list(SLICES, fieldSelector=selector).get("items") or []
    return items


def _same(existing: dict[str, Json], desired: list[Json]) -> bool:
    """Existing slices are exactly the desired ones (same names, specs and owners)."""
    if set(existing) != {s["metadata"]["name"] for s in desired}:
        return False
    return all(
        existing[s["metadata"]["name"]]["spec"] == s["spec"]
        and existing[s["metadata"]["name"]]["metadata"].get("ownerReferences")
        == s["metadata"].get("ownerReferences")
        for s in desired
    )


def _check_kept(sent: Json, written: Json) -> None:
    """The API server silently drops fields of disabled features: refuse to go on as if not."""
    if written.get("spec") != sent["spec"]:
        tainted = any("taints" in d for d in sent["spec"].get("devices", []))
        gates = "DRAConsumableCapacity and DRADeviceTaints" if tainted else "DRAConsumableCapacity"
        raise PublishError(
            f"the API server changed ResourceSlice {sent['metadata']['name']} as it stored it "
            f"(are the {gates} feature gates on?)"
        )
