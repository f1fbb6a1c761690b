"""What the claims of each namespace book, summed as its GPU quotas count them, from a watch on
every ResourceClaim: the quota gate's `used` without a LIST per admission (issue 26: a namespace
holding 5,000 claims was read whole, 5,000 claims parsed, on every GPU admission into it).

Only claims that book something of our driver or DeviceClass are held, as their booking, not as
objects: a few hundred bytes each. A claim that leaves memory to the card's default books the
largest card known, which changes as cards come and go; such a claim keeps a few numbers per
request (`core.booking.Sizing`: count, mode, capacity asked; never its selectors or config) and
is counted at each admission. Those numbers are bounded per namespace (`HELD_PER_NAMESPACE`
requests): past it, the claims that did not fit are held without them and the namespace is
counted by listing its claims at admission, as before this watch, until they are gone (issue 35:
300 claims of 1.26 MiB in one namespace, held whole, took every replica past its memory limit).
The list is read in pages, each item trimmed as it is read (`KubeApi.list_all`), so neither a
cluster's 20,000 claims nor one page of big ones sit in memory at once.

Every ResourceClaim of the cluster is watched, other drivers' too (the API server filters claims by
name and namespace only): an event whose bytes name neither our DeviceClass nor our driver, for a
claim not held, cannot book anything of ours and is passed over undecoded (`screen`; issue 35:
126-325 µs of our CPU per foreign claim event while another driver made 200-480 claims/s).

The sums lag the API server by one watch event: two admissions at once could already both pass
(see quotas.py), so the gate's guarantee is unchanged.

The same watch sums what the allocated claims consumed of each card (`cards`), which the webhook
serves at GET /bookings: `kubectl vgpu status -n` reads a card's booking there instead of
listing every claim of the cluster (20,000 claims at 10,000 GPUs: 25 MB, 1.3 s).
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from vgpu_bridge.core.booking import Booking, Sizing, claim_sizing, total
from vgpu_bridge.core.placements import placements
from vgpu_bridge.core.profiles import DriverProfile
from vgpu_bridge.kube import Json, KubeApi
from vgpu_bridge.webhook.watching import follow, skipped

ALL_CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
#: requests of claims sized later held per namespace (~130 bytes each, measured: ~2 MB)
HELD_PER_NAMESPACE = 16_384
#: the head of a watch event as the API server writes it (Go's field order, no spaces): its type,
#: then the object's kind, apiVersion and metadata up to its resourceVersion; names and versions
#: hold no quote or backslash. Any other layout is decoded in full.
_EVENT_HEAD = re.compile(
    rb'\{"type":"(?:ADDED|MODIFIED|DELETED)","object":\{(?:"kind":"[^"\\]*",)?'
    rb'(?:"apiVersion":"[^"\\]*",)?"metadata":\{"name":"([^"\\]+)",'
    rb'(?:"generateName":"[^"\\]*",)?"namespace":"([^"\\]+)",(?:"selfLink":"[^"\\]*",)?'
    rb'(?:"uid":"[^"\\]*",)?"resourceVersion":"([^"\\]+)"'
)
#: marks a claim kube-scheduler made for a pod's extended resources (KEP-5004)
EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"
#: claims per page of the first list (the API server builds each page whole: 100 claims of
#: 1.5 MiB, the most one can be, are 150 MB there)
CLAIM_PAGE_SIZE = 100


class OnCard(NamedTuple):
    """What one allocated device of a claim consumed of its card (pool and device names
    interned: 20,000 claims name 10,000 cards); `cores` in the profile's units (NVIDIA's
    shares of N, converted to percent once per card by `ClaimBookings.cards`)."""

    pool: str
    device: str
    memory: int
    cores: int


@dataclass(frozen=True, slots=True)
class Held:
    """One claim's booking with no card size known; `sizing` (what its booking reads) when
    whole-card memory makes it depend on the largest card; `cards`, where it is allocated."""

    booking: Booking
    sizing: Sizing | None = None
    cards: tuple[OnCard, ...] = ()
    owner: str | None = None  # the pod uid kube-scheduler made it for (an extended-resource claim)


@dataclass(slots=True)
class CardSum:
    """What the claims allocated on one card consumed of it (memory and SM percent not
    recorded count 0, as the status view counts them), and in how many allocated devices."""

    memory: int = 0
    cores: int = 0
    shares: int = 0

    def count(self, placed: OnCard, sign: int) -> None:
        self.memory += sign * placed.memory
        self.cores += sign * placed.cores
        self.shares += sign


@dataclass(slots=True)
class _Namespace:
    """One namespace's held claims. `unheld`: claims sized later that did not fit in the bound,
    held without their sizing; while there are any, the namespace's sums are not known here."""

    claims: dict[str, Held] = field(default_factory=dict)
    devices: int = 0  # sums of the held claims whose booking needs no card size
    memory_bytes: int = 0
    cores: int = 0
    weight: int = 0  # requests held by the claims sized later
    unheld: set[str] = field(default_factory=set)
    owners: dict[str, int] = field(default_factory=dict)  # pod uid → its extended-resource claims

    def add(self, name: str, held: Held, *, bound: int) -> None:
        self.remove(name)
        if held.sizing is not None and self.weight + held.sizing.weight > bound:
            self.unheld.add(name)
            held = Held(held.booking, None, held.cards, held.owner)
        self.claims[name] = held
        self._count(name, held, 1)
        if held.owner is not None:
            self.owners[held.owner] = self.owners.get(held.owner, 0) + 1

    def remove(self, name: str) -> None:
        held = self.claims.pop(name, None)
        if held is not None:
            self._count(name, held, -1)
            if held.owner is not None and (left := self.owners.pop(held.owner) - 1):
                self.owners[held.owner] = left
        self.unheld.discard(name)

    def _count(self, name: str, held: Held, sign: int) -> None:
        if name in self.unheld:
            return
        if held.sizing is not None:
            self.weight += sign * held.sizing.weight
            return
        self.devices += sign * held.booking.devices
        self.memory_bytes += sign * held.booking.memory_bytes
        self.cores += sign * held.booking.cores


def held_by(claim: Mapping[str, Any], profile: DriverProfile) -> Held | None:
    """What `claim` books of `profile`'s devices, None when nothing."""
    sizing = claim_sizing(claim, profile=profile)
    booking = sizing.booking(None)
    if booking.devices == 0:
        return None
    per_card = profile.shares_per_card is not None  # NVIDIA's shares: summed, converted once
    cards = tuple(
        OnCard(sys.intern(p.pool), sys.intern(p.device), p.memory or 0,
               (p.cores_units if per_card else p.cores) or 0)
        for p in placements(claim, profile=profile)
    )  # fmt: skip
    owner = extended_claim_owner(claim)
    if booking.unsized == 0:
        sums = Booking(booking.devices, booking.memory_bytes, booking.cores)
        return Held(sums, cards=cards, owner=owner)
    return Held(booking, sizing, cards, owner)


def extended_claim_owner(claim: Mapping[str, Any]) -> str | None:
    """The uid of the pod kube-scheduler made `claim` for, when it is the claim of a pod's
    extended resources (KEP-5004: annotated, its controller the pod); None for any other claim.
    Such a pod, still unbound, is counted by this claim, not again as a pod waiting
    (`pending_pods`)."""
    meta = claim.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping) or annotations.get(EXTENDED_CLAIM) != "true":
        return None
    for owner in meta.get("ownerReferences") or ():
        if isinstance(owner, Mapping) and owner.get("kind") == "Pod" and owner.get("controller"):
            uid = owner.get("uid")
            return sys.intern(uid) if isinstance(uid, str) else None
    return None


def event_version(line: bytes) -> str | None:
    """The resourceVersion of a watch event's line as the API server writes it, read without
    decoding it (None: a layout not recognised)."""
    head = _EVENT_HEAD.match(line)
    return None if head is None else head.group(3).decode()


class ClaimBookings:
    """Namespace → what its claims book, and card → what the claims allocated on it consumed.
    `used` and `cards` answer None while the watch is not current (until the watch after a list
    or a resume is established; see `watching`), and `used` for a namespace past its bound: the
    caller then lists the claims itself."""

    def __init__(
        self, api: KubeApi, *, profile: DriverProfile, held_per_namespace: int = HELD_PER_NAMESPACE
    ) -> None:
        self._api, self._profile, self._bound = api, profile, held_per_namespace
        self._ours = tuple({f'"{n}"'.encode() for n in (profile.device_class, profile.driver)})
        self._by_namespace: dict[str, _Namespace] = {}
        self._by_card: dict[tuple[str, str], CardSum] = {}
        self._lock = threading.Lock()
        self.synced = threading.Event()

    def run(self, stop: threading.Event) -> None:
        follow(self._api, ALL_CLAIMS, stop=stop, on_list=self._store, on_event=self.apply,
               on_current=self.synced.set, on_stale=self.synced.clear,
               what="resource claim", keep=self._keep,
               page_size=CLAIM_PAGE_SIZE, screen=self.screen)  # fmt: skip

    def screen(self, line: bytes) -> Json | None:
        """A watch event's line that needs no decoding, as a SKIPPED event carrying its version
        only: one whose bytes name neither our DeviceClass nor our driver (as JSON strings) can
        book nothing of ours, unless it is the last word on a claim held (an allocation of
        another class of our driver, undone). None: decode it (ours, held, an ERROR or a
        BOOKMARK, or a layout not recognised)."""
        if any(name in line for name in self._ours):
            return None
        head = _EVENT_HEAD.match(line)
        if head is None:
            return None
        name, namespace, version = (part.decode() for part in head.groups())
        with self._lock:
            place = self._by_namespace.get(namespace)
            if place is not None and name in place.claims:
                return None
        return skipped(version)

    def used(self, namespace: str, largest: int | None, *, leaving_out: set[str]) -> Booking | None:
        """What the namespace's claims book, those named in `leaving_out` left out."""
        if not self.synced.is_set():
            return None
        with self._lock:
            held = self._by_namespace.get(namespace)
            if held is None:
                return Booking()
            if held.unheld:
                return None
            sums = Booking(held.devices, held.memory_bytes, held.cores)
            sized_later = [h.sizing for h in held.claims.values() if h.sizing is not None]
            left_out = [held.claims[n] for n in leaving_out if n in held.claims]
        for gone in left_out:
            if gone.sizing is None:
                sums = Booking(sums.devices - gone.booking.devices,
                               sums.memory_bytes - gone.booking.memory_bytes,
                               sums.cores - gone.booking.cores)  # fmt: skip
            else:
                sized_later.remove(gone.sizing)
        return sums + total(sizing.booking(largest) for sizing in sized_later)

    def claimed_for(self, namespace: str) -> set[str]:
        """The pods of the namespace that own an extended-resource claim held here (their uids):
        counted by their claim. Read beside `used`, which answers None when this cannot be
        trusted."""
        with self._lock:
            held = self._by_namespace.get(namespace)
            return set() if held is None else set(held.owners)

    def cards(self) -> dict[tuple[str, str], CardSum] | None:
        """(pool, device) → what the claims allocated on that card consumed, as of the watch."""
        if not self.synced.is_set():
            return None
        with self._lock:
            percent = self._profile.cores_percent  # NVIDIA's shares of N summed, as percent
            return {card: CardSum(s.memory, percent(s.cores), s.shares)
                    for card, s in self._by_card.items()}  # fmt: skip

    def __len__(self) -> int:
        with self._lock:
            return sum(len(n.claims) for n in self._by_namespace.values())

    def _keep(self, claim: Json) -> Json | None:
        """A listed claim as it is kept while the list is read: its place and booking only."""
        held = held_by(claim, self._profile)
        return None if held is None else {"where": where(claim), "held": held}

    def replace(self, kept: Iterable[Json]) -> None:
        """The claims as a list known to be current says (`_keep` applied)."""
        self._store(kept)
        self.synced.set()

    def _store(self, kept: Iterable[Json]) -> None:
        """The claims as listed; `synced` is set once the watch from the list's version is
        established (see `watching`)."""
        by_namespace: dict[str, _Namespace] = {}
        by_card: dict[tuple[str, str], CardSum] = {}
        for item in kept:
            namespace, name = item["where"]
            by_namespace.setdefault(namespace, _Namespace()).add(
                name, item["held"], bound=self._bound
            )
            _count_cards(by_card, item["held"], 1)
        with self._lock:
            self._by_namespace, self._by_card = by_namespace, by_card

    def apply(self, kind: str, claim: Json) -> None:
        namespace, name = where(claim)
        held = None if kind == "DELETED" else held_by(claim, self._profile)
        with self._lock:
            place = self._by_namespace.setdefault(namespace, _Namespace())
            before = place.claims.get(name)
            if before is not None:
                _count_cards(self._by_card, before, -1)
            if held is None:
                place.remove(name)
            else:
                place.add(name, held, bound=self._bound)
                _count_cards(self._by_card, held, 1)
            if not place.claims:
                del self._by_namespace[namespace]


def _count_cards(by_card: dict[tuple[str, str], CardSum], held: Held, sign: int) -> None:
    """Add (`sign` 1) or take away (-1) what `held` consumed of each card it is on; a card that
    no claim holds any more is forgotten."""
    for placed in held.cards:
        key = (placed.pool, placed.device)
        total_here = by_card.setdefault(key, CardSum())
        total_here.count(placed, sign)
        if total_here.shares <= 0:
            del by_card[key]


def where(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of an object as the API server sent it."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


BOOKINGS_KIND = "CardBookings"
BOOKINGS_API_VERSION = "vgpu-bridge.io/v1"


def bookings_document(cards: Mapping[tuple[str, str], CardSum]) -> Json:
    """GET /bookings: every card some allocated claim is on, sorted by node and device (bytes
    and SM percent, as the status view's documents count them)."""
    return {
        "apiVersion": BOOKINGS_API_VERSION,
        "kind": BOOKINGS_KIND,
        "cards": [
            {"node": node, "device": device, "memory": s.memory, "cores": s.cores,
             "shares": s.shares}
            for (node, device), s in sorted(cards.items())
        ],
    }  # fmt: skip
