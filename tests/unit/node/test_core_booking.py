"""HAMi's two exclusivity rules as capacity arithmetic: the slices this agent publishes, the claims
core writes, and the allocator's sum rule (dra.md §2.2: a request below a range's `min` is
rounded up to it, an unrequested capacity consumes the policy's default, and the shares of a
device must fit every capacity's value). The real kube-scheduler proves the same in
e2e/test_core_booking.py.

HAMi (pkg/device/nvidia/device.go `Fit`): `gpucores: 100` never joins a used card
(ExclusiveDeviceAllocateConflict), and a share without an SM limit never joins a card whose
cores are fully used (CardComputeUnitsExhausted).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from vgpu_bridge.core import DEFAULT, HAMI, DeviceFilter, GpuRequest, Inventory
from vgpu_bridge.core.claims import claim_spec
from vgpu_bridge.core.models import Problems
from vgpu_bridge.core.profiles import DriverProfile, core_booking_quantity
from vgpu_bridge.core.quantity import MiB, parse_quantity
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.slices import device

CARD = Gpu(0, "GPU-a", "NVIDIA H100 80GB HBM3", 80 * 1024 * MiB)


def requests(profile: DriverProfile, *, cores: int, memory_mib: int | None = 1024) -> Any:
    """The capacity requests core writes for one share of one card."""
    problems = Problems()
    request = GpuRequest(count=1, memory_mib=memory_mib, cores=cores)
    spec = claim_spec(
        request,
        DeviceFilter(),
        profile=profile,
        inventory=Inventory(),
        percent_path="-",
        problems=problems,
    )
    assert spec is not None, problems.errors
    return spec["devices"]["requests"][0]["exactly"]["capacity"]["requests"]


def consumed(capacity: Any, asked: dict[str, str]) -> dict[str, Decimal]:
    """What one share consumes of each capacity of the device (validRange with step 1 or 1Mi)."""
    result = {}
    for name, published in capacity.items():
        policy = published["requestPolicy"]
        if name not in asked:
            result[name] = parse_quantity(policy["default"])
            continue
        minimum = parse_quantity(policy["validRange"]["min"])
        step = parse_quantity(policy["validRange"]["step"])
        value = max(parse_quantity(asked[name]), minimum)
        result[name] = minimum + -((minimum - value) // step) * step
    return result


def fits(profile: DriverProfile, shares: list[dict[str, str]]) -> bool:
    """True when all `shares` fit on one card as the allocator counts."""
    capacity = device(CARD, profile)["capacity"]
    used = [consumed(capacity, share) for share in shares]
    return all(
        sum(u[name] for u in used) <= parse_quantity(published["value"])
        for name, published in capacity.items()
    )


def share(cores: int, *, profile: DriverProfile = DEFAULT) -> dict[str, str]:
    return dict(requests(profile, cores=cores))


def test_a_share_books_a_thousand_per_percent_of_cores_and_one_without_an_sm_limit() -> None:
    assert share(30)["milliCores"] == "30k"
    assert share(100)["milliCores"] == "100k"
    assert share(0)["milliCores"] == "1"
    assert requests(DEFAULT, cores=100, memory_mib=None) == {"cores": "100", "milliCores": "100k"}


@pytest.mark.parametrize("cores", [-1, 101])
def test_a_booking_outside_0_to_100_percent_is_a_bug_not_a_quantity(cores: int) -> None:
    with pytest.raises(ValueError, match="not a percent"):
        core_booking_quantity(cores)


@pytest.mark.parametrize(
    ("first", "second"), [(100, 0), (0, 100), (100, 100), (100, 1), (1, 100)], ids=str
)
def test_cores_100_is_alone_on_its_card_whichever_comes_first(first: int, second: int) -> None:
    assert fits(DEFAULT, [share(first)])
    assert not fits(DEFAULT, [share(first), share(second)])


def test_a_share_without_an_sm_limit_does_not_join_a_card_whose_cores_are_fully_booked() -> None:
    assert fits(DEFAULT, [share(60), share(40)])
    assert not fits(DEFAULT, [share(60), share(40), share(0)])
    assert fits(DEFAULT, [share(60), share(39), share(0)])


def test_legacy_sharing_is_kept_otherwise() -> None:
    assert fits(DEFAULT, [share(0)] * 80)  # memory-only shares: 1Gi each of 80Gi
    assert fits(DEFAULT, [share(10)] * 10)
    assert fits(DEFAULT, [share(50), share(0), share(0), share(49)])


def test_a_share_without_an_sm_limit_takes_a_thousandth_of_a_percent_whatever_the_order() -> None:
    """HAMi's rule depends on the order (a 0 placed first lets 60 + 40 follow); a sum cannot, so
    a card holding a share without an SM limit takes at most 99% in SM-limited shares."""
    assert not fits(DEFAULT, [share(0), share(60), share(40)])


def test_hand_written_claims_without_a_booking_share_as_before() -> None:
    """The booking's default is 1, not the card: claims from before the rule still share."""
    old = {"memory": "1Gi", "cores": "30"}
    assert fits(DEFAULT, [old, old, old])


def test_under_the_hami_profile_a_share_of_100_cores_alone_lets_a_0_join() -> None:
    """HAMi's driver publishes `cores` 0..100 only: no booking. So translate books the whole card
    for `gpucores: 100` under that profile instead (the golden case
    hami-profile-cores-100-books-the-whole-card, e2e/translate/test_hami_profile_exclusive.py);
    the second rule stays unenforced (README)."""
    assert "milliCores" not in share(0, profile=HAMI)
    assert fits(HAMI, [share(100, profile=HAMI), share(0, profile=HAMI)])
