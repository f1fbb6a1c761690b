"""What the claim watch holds of a claim (issue 35, item 2): only what a booking reads, never the
claim's JSON. A claim of our class with no memory request (32 requests, each with 4 CEL selectors
of 10 KiB: 1.26 MiB, within the API's limits) was held with its whole `spec.devices`, and 300 of
them in one namespace took a replica past its memory limit. Held now: per request its count,
allocation mode and capacity requests, sized by the largest card at each admission as before;
and past a bound per namespace the namespace is counted by listing its claims at admission."""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from tests.unit.recording_api import RecordingApi
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.core.booking import Booking, claim_booking, total
from vgpu_bridge.webhook.claim_bookings import ClaimBookings, Held, held_by

GiB = 1 << 30
SELECTOR = "device.attributes['gpu'].productName.contains('" + "x" * 10 * 1024 + "')"


def big_claim(name: str = "big", namespace: str = "hostile", *, requests: int = 32) -> Any:
    exactly = {"deviceClassName": DEFAULT.device_class, "count": 1,
               "selectors": [{"cel": {"expression": SELECTOR}} for _ in range(4)]}  # fmt: skip
    claim = {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {
            "requests": [{"name": f"r{i}", "exactly": exactly} for i in range(requests)],
            "config": [{"opaque": {"driver": DEFAULT.driver, "parameters": {"x": SELECTOR}}}],
        }},
    }  # fmt: skip
    return json.loads(json.dumps(claim))  # each part its own object, as the watch parses it


def deep_size(value: object, seen: set[int] | None = None) -> int:
    """Bytes of `value` and everything it refers to (each object once)."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        return size + sum(deep_size(k, seen) + deep_size(v, seen) for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return size + sum(deep_size(item, seen) for item in value)
    slots = getattr(type(value), "__slots__", ())
    return size + sum(deep_size(getattr(value, s), seen) for s in slots if hasattr(value, s))


def strings_in(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in strings_in(k) + strings_in(v)]
    if isinstance(value, list | tuple):
        return [s for item in value for s in strings_in(item)]
    slots = getattr(type(value), "__slots__", ())
    return [s for name in slots if hasattr(value, name) for s in strings_in(getattr(value, name))]


def test_a_big_claim_with_no_memory_request_is_held_small_without_its_selectors() -> None:
    held = held_by(big_claim(), DEFAULT)
    assert isinstance(held, Held)
    assert deep_size(held) < 8 * 1024  # the claim's JSON is 1.26 MiB
    assert not [s for s in strings_in(held) if "productName" in s or len(s) > 200]


def test_a_big_claim_held_small_books_as_the_whole_claim_does(recorded: RecordingApi) -> None:
    claim = big_claim()
    claims = ClaimBookings(recorded.api, profile=DEFAULT)
    claims.replace([])
    claims.apply("ADDED", claim)
    whole = claim_booking(claim, profile=DEFAULT, largest_card=80 * GiB)
    assert claims.used("hostile", 80 * GiB, leaving_out=set()) == Booking(
        whole.devices, whole.memory_bytes, whole.cores
    )
    assert whole == Booking(32, 32 * 80 * GiB, 3200)


def test_past_its_bound_a_namespace_is_counted_by_listing_and_others_are_not(
    recorded: RecordingApi,
) -> None:
    """A namespace whose claims need more held requests than the bound is no longer answered
    from the watch (the quota gate then lists that namespace's claims); every other namespace
    still is, and once the claims that did not fit are gone, the namespace is answered again."""
    claims = ClaimBookings(recorded.api, profile=DEFAULT, held_per_namespace=100)
    claims.replace([])
    claims.apply("ADDED", big_claim("small", "team-a", requests=2))
    for i in range(4):  # 4 x 32 held requests: the fourth does not fit
        claims.apply("ADDED", big_claim(f"big-{i}", requests=32))
    assert claims.used("hostile", 80 * GiB, leaving_out=set()) is None
    assert claims.used("team-a", 80 * GiB, leaving_out=set()) == Booking(2, 160 * GiB, 200)
    claims.apply("DELETED", big_claim("big-3"))
    assert claims.used("hostile", 80 * GiB, leaving_out=set()) == Booking(96, 96 * 80 * GiB, 9600)


def test_the_bound_keeps_the_sums_right_through_any_events(recorded: RecordingApi) -> None:
    """Random adds, re-adds and deletions of claims of 1 to 16 requests under a bound of 64:
    whenever the namespace is answered, it is the sum of booking its live claims."""
    chooser = random.Random(35)
    claims = ClaimBookings(recorded.api, profile=DEFAULT, held_per_namespace=64)
    claims.replace([])
    live: dict[str, Any] = {}
    answered = 0
    for _ in range(400):
        name = f"c{chooser.randrange(10)}"
        if name in live and chooser.random() < 0.4:
            claims.apply("DELETED", live.pop(name))
        else:
            live[name] = big_claim(name, requests=chooser.randint(1, 16))
            claims.apply("MODIFIED", live[name])
        got = claims.used("hostile", 80 * GiB, leaving_out=set())
        answered += got is not None
        if got is not None:
            expected = total(claim_booking(c, profile=DEFAULT, largest_card=80 * GiB)
                             for c in live.values())  # fmt: skip
            assert got == Booking(expected.devices, expected.memory_bytes, expected.cores)
    assert 50 < answered < 350  # both sides of the bound were taken
