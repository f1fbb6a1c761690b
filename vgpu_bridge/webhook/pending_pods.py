"""Whole-card pods admitted but not yet bound, per namespace, from a watch on the cluster's unbound
pods: the quota gate counts them beside the claims without a LIST per admission (issue 26).

A pod no webhook translated that asks whole cards of our class as an extended resource (KEP-5004)
has no claim until kube-scheduler binds it: the scheduler makes its claim at PreBind. Counted only
at its own admission, it was invisible to the next ones, so a tenant who created many such pods at
once (each seeing only the claims) overshot the quota once they bound (issue 35, item 4). Here
each such pod is held as its uid and its card count, nothing else (~150 bytes). A pod leaves the
watch when it is bound (it no longer matches `spec.nodeName=`: the API server sends DELETED) or
deleted; from then on its claim counts through `claim_bookings.ClaimBookings`. In between, the
claim exists while the pod still waits: a pod whose uid owns an extended-resource claim of the
namespace is left to the claim (`uncounted`), so nothing is counted twice.

Bounded per namespace and in all: past either bound, the pods that did not fit are not held and
the namespace answers None, so the gate lists that namespace's unbound pods at admission, as the
claim watch falls back past its own bound. An event whose bytes name none of the whole-card
resources is passed over undecoded (most unbound pods ask no GPU; a held pod's every event names
its resource, as pod resources of extended resources cannot change).

The watch lags the API server: a pod bound (its DELETED seen) before its claim's ADDED reaches the
claim watch is briefly counted by neither; as with two admissions at once (see quotas.py), that
is one pod's cards, never a tenant's loop.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from vgpu_bridge.core.booking import extended_resource_sizing
from vgpu_bridge.kube import Json, KubeApi, api_path
from vgpu_bridge.webhook.claim_bookings import event_version
from vgpu_bridge.webhook.watching import follow, skipped

ALL_PODS = "/api/v1/pods"
#: pods kube-scheduler has not bound yet (a field selector pods support for list and watch)
UNBOUND = "spec.nodeName="
#: whole-card pods held per namespace, and in all (~150 bytes each: ~0.6 MB and ~10 MB)
HELD_PER_NAMESPACE = 4_096
HELD_IN_ALL = 65_536
FINISHED = ("Succeeded", "Failed")  # a pod ended before binding gets no claim


def waiting_cards(pod: Mapping[str, Any], names: Iterable[str]) -> int:
    """The whole cards of our class `pod` waits for: what its extended resources `names` ask,
    0 once it is bound or finished."""
    spec, status = pod.get("spec"), pod.get("status")
    if isinstance(spec, Mapping) and spec.get("nodeName"):
        return 0
    if isinstance(status, Mapping) and status.get("phase") in FINISHED:
        return 0
    return extended_resource_sizing(pod, names).booking(None).devices


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid"))


def _namespace(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("namespace"))


class PendingWholeCards:
    """Namespace → {pod uid: whole cards} of its unbound whole-card pods. `waiting` answers None
    while the watch is not current (until the watch after a list or a resume is established; see
    `watching`) and for a namespace some pod of which did not fit the bounds: the caller then
    lists that namespace's unbound pods (`list_waiting`)."""

    def __init__(
        self,
        api: KubeApi,
        *,
        names: tuple[str, ...],
        held_per_namespace: int = HELD_PER_NAMESPACE,
        held_in_all: int = HELD_IN_ALL,
    ) -> None:
        self._api, self._names = api, names
        self._per_namespace, self._in_all = held_per_namespace, held_in_all
        self._marks = tuple(f'"{n}"'.encode() for n in names)
        self._by_namespace: dict[str, dict[str, int]] = {}
        self._overflow: dict[str, set[str]] = {}  # namespace → uids not held past a bound
        self._held = 0
        self._lock = threading.Lock()
        self.synced = threading.Event()

    def run(self, stop: threading.Event) -> None:
        follow(self._api, ALL_PODS, stop=stop, on_list=self._store, on_event=self.apply,
               on_current=self.synced.set, on_stale=self.synced.clear,
               what="unbound pod", keep=self._keep,
               screen=self.screen, fieldSelector=UNBOUND)  # fmt: skip

    def screen(self, line: bytes) -> Json | None:
        """A SKIPPED event (its version only) for a line that names none of the whole-card
        resources as a JSON string: that pod asks no whole card of ours, and never did. None:
        decode it."""
        if any(mark in line for mark in self._marks):
            return None
        version = event_version(line)
        if version is None:
            return None
        return skipped(version)

    def waiting(self, namespace: str) -> dict[str, int] | None:
        """{pod uid: whole cards} of the namespace's unbound whole-card pods."""
        if not self.synced.is_set():
            return None
        with self._lock:
            if namespace in self._overflow:
                return None
            return dict(self._by_namespace.get(namespace, {}))

    def list_waiting(self, namespace: str) -> dict[str, int]:
        """The same, read from the API server in pages, each pod reduced as it is read."""
        path = api_path("/api/v1", "namespaces", namespace, "pods")
        listed = self._api.list_all(path, keep=self._keep, fieldSelector=UNBOUND)
        return {item["uid"]: item["cards"] for item in listed.items}

    def __len__(self) -> int:
        with self._lock:
            return self._held

    def _keep(self, pod: Json) -> Json | None:
        cards = waiting_cards(pod, self._names)
        if not cards:
            return None
        return {"namespace": _namespace(pod), "uid": _uid(pod), "cards": cards}

    def replace(self, kept: Iterable[Json]) -> None:
        """The unbound pods as a list known to be current says (`_keep` applied)."""
        self._store(kept)
        self.synced.set()

    def _store(self, kept: Iterable[Json]) -> None:
        """The pods as listed; `synced` is set once the watch from the list's version is
        established (see `watching`)."""
        with self._lock:
            self._by_namespace, self._overflow, self._held = {}, {}, 0
            for item in kept:
                self._hold(item["namespace"], item["uid"], item["cards"])

    def apply(self, kind: str, pod: Json) -> None:
        namespace, uid = _namespace(pod), _uid(pod)
        cards = 0 if kind == "DELETED" else waiting_cards(pod, self._names)
        with self._lock:
            self._drop(namespace, uid)
            if cards:
                self._hold(namespace, uid, cards)

    def _hold(self, namespace: str, uid: str, cards: int) -> None:
        pods = self._by_namespace.setdefault(namespace, {})
        if len(pods) >= self._per_namespace or self._held >= self._in_all:
            self._overflow.setdefault(namespace, set()).add(uid)
            if not pods:
                del self._by_namespace[namespace]
            return
        pods[uid] = cards
        self._held += 1

    def _drop(self, namespace: str, uid: str) -> None:
        overflow = self._overflow.get(namespace)
        if overflow is not None:
            overflow.discard(uid)
            if not overflow:
                del self._overflow[namespace]
        pods = self._by_namespace.get(namespace)
        if pods is not None and pods.pop(uid, None) is not None:
            self._held -= 1
            if not pods:
                del self._by_namespace[namespace]


def uncounted(waiting: Mapping[str, int], claimed_for: Iterable[str]) -> int:
    """The whole cards of `waiting` pods whose claim does not exist yet (a pod that owns an
    extended-resource claim is counted by that claim)."""
    owners = set(claimed_for)
    return sum(cards for uid, cards in waiting.items() if uid not in owners)
