"""What the claims of each namespace book, summed as its GPU quotas count them, from a watch on
every ResourceClaim: the quota gate's `used` without a LIST per admission (issue 26: a namespace
holding 5,000 claims was read whole, 5,000 claims parsed, on every GPU admission into it).

Only claims that book something of our driver or DeviceClass are held, as their booking, not as
objects: a few hundred bytes each. A claim that leaves memory to the card's default books the
largest card known, which changes as cards come and go; such a claim keeps the parts of its
object the booking reads and is counted at each admission. The list is read page by page and each
page trimmed before the next, so a cluster's 20,000 claims never sit in memory at once.

The sums lag the API server by one watch event: two admissions at once could already both pass
(see quotas.py), so the gate's guarantee is unchanged.

The same watch sums what the allocated claims consumed of each card (`cards`), which the webhook
serves at GET /bookings: `kubectl vgpu status -n` reads a card's booking there instead of
listing every claim of the cluster (20,000 claims at 10,000 GPUs: 25 MB, 1.3 s).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from vgpu_bridge.core.booking import Booking, claim_booking, total
from vgpu_bridge.core.placements import placements
from vgpu_bridge.core.profiles import DriverProfile
from vgpu_bridge.kube import Json, KubeApi
from vgpu_bridge.webhook.watching import follow

ALL_CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"


class OnCard(NamedTuple):
    """What one allocated device of a claim consumed of its card (pool and device names
    interned: 20,000 claims name 10,000 cards)."""

    pool: str
    device: str
    memory: int
    cores: int


@dataclass(frozen=True, slots=True)
class Held:
    """One claim's booking with no card size known; `claim` (the parts a booking reads) when
    whole-card memory makes it depend on the largest card; `cards`, where it is allocated."""

    booking: Booking
    claim: Json | None = None
    cards: tuple[OnCard, ...] = ()


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
    claims: dict[str, Held] = field(default_factory=dict)
    devices: int = 0  # sums of the held claims whose booking needs no card size
    memory_bytes: int = 0
    cores: int = 0

    def add(self, name: str, held: Held) -> None:
        self.remove(name)
        self.claims[name] = held
        self._count(held, 1)

    def remove(self, name: str) -> None:
        held = self.claims.pop(name, None)
        if held is not None:
            self._count(held, -1)

    def _count(self, held: Held, sign: int) -> None:
        if held.claim is None:
            self.devices += sign * held.booking.devices
            self.memory_bytes += sign * held.booking.memory_bytes
            self.cores += sign * held.booking.cores


def held_by(claim: Mapping[str, Any], profile: DriverProfile) -> Held | None:
    """What `claim` books of `profile`'s devices, None when nothing."""
    booking = claim_booking(claim, profile=profile, largest_card=None)
    if booking.devices == 0:
        return None
    cards = tuple(
        OnCard(sys.intern(p.pool), sys.intern(p.device), p.memory or 0, p.cores or 0)
        for p in placements(claim, profile=profile)
    )
    if booking.unsized == 0:
        return Held(Booking(booking.devices, booking.memory_bytes, booking.cores), cards=cards)
    spec, status = claim.get("spec") or {}, claim.get("status") or {}
    trimmed = {"spec": {"devices": spec.get("devices")},
               "status": {"allocation": status.get("allocation")}}  # fmt: skip
    return Held(booking, trimmed, cards)


class ClaimBookings:
    """Namespace → what its claims book, and card → what the claims allocated on it consumed.
    `used` and `cards` answer None while the watch is not following (before its first list, or
    after a failure until it has listed again): the caller then lists the claims itself."""

    def __init__(self, api: KubeApi, *, profile: DriverProfile) -> None:
        self._api, self._profile = api, profile
        self._by_namespace: dict[str, _Namespace] = {}
        self._by_card: dict[tuple[str, str], CardSum] = {}
        self._lock = threading.Lock()
        self.synced = threading.Event()

    def run(self, stop: threading.Event) -> None:
        follow(self._api, ALL_CLAIMS, stop=stop, on_list=self.replace, on_event=self.apply,
               on_stale=self.synced.clear, what="resource claim", keep=self._keep)  # fmt: skip

    def used(self, namespace: str, largest: int | None, *, leaving_out: set[str]) -> Booking | None:
        """What the namespace's claims book, those named in `leaving_out` left out."""
        if not self.synced.is_set():
            return None
        with self._lock:
            held = self._by_namespace.get(namespace)
            if held is None:
                return Booking()
            sums = Booking(held.devices, held.memory_bytes, held.cores)
            sized_later = [h.claim for h in held.claims.values() if h.claim is not None]
            left_out = [held.claims[n] for n in leaving_out if n in held.claims]
        for gone in left_out:
            if gone.claim is None:
                sums = Booking(sums.devices - gone.booking.devices,
                               sums.memory_bytes - gone.booking.memory_bytes,
                               sums.cores - gone.booking.cores)  # fmt: skip
            else:
                sized_later.remove(gone.claim)
        booked = (claim_booking(c, profile=self._profile, largest_card=largest)
                  for c in sized_later)  # fmt: skip
        return sums + total(booked)

    def cards(self) -> dict[tuple[str, str], CardSum] | None:
        """(pool, device) → what the claims allocated on that card consumed, as of the watch."""
        if not self.synced.is_set():
            return None
        with self._lock:
            return {card: CardSum(s.memory, s.cores, s.shares) for card, s in self._by_card.items()}

    def __len__(self) -> int:
        with self._lock:
            return sum(len(n.claims) for n in self._by_namespace.values())

    def _keep(self, claim: Json) -> Json | None:
        """A listed claim as it is kept while the list is read: its place and booking only."""
        held = held_by(claim, self._profile)
        return None if held is None else {"where": where(claim), "held": held}

    def replace(self, kept: Iterable[Json]) -> None:
        by_namespace: dict[str, _Namespace] = {}
        by_card: dict[tuple[str, str], CardSum] = {}
        for item in kept:
            namespace, name = item["where"]
            by_namespace.setdefault(namespace, _Namespace()).add(name, item["held"])
            _count_cards(by_card, item["held"], 1)
        with self._lock:
            self._by_namespace, self._by_card = by_namespace, by_card
        self.synced.set()

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
                place.add(name, held)
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
