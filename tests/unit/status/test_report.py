"""`build_report` on objects recorded from the real control plane: each share on the card its
claim was allocated, booked sizes from consumedCapacity, free capacity, priority from our opaque
config, pending pods with the scheduler's message."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from tests.unit.status.recorded import (
    NAMESPACE,
    NODE,
    OTHER,
    GiB,
    Json,
    MiB,
    in_namespace,
    recorded,
)
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.core.profiles import our_profile
from vgpu_bridge.status import Card, Report, build_report


def report_of(**changes: object) -> Report:
    objects = {name: recorded(name) for name in ("slices", "claims", "pods")}
    return build_report(**{**objects, **changes}, profile=DEFAULT)  # type: ignore[arg-type]


def card(report: Report, device: str) -> Card:
    (found,) = [c for c in report.cards if (c.node, c.device) == (NODE, device)]
    return found


def test_each_share_is_on_the_card_its_claim_was_allocated_with_what_it_consumed() -> None:
    report = report_of()
    shown = {
        (s.device, s.pod, s.memory, s.cores, s.priority)
        for c in report.cards for s in c.shares
    }  # fmt: skip
    assert shown == {
        ("gpu-0", "infer-a", 30000 * MiB, 30, 0),
        ("gpu-0", "infer-b", 40000 * MiB, 50, None),
        ("gpu-0", "neighbour", 1000 * MiB, 5, None),
        ("gpu-1", "train", 20000 * MiB, 40, 1),
    }
    assert report.unplaced == ()


def test_a_card_shows_its_product_size_booking_and_what_is_free() -> None:
    h100, a100 = card(report_of(), "gpu-0"), card(report_of(), "gpu-1")
    assert (h100.product, h100.uuid, h100.memory, h100.cores) == (
        "NVIDIA H100 80GB HBM3", "GPU-agent-0000", 80 * GiB, 100,
    )  # fmt: skip
    assert (h100.booked_memory, h100.free_memory) == (71000 * MiB, 80 * GiB - 71000 * MiB)
    assert (h100.booked_cores, h100.free_cores) == (85, 15)
    assert (a100.product, a100.free_memory, a100.free_cores) == (
        "NVIDIA A100-PCIE-40GB", 40 * GiB - 20000 * MiB, 60,
    )  # fmt: skip


def test_a_share_names_its_namespace_pod_containers_and_claim() -> None:
    (share,) = card(report_of(), "gpu-1").shares
    assert (share.namespace, share.pod, share.containers) == (NAMESPACE, "train", ("main",))
    assert share.claim.startswith("train-gpu-main-")
    assert share.claim_uid


def test_a_pod_that_fits_nowhere_is_pending_with_the_schedulers_message() -> None:
    (pending,) = report_of().pending
    assert (pending.namespace, pending.pod, pending.scheduler) == (
        NAMESPACE, "too-big", "default-scheduler",
    )  # fmt: skip
    assert pending.reason.startswith("0/1 nodes are available: 1 cannot allocate all claims.")


def test_shown_namespace_only_but_booked_and_free_count_every_claim_on_the_card() -> None:
    claims = recorded("claims")
    report = report_of(claims=in_namespace(claims, NAMESPACE), bookings=claims)
    h100 = card(report, "gpu-0")
    assert {s.pod for s in h100.shares} == {"infer-a", "infer-b"}
    assert (h100.booked_memory, h100.booked_cores) == (71000 * MiB, 85)


def test_without_the_clusters_claims_a_card_counts_the_shares_shown() -> None:
    report = report_of(claims=in_namespace(recorded("claims"), OTHER))
    assert (card(report, "gpu-0").booked_memory, card(report, "gpu-1").booked_memory) == (
        1000 * MiB, 0,
    )  # fmt: skip


def test_shares_whose_card_is_not_in_view_are_unplaced() -> None:
    report = report_of(slices=[])
    assert report.cards == ()
    assert sorted(s.pod for s in report.unplaced) == ["infer-a", "infer-b", "neighbour", "train"]


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    (newest,) = recorded("slices")
    older = copy.deepcopy(newest)
    older["metadata"]["name"] += "-old"
    older["spec"]["pool"]["generation"] -= 1
    older["spec"]["devices"] = [{**newest["spec"]["devices"][0], "name": "gpu-9"}]
    assert [c.device for c in report_of(slices=[older, newest]).cards] == ["gpu-0", "gpu-1"]


def test_claims_and_slices_of_another_driver_are_not_ours() -> None:
    report = build_report(recorded("slices"), recorded("claims"), recorded("pods"),
                          profile=our_profile("gpu.example.com"))  # fmt: skip
    assert (report.cards, report.unplaced) == ((), ())


def allocations(claims: list[Json]) -> Iterator[Json]:
    """The `status.allocation.devices` of each allocated claim (to change in place)."""
    for claim in claims:
        if claim["status"].get("allocation"):
            yield claim["status"]["allocation"]["devices"]


def test_consumed_capacity_under_the_qualified_name_is_read() -> None:
    claims = recorded("claims")
    for devices in allocations(claims):
        for result in devices["results"]:
            consumed = result["consumedCapacity"]
            result["consumedCapacity"] = {f"{DEFAULT.driver}/{k}": v for k, v in consumed.items()}
    assert card(report_of(claims=claims), "gpu-1").shares[0].memory == 20000 * MiB


@pytest.mark.parametrize(
    "config",
    [
        pytest.param({"requests": ["another-request"]}, id="config-for-another-request"),
        pytest.param({"opaque": {"driver": "gpu.example.com"}}, id="config-of-another-driver"),
        pytest.param({"opaque": {"driver": DEFAULT.driver, "parameters": {"priority": 7}}},
                     id="config-we-cannot-read"),
    ],
)  # fmt: skip
def test_a_priority_that_does_not_apply_to_the_share_is_not_shown(config: Json) -> None:
    claims = recorded("claims")
    for devices in allocations(claims):
        for entry in devices.get("config") or ():
            entry.update(config)
    assert card(report_of(claims=claims), "gpu-1").shares[0].priority is None


def test_every_container_using_a_claim_is_named() -> None:
    pods = recorded("pods")
    (train,) = [p for p in pods if p["metadata"]["name"] == "train"]
    init = copy.deepcopy(train["spec"]["containers"][0])
    train["spec"]["initContainers"] = [{**init, "name": "warm-up"}]
    assert card(report_of(pods=pods), "gpu-1").shares[0].containers == ("warm-up", "main")


def test_pods_not_yet_seen_by_their_scheduler_or_not_waiting_for_claims_are_told_apart() -> None:
    pods = recorded("pods")
    (too_big,) = [p for p in pods if p["metadata"]["name"] == "too-big"]
    unseen = copy.deepcopy(too_big)
    unseen["metadata"]["name"] = "unseen"
    unseen["spec"]["schedulerName"] = "kai-scheduler"
    unseen["status"] = {"phase": "Pending"}
    leaving = copy.deepcopy(too_big)
    leaving["metadata"].update(name="leaving", deletionTimestamp="2026-12-01T18:00:00Z")
    no_claims = copy.deepcopy(unseen)
    no_claims["metadata"]["name"] = "no-claims"
    del no_claims["spec"]["resourceClaims"]
    pending = report_of(pods=[*pods, unseen, leaving, no_claims]).pending
    assert [(p.pod, p.scheduler) for p in pending] == [
        ("too-big", "default-scheduler"), ("unseen", "kai-scheduler"),
    ]  # fmt: skip
    assert pending[1].reason == "not yet looked at by kai-scheduler"
