"""Directories containers can write: each claim's shared-region dir and the node's priority dir.

Both are host bind mounts, outside the container's storage accounting, that a tenant can fill.
The agent never walks them under its global lock: Unprepare renames a claim's dir into the trash
(`<vgpu_dir>/trash/`, one rename, O(1)) under the lock and deletes it after releasing it, and
every walk here stops after a bound of entries. A bind mount has no quota, so between two rounds
a tenant can still write what the host disk holds; the agent measures (`measure`), reports and
removes what is not libvgpu's. Deletion (`files.remove_tree`) has no depth limit and never
follows a link; the sweep's steps run apart, so one that fails stops none of the others, and
each step's record (`SweepStep`) feeds a metric and `/healthz`.

Deletion goes in bounded passes (`removal_budget`: MAX_REMOVALS_PER_PASS operations or
MAX_REMOVAL_PASS_S, whichever comes first): a tree of 50,000 directories a tenant planted took
40 s to delete on ext4 with `discard`, and a step that runs past /healthz's MAX_SWEEP_SILENCE_S
would have the agent restarted mid-way. A pass that stops early is a success; what it left stays
in the trash (or the priority dir), and the sweeper runs again after RESUME_S instead of a whole
period (`TenantDirs.unfinished`) until it is gone. Unprepare deletes its call's dirs within one
such budget too and leaves the rest to the sweep.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from vgpu_bridge.logs import get_logger
from vgpu_bridge.node.cdi import CLAIMS_DIR, CdiLayout
from vgpu_bridge.node.files import RemovalBudget, check_entry, remove_tree

log = get_logger("vgpu_bridge.node.claimdirs")

TRASH_DIR = "trash"  # in the host's vgpu dir, root's alone: claim dirs waiting to be deleted
TRASH_DIR_MODE = 0o700
MAX_ENTRIES = 1000  # a walk stops here: what a claim dir holds is 'at least' beyond it
BOARD_SIZE = 128  # native/vgpu/src/priority.c, layout version 1
BOARD_SUFFIX = ".board"
_EMPTYING = threading.Lock()
MAX_REMOVALS_PER_PASS = 20_000  # unlinks, rmdirs and renames: 40 s at worst on a slow disk
#: far below MAX_SWEEP_SILENCE_S; an Unprepare that waits out the sweeper's pass, then makes its
#: own, answers within twice this: well inside the kubelet's 45 s
MAX_REMOVAL_PASS_S = 10.0
RESUME_S = 1.0  # the next sweep, after a pass that left something to delete


def removal_budget(operations: int | None = None) -> RemovalBudget:
    """What one pass may delete (a sweep's, or one Unprepare call's); MAX_REMOVALS_PER_PASS
    operations unless told."""
    operations = MAX_REMOVALS_PER_PASS if operations is None else operations
    return RemovalBudget(operations=operations, seconds=MAX_REMOVAL_PASS_S)


def trash_dir(layout: CdiLayout) -> Path:
    return layout.vgpu_dir / TRASH_DIR


def trash(layout: CdiLayout, claim_uid: str) -> Path | None:
    """Move the claim's dir into the trash (a rename: instant whatever it holds); where it went,
    or None when there was none. The caller deletes it with `empty_trash`, outside its lock."""
    claims = layout.vgpu_dir / CLAIMS_DIR
    source = claims / claim_uid
    check_entry(claims, source)
    target_dir = trash_dir(layout)
    target_dir.mkdir(mode=TRASH_DIR_MODE, parents=True, exist_ok=True)
    target = target_dir / f"{claim_uid}.{time.time_ns()}"
    try:
        os.rename(source, target)
    except FileNotFoundError:
        return None
    return target


def empty_trash(
    layout: CdiLayout, paths: Iterable[Path] | None = None, *, budget: RemovalBudget | None = None
) -> int:
    """Delete `paths` from the trash (all of it when None, e.g. what a killed agent left)
    within `budget` (a fresh `removal_budget()` when None); how many were there. Never follows
    a link; what cannot be deleted below them is counted and logged (`files.remove_tree`), and
    what the budget did not reach stays: both for the next sweep."""
    budget = removal_budget() if budget is None else budget
    root = trash_dir(layout)
    if paths is not None:
        paths = list(paths)
        if not paths:
            return 0  # nothing to wait for: a call that trashed nothing never waits
    with _EMPTYING:  # Unprepare and the sweeper never walk the same tree at once
        if paths is None:
            try:
                paths = [root / name for name in os.listdir(root)]
            except FileNotFoundError:
                return 0
        found = 0
        for path in paths:
            if budget.exhausted:
                break
            found += remove_tree(root, path, budget=budget)
        return found


@dataclass(frozen=True, slots=True)
class DirUsage:
    """What a walk of at most MAX_ENTRIES entries saw: entries and bytes on disk (of those)."""

    entries: int
    bytes: int
    complete: bool  # False: the walk stopped at the bound, there is more


def measure(directory: Path, *, max_entries: int = MAX_ENTRIES) -> DirUsage:
    """The entries below `directory` (recursively, never through a link) and the disk they use,
    counting at most `max_entries`."""
    entries = used = 0
    pending = [directory]
    while pending:
        try:
            scan = os.scandir(pending.pop())
        except OSError:
            continue
        with scan:
            for entry in scan:
                if entries >= max_entries:
                    return DirUsage(entries, used, complete=False)
                entries += 1
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                used += info.st_blocks * 512
                if stat.S_ISDIR(info.st_mode):
                    pending.append(Path(entry.path))
    return DirUsage(entries, used, complete=True)


def clean_priority_dir(
    directory: Path,
    gpu_uuids: Collection[str],
    *,
    max_entries: int = MAX_ENTRIES,
    budget: RemovalBudget | None = None,
) -> list[str]:
    """Remove from the node's priority dir every entry that is not a board libvgpu could use (a
    regular `<uuid>.board` of BOARD_SIZE bytes, or 0 while being made, for a GPU of this node);
    at most `max_entries` looked at and `budget` spent per round (an entry the budget did not
    finish stays, for the next). The names of those it found."""
    budget = removal_budget() if budget is None else budget
    boards = {f"{uuid}{BOARD_SUFFIX}" for uuid in gpu_uuids}
    removed: list[str] = []
    try:
        scan = os.scandir(directory)
    except FileNotFoundError:
        return removed
    with scan:
        for seen, entry in enumerate(scan):
            if seen >= max_entries or budget.exhausted:
                break
            if entry.name in boards and _is_board(entry):
                continue
            if remove_tree(directory, directory / entry.name, budget=budget):
                removed.append(entry.name)
    return removed


def _is_board(entry: os.DirEntry[str]) -> bool:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    # 0 bytes: libvgpu has just created it and sizes it next (priority.c)
    return stat.S_ISREG(info.st_mode) and info.st_size in (0, BOARD_SIZE)


SWEEP_PERIOD_S = 30.0
# /healthz fails when a step has not succeeded for this long: 10 sweeps in a row that failed or
# a step that hangs (one still running has not succeeded); a long deletion resumes after restart
MAX_SWEEP_SILENCE_S = 10 * SWEEP_PERIOD_S
# what libvgpu and the agent put in a claim's dir: the region (225 KiB) and the host-pids file
EXPECTED_ENTRIES = 8
EXPECTED_BYTES = 4 * 2**20


@dataclass(frozen=True, slots=True)
class SweepStep:
    """How one step of the sweep went: when it last succeeded (on the sweeper's clock; None
    before it first did), how many times it failed, and the last failure."""

    succeeded_at: float | None = None
    failures: int = 0
    error: str | None = None

    def silent_for(self, *, now: float, started_at: float) -> float:
        """Seconds since it last succeeded; before it first did, since `started_at` (when the
        reader, `/healthz` or the metrics, began watching)."""
        return now - (started_at if self.succeeded_at is None else self.succeeded_at)


class TenantDirs:
    """One sweep every SWEEP_PERIOD_S, in its own thread (no lock of the agent held), in steps
    that each run whatever the others did: empty the trash (what Unprepare or a killed agent
    left), clean the priority dir, and measure each prepared claim's dir (`usage`, for the
    metrics; a warning once per claim over the expected size, again after it came back under).
    A step that raises is logged and counted in `steps`. The deleting steps each spend at most
    one `removal_budget` a sweep; `unfinished` says one stopped there (sweep again soon)."""

    def __init__(
        self,
        layout: CdiLayout,
        *,
        claims: Callable[[], Iterable[str]],
        gpu_uuids: Collection[str],
        clock: Callable[[], float] = time.monotonic,
        removals_per_pass: int = MAX_REMOVALS_PER_PASS,
    ) -> None:
        """`clock` must be the one of the `Health` and the collector reading `steps`."""
        self._layout = layout
        self._claims = claims
        self._gpu_uuids = gpu_uuids
        self._clock = clock
        self._removals_per_pass = removals_per_pass
        self._unfinished: set[str] = set()
        self._usage: dict[str, DirUsage] = {}
        self._over: set[str] = set()
        self._work: dict[str, Callable[[], None]] = {
            "trash": self._empty_trash,
            "priority-dir": self._clean_priority_dir,
            "claim-dirs": self._measure_claim_dirs,
        }
        self._steps = {name: SweepStep() for name in self._work}
        self._steps_lock = threading.Lock()

    def sweep(self) -> None:
        """Run every step, in order, each whatever the others did; never raises."""
        for name, step in self._work.items():
            self._run(name, step)

    @property
    def unfinished(self) -> bool:
        """The last sweep's deletion stopped at a pass's budget: what is left waits for the
        next sweep, which should come after RESUME_S rather than a whole period."""
        return bool(self._unfinished)

    def steps(self) -> dict[str, SweepStep]:
        """Each step's record, by name: `trash`, `priority-dir`, `claim-dirs`."""
        with self._steps_lock:
            return dict(self._steps)

    def usage(self) -> dict[str, DirUsage]:
        return dict(self._usage)

    def _run(self, name: str, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as error:  # any failure: logged, counted, and the next step runs
            log.exception("a step of the sweep failed; the others go on", step=name)
            self._record(name, error=f"{type(error).__name__}: {error}")
        else:
            self._record(name, error=None)

    def _record(self, name: str, *, error: str | None) -> None:
        with self._steps_lock:
            last = self._steps[name]
            if error is None:
                self._steps[name] = replace(last, succeeded_at=self._clock())
            else:
                self._steps[name] = replace(last, failures=last.failures + 1, error=error)

    def _empty_trash(self) -> None:
        budget = removal_budget(self._removals_per_pass)
        try:
            empty_trash(self._layout, budget=budget)
        finally:
            self._note_pass("trash", budget)

    def _clean_priority_dir(self) -> None:
        budget = removal_budget(self._removals_per_pass)
        try:
            found = clean_priority_dir(self._layout.priority_dir, self._gpu_uuids, budget=budget)
        finally:
            self._note_pass("priority-dir", budget)
        for name in found:
            log.warning("removed a file no GPU's priority board may be", name=name)

    def _note_pass(self, step: str, budget: RemovalBudget) -> None:
        if budget.exhausted:
            self._unfinished.add(step)
            log.info("deletion stopped at this pass's budget; the next pass goes on soon",
                     step=step, operations=budget.spent)  # fmt: skip
        else:
            self._unfinished.discard(step)

    def _measure_claim_dirs(self) -> None:
        usage = {uid: measure(self._layout.shared_dir(uid)) for uid in self._claims()}
        for uid, found in usage.items():
            over = found.entries > EXPECTED_ENTRIES or found.bytes > EXPECTED_BYTES
            if over and uid not in self._over:
                log.warning("a claim's directory holds more than libvgpu puts there",
                            claim_uid=uid, entries=found.entries, bytes=found.bytes,
                            walk_complete=found.complete)  # fmt: skip
            if over:
                self._over.add(uid)
            else:
                self._over.discard(uid)
        self._over &= set(usage)
        self._usage = usage
