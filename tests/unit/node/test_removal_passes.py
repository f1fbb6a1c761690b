"""Trees a tenant planted are deleted in bounded passes (issue 35, item 8): a 50,000-directory
tree took 40 s to delete in one go, long enough for /healthz's sweep rule to restart the agent
mid-way on a slower disk. Each pass spends at most its budget of operations, leaves the rest
where it is (never following a link), and the next pass goes on until the tree is gone; a pass
that stops early is a success of its sweep step, and the sweeper comes back soon. Counts only,
no timings."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from tests.unit.node.claims import UID
from tests.unit.node.test_deep_trees import (
    NEIGHBOUR,
    _layout,
    _two_prepared_claims,
    _victim,
    base,
    deep_tree,
)
from vgpu_bridge.node import claimdirs
from vgpu_bridge.node.app import every
from vgpu_bridge.node.claimdirs import TenantDirs, trash, trash_dir
from vgpu_bridge.node.files import RemovalBudget, remove_tree
from vgpu_bridge.node.health import Health
from vgpu_bridge.node.state import ClaimRef

__all__ = ["base"]  # the fixture, shared with test_deep_trees

DEPTH = 300  # 301 files, 300 directories, 600 renames up: about 1,200 operations
PER_PASS = 100


def _entries(top: Path) -> int:
    return sum(len(dirs) + len(files) for _, dirs, files in os.walk(top)) if top.exists() else 0


def test_a_removal_stops_at_its_budget_and_later_passes_finish_the_tree(base: Path) -> None:
    victim = _victim(base)
    root = base / "trash"
    deep_tree(root / "claim", depth=DEPTH, victim=victim)
    left, passes = [_entries(root / "claim")], 0
    while (root / "claim").exists():
        budget = RemovalBudget(operations=PER_PASS, seconds=3600)
        assert remove_tree(root, root / "claim", budget=budget) is True
        assert budget.spent <= PER_PASS
        passes += 1
        left.append(_entries(root / "claim"))
        assert passes <= 30, left  # about 1,200 operations: 13 passes, never one at a time
    assert passes >= 10  # bounded: no pass took the whole tree
    assert all(later < earlier for earlier, later in itertools.pairwise(left))
    assert (victim / "passwd").read_text() == "root"
    assert list(root.iterdir()) == []


def test_a_spent_budget_leaves_the_next_tree_untouched(base: Path) -> None:
    root = base / "trash"
    deep_tree(root / "one", depth=20)
    deep_tree(root / "two", depth=20)
    budget = RemovalBudget(operations=10, seconds=3600)
    remove_tree(root, root / "one", budget=budget)
    before = _entries(root / "two")
    assert budget.exhausted
    assert remove_tree(root, root / "two", budget=budget) is True  # there, but not touched
    assert _entries(root / "two") == before


def test_the_sweep_empties_a_big_trash_in_passes_each_one_a_success_and_healthz_stays_ok(
    base: Path,
) -> None:
    victim = _victim(base)
    layout = _layout(base)
    deep_tree(layout.shared_dir(UID), depth=DEPTH, victim=victim)
    assert trash(layout, UID) is not None
    deep_tree(layout.priority_dir / "filler", depth=DEPTH, victim=victim)
    now = [1000.0]
    dirs = TenantDirs(layout, claims=list, gpu_uuids={"GPU-aaaa"}, clock=lambda: now[0],
                      removals_per_pass=PER_PASS)  # fmt: skip
    health = Health(sockets=lambda: None, publications=lambda: None, max_silence_s=1e9,
                    sweep_steps=dirs.steps, clock=lambda: now[0])  # fmt: skip
    sweeps = 0
    while any(trash_dir(layout).iterdir()) or any(layout.priority_dir.iterdir()):
        dirs.sweep()
        sweeps += 1
        now[0] += claimdirs.RESUME_S
        assert {n: s.failures for n, s in dirs.steps().items()} == {
            "trash": 0, "priority-dir": 0, "claim-dirs": 0,
        }  # fmt: skip
        assert health.problem() is None
        assert sweeps <= 30
    assert sweeps >= 10
    assert not dirs.unfinished  # the sweeper is back to its period
    assert (victim / "passwd").read_text() == "root"


def test_unprepare_deletes_within_one_budget_and_the_sweep_deletes_the_rest(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = _victim(base)
    state, layout = _two_prepared_claims(base)
    deep_tree(layout.shared_dir(UID), depth=DEPTH, victim=victim)
    monkeypatch.setattr(claimdirs, "MAX_REMOVALS_PER_PASS", PER_PASS)
    refs = [ClaimRef("team-a", f"c-{uid[-1]}", uid) for uid in (UID, NEIGHBOUR)]
    try:
        assert state.unprepare(refs) == {UID: None, NEIGHBOUR: None}
    finally:
        state.close()
    assert not layout.shared_dir(UID).exists()
    assert _entries(trash_dir(layout)) > 0  # the rest, for the sweep
    dirs = TenantDirs(layout, claims=list, gpu_uuids=set(), removals_per_pass=PER_PASS)
    while any(trash_dir(layout).iterdir()):
        dirs.sweep()
    assert (victim / "passwd").read_text() == "root"


def test_unprepare_spends_the_budget_removals_per_pass_names(base: Path) -> None:
    state, layout = _two_prepared_claims(base, removals_per_pass=PER_PASS)
    deep_tree(layout.shared_dir(UID), depth=DEPTH, victim=_victim(base))
    refs = [ClaimRef("team-a", f"c-{uid[-1]}", uid) for uid in (UID, NEIGHBOUR)]
    try:
        assert state.unprepare(refs) == {UID: None, NEIGHBOUR: None}
    finally:
        state.close()
    assert _entries(trash_dir(layout)) > 0  # stopped at --removals-per-pass, not the default


def test_the_sweeper_comes_back_soon_after_a_pass_that_left_work() -> None:
    waits: list[float] = []
    left = [True, True, False]

    class Stop:
        def wait(self, seconds: float) -> bool:
            waits.append(seconds)
            return len(waits) == 3

    every(30.0, Stop(), "sweeping", lambda: None, again_soon=lambda: left.pop(0))  # type: ignore[arg-type]
    assert waits == [claimdirs.RESUME_S, claimdirs.RESUME_S, 30.0]


def test_a_pass_also_stops_when_its_time_is_spent(base: Path) -> None:
    root = base / "trash"
    deep_tree(root / "claim", depth=50)
    ticks = iter(range(1_000_000))  # every look at the clock: one second later
    budget = RemovalBudget(operations=10**9, seconds=20, clock=lambda: float(next(ticks)))
    remove_tree(root, root / "claim", budget=budget)
    assert budget.exhausted
    assert 0 < budget.spent < 30  # about one operation per second, out of some 150
    assert _entries(root / "claim") > 0
