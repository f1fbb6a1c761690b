"""From ResourceSlices, ResourceClaims and Pods (and optionally the agents' metrics) to a
`Report` (pure: no I/O).

Booked sizes are the allocation's `consumedCapacity` (what the scheduler counted against the
card), priority our opaque config in the allocation; a card's size is its slice's capacity. Only
the newest generation of each pool counts, as the scheduler reads it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from vgpu_bridge.core.inventory import is_full_gpu
from vgpu_bridge.core.opaque_config import ShareConfigError, parse_share_config
from vgpu_bridge.core.placements import placements, quantity_or_none
from vgpu_bridge.core.profiles import DriverProfile
from vgpu_bridge.status.card_bookings import CardBooked
from vgpu_bridge.status.model import Card, PendingPod, Report, Share
from vgpu_bridge.status.usage import Usage

Json = dict[str, Any]


@dataclass(frozen=True)
class Holder:
    """The pod that holds a claim, and its containers that use it."""

    pod: str
    containers: tuple[str, ...]


def build_report(
    slices: Iterable[Json],
    claims: Iterable[Json],
    pods: Iterable[Json],
    *,
    profile: DriverProfile,
    bookings: Iterable[Json] | None = None,
    card_bookings: Mapping[tuple[str, str], CardBooked] | None = None,
    usage: Usage | None = None,
    notes: Iterable[str] = (),
    nodes: Collection[str] | None = None,
) -> Report:
    """Every share of `profile`'s driver in `claims` on the cards of `slices`; shares on cards not
    among them are `unplaced`; pods with claims that no scheduler placed are `pending`. A card's
    booking is what `card_bookings` (the webhook's sums) gives, else what the claims of
    `bookings` (all the cluster's, where readable) consumed of it, else those of `claims`.
    With `nodes`, only the cards on those nodes are shown."""
    pods, slices = list(pods), list(slices)
    holders = claim_holders(pods)
    not_cards = non_card_devices(slices, profile=profile)
    shares = [s for claim in claims for s in claim_shares(claim, profile=profile, holders=holders)
              if (s.node, s.device) not in not_cards]  # fmt: skip
    if usage is not None:
        shares = usage.of_shares(shares)
    cards = {(card.node, card.device): card for card in slice_cards(slices, profile=profile)
             if nodes is None or card.node in nodes}  # fmt: skip
    on_card: dict[tuple[str, str], list[Share]] = {key: [] for key in cards}
    unplaced: list[Share] = []
    for share in sorted(shares, key=_share_order):
        on_card.get((share.node, share.device), unplaced).append(share)
    if card_bookings is not None:
        by_uuid = usage.by_card() if usage is not None else {}
        filled = [_filled(card, on_card[key], card_bookings.get(key),
                          by_uuid.get(card.uuid, 0) if _read(card, usage) else None)
                  for key, card in sorted(cards.items())]  # fmt: skip
    else:
        booked = shares if bookings is None else [
            s for claim in bookings for s in claim_shares(claim, profile=profile, holders={})
            if (s.node, s.device) not in not_cards
        ]  # fmt: skip
        if usage is not None and bookings is not None:
            booked = usage.of_shares(booked)
        by_card: dict[tuple[str, str], list[Share]] = {}
        for share in booked:  # grouped once: a walk of every share per card is quadratic
            by_card.setdefault((share.node, share.device), []).append(share)
        filled = []
        for key, card in sorted(cards.items()):
            mine = by_card.get(key, [])
            summed = CardBooked(sum(s.memory or 0 for s in mine), _card_cores(mine, profile))
            used = sum(s.used_memory or 0 for s in mine) if _read(card, usage) else None
            filled.append(_filled(card, on_card[key], summed, used))
    return Report(tuple(filled), tuple(unplaced), pending_pods(pods), tuple(notes))


def _card_cores(shares: list[Share], profile: DriverProfile) -> int:
    """The SM percent a card's shares booked: NVIDIA's shares of N summed, then converted once
    (N shares of one fill the card: 100, not N times the rounded-down percent); else the sum."""
    if profile.shares_per_card is None:
        return sum(s.cores or 0 for s in shares)
    return profile.cores_percent(sum(s.cores_units or 0 for s in shares))


def _filled(card: Card, shown: list[Share], booked: CardBooked | None, used: int | None) -> Card:
    """`card` with the shares shown on it, what every claim on it booked (None: nothing) and
    the memory its agent saw in use (None: not read)."""
    booked = booked or CardBooked(0, 0)
    return replace(card, shares=tuple(shown), booked_memory=booked.memory,
                   booked_cores=booked.cores, used_memory=used)  # fmt: skip


def _read(card: Card, usage: Usage | None) -> bool:
    """Whether the agent of the card's node was read (its cards' use is known, 0 included)."""
    return usage is not None and card.node in usage.nodes


def _share_order(share: Share) -> tuple[str, str, str, str]:
    return (share.namespace, share.pod, share.claim, share.device)


def claim_holders(pods: Iterable[Json]) -> dict[tuple[str, str], Holder]:
    """(namespace, claim name) -> the pod that holds it and the containers that use it."""
    holders = {}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or ():
            claim = status.get("resourceClaimName")
            if not claim:
                continue
            users = tuple(
                container.get("name", "")
                for container in containers
                if any(
                    ref.get("name") == status.get("name")
                    for ref in (container.get("resources") or {}).get("claims") or ()
                )
            )
            holders[(meta.get("namespace", ""), claim)] = Holder(meta.get("name", ""), users)
    return holders


def claim_shares(
    claim: Json, *, profile: DriverProfile, holders: Mapping[tuple[str, str], Holder]
) -> list[Share]:
    """The allocated devices of our driver in `claim`, one share each (none if unallocated)."""
    meta = claim.get("metadata") or {}
    configs = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "config"
    )
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    holder = holders.get((namespace, name)) or Holder("", ())
    return [
        Share(
            namespace=namespace,
            pod=holder.pod,
            containers=holder.containers,
            claim=name,
            claim_uid=meta.get("uid", ""),
            node=placed.pool,
            device=placed.device,
            memory=placed.memory,
            cores=placed.cores,
            cores_units=placed.cores_units,
            priority=_priority(configs or (), placed.request, profile),
        )
        for placed in placements(claim, profile=profile)
    ]


def _priority(configs: Iterable[Json], answered: str, profile: DriverProfile) -> int | None:
    """The last of our opaque configs that applies to the request a result `answered` (a
    subrequest's result answers its request) and sets a priority. Under the nvidia profile our
    config is our enforcer's, for its own request, and holds for the whole claim."""
    request = answered.split("/", 1)[0]
    ours = profile.enforcer_driver or profile.driver
    priority = None
    for entry in configs:
        opaque = entry.get("opaque") or {}
        applies = bool(profile.enforcer_driver) or not entry.get("requests")
        applies = applies or request in entry["requests"]
        if opaque.get("driver") != ours or not applies:
            continue
        try:
            config = parse_share_config(opaque.get("parameters") or {})
        except ShareConfigError:
            continue  # the agent refuses such a claim with the reason; the view shows no priority
        priority = config.priority if config.priority is not None else priority
    return priority


def slice_cards(slices: Iterable[Json], *, profile: DriverProfile) -> list[Card]:
    """The full GPUs of `profile`'s driver in the newest generation of each pool, as empty
    cards."""
    return [_card(pool, d, profile) for pool, d in _newest_devices(slices, profile)
            if is_full_gpu(d, profile.driver)]  # fmt: skip


def non_card_devices(slices: Iterable[Json], *, profile: DriverProfile) -> set[tuple[str, str]]:
    """(pool, device) of the driver's devices that are no full GPU: NVIDIA publishes its MIG
    and VFIO devices beside its cards (`type` mig, vfio); claims on them are not shares of ours
    (nothing of ours enforces them), so the view leaves them out."""
    return {(pool, str(d.get("name", ""))) for pool, d in _newest_devices(slices, profile)
            if not is_full_gpu(d, profile.driver)}  # fmt: skip


def _newest_devices(slices: Iterable[Json], profile: DriverProfile) -> list[tuple[str, Json]]:
    """(pool, device) of `profile`'s driver in the newest generation of each pool."""
    ours = [s for s in slices if (s.get("spec") or {}).get("driver") == profile.driver]
    newest: dict[str, int] = {}
    for piece in ours:
        pool = piece["spec"].get("pool") or {}
        newest[pool.get("name", "")] = max(newest.get(pool.get("name", ""), 0), _generation(pool))
    found = []
    for piece in ours:
        spec = piece["spec"]
        pool = spec.get("pool") or {}
        if _generation(pool) == newest[pool.get("name", "")]:
            found += [(pool.get("name", ""), d) for d in spec.get("devices") or ()]
    return found


def _generation(pool: Json) -> int:
    generation = pool.get("generation", 0)
    return generation if isinstance(generation, int) else 0


def _card(pool: str, device: Json, profile: DriverProfile) -> Card:
    attributes, capacity = device.get("attributes") or {}, device.get("capacity") or {}

    def text(name: str) -> str:
        return str((attributes.get(name) or {}).get("string", ""))

    def size(name: str) -> int:
        return quantity_or_none((capacity.get(name) or {}).get("value")) or 0

    return Card(
        node=pool,
        device=str(device.get("name", "")),
        uuid=text(profile.uuid_attribute),
        product=text(profile.product_attribute),
        memory=size(profile.memory_capacity),
        # SM percent of the card: 100 for ours; NVIDIA's N shares are the whole card too; 0
        # where the driver books no SMs (NVIDIA's memory and unlimited modes)
        cores=profile.cores_percent(size(profile.cores_capacity)) if profile.cores_capacity else 0,
        shares=(),
    )


def pending_pods(pods: Iterable[Json]) -> tuple[PendingPod, ...]:
    """Pods with resource claims, not bound to a node, not being deleted: with the scheduler's
    reason (its PodScheduled condition), or that no scheduler has looked at them yet."""
    waiting = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if spec.get("nodeName") or not spec.get("resourceClaims") or meta.get("deletionTimestamp"):
            continue
        if phase != "Pending":
            continue
        scheduler = spec.get("schedulerName") or "default-scheduler"
        waiting.append(
            PendingPod(meta.get("namespace", ""), meta.get("name", ""), scheduler, _reason(pod))
        )
    return tuple(sorted(waiting, key=lambda p: (p.namespace, p.pod)))


def _reason(pod: Json) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") != "True":
            return str(condition.get("message") or condition.get("reason") or "not scheduled")
    scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
    return f"not yet looked at by {scheduler}"
