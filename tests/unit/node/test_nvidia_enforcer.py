"""Enforcer mode reads NVIDIA's shares (issue 37): the card from NVIDIA's slice, the limits from
the allocation's consumed capacity and our config, in each `--consumable-shares` mode, and
refuses every claim whose share it could not hold to its limits (no share without its limits)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from e2e.nvidia.slices import NvidiaCard, mock_uuid
from tests.unit.node.claims import NODE, UID
from tests.unit.node.nvidia_claims import (
    ENFORCER_SHARE_ID,
    enforcer_config,
    enforcer_result,
    nvidia_claim,
    nvidia_result,
    nvidia_slice,
)
from vgpu_bridge.core.profiles import ENFORCER_DRIVER
from vgpu_bridge.node.allocation import ClaimError
from vgpu_bridge.node.enforcer import EnforcedClaim, enforced_shares, enforcer_device
from vgpu_bridge.node.nvidia_slices import MAX_AGE_S, CardProblem, NvidiaCards, cards_in_slices

Json = dict[str, Any]
GIB = 2**30
SECOND_SHARE_ID = "5b4f0a11-0000-4000-8000-00000000000b"


class Slices:
    """NVIDIA's slices as an API would list them, counting the reads."""

    def __init__(self, *slices: Json) -> None:
        self.slices = list(slices)
        self.reads = 0
        self.broken: Exception | None = None

    def __call__(self) -> list[Json]:
        self.reads += 1
        if self.broken is not None:
            raise self.broken
        return copy.deepcopy(self.slices)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _enforce(claim: Json, mode: str = "100", **slice_args: Any) -> EnforcedClaim:
    cards = NvidiaCards(Slices(nvidia_slice(mode, **slice_args)), node=NODE)
    return enforced_shares(claim, uid=UID, node=NODE, driver=ENFORCER_DRIVER, card=cards.card)


def _limits(enforced: EnforcedClaim) -> list[tuple[str, int, int]]:
    return [(s.gpu.uuid, s.memory, s.cores) for s in enforced.shares.shares]


# --- NVIDIA's slice ---------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "shares"), [("100", 100), ("4", 4), ("memory", None),
                                              ("unlimited", None)])  # fmt: skip
def test_each_card_of_nvidias_slice_is_read_with_its_uuid_memory_and_shares(
    mode: str, shares: int | None
) -> None:
    found = cards_in_slices([nvidia_slice(mode)], node=NODE)
    card = found["gpu-1"]
    assert not isinstance(card, CardProblem)
    assert (card.uuid, card.memory, card.shares) == (mock_uuid(1), 80 * GIB, shares)
    assert (card.gpu.device_name, card.gpu.product_name) == ("gpu-1", "NVIDIA H100 80GB HBM3")
    assert card.gpu.device_node is None  # NVIDIA's spec gives the device node, not ours


def test_only_the_newest_generation_of_this_nodes_pool_counts() -> None:
    old = nvidia_slice(cards=[NvidiaCard(minor=0, uuid="GPU-old")])
    new = nvidia_slice()
    new["spec"]["pool"]["generation"] = 2
    other = nvidia_slice(node="node-b", cards=[NvidiaCard(minor=7, uuid="GPU-b")])
    other["spec"]["pool"]["generation"] = 9
    found = cards_in_slices([old, new, other], node=NODE)
    assert sorted(found) == ["gpu-0", "gpu-1"]
    assert getattr(found["gpu-0"], "uuid", None) == mock_uuid(0)


def _device_with(**changes: Any) -> Json:
    published = nvidia_slice()
    device = published["spec"]["devices"][0]
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = device
        for parent in parents:
            target = target[parent]
        if value is None:
            del target[leaf]
        else:
            target[leaf] = value
    return published


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"attributes__type": {"string": "mig"}}, "MIG devices of gpu.nvidia.com are not enforced"),
        ({"attributes__type": {"string": "vfio"}}, "attribute type is 'vfio'"),
        ({"attributes__uuid": None}, "no string attribute uuid"),
        ({"attributes__uuid": {"int": 5}}, "no string attribute uuid"),
        ({"capacity__memory": None}, "no capacity memory"),
        ({"capacity__memory": {"value": "1e40"}}, "capacity memory"),
        ({"capacity__memory": {"value": "-1Gi"}}, "capacity memory '-1Gi' is not 1.."),
        ({"capacity__shares": {"value": "2.5"}}, "capacity shares '2.5' is not 1.."),
        ({"capacity__shares": {"value": "0"}}, "capacity shares '0' is not 1.."),
    ],
)
def test_a_device_that_is_no_enforceable_card_says_why(changes: Json, reason: str) -> None:
    found = cards_in_slices([_device_with(**changes)], node=NODE)["gpu-0"]
    assert isinstance(found, CardProblem)
    assert reason in str(found)


def test_the_cards_are_read_once_and_again_only_on_a_miss_or_when_old() -> None:
    slices, clock = Slices(nvidia_slice()), Clock()
    cards = NvidiaCards(slices, node=NODE, clock=clock)
    assert cards.card("gpu-0").uuid == mock_uuid(0)
    assert cards.card("gpu-1").uuid == mock_uuid(1)
    assert slices.reads == 1  # a Prepare normally makes no API call
    clock.now += 2
    slices.slices[0]["spec"]["devices"].append(
        nvidia_slice(cards=[NvidiaCard(minor=2, uuid="GPU-new")])["spec"]["devices"][0]
    )
    assert cards.card("gpu-2").uuid == "GPU-new"  # a card published since: read again
    assert slices.reads == 2
    clock.now += 31
    cards.card("gpu-0")
    assert slices.reads == 3


def test_a_burst_of_misses_reads_the_slices_once() -> None:
    slices = Slices(nvidia_slice())
    cards = NvidiaCards(slices, node=NODE, clock=Clock())
    for _ in range(5):
        with pytest.raises(CardProblem, match=r"'gpu-9' is not in gpu\.nvidia\.com's slice"):
            cards.card("gpu-9")
    assert slices.reads == 1


def test_an_api_that_cannot_be_read_is_the_claims_error() -> None:
    slices = Slices(nvidia_slice())
    slices.broken = RuntimeError("connection refused")
    cards = NvidiaCards(slices, node=NODE, clock=Clock())
    with pytest.raises(CardProblem, match=r"reading gpu\.nvidia\.com's ResourceSlices.*refused"):
        cards.card("gpu-0")
    assert cards.cards() == ()  # metrics: nothing known, and no exception


# --- the limits of a share --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shares", "cores", "sm"),
    [
        ("30", 30, 30),  # gpucores 30 of 100 shares: 30 shares, SM limit 30
        ("30", 20, 20),  # the config asks less than the shares: the config's
        ("30", 50, 30),  # never more than the shares booked
        ("30", 0, 0),  # gpucores 0: no SM limit
        ("30", None, 30),  # no cores in the config: the shares booked
        ("1", None, 1),  # the policy default: 1 share
        ("100", 100, 100),  # the whole card
    ],
)
def test_in_the_100_shares_mode_the_sm_limit_follows_the_shares_and_the_config(
    shares: str, cores: int | None, sm: int
) -> None:
    claim = nvidia_claim(nvidia_result(shares=shares), enforcer_result(),
                         config=[enforcer_config(cores=cores)])  # fmt: skip
    assert _limits(_enforce(claim)) == [(mock_uuid(0), GIB, sm)]


@pytest.mark.parametrize(("shares", "sm"), [("1", 25), ("3", 75), ("4", 100), ("9", 100)])
def test_in_an_n_shares_mode_a_share_is_its_part_of_the_card(shares: str, sm: int) -> None:
    claim = nvidia_claim(nvidia_result(shares=shares), enforcer_result(), config=[])
    assert _limits(_enforce(claim, "4")) == [(mock_uuid(0), GIB, sm)]


def test_a_share_of_many_shares_is_at_least_one_percent() -> None:
    claim = nvidia_claim(nvidia_result(shares="1"), enforcer_result(), config=[])
    assert _limits(_enforce(claim, "1000")) == [(mock_uuid(0), GIB, 1)]


@pytest.mark.parametrize("mode", ["memory", "unlimited"])
@pytest.mark.parametrize(("cores", "sm"), [(40, 40), (0, 0), (None, 0)])
def test_without_shares_the_sm_limit_is_the_configs_cores(
    mode: str, cores: int | None, sm: int
) -> None:
    claim = nvidia_claim(nvidia_result(shares=None), enforcer_result(),
                         config=[enforcer_config(cores=cores)])  # fmt: skip
    assert _limits(_enforce(claim, mode)) == [(mock_uuid(0), GIB, sm)]


def test_priority_share_ids_and_every_card_of_the_claim_are_read() -> None:
    claim = nvidia_claim(
        nvidia_result("gpu-0", memory="2Gi", shares="10"),
        nvidia_result("gpu-1", memory="3Gi", shares="50", share_id=SECOND_SHARE_ID),
        enforcer_result(),
        config=[enforcer_config(cores=20, priority=0)],
    )  # fmt: skip
    enforced = _enforce(claim)
    assert _limits(enforced) == [(mock_uuid(0), 2 * GIB, 10), (mock_uuid(1), 3 * GIB, 20)]
    assert enforced.share_id == ENFORCER_SHARE_ID
    assert enforced.shares.priority == 0
    assert [s.device for s in enforced.shares.shares] == ["gpu-0", "gpu-1"]


def test_the_enforcer_device_is_shareable_has_no_capacity_and_names_what_it_enforces() -> None:
    assert enforcer_device() == {
        "name": "enforcer",
        "allowMultipleAllocations": True,
        "attributes": {"enforces": {"string": "gpu.nvidia.com"}},
    }


# --- refusals: no share without its limits ----------------------------------------------------


@pytest.mark.parametrize(
    ("results", "reason"),
    [
        ([nvidia_result()], "has 0 devices of enforcer.vgb.io, not exactly one"),
        ([nvidia_result(), enforcer_result(), enforcer_result()], "has 2 devices of enforcer"),
        ([nvidia_result(), enforcer_result(pool="node-b")], "is not this node's enforcer"),
        ([nvidia_result(), enforcer_result(device="gpu-0")], "is not this node's enforcer"),
        ([enforcer_result()], "has no device of gpu.nvidia.com: nothing to enforce"),
        ([nvidia_result(pool="node-b"), enforcer_result()], "is not this node's pool"),
        ([nvidia_result("gpu-7"), enforcer_result()], "'gpu-7' is not in gpu.nvidia.com's slice"),
        ([nvidia_result(memory=None), enforcer_result()], "no consumedCapacity[memory]"),
        ([nvidia_result(memory="81Gi"), enforcer_result()], "is not 1Mi..85899345920 bytes"),
        ([nvidia_result(memory="1000k"), enforcer_result()], "in 1Mi steps"),
        ([nvidia_result(memory="-1Gi"), enforcer_result()], "is not 1Mi.."),
        ([nvidia_result(memory="0"), enforcer_result()], "is not 1Mi.."),
        ([nvidia_result(memory="9" * 80), enforcer_result()], "consumedCapacity[memory]"),
        ([nvidia_result(memory="lots"), enforcer_result()], "consumedCapacity[memory]"),
        ([nvidia_result(shares=None), enforcer_result()], "no consumedCapacity[shares]"),
        ([nvidia_result(shares="0"), enforcer_result()], "is not a whole number of shares"),
        ([nvidia_result(shares="-3"), enforcer_result()], "is not a whole number of shares"),
        ([nvidia_result(shares="1.5"), enforcer_result()], "is not a whole number of shares"),
    ],
)
def test_a_claim_whose_share_cannot_be_held_to_its_limits_is_refused(
    results: list[Json], reason: str
) -> None:
    with pytest.raises(ClaimError) as refused:
        _enforce(nvidia_claim(*results))
    assert reason in str(refused.value)


def test_a_mig_device_of_nvidia_is_refused() -> None:
    published = nvidia_slice()
    published["spec"]["devices"][0]["attributes"]["type"] = {"string": "mig"}
    cards = NvidiaCards(Slices(published), node=NODE)
    with pytest.raises(ClaimError, match=r"MIG devices of gpu\.nvidia\.com are not enforced"):
        enforced_shares(nvidia_claim(), uid=UID, node=NODE, driver=ENFORCER_DRIVER,
                        card=cards.card)  # fmt: skip


@pytest.mark.parametrize(
    ("parameters", "reason"),
    [
        ({"cores": 101}, "cores: must be a whole percent 0..100"),
        ({"cores": "30"}, "cores: must be a whole percent"),
        ({"cores": 30.0}, "cores: must be a whole percent"),
        ({"limit": 1}, "limit: unknown field"),
    ],
)
def test_a_bad_config_of_ours_is_refused_naming_the_field(parameters: Json, reason: str) -> None:
    config = enforcer_config()
    config["opaque"]["parameters"].update(parameters)
    with pytest.raises(ClaimError, match=r"config\[0\]\.opaque\.parameters") as refused:
        _enforce(nvidia_claim(nvidia_result(), enforcer_result(), config=[config]))
    assert reason in str(refused.value)


def test_a_claim_replaced_unallocated_or_on_another_node_is_refused() -> None:
    with pytest.raises(ClaimError, match="it was replaced"):
        _enforce(nvidia_claim(uid="0c1a1d00-0000-4000-8000-0000000000ff"))
    unallocated = nvidia_claim()
    del unallocated["status"]["allocation"]
    with pytest.raises(ClaimError, match="is not allocated"):
        _enforce(unallocated)
    with pytest.raises(ClaimError, match="allocated to node"):
        _enforce(nvidia_claim(node="node-b"))


MAX_STALE_S = 10 * MAX_AGE_S  # nvidia_slices.MAX_STALE_S


def test_after_a_failed_read_a_card_read_not_long_ago_is_still_served() -> None:
    """Within MIN_REFRESH_S of a failed read the API is not asked again; what was read within
    MAX_STALE_S still answers (a card's uuid and size do not change while it is published)."""
    slices, clock = Slices(nvidia_slice()), Clock()
    cards = NvidiaCards(slices, node=NODE, clock=clock)
    cards.card("gpu-0")
    clock.now += 31  # old: read again
    slices.broken = RuntimeError("connection refused")
    with pytest.raises(CardProblem, match="refused"):
        cards.card("gpu-0")
    clock.now += 0.5
    assert cards.card("gpu-0").uuid == mock_uuid(0)
    assert slices.reads == 2


def test_after_a_failed_read_a_card_read_too_long_ago_is_the_read_error() -> None:
    slices, clock = Slices(nvidia_slice()), Clock()
    cards = NvidiaCards(slices, node=NODE, clock=clock)
    cards.card("gpu-0")
    clock.now += MAX_STALE_S
    slices.broken = RuntimeError("connection refused")
    with pytest.raises(CardProblem, match="refused"):
        cards.card("gpu-0")
    clock.now += 0.5  # not read again yet: the last read's error, not the old card
    with pytest.raises(CardProblem, match=r"reading gpu\.nvidia\.com's ResourceSlices.*refused"):
        cards.card("gpu-0")
    assert slices.reads == 2


def test_a_cached_lookup_never_reads() -> None:
    slices, clock = Slices(nvidia_slice()), Clock()
    cards = NvidiaCards(slices, node=NODE, clock=clock)
    with pytest.raises(CardProblem, match=r"'gpu-0' is not in gpu\.nvidia\.com's slice"):
        cards.cached_card("gpu-0")
    cards.card("gpu-0")
    clock.now += 31  # old, yet served without a read
    assert cards.cached_card("gpu-1").uuid == mock_uuid(1)
    clock.now += MAX_STALE_S
    with pytest.raises(CardProblem, match="last read"):
        cards.cached_card("gpu-1")
    assert slices.reads == 1
