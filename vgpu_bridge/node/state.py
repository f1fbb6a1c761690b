"""The work behind NodePrepareResources / NodeUnprepareResources (the gRPC layer only converts).

Prepare reads the checkpoint first: a prepared claim answers with the same devices and CDI IDs,
without calling the API, and its CDI spec is rewritten if a reboot wiped it (HAMi's driver
rejects such a claim, issue #45). Otherwise the claim is read from the API, its shares checked
(`allocation.claim_shares`), the CDI spec written, and the checkpoint saved once per call; a claim
counts as prepared only when the checkpoint holding it is on disk. Every error is per claim, and
a failed claim leaves nothing behind. Unprepare needs only the checkpoint and the claim uid (the
spec and shared-region names derive from it), so it works for deleted claims and repeats.
Calls are serialised, like the Go helper does, but no call walks a tenant's files under the
lock: a claim's dir is renamed into the trash under it and deleted after (`claimdirs`).
Every claim uid, namespace and name the kubelet sends is checked (`names`) before it becomes a
host path or an API path; a bad one is that claim's error.
In enforcer mode (`nvidia_cards` given) the shares are NVIDIA's (`enforcer.enforced_shares`); the
checkpoint keeps one entry per share (metrics count them by card) and the kubelet gets one
device, this node's enforcer, without request names (`answered`); all else is as above.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vgpu_bridge.core.profiles import DriverProfile
from vgpu_bridge.kube import KubeApi, KubeError, api_path
from vgpu_bridge.logs import get_logger
from vgpu_bridge.node import checkpoint, claimdirs, names
from vgpu_bridge.node.allocation import ClaimError, ClaimShares, claim_shares
from vgpu_bridge.node.cdi import (
    LIMITS_FILE_PATTERN,
    CdiLayout,
    build_spec,
    limits_text,
    remove_spec,
    spec_is_current,
    spec_text,
    write_spec,
)
from vgpu_bridge.node.checkpoint import CheckpointCorrupt, PreparedClaim, PreparedDevice
from vgpu_bridge.node.enforcer import ENFORCER_DEVICE, EnforcedClaim, enforced_shares
from vgpu_bridge.node.files import remove, remove_temp_files
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.nvidia_slices import CardProblem, NvidiaCards, allocated_devices

Json = dict[str, Any]
CLAIMS = "/apis/resource.k8s.io/v1"
LOCK_FILE = "agent.lock"
DEFAULT_BUDGET_S = 40.0  # the kubelet's per-call timeout is 45 s; leave room to answer
log = get_logger("vgpu_bridge.node")


Observer = Callable[[str, str, float], None]
"""Told of every claim a call handled: (call, decision, seconds); metrics count them."""


class StateLocked(RuntimeError):
    """Another agent already serves this plugin dir."""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    name: str
    uid: str

    def check(self) -> None:
        """ClaimError naming the field unless every part is what the API server would make."""
        try:
            names.check_uid(self.uid, field="claim uid")
            names.check_namespace(self.namespace, field="claim namespace")
            names.check_name(self.name, field="claim name")
        except names.BadName as error:
            raise ClaimError(str(error)) from None

    @property
    def api_path(self) -> str:
        self.check()
        return api_path(CLAIMS, "namespaces", self.namespace, "resourceclaims", self.name)


@dataclass(frozen=True, slots=True)
class Prepared:
    """One claim's answer: its devices, or why it failed."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str | None = None


def answered(devices: tuple[PreparedDevice, ...]) -> tuple[PreparedDevice, ...]:
    """The devices as the kubelet gets them: each (requests, pool, device, share, CDI ids)
    once. Our own shares are distinct already; an enforced claim's entries (one per NVIDIA
    share, for metrics) are one enforcer device."""
    seen: set[tuple[object, ...]] = set()
    unique = []
    for device in devices:
        key = (device.request_names, device.pool_name, device.device_name, device.share_id,
                   device.cdi_device_ids)  # fmt: skip
        if key not in seen:
            seen.add(key)
            unique.append(device)
    return tuple(unique)


class DeviceState:
    def __init__(
        self,
        api: KubeApi,
        *,
        node: str,
        profile: DriverProfile,
        gpus: Sequence[Gpu],
        layout: CdiLayout,
        checkpoint_file: Path,
        observer: Observer | None = None,
        removals_per_pass: int | None = None,
        nvidia_cards: NvidiaCards | None = None,
    ) -> None:
        """`removals_per_pass`: what one Unprepare call may delete (`--removals-per-pass`;
        None: `claimdirs.MAX_REMOVALS_PER_PASS`). `nvidia_cards`: enforcer mode (`enforcer`),
        the cards of NVIDIA's slice; None: our own `gpus`."""
        self._api = api
        self._nvidia_cards = nvidia_cards
        self._observer = observer
        self._removals_per_pass = removals_per_pass
        self._node = node
        self._profile = profile
        self._gpus = {gpu.device_name: gpu for gpu in gpus}
        self._layout = layout
        self._checkpoint_file = checkpoint_file
        self._lock = threading.Lock()
        self._claims: dict[str, PreparedClaim] = {}
        self._owner: int | None = None  # fd holding the plugin dir's lock while we run
        self._refusal: str | None = None  # why no new claim is prepared (uninstall); None: none

    # --- start-up -------------------------------------------------------------------------

    def start(self) -> None:
        """Load the checkpoint (rebuilding a corrupt one from the API), rewrite specs a reboot
        wiped, and remove our specs that no prepared claim owns. Never raises for a bad
        checkpoint or an unreachable API: the kubelet's next Prepare calls repair what is left."""
        with self._lock:
            self._checkpoint_file.parent.mkdir(parents=True, exist_ok=True)
            self._layout.cdi_dir.mkdir(parents=True, exist_ok=True)
            self._take_ownership()
            self._remove_temp_files()
            complete = True
            try:
                self._claims = checkpoint.load(self._checkpoint_file)
            except CheckpointCorrupt as error:
                aside = checkpoint.quarantine(self._checkpoint_file)
                log.error("checkpoint corrupt; rebuilding from the API", error=str(error),
                          moved_to=str(aside))  # fmt: skip
                self._claims, complete = self._rebuild_from_api()
                checkpoint.save(self._checkpoint_file, self._claims)
            for uid, claim in self._claims.items():
                if spec_is_current(claim.cdi_spec, uid, self._layout):
                    continue
                try:
                    write_spec(claim.cdi_spec, uid, self._layout)
                except (
                    OSError,
                    ValueError,
                ) as error:  # Prepare of this claim retries (and reports) it
                    log.error("cannot rewrite CDI spec", claim_uid=uid, error=str(error))
                    continue
                log.info("rewrote CDI spec", claim_uid=uid, namespace=claim.namespace,
                         claim=claim.name)  # fmt: skip
            if complete:
                self._remove_orphans()

    def _take_ownership(self) -> None:
        """One agent per plugin dir (a DaemonSet needs maxSurge 0): a second one fails fast
        instead of both rewriting the checkpoint."""
        if self._owner is not None:
            return
        fd = os.open(self._checkpoint_file.with_name(LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateLocked(
                f"another agent holds {self._checkpoint_file.with_name(LOCK_FILE)}"
            ) from None
        self._owner = fd

    @property
    def layout(self) -> CdiLayout:
        """Where this state's specs, limits files and claim dirs are."""
        return self._layout

    def refuse_new_claims(self, reason: str) -> None:
        """From now on a Prepare of a claim not prepared yet fails with `reason` (the agent is
        being uninstalled: a claim prepared now would get files removed moments later); claims
        already prepared still answer, and Unprepare works as before."""
        self._refusal = reason

    def close(self) -> None:
        """Let another agent take over this plugin dir."""
        with self._lock:
            if self._owner is not None:
                os.close(self._owner)
                self._owner = None

    def _remove_temp_files(self) -> None:
        """What a kill -9 in the middle of `write_atomic` left, of the files this agent writes."""
        layout = self._layout
        for directory, target in (
            (self._checkpoint_file.parent, re.escape(self._checkpoint_file.name)),
            (layout.cdi_dir, layout.spec_name_pattern),
            (layout.limits_dir, LIMITS_FILE_PATTERN),
        ):
            for name in remove_temp_files(directory, target):
                log.info("removed a temp file left by a killed write", path=str(directory / name))

    def _remove_orphans(self) -> None:
        """Our specs and limits files (exact names: a UUID where the uid goes) that no prepared
        claim owns; their claims' dirs go to the trash (emptied by the sweeper, not here)."""
        for path in sorted(self._layout.cdi_dir.iterdir()):
            uid = self._layout.claim_uid_of(path)
            if uid is not None and uid not in self._claims:
                try:
                    remove_spec(uid, self._layout)
                    claimdirs.trash(self._layout, uid)
                except OSError as error:  # tried again at the next start; never stops this one
                    log.error("cannot remove an orphaned claim", claim_uid=uid, error=str(error))
                    continue
                log.info("removed orphaned CDI spec", claim_uid=uid, path=str(path))
        limits = self._layout.limits_dir
        for path in sorted(limits.iterdir()) if limits.is_dir() else []:
            uid = self._layout.claim_uid_of_limits(path)
            if uid is not None and uid not in self._claims:
                remove(path, durable=False)
                log.info("removed orphaned limits file", claim_uid=uid, path=str(path))

    def _rebuild_from_api(self) -> tuple[dict[str, PreparedClaim], bool]:
        """Claims allocated on this node and reserved for a pod, prepared again from the API;
        and whether the API could be read (if not, nothing else may be assumed stale)."""
        rebuilt: dict[str, PreparedClaim] = {}
        try:
            items = self._api.list_all(api_path(CLAIMS, "resourceclaims")).items
        except Exception as error:  # the API unreachable: start empty, repair on Prepare
            log.error("cannot list ResourceClaims to rebuild the checkpoint", error=str(error))
            return rebuilt, False
        for claim in items:
            meta, status = claim["metadata"], claim.get("status") or {}
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
            ours = any(
                r.get("driver") == self._profile.driver and r.get("pool") == self._node
                for r in results
            )
            if not ours or not status.get("reservedFor"):
                continue
            ref = ClaimRef(meta["namespace"], meta["name"], meta["uid"])
            try:
                ref.check()
                rebuilt[ref.uid] = self._prepare_new(claim, ref, read_cards=True)
            except ClaimError as error:
                log.warning("could not rebuild a claim", claim_uid=ref.uid, error=str(error))
        return rebuilt, True

    # --- Prepare / Unprepare --------------------------------------------------------------

    def prepare(
        self, refs: Iterable[ClaimRef], *, budget_s: float = DEFAULT_BUDGET_S
    ) -> dict[str, Prepared]:
        """Prepare each claim; every claim gets an answer within `budget_s` (the kubelet gives
        up after 45 s): claims not reached in time fail with a reason and are retried."""
        deadline = time.monotonic() + budget_s
        refs = list(refs)
        fetched = self._fetch_unprepared(refs, deadline)
        if not self._lock.acquire(timeout=max(deadline - time.monotonic(), 0)):
            busy = "the agent is busy with another call; the kubelet retries"
            return {ref.uid: Prepared(error=busy) for ref in refs}
        try:
            results: dict[str, Prepared] = {}
            claims = dict(self._claims)
            new: dict[str, ClaimRef] = {}
            for ref in refs:
                started = time.perf_counter()
                try:
                    ref.check()
                    hit = claims.get(ref.uid)
                    if hit is None:
                        if self._refusal is not None:
                            raise ClaimError(self._refusal)
                        if time.monotonic() > deadline:
                            raise ClaimError("not prepared: the call ran out of time; retried")
                        claim, read_s = fetched.get(ref.uid) or (None, 0.0)
                        started -= read_s  # the claim's time includes its read
                        if isinstance(claim, ClaimError):
                            raise claim
                        hit = self._prepare_new(claim or self._get_claim(ref), ref)
                        claims[ref.uid], new[ref.uid] = hit, ref
                        decision = "prepared"
                    else:
                        self._ensure_spec(hit)
                        decision = "already prepared"
                    results[ref.uid] = Prepared(devices=answered(hit.devices))
                except ClaimError as error:
                    results[ref.uid], decision = Prepared(error=str(error)), "refused"
                self._record("prepare", ref, decision, started, results[ref.uid].error)
            trashed = self._commit_new(claims, new, results) if new else []
        finally:
            self._lock.release()
        self._empty_trash(trashed)
        return results

    def _fetch_unprepared(
        self, refs: list[ClaimRef], deadline: float
    ) -> dict[str, tuple[Json | ClaimError, float]]:
        """The claims of `refs` not prepared yet, read from the API before the lock, so that
        calls in flight read theirs at the same time and only the node-local work takes turns
        (a burst of pods starting on a dense node). What reading one raised is kept for the call
        to answer, with the seconds the read took; a ref that fails its check, or is reached
        after `deadline`, is left out."""
        known = self._claims  # replaced whole under the lock, never changed in place
        fetched: dict[str, tuple[Json | ClaimError, float]] = {}
        for ref in refs:
            if ref.uid in known or ref.uid in fetched or time.monotonic() > deadline:
                continue
            if self._refusal is not None:
                break  # refused under the lock: no read needed
            started = time.perf_counter()
            claim: Json | ClaimError
            try:
                ref.check()
                claim = self._get_claim(ref)
                self._warm_nvidia_cards(claim)
            except ClaimError as error:
                claim = error
            fetched[ref.uid] = (claim, time.perf_counter() - started)
        return fetched

    def _warm_nvidia_cards(self, claim: Json) -> None:
        """In enforcer mode, look up (reading NVIDIA's slices when needed) each card of this node
        that `claim`'s allocation names, before the lock: under it `plan` only reads the cache,
        so a slow API holds up no other claim's Prepare or Unprepare. A card that cannot be
        read is the claim's error there, from the cache."""
        if self._nvidia_cards is None:
            return
        for device in allocated_devices(claim, node=self._node):
            with contextlib.suppress(CardProblem):
                self._nvidia_cards.card(device)

    def _commit_new(
        self,
        claims: dict[str, PreparedClaim],
        new: dict[str, ClaimRef],
        results: dict[str, Prepared],
    ) -> list[Path]:
        """Save the checkpoint holding the new claims, or undo them all with the reason; the
        undone claims' dirs, in the trash, for the caller to delete after the lock."""
        trashed: list[Path] = []
        try:
            checkpoint.save(self._checkpoint_file, claims)
        except OSError as error:
            for uid, ref in new.items():
                remove_spec(uid, self._layout)
                trashed += filter(None, [claimdirs.trash(self._layout, uid)])
                results[uid] = Prepared(error=f"cannot write the checkpoint: {error}")
                log.error("prepare undone", claim_uid=uid, namespace=ref.namespace,
                          claim=ref.name, error=str(error))  # fmt: skip
            return trashed
        self._claims = claims
        return trashed

    def unprepare(self, refs: Iterable[ClaimRef]) -> dict[str, str | None]:
        """Errors by claim uid (None = done); claims never or no longer prepared are done. The
        claims' dirs are deleted after the lock is released (a tenant may have filled them)."""
        trashed: list[Path] = []
        with self._lock:
            results: dict[str, str | None] = {}
            claims = dict(self._claims)
            for ref in refs:
                started = time.perf_counter()
                try:
                    ref.check()
                except ClaimError as error:
                    results[ref.uid] = str(error)
                    self._record("unprepare", ref, "refused", started, results[ref.uid])
                    continue
                known = claims.pop(ref.uid, None) is not None
                results[ref.uid] = self._remove_claim_files(ref.uid, trashed)
                if results[ref.uid] is not None and known:
                    claims[ref.uid] = self._claims[ref.uid]
                decision = "unprepared" if known else "not prepared"
                self._record("unprepare", ref, decision, started, results[ref.uid])
            if claims != self._claims:
                try:
                    checkpoint.save(self._checkpoint_file, claims)
                except OSError as error:
                    results = dict.fromkeys(results, f"cannot write the checkpoint: {error}")
                else:
                    self._claims = claims
        self._empty_trash(trashed)
        return results

    def _empty_trash(self, trashed: list[Path]) -> None:
        """Delete the call's claim dirs from the trash, after the lock. No claim's answer
        depends on it: what cannot go now is logged and left to the sweep (`claimdirs`)."""
        try:
            budget = claimdirs.removal_budget(self._removals_per_pass)
            claimdirs.empty_trash(self._layout, trashed, budget=budget)
        except Exception:  # whatever a tenant's tree does, the call's claims are answered
            log.exception("cannot empty the trash; the sweep tries again",
                          paths=[str(path) for path in trashed])  # fmt: skip

    def _remove_claim_files(self, uid: str, trashed: list[Path]) -> str | None:
        """Remove the claim's spec and limits file, move its dir to the trash; the error."""
        try:
            remove_spec(uid, self._layout)
        except OSError as error:
            return f"cannot remove the CDI spec: {error}"
        try:
            trashed += filter(None, [claimdirs.trash(self._layout, uid)])
        except OSError as error:
            return f"cannot remove the claim's directory: {error}"
        return None

    def cleanup_stale(self) -> list[str]:
        """Unprepare claims whose ResourceClaim is gone or replaced; their uids."""
        stale = []
        for claim in self.snapshot():
            ref = ClaimRef(claim.namespace, claim.name, claim.uid)
            try:
                current = self._api.get(ref.api_path)
            except ClaimError:
                continue  # the checkpoint refuses such names: never reached
            except KubeError as error:
                if error.status != 404:
                    continue
                current = {}
            if (current.get("metadata") or {}).get("uid") != claim.uid:
                stale.append(claim.uid)
        if stale:
            snapshot = {c.uid: c for c in self.snapshot()}
            self.unprepare(
                ClaimRef(snapshot[u].namespace, snapshot[u].name, u) for u in stale if u in snapshot
            )
        return stale

    def snapshot(self) -> list[PreparedClaim]:
        """The prepared claims now (for metrics and cleanup)."""
        with self._lock:
            return list(self._claims.values())

    # --- one claim ------------------------------------------------------------------------

    def _record(
        self, call: str, ref: ClaimRef, decision: str, started: float, error: str | None
    ) -> None:
        """One log line per claim of a call, and the observer told."""
        seconds = time.perf_counter() - started
        fields = {
            "claim_uid": ref.uid,
            "namespace": ref.namespace,
            "claim": ref.name,
            "decision": decision,
            "duration_ms": round(seconds * 1000, 2),
        }
        if error:
            log.warning(call, error=error, **fields)
        else:
            log.info(call, **fields)
        if self._observer is not None:
            self._observer(call, decision, seconds)

    def _get_claim(self, ref: ClaimRef) -> Json:
        path = ref.api_path  # checked: no crafted name reaches the API
        try:
            return self._api.get(path)
        except KubeError as error:
            if error.status == 404:
                raise ClaimError(f"ResourceClaim {ref.namespace}/{ref.name} not found") from None
            raise ClaimError(f"reading ResourceClaim {ref.namespace}/{ref.name}: {error}") from None
        except Exception as error:  # the API unreachable after retries: this claim fails
            raise ClaimError(f"reading ResourceClaim {ref.namespace}/{ref.name}: {error}") from None

    def plan(self, claim: Json, ref: ClaimRef, *, read_cards: bool = True) -> PreparedClaim:
        """What preparing `claim` means on this node, without writing anything. `read_cards`:
        NVIDIA's slices may be read (enforcer mode); False under the lock, where only what
        `_fetch_unprepared` warmed is looked at."""
        if self._nvidia_cards is not None:
            cards = self._nvidia_cards
            card = cards.card if read_cards else cards.cached_card
            enforced = enforced_shares(claim, uid=ref.uid, node=self._node,
                                       driver=self._profile.driver, card=card)  # fmt: skip
            shares, devices = enforced.shares, self._enforcer_devices(enforced)
        else:
            shares = claim_shares(
                claim, uid=ref.uid, node=self._node, profile=self._profile, gpus=self._gpus
            )
            devices = self._devices(shares)
        spec = build_spec(shares, self._layout)
        try:
            limits_text(spec)  # libvgpu must be able to tell this claim's GPUs apart
        except ValueError as error:
            raise ClaimError(f"cannot write the limits file: {error}") from None
        return PreparedClaim(
            uid=ref.uid,
            namespace=ref.namespace,
            name=ref.name,
            devices=devices,
            priority=shares.priority,
            cdi_spec=spec_text(spec),
        )

    def _prepare_new(
        self, claim: Json, ref: ClaimRef, *, read_cards: bool = False
    ) -> PreparedClaim:
        """Under the lock: NVIDIA's slices are read only with `read_cards` (the rebuild at
        start, before any call is served); a Prepare warmed them before (`_warm_nvidia_cards`)."""
        prepared = self.plan(claim, ref, read_cards=read_cards)
        try:
            write_spec(prepared.cdi_spec, ref.uid, self._layout)
        except OSError as error:
            raise ClaimError(f"cannot write the CDI spec: {error}") from None
        return prepared

    def _devices(self, shares: ClaimShares) -> tuple[PreparedDevice, ...]:
        return tuple(
            PreparedDevice(
                request_names=(share.request,) if share.request else (),
                pool_name=share.pool,
                device_name=share.device,
                share_id=share.share_id,
                cdi_device_ids=(self._layout.device_id(shares.uid, index),),
                uuid=share.gpu.uuid,
                memory=share.memory,
                cores=share.cores,
            )
            for index, share in enumerate(shares.shares)
        )

    def _enforcer_devices(self, enforced: EnforcedClaim) -> tuple[PreparedDevice, ...]:
        """One entry per enforced share (metrics count each card's shares from them), all the
        same device to the kubelet (`answered`): this node's enforcer with every CDI device of
        the spec and NO request name, so that every container that lists the claim gets the
        limits, whichever of its requests it names (the kubelet gives a device without request
        names to all of them)."""
        shares = enforced.shares
        ids = tuple(self._layout.device_id(shares.uid, i) for i in range(len(shares.shares)))
        return tuple(
            PreparedDevice(
                request_names=(),
                pool_name=self._node,
                device_name=ENFORCER_DEVICE,
                share_id=enforced.share_id,
                cdi_device_ids=ids,
                uuid=share.gpu.uuid,
                memory=share.memory,
                cores=share.cores,
            )
            for share in shares.shares
        )

    def _ensure_spec(self, claim: PreparedClaim) -> None:
        if spec_is_current(claim.cdi_spec, claim.uid, self._layout):
            return
        try:
            write_spec(claim.cdi_spec, claim.uid, self._layout)
        except (OSError, ValueError) as error:
            raise ClaimError(f"cannot rewrite the CDI spec: {error}") from None
