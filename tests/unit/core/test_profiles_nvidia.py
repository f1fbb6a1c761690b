"""The `nvidia` profile: claims for NVIDIA's DRA driver (`gpu.nvidia.com`) in each of its
`--consumable-shares` modes, and the enforcer our node agent publishes beside it."""

from __future__ import annotations

import re

import pytest

from vgpu_bridge.core import (
    ENFORCER_DRIVER,
    ENFORCER_REQUEST,
    PROFILES,
    nvidia_profile,
    profile_named,
)
from vgpu_bridge.core.profiles import DEFAULT, HAMI

NVIDIA_MIG_NAME = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")  # NVIDIA's mig.go parse regex

MODES = [
    # consumable_shares, cores capacity, shares per card, memory default is the whole card
    ("100", "shares", 100, False),
    ("4", "shares", 4, False),
    ("memory", None, None, True),
    ("unlimited", None, None, False),
]


@pytest.mark.parametrize(("mode", "cores", "shares", "whole"), MODES, ids=[m[0] for m in MODES])
def test_each_consumable_shares_mode_has_its_capacities(
    mode: str, cores: str | None, shares: int | None, whole: bool
) -> None:
    profile = nvidia_profile(mode)
    assert (profile.name, profile.driver, profile.device_class) == (
        "nvidia",
        "gpu.nvidia.com",
        "gpu.nvidia.com",
    )
    assert (profile.uuid_attribute, profile.product_attribute) == ("uuid", "productName")
    assert profile.memory_capacity == "memory"
    assert profile.cores_capacity == cores
    assert profile.shares_per_card == shares
    assert profile.memory_default_whole_card is whole
    assert profile.core_booking_capacity is None
    assert profile.share_config is False
    assert profile.enforcer_driver == ENFORCER_DRIVER == "enforcer.vgb.io"


@pytest.mark.parametrize("value", ["disabled", "", "0", "-3", "1.5", "Memory", " 100", "x"])
def test_a_mode_nvidia_does_not_share_in_is_refused_naming_it(value: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(value))):
        nvidia_profile(value)


def test_a_share_count_past_the_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="'10000001'"):
        nvidia_profile("10000001")


@pytest.mark.parametrize("driver", ["vgpu-enforcer.example.com", "Enforcer.vgb.io", "a..b"])
def test_an_enforcer_driver_kai_would_count_or_the_api_refuses_is_refused(driver: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(driver))):
        nvidia_profile("100", enforcer_driver=driver)


def test_profile_named_knows_nvidia_with_100_shares_unless_told_otherwise() -> None:
    assert profile_named("nvidia") == nvidia_profile("100")
    assert profile_named("nvidia", nvidia_consumable_shares="memory") == nvidia_profile("memory")
    renamed = profile_named("nvidia", enforcer_driver="limits.example.com")
    assert renamed.enforcer_driver == "limits.example.com"
    assert "nvidia" in PROFILES


def test_our_profiles_book_percent_cores_and_take_the_whole_card_by_default() -> None:
    for profile in (DEFAULT, HAMI):
        assert profile.cores_capacity == "cores"
        assert profile.shares_per_card is None
        assert profile.memory_default_whole_card is True
        assert profile.enforcer_driver is None


@pytest.mark.parametrize(
    ("mode", "booked", "percent"),
    [("100", 30, 30), ("4", 1, 25), ("4", 4, 100), ("3", 1, 33), ("3", 2, 66), ("100", 0, 0),
     ("300", 1, 1), ("1000", 9, 1), ("3", 3, 100), ("3", 4, 100)],
)  # fmt: skip
def test_booked_shares_read_as_percent_of_the_card(mode: str, booked: int, percent: int) -> None:
    """As the node agent sets the SM limit: at least 1 percent for a share, 100 for all N."""
    assert nvidia_profile(mode).cores_percent(booked) == percent


def test_our_cores_are_already_percent() -> None:
    assert DEFAULT.cores_percent(40) == 40


def test_the_enforcer_names_are_neither_a_gpu_for_kai_nor_an_nvidia_mig_device() -> None:
    assert "gpu" not in ENFORCER_DRIVER
    assert ENFORCER_REQUEST == "vgpu-limits"
    assert not NVIDIA_MIG_NAME.match("enforcer")
