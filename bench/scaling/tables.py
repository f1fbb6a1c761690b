"""The tables ``bench/scale.py`` prints: one row per step (and view), each figure a median with
its range over the step's runs, each goal met or missed, and under each table the slope, the
least-squares cost per 1,000 GPUs over the steps."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from bench.scaling.replica_start import ReplicaStart
from bench.scaling.viewer import ListCounts, ViewerRun, measured_lists, pages


@dataclass(frozen=True)
class Step:
    gpus: int  # as asked on the command line
    cards: int  # published: whole nodes of 8
    claims: int
    slices: int
    nodes: int


@dataclass(frozen=True)
class ViewerRow:
    step: Step
    view: str  # "-A", "-n viewer-small"
    runs: Sequence[ViewerRun]
    expected: ListCounts
    expected_shares: int
    goal_s: float

    @property
    def wall_s(self) -> float:
        return statistics.median(run.wall_s for run in self.runs)

    @property
    def peak_rss_mb(self) -> float:
        return statistics.median(run.peak_rss_mb for run in self.runs)


@dataclass(frozen=True)
class ReplicaRow:
    step: Step
    starts: Sequence[ReplicaStart]
    goal_s: float

    @property
    def ready_s(self) -> float:
        return statistics.median(start.ready_s for start in self.starts)

    @property
    def rss_settled_mb(self) -> float:
        return statistics.median(start.rss_settled_mb for start in self.starts)


def spread(values: Sequence[float], digits: int) -> str:
    """``median (min..max)``; the value alone for one."""
    median = f"{statistics.median(values):.{digits}f}"
    if len(values) < 2:
        return median
    return f"{median} ({min(values):.{digits}f}..{max(values):.{digits}f})"


def slope_per_1000(points: Sequence[tuple[int, float]]) -> float | None:
    """Least-squares slope of the figure over GPUs, per 1,000 GPUs; None under two steps."""
    if len({x for x, _ in points}) < 2:
        return None
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in points)
    variance = sum((x - mean_x) ** 2 for x, _ in points)
    return 1000 * covariance / variance


def _slope_text(points: Sequence[tuple[int, float]], unit: str, digits: int) -> str:
    slope = slope_per_1000(points)
    return "n/a (one step)" if slope is None else f"{slope:+.{digits}f} {unit}"


def _goal(met: bool) -> str:
    return "met" if met else "MISSED"


def viewer_table(
    rows: Sequence[ViewerRow], floor: tuple[Sequence[float], Sequence[float]] | None = None
) -> str:
    """`floor`: seconds of the plugin's start alone, and of that with the client's import."""
    runs = max((len(row.runs) for row in rows), default=0)
    lines = [
        f"part 4, the viewer: kubectl vgpu status (table output), {runs} runs per row, median "
        "(min..max); LISTs of claims/pods/slices as the API server counted them, next to the "
        "pages a paged reading makes (500 per page); requests: all the API server answered "
        "meanwhile (its own lease renewals included); -n: the namespace holding 100 of the "
        "shares, its cards' bookings read from a webhook replica's /bookings behind its Service "
        "(the API server's service proxy), or, with no webhook answering, from every claim",
        f"{'step GPUs':>9}{'claims':>8}  {'view':<17}{'wall s':>20}{'peak RSS MB':>22}"
        f"{'shares':>8}{'LISTs c/p/s':>13}{'paged':>9}{'requests':>10}{'goal':>9}{'':>8}",
    ]
    for row in rows:
        lists = [measured_lists(run.requests) for run in row.runs]
        shown = min(run.shares_shown for run in row.runs)
        lines.append(
            f"{row.step.gpus:>9,}{row.step.claims:>8,}  {row.view:<17}"
            f"{spread([run.wall_s for run in row.runs], 2):>20}"
            f"{spread([run.peak_rss_mb for run in row.runs], 0):>22}"
            f"{shown:>8,}{lists[0]!s:>13}{row.expected!s:>9}"
            f"{max(run.requests.on_resources() for run in row.runs):>10}"
            f"{'<= ' + format(row.goal_s, 'g') + ' s':>9}{_goal(row.wall_s <= row.goal_s):>8}"
        )
        if shown != row.expected_shares or any(lst != row.expected for lst in lists):
            lines.append(f"{'':>19}^ expected {row.expected_shares:,} shares and "
                         f"{row.expected} LISTs in every run")  # fmt: skip
    for view in dict.fromkeys(row.view for row in rows):
        mine = [row for row in rows if row.view == view]
        wall = _slope_text([(r.step.gpus, r.wall_s) for r in mine], "s", 3)
        rss = _slope_text([(r.step.gpus, r.peak_rss_mb) for r in mine], "MB", 1)
        lines.append(f"slope per 1,000 GPUs, {view}: wall {wall}, peak RSS {rss}")
    if floor is not None:
        lines.append(
            f"start floor, no request made: kubectl-vgpu --version {spread(floor[0], 2)} s; "
            f"with the Kubernetes client imported {spread(floor[1], 2)} s"
        )
    return "\n".join(lines)


def replica_table(rows: Sequence[ReplicaRow]) -> str:
    starts = max((len(row.starts) for row in rows), default=0)
    lines = [
        f"part 3, a webhook replica's start: process start to /readyz 200 (our driver's slices "
        f"listed), {starts} starts per row, median (min..max); RSS with its child process; "
        "LISTs (and all requests) from start to 2 s after ready, as the API server counted them",
        f"{'step GPUs':>9}{'claims':>8}{'slices':>8}{'ready s':>20}{'RSS ready MB':>20}"
        f"{'RSS +2 s MB':>20}{'slice LISTs':>13}{'paged':>7}{'node LISTs':>12}{'paged':>7}"
        f"{'claim LISTs':>13}{'requests':>10}{'goal':>9}{'':>8}",
    ]
    for row in rows:
        ready = [start.ready_s for start in row.starts]
        slice_lists = max(start.requests.lists("resourceslices") for start in row.starts)
        node_lists = max(start.requests.lists("nodes") for start in row.starts)
        claim_lists = max(start.requests.lists("resourceclaims") for start in row.starts)
        lines.append(
            f"{row.step.gpus:>9,}{row.step.claims:>8,}{row.step.slices:>8,}"
            f"{spread(ready, 2):>20}"
            f"{spread([start.rss_ready_mb for start in row.starts], 0):>20}"
            f"{spread([start.rss_settled_mb for start in row.starts], 0):>20}"
            f"{slice_lists:>13}{pages(row.step.slices):>7}"
            f"{node_lists:>12}{pages(row.step.nodes):>7}{claim_lists:>13}"
            f"{max(start.requests.on_resources() for start in row.starts):>10}"
            f"{'<= ' + format(row.goal_s, 'g') + ' s':>9}"
            f"{_goal(row.ready_s <= row.goal_s):>8}"
        )
    ready_slope = _slope_text([(r.step.gpus, r.ready_s) for r in rows], "s", 3)
    rss_slope = _slope_text([(r.step.gpus, r.rss_settled_mb) for r in rows], "MB", 1)
    lines.append(f"slope per 1,000 GPUs: ready {ready_slope}, RSS +2 s {rss_slope}")
    return "\n".join(lines)
