"""Part 2's table and profile summary for ``bench/schedule.py --gpu-steps`` (issue 26): per step,
kube-scheduler's pods/s for shares and for whole cards, their ratio (goal >= 0.9x), its algorithm
time per pod and tries per pod, the slope per 1,000 GPUs; and where a CPU profile of the
scheduler spends its time, summed by who wrote the code (upstream's DRA allocator and plugin, the
CEL that evaluates our DeviceClass's selector, Go's runtime and garbage collector, the rest).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bench.scaling.tables import slope_per_1000

if TYPE_CHECKING:
    from bench.schedule import Result

RATIO_GOAL = 0.9
GPUS_PER_NODE = 8
#: function-name prefixes (Go's full import paths) -> the part of the scheduler they belong to
BUCKETS = (
    ("runtime.gc", "Go GC and allocation"),
    ("runtime.mallocgc", "Go GC and allocation"),
    ("runtime.scanobject", "Go GC and allocation"),
    ("runtime.", "Go runtime: maps, copies, locks (for every caller)"),
    ("k8s.io/dynamic-resource-allocation/cel", "CEL: DeviceClass selectors"),
    ("github.com/google/cel-go", "CEL: DeviceClass selectors"),
    ("k8s.io/dynamic-resource-allocation/structured", "DRA allocator (upstream)"),
    ("k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources", "DRA plugin (upstream)"),
    ("k8s.io/kubernetes/pkg/scheduler", "scheduler, other plugins and queue"),
    ("encoding/json", "decoding and encoding objects"),
    ("k8s.io/apimachinery", "decoding and encoding objects"),
    ("sigs.k8s.io/structured-merge-diff", "decoding and encoding objects"),
    ("google.golang.org/protobuf", "decoding and encoding objects"),
)
WATCHED = ("dynamicresources", "dynamic-resource-allocation")


def scaling_table(results: Sequence[Result]) -> str:
    steps: dict[tuple[int, int], list[Result]] = {}
    for result in results:
        steps.setdefault((result.scale.nodes, result.scale.pods), []).append(result)
    lines = [
        "part 2, scheduling: kube-scheduler (second instance, no client rate limit) binding every "
        "pod; shares = our agent's slices, 8 cards of 80 GiB per node, 8192Mi + 10% per pod; "
        "whole = plain devices, one per pod; median of the runs",
        f"{'GPUs':>7} {'pods':>7} {'shares/s':>9} {'whole/s':>8} {'ratio':>7} {'algo ms s/w':>13} "
        f"{'tries s/w':>10}  goal",
    ]
    points: list[tuple[int, float]] = []
    algo_points: list[tuple[int, float]] = []
    for (nodes, _pods), group in steps.items():
        gpus = nodes * GPUS_PER_NODE
        shares = [r for r in group if r.workload == "shares"]
        whole = [r for r in group if r.workload == "whole"]
        if not shares or not whole:
            continue
        ratios = [s.pods_per_s / w.pods_per_s for s, w in zip(shares, whole, strict=False)
                  if w.pods_per_s > 0]  # fmt: skip
        ratio = statistics.median(ratios) if ratios else 0.0
        share_rate = statistics.median(r.pods_per_s for r in shares)
        share_algo = statistics.median(r.algorithm_ms for r in shares)
        points.append((gpus, share_rate))
        algo_points.append((gpus, share_algo))
        verdict = "met" if ratio >= RATIO_GOAL else "MISSED"
        short = [r for r in group if r.bound < r.scale.pods or r.watch_restarts]
        if short:  # a stalled run or a watch started over: its rate is not the scheduler's
            verdict = "not measured: " + ", ".join(
                f"{r.workload} {r.bound:,}/{r.scale.pods:,} bound, {r.watch_restarts} restarts"
                for r in short
            )
        lines.append(
            f"{gpus:>7,} {min(r.bound for r in shares):>7,} {share_rate:>9.1f} "
            f"{statistics.median(r.pods_per_s for r in whole):>8.1f} {ratio:>6.2f}x "
            f"{share_algo:>6.2f}/{statistics.median(r.algorithm_ms for r in whole):<6.2f} "
            f"{statistics.median(r.attempts for r in shares):>4.2f}/"
            f"{statistics.median(r.attempts for r in whole):<5.2f} "
            f"shares/whole >= {RATIO_GOAL}x: {verdict}"
        )
    rate_slope, algo_slope = slope_per_1000(points), slope_per_1000(algo_points)
    if rate_slope is not None and algo_slope is not None:
        lines.append(
            f"slope per 1,000 GPUs (shares): {rate_slope:+.2f} pods/s, {algo_slope:+.3f} ms "
            "of algorithm time per pod"
        )
    return "\n".join(lines)


def profile_summary(profile: Path, title: str) -> str:
    """The profile's flat time summed by part, and the DRA functions that take the most
    cumulative time; a note when Go's pprof is not at hand."""
    go = shutil.which("go")
    if go is None:
        return f"{title}: profile kept at {profile} (no `go` to read it)"
    flat = _top(go, profile, cumulative=False)
    total = sum(seconds for _, seconds in flat) or 1.0
    parts: dict[str, float] = {}
    for function, seconds in flat:
        part = next((name for prefix, name in BUCKETS if function.startswith(prefix)), "other")
        parts[part] = parts.get(part, 0.0) + seconds
    lines = [f"where kube-scheduler's CPU goes, {title} ({total:.1f} s of samples, {profile.name})"]
    for part, seconds in sorted(parts.items(), key=lambda item: -item[1]):
        lines.append(f"  {part:<40} {100 * seconds / total:5.1f} %")
    cumulative = [(f, s) for f, s in _top(go, profile, cumulative=True)
                  if any(w in f for w in WATCHED)][:10]  # fmt: skip
    lines.append("  DRA functions by cumulative time (their callees included):")
    lines += [f"    {100 * s / total:5.1f} %  {f}" for f, s in cumulative]
    return "\n".join(lines)


def _top(go: str, profile: Path, *, cumulative: bool) -> list[tuple[str, float]]:
    """(function, seconds) of `go tool pprof -top`, flat or cumulative."""
    command = [go, "tool", "pprof", "-top", "-nodecount=100000", *(["-cum"] if cumulative else [])]
    text = subprocess.run([*command, str(profile)], capture_output=True, text=True,
                          check=True, timeout=300).stdout  # fmt: skip
    rows = []
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[1].endswith("%") and fields[4].endswith("%"):
            value = fields[3] if cumulative else fields[0]
            rows.append((fields[5], _seconds(value)))
    return rows


def _seconds(text: str) -> float:
    for unit, factor in (("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("ns", 1e-9), ("s", 1.0)):
        if text.endswith(unit):
            try:
                return float(text[: -len(unit)]) * factor
            except ValueError:
                return 0.0
    return 0.0
