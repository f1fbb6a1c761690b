"""Issue 37's benchmark builds what it claims to measure and reads its runs right: the enforcer's
slice and the allocations written without a scheduler have the shared design's shapes, and the
tables pair the rounds and judge the 1.2x goal on the last row over the first."""

from __future__ import annotations

import argparse
import re

import pytest

from bench.nvidia import (
    _parts,
    _workloads,
    admission_lines,
    nvidia_share_claim,
    ratio_lines,
    schedule_ratios,
    without_enforcer,
)
from bench.nvidia_shapes import allocation, enforcer_device_class, enforcer_slice, node_cards
from bench.schedule import Result, Scale
from bench.webhook import Load
from vgpu_bridge.core import ENFORCER_DRIVER, ENFORCER_REQUEST

NVIDIA_MIG_NAME = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")  # NVIDIA's mig.go:244


def test_the_enforcer_slice_is_one_shared_device_without_capacity_in_the_nodes_pool() -> None:
    spec = enforcer_slice("n1")["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]["name"]) == (ENFORCER_DRIVER, "n1", "n1")
    (device,) = spec["devices"]
    assert device["name"] == "enforcer"
    assert not NVIDIA_MIG_NAME.match(device["name"])
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"] == {"enforces": {"string": "gpu.nvidia.com"}}
    assert "capacity" not in device


def test_the_enforcer_class_selects_only_the_enforcers_shareable_devices() -> None:
    (selector,) = enforcer_device_class()["spec"]["selectors"]
    assert selector["cel"]["expression"] == (
        'device.driver == "enforcer.vgb.io" && device.allowMultipleAllocations == true'
    )


def test_cards_of_different_nodes_have_different_uuids() -> None:
    uuids = {card.uuid for node in ("a", "b") for card in node_cards(node, 8, memory_bytes=1)}
    assert len(uuids) == 16


def test_the_schedule_claim_asks_nvidias_class_for_8gi_and_10_shares_and_the_enforcer() -> None:
    requests = {r["name"]: r["exactly"] for r in nvidia_share_claim()["devices"]["requests"]}
    assert requests["gpu"]["deviceClassName"] == "gpu.nvidia.com"
    assert requests["gpu"]["capacity"]["requests"] == {"memory": "8Gi", "shares": "10"}
    assert requests[ENFORCER_REQUEST]["deviceClassName"] == ENFORCER_DRIVER


def test_an_allocation_consumes_what_nvidias_request_asks_and_puts_the_enforcer_beside() -> None:
    written = allocation("n1", TRANSLATED, device="gpu-3")
    results = {r["request"]: r for r in written["devices"]["results"]}
    gpu, enforcer = results["gpu"], results[ENFORCER_REQUEST]
    assert (gpu["driver"], gpu["pool"], gpu["device"]) == ("gpu.nvidia.com", "n1", "gpu-3")
    assert gpu["consumedCapacity"] == {"memory": "1Gi", "shares": "5"}
    assert (enforcer["driver"], enforcer["device"]) == (ENFORCER_DRIVER, "enforcer")
    assert "consumedCapacity" not in enforcer
    assert gpu["shareID"] != enforcer["shareID"]
    (config,) = written["devices"]["config"]
    assert config == {"source": "FromClaim", **TRANSLATED["devices"]["config"][0]}


#: The translator's claim for gpumem 1024, gpucores 5 under profile nvidia (shared.md's rules).
TRANSLATED = {
    "devices": {
        "requests": [
            {"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1,
                "capacity": {"requests": {"memory": "1Gi", "shares": "5"}}}},
            {"name": "vgpu-limits", "exactly": {"deviceClassName": "enforcer.vgb.io",
                                                "allocationMode": "ExactCount", "count": 1}},
        ],
        "config": [{"requests": ["vgpu-limits"], "opaque": {
            "driver": "enforcer.vgb.io",
            "parameters": {"apiVersion": "gpu.vgpu-bridge.io/v1alpha1", "kind": "GpuShareConfig",
                           "cores": 5}}}],
    }
}  # fmt: skip


def test_nvidia_alone_is_the_same_share_without_the_enforcer_request_and_config() -> None:
    alone, share = without_enforcer()["devices"], nvidia_share_claim()["devices"]
    assert alone["requests"] == [r for r in share["requests"] if r["name"] == "gpu"]
    assert "config" not in alone


def result(workload: str, rate: float, algorithm_ms: float) -> Result:
    scale = Scale(nodes=2, pods=101, whole_per_node=51)
    return Result("kube-scheduler", workload, 100 / rate, 1.0, 1.0, 101, algorithm_ms, 1.0, scale)


def test_the_schedule_ratios_pair_each_round_and_give_the_median() -> None:
    results = [
        result("shares", 60, 2.0), result("nvidia-shares", 30, 4.0), result("whole", 100, 1.0),
        result("shares", 80, 2.0), result("nvidia-shares", 80, 2.0), result("whole", 100, 1.0),
    ]  # fmt: skip
    nvidia, both = schedule_ratios(results)
    assert nvidia.startswith(
        "nvidia-shares / whole = 0.55 (0.30..0.80)x pods/s, 3.00 (2.00..4.00)x"
    )
    assert both.startswith("nvidia-shares / shares = 0.75 (0.50..1.00)x pods/s")


@pytest.mark.parametrize(
    ("enforcer_ms", "verdict"),
    [(11.0, "1.10x (goal <= 1.2x): met"), (13.0, "1.30x (goal <= 1.2x): MISSED")],
)
def test_the_prepare_goal_is_the_last_rows_p99_over_the_firsts(
    enforcer_ms: float, verdict: str
) -> None:
    spoiled = [10.0] * 99 + [500.0]  # one slow spell: the median of the rounds passes it over
    rows = {"ours": [[10.0] * 100] * 3, "enforcer": [[enforcer_ms] * 100] * 2 + [spoiled]}
    lines = ratio_lines("new", rows)
    assert lines[-1] == f"  p99 enforcer / ours = {verdict}"


def test_a_row_without_goal_shows_its_ratio_unjudged() -> None:
    rows = {"ours": [[1.0] * 10], "enforcer": [[2.0] * 10]}
    assert ratio_lines("again", rows, goal=None)[-1] == "  p99 enforcer / ours = 2.00x (no goal)"


def load(p99_ms: float) -> Load:
    return Load(50.0, p99_ms / 2, p99_ms, p99_ms, 750, {"201": 750}, 0.1, [])


def test_the_admission_goal_compares_the_median_p99_of_the_rounds() -> None:
    from bench.nvidia import Replica

    ours = Replica("default", "admit-default", None, None, [load(10), load(20), load(12)], [1.0])  # type: ignore[arg-type]
    nvidia = Replica("nvidia", "admit-nvidia", None, None, [load(13), load(99), load(14)], [1.0])  # type: ignore[arg-type]
    lines = admission_lines([ours, nvidia])
    assert "nvidia / default p99 = 1.17x (goal <= 1.2x): met" in lines
    assert "nvidia / default hook p99 = 1.00x (goal <= 1.2x): met" in lines


def test_the_enforcers_cost_is_nvidia_shares_over_nvidia_alone_when_both_ran() -> None:
    results = [result("nvidia-shares", 30, 3.0), result("nvidia-alone", 40, 2.0)]
    (line,) = schedule_ratios(results)
    assert line == "nvidia-shares / nvidia-alone = 0.75x pods/s, 1.50x algorithm time per pod"


def test_unknown_workloads_are_refused_naming_the_known_ones() -> None:
    assert _workloads("nvidia-alone,whole") == ["nvidia-alone", "whole"]
    with pytest.raises(argparse.ArgumentTypeError, match="shares, nvidia-shares, nvidia-alone"):
        _workloads("nvidia")


def test_unknown_parts_are_refused_naming_the_known_ones() -> None:
    assert _parts("schedule,prepare") == ["schedule", "prepare"]
    with pytest.raises(argparse.ArgumentTypeError, match="admission, prepare, schedule"):
        _parts("scheduling")
