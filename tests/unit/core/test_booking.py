"""What a claim of our DeviceClass books against HAMi's namespace quotas: devices, memory and
cores summed over devices; allocated claims by what the scheduler recorded, others by what they
ask, the largest alternative of a percentage, a whole card by the largest card known."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.core import DEFAULT
from vgpu_bridge.core.booking import Booking, claim_booking, spec_booking
from vgpu_bridge.core.quantity import MiB

GiB = 1024 * MiB
CLASS = DEFAULT.device_class


def exact(count: int = 1, **capacity: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "deviceClassName": CLASS,
        "allocationMode": "ExactCount",
        "count": count,
    }
    body["capacity"] = {"requests": capacity}
    return body


def spec(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


CASES = [
    pytest.param(
        spec({"name": "gpu", "exactly": exact(2, memory="3000Mi", cores="30")}), None,
        Booking(devices=2, memory_bytes=6000 * MiB, cores=60), id="share-on-two-cards",
    ),
    pytest.param(
        spec({"name": "gpu", "firstAvailable": [
            {"name": "card-40gi", **exact(1, memory="10Gi", cores="0")},
            {"name": "card-80gi", **exact(1, memory="20Gi", cores="0")},
        ]}), None,
        Booking(devices=1, memory_bytes=20 * GiB, cores=0), id="percentage-books-its-largest-share",
    ),
    pytest.param(
        spec({"name": "gpu", "exactly": exact(1, cores="100")}), 80 * GiB,
        Booking(devices=1, memory_bytes=80 * GiB, cores=100), id="whole-card-books-largest-card",
    ),
    pytest.param(
        spec({"name": "gpu", "exactly": exact(2, cores="100")}), None,
        Booking(devices=2, cores=200, unsized=2), id="whole-card-of-unknown-size-is-unsized",
    ),
    pytest.param(
        spec({"name": "other", "exactly": {"deviceClassName": "other.example.com", "count": 4}}),
        None, Booking(), id="another-class-books-nothing",
    ),
    pytest.param(
        spec({"name": "gpu", "exactly": {"deviceClassName": CLASS}}), 40 * GiB,
        Booking(devices=1, memory_bytes=40 * GiB, cores=100), id="no-capacity-is-a-whole-card",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("claim_spec", "largest", "booked"), CASES)
def test_a_claim_not_yet_allocated_books_what_it_asks(
    claim_spec: dict[str, Any], largest: int | None, booked: Booking
) -> None:
    assert spec_booking(claim_spec, profile=DEFAULT, largest_card=largest) == booked
    claim = {"spec": claim_spec, "status": {}}
    assert claim_booking(claim, profile=DEFAULT, largest_card=largest) == booked


def result(request: str, driver: str = DEFAULT.driver, **consumed: str) -> dict[str, Any]:
    return {"request": request, "driver": driver, "device": "gpu-0", "consumedCapacity": consumed}


def test_an_allocated_claim_books_what_the_scheduler_recorded_on_our_driver_only() -> None:
    claim = {
        "spec": spec(
            {"name": "gpu", "firstAvailable": [
                {"name": "card-40gi", **exact(1, memory="10Gi", cores="0")},
                {"name": "card-80gi", **exact(1, memory="20Gi", cores="0")},
            ]},
            {"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}},
        ),
        "status": {"allocation": {"devices": {"results": [
            result("gpu/card-40gi", memory="10Gi", cores="0"),
            result("nic", driver="nic.example.com", memory="1Gi"),
        ]}}},
    }  # fmt: skip
    booked = claim_booking(claim, profile=DEFAULT, largest_card=80 * GiB)
    assert booked == Booking(devices=1, memory_bytes=10 * GiB, cores=0)


def test_an_allocated_whole_card_books_its_consumed_memory_and_all_its_cores() -> None:
    claim = {
        "spec": spec({"name": "gpu", "exactly": exact(1, cores="100")}),
        "status": {"allocation": {"devices": {"results": [result("gpu", memory="40Gi")]}}},
    }
    booked = claim_booking(claim, profile=DEFAULT, largest_card=80 * GiB)
    assert booked == Booking(devices=1, memory_bytes=40 * GiB, cores=100)


def test_a_claim_of_garbage_books_nothing_and_raises_nothing() -> None:
    claims: list[dict[str, Any]] = [
        {}, {"spec": []}, {"spec": {"devices": {"requests": "x"}}}, {"status": 3},
    ]  # fmt: skip
    for claim in claims:
        assert claim_booking(claim, profile=DEFAULT, largest_card=None) == Booking()


def test_an_allocated_claim_of_another_class_of_our_driver_is_counted() -> None:
    """The chart's `deviceClasses` adds classes of our driver; what they hold is GPU memory too."""
    claim = {
        "spec": spec({"name": "big", "exactly": {"deviceClassName": "big-cards.example.com"}}),
        "status": {"allocation": {"devices": {"results": [
            result("big", memory="80Gi", cores="100"),
        ]}}},
    }  # fmt: skip
    booked = claim_booking(claim, profile=DEFAULT, largest_card=80 * GiB)
    assert booked == Booking(devices=1, memory_bytes=80 * GiB, cores=100)


def test_a_claim_kube_scheduler_made_for_an_extended_resource_books_whole_cards() -> None:
    """`deviceClass.extendedResourceName` (KEP-5004): a pod the webhook never saw gets a claim
    kube-scheduler made, asking N cards with no capacity; the cards it holds count against the
    namespace's quota for the pods admitted after it."""
    claim = {
        "metadata": {"annotations": {"resource.kubernetes.io/extended-resource-claim": "true"}},
        "spec": spec({"name": "container-0-request-0", "exactly": {
            "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 2}}),
        "status": {"allocation": {"devices": {"results": [
            result("container-0-request-0", memory="80Gi", cores="100", milliCores="1"),
            result("container-0-request-0", memory="40Gi", cores="100", milliCores="1"),
        ]}}},
    }  # fmt: skip
    booked = claim_booking(claim, profile=DEFAULT, largest_card=80 * GiB)
    assert booked == Booking(devices=2, memory_bytes=120 * GiB, cores=200)


def test_a_request_for_every_device_is_marked_with_its_path_not_counted_silently() -> None:
    """`allocationMode: All` takes every matching device: summed as one device, and marked, so
    that a quota check can refuse it instead of counting it as one (issue 25)."""
    every = {"deviceClassName": CLASS, "allocationMode": "All"}
    other = {"deviceClassName": "nic.example.com", "allocationMode": "All"}
    booked = spec_booking(
        spec(
            {"name": "nic", "exactly": other},
            {"name": "gpu", "exactly": every},
            {"name": "alt", "firstAvailable": [{"name": "a", **exact(1)}, {"name": "b", **every}]},
        ),
        profile=DEFAULT,
        largest_card=80 * GiB,
    )
    assert booked.takes_all == (
        "devices.requests[1].exactly.allocationMode",
        "devices.requests[2].firstAvailable[1].allocationMode",
    )
    assert booked.devices == 2
    counted = spec_booking(spec({"name": "gpu", "exactly": exact(3)}), profile=DEFAULT,
                           largest_card=80 * GiB)  # fmt: skip
    assert counted.takes_all == ()
