"""The quota gate's `used` from a watch on every ResourceClaim (issue 26: no list of a namespace's
claims per admission): the sums equal what listing and booking each claim gives, through adds,
changes and deletions, whole-card claims sized by the largest card at the time of asking; an
admission against a followed namespace makes no claim list, and one before the first list does."""

from __future__ import annotations

import random
from typing import Any

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over, pod_response
from tests.unit.webhook.test_quotas import CLAIMS, asked_for, held, message, namespace_holds, pod
from tests.unit.webhook.test_quotas import quota as quota_in
from vgpu_bridge.core import DEFAULT, Inventory, TranslatorConfig
from vgpu_bridge.core.booking import Booking, claim_booking, total
from vgpu_bridge.core.dialects import hami
from vgpu_bridge.core.placements import placements
from vgpu_bridge.webhook.admission import Admitter
from vgpu_bridge.webhook.claim_bookings import ClaimBookings, held_by
from vgpu_bridge.webhook.quotas import QuotaCache, QuotaGate

GiB = 1 << 30


def named(name: str, body: dict[str, Any], namespace: str = "team-a") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, **body}


def whole_card() -> dict[str, Any]:
    """A claim of our class that leaves memory to the card's default: it books a whole card."""
    request = {"deviceClassName": DEFAULT.device_class, "count": 1}
    return {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}}


def other_driver() -> dict[str, Any]:
    request = {"deviceClassName": "other.example.com", "count": 1}
    return {"spec": {"devices": {"requests": [{"name": "nic", "exactly": request}]}}}


def admitter_with(api: RecordingApi, claims: ClaimBookings) -> Admitter:
    gate = QuotaGate(api=api.api, cache=QuotaCache(api.api, names=hami.RESOURCES),
                     profile=DEFAULT, names=hami.RESOURCES, inventory=Inventory,
                     claims=claims)  # fmt: skip
    return admitter_over(api, config=TranslatorConfig(), quotas=gate)


def test_a_followed_namespace_is_counted_without_listing_its_claims(
    recorded: RecordingApi,
) -> None:
    namespace_holds(recorded, [quota_in("team-gpu", **{"limits.nvidia.com/gpumem": "10000"})],
                    [held(1, "5000Mi", 0), held(1, "3000Mi", 0)])  # fmt: skip
    claims = ClaimBookings(recorded.api, profile=DEFAULT)
    claims.replace([
        {"where": ("team-a", "a"), "held": held_by(held(1, "5000Mi", 0), DEFAULT)},
        {"where": ("team-a", "b"), "held": held_by(held(1, "3000Mi", 0), DEFAULT)},
    ])  # fmt: skip
    response = pod_response(admitter_with(recorded, claims), pod({"nvidia.com/gpumem": 3000}))
    assert message(response) == (
        "exceeded quota team-gpu: limits.nvidia.com/gpumem: requested 3000, used 8000, "
        "limited 10000"
    )
    assert CLAIMS not in asked_for(recorded)


def test_before_its_first_list_the_gate_lists_the_claims_itself(recorded: RecordingApi) -> None:
    namespace_holds(recorded, [quota_in("team-gpu", **{"limits.nvidia.com/gpumem": "10000"})],
                    [held(1, "8000Mi", 0)])  # fmt: skip
    claims = ClaimBookings(recorded.api, profile=DEFAULT)
    response = pod_response(admitter_with(recorded, claims), pod({"nvidia.com/gpumem": 3000}))
    assert "used 8000" in message(response)
    assert CLAIMS in asked_for(recorded)


def test_only_claims_booking_our_devices_are_held(recorded: RecordingApi) -> None:
    claims = ClaimBookings(recorded.api, profile=DEFAULT)
    claims.replace([])
    claims.apply("ADDED", named("nic", other_driver()))
    claims.apply("ADDED", named("share", held(2, "1Gi", 10)))
    assert len(claims) == 1
    assert claims.used("team-a", None, leaving_out=set()) == Booking(2, 2 * GiB, 20)
    assert claims.used("elsewhere", None, leaving_out=set()) == Booking()
    claims.synced.clear()  # the watch stopped: unknown until it has listed again
    assert claims.used("team-a", None, leaving_out=set()) is None


def test_a_whole_card_claim_books_the_largest_card_known_when_asked(
    recorded: RecordingApi,
) -> None:
    claims = ClaimBookings(recorded.api, profile=DEFAULT)
    claims.replace([])
    claims.apply("ADDED", named("whole", whole_card()))
    claims.apply("ADDED", named("share", held(1, "1Gi", 10)))
    assert claims.used("team-a", None, leaving_out=set()) == Booking(2, GiB, 110, unsized=1)
    assert claims.used("team-a", 80 * GiB, leaving_out=set()) == Booking(2, 81 * GiB, 110)
    assert claims.used("team-a", 80 * GiB, leaving_out={"whole"}) == Booking(1, GiB, 10)
    assert claims.used("team-a", 80 * GiB, leaving_out={"share"}) == Booking(1, 80 * GiB, 100)


def test_the_sums_match_listing_and_booking_each_claim_through_any_events(
    recorded: RecordingApi,
) -> None:
    """Random adds, changes (allocated, resized, turned into another driver's) and deletions
    over three namespaces: after each event the cache's sums equal booking the live claims."""
    chooser = random.Random(26)
    shapes = [lambda: held(chooser.randint(1, 3), f"{chooser.randint(1, 80)}Gi",
                           chooser.randint(0, 100)),
              whole_card, other_driver]  # fmt: skip
    live: dict[tuple[str, str], dict[str, Any]] = {}
    claims = ClaimBookings(recorded.api, profile=DEFAULT)
    claims.replace([])
    for _ in range(600):
        where = (chooser.choice(["a", "b", "c"]), f"claim-{chooser.randint(0, 30)}")
        if where in live and chooser.random() < 0.3:
            claims.apply("DELETED", live.pop(where))
        else:
            claim = named(where[1], chooser.choice(shapes)(), namespace=where[0])
            claims.apply("MODIFIED" if where in live else "ADDED", claim)
            live[where] = claim
        namespace = chooser.choice(["a", "b", "c"])
        names = [n for ns, n in live if ns == namespace]
        leaving_out = set(chooser.sample(names, min(len(names), chooser.randint(0, 2))))
        expected = total(claim_booking(c, profile=DEFAULT, largest_card=80 * GiB)
                         for (ns, n), c in live.items()
                         if ns == namespace and n not in leaving_out)  # fmt: skip
        got = claims.used(namespace, 80 * GiB, leaving_out=leaving_out)
        assert got == Booking(expected.devices, expected.memory_bytes, expected.cores)


def on_cards(*places: tuple[str, str, str, int]) -> dict[str, Any]:
    """An allocated claim of our driver: (pool, device, memory, cores) per result."""
    results = [{"request": f"gpu{i}", "driver": DEFAULT.driver, "pool": pool, "device": device,
                "consumedCapacity": {"memory": memory, "cores": str(cores)}}
               for i, (pool, device, memory, cores) in enumerate(places)]  # fmt: skip
    request = {"deviceClassName": DEFAULT.device_class, "count": len(places)}
    return {
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
        "status": {"allocation": {"devices": {"results": results}}},
    }


Sums = dict[tuple[str, str], tuple[int, ...]]


def card_sums_of(claims: dict[tuple[str, str], dict[str, Any]]) -> Sums:
    """What the claims consumed of each card, summed from scratch."""
    sums: dict[tuple[str, str], list[int]] = {}
    for claim in claims.values():
        for placed in placements(claim, profile=DEFAULT):
            total_here = sums.setdefault((placed.pool, placed.device), [0, 0, 0])
            total_here[0] += placed.memory or 0
            total_here[1] += placed.cores or 0
            total_here[2] += 1
    return {card: tuple(values) for card, values in sums.items()}


def followed(claims: ClaimBookings) -> Sums:
    cards = claims.cards()
    assert cards is not None
    return {card: (s.memory, s.cores, s.shares) for card, s in cards.items()}


def test_the_cards_sums_follow_adds_changes_and_deletions(recorded: RecordingApi) -> None:
    """Per card, what the allocated claims consumed equals summing the claims there are, after
    every event of a random run (claims moved between cards, two results on one card, claims
    unallocated again and deleted); a card nothing holds any more is left out."""
    chooser = random.Random(26)
    cards = [("node-a", "gpu-0"), ("node-a", "gpu-1"), ("node-b", "gpu-0")]
    claims = ClaimBookings(recorded.api, profile=DEFAULT)
    assert claims.cards() is None  # not following yet: the viewer lists the claims itself
    claims.replace([])
    now: dict[tuple[str, str], dict[str, Any]] = {}
    for _ in range(300):
        key = (chooser.choice(["team-a", "team-b"]), f"c{chooser.randrange(8)}")
        action = chooser.choice(["put", "put", "unallocate", "delete"])
        if action == "delete":
            now.pop(key, None)
            claims.apply("DELETED", named(key[1], {}, key[0]))
            continue
        if action == "unallocate":
            claim = named(key[1], whole_card(), key[0])
        else:
            count = chooser.randrange(1, 3)
            places = [(*chooser.choice(cards), f"{chooser.randrange(1, 9)}Gi",
                       chooser.randrange(0, 50)) for _ in range(count)]  # fmt: skip
            claim = named(key[1], on_cards(*places), key[0])
        now[key] = claim
        claims.apply("MODIFIED", claim)
        assert followed(claims) == card_sums_of(now)
    assert followed(claims) == card_sums_of(now)
