"""Issue 26's tables read their runs right: part 2's steps (pods per step, the shares / whole
ratio against the 0.9x goal, pprof's units) and part 1's attribution of API requests (an
admission's namespaced LISTs are the webhook's; the generator's pod creates are not)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

from bench.scaling.admission import AdmissionRow, admission_times
from bench.scaling.api_counts import RequestKind, Requests
from bench.scaling.scheduling import _seconds, scaling_table
from bench.scaling.tables import Step
from bench.schedule import Result, Scale
from bench.webhook import Load


def test_a_step_holds_20000_share_pods_or_80_percent_of_what_its_cards_hold() -> None:
    assert Scale.at_gpus(1_000) == Scale(nodes=125, pods=8_000, whole_per_node=64)
    assert Scale.at_gpus(10_000) == Scale(nodes=1_250, pods=20_000, whole_per_node=16)


def result(workload: str, rate: float, scale: Scale) -> Result:
    bound = scale.pods
    return Result("kube-scheduler", workload, (bound - 1) / rate, 1.0, 10.0, bound, 4.0, 1.0,
                  scale)  # fmt: skip


def test_the_ratio_of_each_step_is_judged_against_the_goal() -> None:
    small, big = Scale.at_gpus(1_000), Scale.at_gpus(10_000)
    text = scaling_table([result("shares", 100, small), result("whole", 100, small),
                          result("shares", 80, big), result("whole", 100, big)])  # fmt: skip
    lines = text.splitlines()
    assert "1.00x" in lines[2]
    assert lines[2].endswith("met")
    assert "0.80x" in lines[3]
    assert lines[3].endswith("MISSED")
    assert "-2.22 pods/s" in lines[4]  # (80 - 100) over 9,000 GPUs, per 1,000


def test_a_run_that_stalled_or_lost_its_watch_is_not_judged() -> None:
    scale = Scale.at_gpus(1_000)
    stalled = replace(result("shares", 100, scale), bound=scale.pods - 55)
    text = scaling_table([stalled, replace(result("whole", 100, scale), watch_restarts=1)])
    assert text.splitlines()[2].endswith(
        "not measured: shares 7,945/8,000 bound, 0 restarts, whole 8,000/8,000 bound, 1 restarts"
    )


def test_pprof_times_are_read_in_their_units() -> None:
    assert [_seconds(t) for t in ("1.50s", "20ms", "300us", "0", "x")] == [1.5, 0.02, 0.0003, 0, 0]


def test_only_an_admissions_own_lists_count_against_the_no_list_goal() -> None:
    counts = Counter({
        RequestKind("CREATE", "pods", "namespace"): 1000,  # the generator
        RequestKind("CREATE", "resourceclaims", "namespace"): 1000,  # the claim controller
        RequestKind("LIST", "nodes", "cluster"): 3,  # the webhook's housekeeping
        RequestKind("LIST", "resourceclaims", "namespace"): 7,  # an admission's
        RequestKind("GET", "resourceclaimtemplates", "resource"): 2,
    })  # fmt: skip
    load = Load(50, 1, 2, 3, 1000, {"201": 1000}, 0.1, [])
    row = AdmissionRow(Step(1000, 1000, 2000, 125, 125), [load], load, 1.0, 0.5, 90, 95,
                       Requests(counts))  # fmt: skip
    assert row.webhook_lists == 7
    assert row.webhook_requests == 3 + 7 + 2


def test_the_webhooks_own_times_are_read_from_its_log_after_the_mark(tmp_path: Path) -> None:
    log = tmp_path / "webhook.log"
    log.write_text('{"event": "admission", "duration_ms": 9.0}\n')
    mark = log.stat().st_size
    with log.open("a") as more:
        more.write('{"event": "admission", "duration_ms": 1.5}\nnot json\n')
        more.write('{"event": "serving"}\n{"event": "admission", "duration_ms": 2.25}\n')
    assert admission_times(log, mark) == [1.5, 2.25]
