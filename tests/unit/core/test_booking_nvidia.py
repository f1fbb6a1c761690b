"""What a claim for NVIDIA's driver books against namespace quotas: its cards, not our enforcer;
memory as asked (or the mode's default); cores as the percent its shares are of the card's N,
or, where the driver books no SMs, the SM limit the enforcer's config holds."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_bridge.core import ENFORCER_DRIVER, ENFORCER_REQUEST, nvidia_profile
from vgpu_bridge.core.booking import Booking, claim_booking, spec_booking
from vgpu_bridge.core.opaque_config import GpuShareConfig
from vgpu_bridge.core.quantity import MiB

GiB = 1024 * MiB
ENFORCER = {
    "name": ENFORCER_REQUEST,
    "exactly": {"deviceClassName": ENFORCER_DRIVER, "allocationMode": "ExactCount", "count": 1},
}


def spec(*, count: int = 1, cores: int | None = None, **capacity: str) -> dict[str, Any]:
    card: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": count}
    if capacity:
        card["capacity"] = {"requests": capacity}
    devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": card}, ENFORCER]}
    if cores is not None:
        parameters = GpuShareConfig(cores=cores).to_parameters()
        devices["config"] = [
            {"requests": [ENFORCER_REQUEST],
             "opaque": {"driver": ENFORCER_DRIVER, "parameters": parameters}}
        ]  # fmt: skip
    return {"devices": devices}


CASES = [
    pytest.param("4", spec(memory="3000Mi", shares="2", cores=30), None,
                 Booking(1, 3000 * MiB, 50), id="shares-of-4-as-percent"),
    pytest.param("100", spec(count=2, memory="3000Mi", shares="30", cores=30), None,
                 Booking(2, 6000 * MiB, 60), id="shares-of-100-are-percent"),
    pytest.param("100", spec(memory="3000Mi", cores=0), None,
                 Booking(1, 3000 * MiB, 1), id="no-shares-books-the-default-one"),
    pytest.param("memory", spec(memory="3000Mi", cores=30), None,
                 Booking(1, 3000 * MiB, 30), id="memory-mode-counts-the-sm-limit"),
    pytest.param("memory", spec(memory="3000Mi"), None,
                 Booking(1, 3000 * MiB, 100), id="memory-mode-without-a-limit-counts-all-sms"),
    pytest.param("memory", spec(cores=100), 80 * GiB,
                 Booking(1, 80 * GiB, 100), id="memory-mode-default-is-the-whole-card"),
    pytest.param("unlimited", spec(cores=0), 80 * GiB,
                 Booking(1, 0, 0), id="unlimited-mode-default-is-no-memory"),
]  # fmt: skip


@pytest.mark.parametrize(("mode", "claim_spec", "largest", "expected"), CASES)
def test_a_claim_spec_books_its_cards_not_the_enforcer(
    mode: str, claim_spec: dict[str, Any], largest: int | None, expected: Booking
) -> None:
    profile = nvidia_profile(mode)
    assert spec_booking(claim_spec, profile=profile, largest_card=largest) == expected


def allocated(consumed: dict[str, str], claim_spec: dict[str, Any]) -> dict[str, Any]:
    results = [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0",
         "shareID": "a", "consumedCapacity": consumed},
        {"request": ENFORCER_REQUEST, "driver": ENFORCER_DRIVER, "pool": "n1",
         "device": "enforcer"},
    ]  # fmt: skip
    return {
        "spec": claim_spec,
        "status": {"allocation": {"devices": {"results": results}}},
    }


def test_an_allocated_claim_books_the_shares_recorded() -> None:
    claim = allocated({"memory": "3000Mi", "shares": "1"}, spec(memory="3000Mi", cores=0))
    booked = claim_booking(claim, profile=nvidia_profile("4"), largest_card=None)
    assert booked == Booking(1, 3000 * MiB, 25)


def test_an_allocated_claim_in_memory_mode_books_its_sm_limit() -> None:
    claim = allocated({"memory": "3000Mi"}, spec(memory="3000Mi", cores=40))
    booked = claim_booking(claim, profile=nvidia_profile("memory"), largest_card=None)
    assert booked == Booking(1, 3000 * MiB, 40)


def test_a_share_smaller_than_a_percent_books_one_percent_as_the_node_limits_it() -> None:
    claim = allocated({"memory": "3000Mi", "shares": "1"}, spec(memory="3000Mi", cores=0))
    booked = claim_booking(claim, profile=nvidia_profile("300"), largest_card=None)
    assert booked == Booking(1, 3000 * MiB, 1)
