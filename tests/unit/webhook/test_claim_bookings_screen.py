"""The claim watch passes over other drivers' claims without decoding them (issue 35): the API
server can narrow a ResourceClaim watch by name and namespace only, so every claim of the cluster
arrives, and each foreign event cost 126-325 µs of our CPU (decoded whole, then booked to find it
books nothing). An event whose bytes name neither our DeviceClass nor our driver, for a claim not
held, is screened: only its resourceVersion is read. Everything else is decoded as before: our
claims (a hand-written one of our class too), a held claim's last word, ERROR and BOOKMARK events,
and any layout that is not the API server's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.test_watching import Script, serving
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.core.booking import Booking
from vgpu_bridge.webhook.claim_bookings import ClaimBookings

GiB = 1 << 30
FOREIGN = "gpu.nvidia.com"


def claim(name: str, *, device_class: str, driver: str | None = None, version: str = "7",
          namespace: str = "team-a") -> dict[str, Any]:  # fmt: skip
    """A claim as the API server writes it (Go's field order), allocated on `driver` if given."""
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class, "count": 1}}
    body: dict[str, Any] = {
        "kind": "ResourceClaim",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": name, "generateName": "p-", "namespace": namespace,
                     "uid": "4f0c9d1e-0000-4000-8000-000000000001", "resourceVersion": version,
                     "creationTimestamp": "2026-12-07T05:00:00Z",
                     "annotations": {"resourceVersion": "not this one"}},
        "spec": {"devices": {"requests": [request]}},
    }  # fmt: skip
    if driver is not None:
        result = {"request": "gpu", "driver": driver, "pool": "node-a", "device": "gpu-0",
                  "consumedCapacity": {"memory": "10Gi", "cores": "10"}}  # fmt: skip
        body["status"] = {"allocation": {"devices": {"results": [result]}}}
    return body


def line(kind: str, obj: dict[str, Any]) -> bytes:
    """One watch event as the API server streams it: compact JSON, type first."""
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode()


@pytest.fixture
def claims(recorded: RecordingApi) -> ClaimBookings:
    followed = ClaimBookings(recorded.api, profile=DEFAULT)
    followed.replace([])
    return followed


@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED", "DELETED"])
def test_another_drivers_claim_is_screened_to_its_version(claims: ClaimBookings, kind: str) -> None:
    foreign = claim("theirs", device_class=FOREIGN, driver=FOREIGN, version="4242")
    assert claims.screen(line(kind, foreign)) == {
        "type": "SKIPPED", "object": {"metadata": {"resourceVersion": "4242"}}
    }  # fmt: skip


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(lambda: claim("mine", device_class=DEFAULT.device_class), id="our-class"),
        pytest.param(
            lambda: claim("other-class", device_class="big.example.com", driver=DEFAULT.driver),
            id="allocated-on-our-driver",
        ),
    ],
)
def test_a_claim_naming_our_class_or_driver_is_decoded(claims: ClaimBookings, shape: Any) -> None:
    assert claims.screen(line("ADDED", shape())) is None


def test_a_held_claims_last_word_is_decoded_even_naming_neither(claims: ClaimBookings) -> None:
    """A claim of another class of our driver, allocated (held), then deallocated: its MODIFIED
    names neither any more, and must still reach the cache to drop it."""
    allocated = claim("other-class", device_class="big.example.com", driver=DEFAULT.driver)
    claims.apply("ADDED", allocated)
    undone = claim("other-class", device_class="big.example.com")
    assert claims.screen(line("MODIFIED", undone)) is None
    claims.apply("MODIFIED", undone)
    assert claims.used("team-a", 80 * GiB, leaving_out=set()) == Booking()
    assert claims.screen(line("MODIFIED", undone)) is not None  # no longer held


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"code":410}}',
        b'{"type":"BOOKMARK","object":{"kind":"ResourceClaim","apiVersion":"resource.k8s.io/v1",'
        b'"metadata":{"resourceVersion":"99","annotations":{"k8s.io/initial-events-end":"true"}}}}',
        json.dumps({"type": "ADDED", "object": claim("spaced", device_class=FOREIGN)}).encode(),
        json.dumps(
            {"object": claim("object-first", device_class=FOREIGN), "type": "ADDED"},
            separators=(",", ":"),
        ).encode(),
    ],
    ids=["error", "bookmark", "spaced-json", "object-first"],
)
def test_what_is_not_a_recognised_event_head_is_decoded(claims: ClaimBookings, raw: bytes) -> None:
    assert claims.screen(raw) is None


class Decoding(ClaimBookings):
    """Remembers the claims whose events reached it decoded."""

    decoded: list[str]

    def apply(self, kind: str, claim: dict[str, Any]) -> None:
        self.decoded.append(claim["metadata"]["name"])
        super().apply(kind, claim)


def test_through_the_watch_foreign_events_only_move_the_version() -> None:
    """Against a real KubeApi: foreign claims' events change nothing, ours count, and the next
    watch resumes from the last foreign event's version."""
    ours = claim("mine", device_class=DEFAULT.device_class, driver=DEFAULT.driver, version="12")
    theirs = [claim(f"f{i}", device_class=FOREIGN, driver=FOREIGN, version=str(20 + i))
              for i in range(3)]  # fmt: skip
    events = [{"type": "ADDED", "object": obj} for obj in (ours, *theirs)]
    script = Script(listed=[], watches=[events, []], compact=True)
    with serving(script) as api:
        followed = Decoding(api, profile=DEFAULT)
        followed.decoded = []
        followed.run(script.stop)
    assert followed.decoded == ["mine"]
    assert len(followed) == 1
    watches = [q for q in script.queries if q.get("watch") == "true"]
    assert [q["resourceVersion"] for q in watches][:2] == ["10", "22"]
