"""The webhook's per-card sums (GET /bookings, read by `kubectl vgpu status`) on NVIDIA's
`<N>` mode: a card's shares are summed, then converted to percent once, as the node limits them."""

from __future__ import annotations

from typing import Any

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.test_quotas_nvidia import held
from vgpu_bridge.core import nvidia_profile
from vgpu_bridge.webhook.claim_bookings import ClaimBookings


def named(name: str, claim: dict[str, Any]) -> dict[str, Any]:
    claim["metadata"]["name"] = name
    return claim


def card_cores(recorded: RecordingApi, mode: str, shares: list[int]) -> int:
    claims = ClaimBookings(recorded.api, profile=nvidia_profile(mode))
    claims.replace([])
    for index, share in enumerate(shares):
        claims.apply("ADDED", named(f"c{index}", held("1Gi", share)))
    cards = claims.cards()
    assert cards is not None
    return cards[("n1", "gpu-0")].cores


def test_n_shares_of_one_fill_the_card_not_99(recorded: RecordingApi) -> None:
    assert card_cores(recorded, "3", [1, 1, 1]) == 100


def test_shares_under_a_percent_are_summed_before_they_are_converted(
    recorded: RecordingApi,
) -> None:
    assert card_cores(recorded, "300", [1, 1, 1, 1]) == 1  # 4 of 300: 1.33 percent


def test_a_removed_share_frees_its_part_of_the_card(recorded: RecordingApi) -> None:
    claims = ClaimBookings(recorded.api, profile=nvidia_profile("3"))
    claims.replace([])
    for index in range(3):
        claims.apply("ADDED", named(f"c{index}", held("1Gi", 1)))
    claims.apply("DELETED", named("c2", held("1Gi", 1)))
    cards = claims.cards()
    assert cards is not None
    assert cards[("n1", "gpu-0")].cores == 66
