"""The sweep of container-writable dirs runs its steps apart: one that raises is logged and
counted and the next still runs; a step that has not succeeded for MAX_SWEEP_SILENCE_S shows in
`vgpu_bridge_node_sweep_*` and makes `/healthz` fail, naming the step and its last error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from tests.unit.node.claims import UID
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.node import claimdirs
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.claimdirs import MAX_SWEEP_SILENCE_S, SWEEP_PERIOD_S, TenantDirs, trash_dir
from vgpu_bridge.node.files import remove_tree
from vgpu_bridge.node.health import Health
from vgpu_bridge.node.metrics import TenantFilesCollector

STARTED = 1000.0


class Clock:
    def __init__(self) -> None:
        self.now = STARTED

    def __call__(self) -> float:
        return self.now


def _layout(tmp_path: Path) -> CdiLayout:
    return CdiLayout(cdi_dir=tmp_path / "cdi", vgpu_dir=tmp_path / "vgpu", driver=DEFAULT.driver)


def _broken_trash(_layout: CdiLayout, _paths: object = None, **_budget: object) -> int:
    raise RecursionError("maximum recursion depth exceeded")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def dirs(tmp_path: Path, clock: Clock) -> TenantDirs:
    """A claim dir of 3 files, a file in the priority dir that is no board, a tree in the
    trash; a sweeper on `clock`."""
    layout = _layout(tmp_path)
    layout.shared_dir(UID).mkdir(parents=True)
    for name in ("a", "b", "c"):
        (layout.shared_dir(UID) / name).touch()
    layout.priority_dir.mkdir()
    (layout.priority_dir / "junk").touch()
    (trash_dir(layout) / "left.1" / "x").mkdir(parents=True)
    return TenantDirs(layout, claims=lambda: [UID], gpu_uuids={"GPU-aaaa"}, clock=clock)


def _samples(collector: TenantFilesCollector) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (s.name, s.labels.get("step", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("vgpu_bridge_node_sweep_")
    }


def test_a_step_that_raises_stops_neither_the_next_steps_nor_the_sweep(
    dirs: TenantDirs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claimdirs, "empty_trash", _broken_trash)
    with capture_logs() as logs:
        dirs.sweep()  # raises nothing
    layout = _layout(tmp_path)
    assert not (layout.priority_dir / "junk").exists()  # the priority dir was cleaned
    assert dirs.usage()[UID].entries == 3  # the claim dir was measured
    assert (trash_dir(layout) / "left.1").is_dir()
    steps = dirs.steps()
    assert steps["trash"].failures == 1
    assert steps["trash"].succeeded_at is None
    assert steps["trash"].error == "RecursionError: maximum recursion depth exceeded"
    assert steps["priority-dir"].succeeded_at == STARTED
    assert steps["claim-dirs"].succeeded_at == STARTED
    failed = [e for e in logs if e["event"] == "a step of the sweep failed; the others go on"]
    assert [e["step"] for e in failed] == ["trash"]


def test_a_stuck_step_shows_in_the_metrics_and_fails_healthz_past_the_bound(
    dirs: TenantDirs, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    collector = TenantFilesCollector(dict, dirs.steps, clock=clock)
    health = Health(sockets=lambda: None, publications=lambda: None, max_silence_s=1e9,
                    sweep_steps=dirs.steps, clock=clock)  # fmt: skip
    dirs.sweep()
    assert health.problem() is None
    monkeypatch.setattr(claimdirs, "empty_trash", _broken_trash)
    sweeps = int(MAX_SWEEP_SILENCE_S // SWEEP_PERIOD_S)
    for _ in range(sweeps):
        clock.now += SWEEP_PERIOD_S
        dirs.sweep()
        assert health.problem() is None  # up to the bound, failures restart nothing
    clock.now += 1
    samples = _samples(collector)
    assert samples[("vgpu_bridge_node_sweep_failures_total", "trash")] == sweeps
    assert samples[("vgpu_bridge_node_sweep_failures_total", "priority-dir")] == 0
    assert samples[("vgpu_bridge_node_sweep_seconds_since_success", "trash")] == (
        MAX_SWEEP_SILENCE_S + 1
    )
    assert samples[("vgpu_bridge_node_sweep_seconds_since_success", "claim-dirs")] == 1
    assert health.problem() == (
        f"the sweep's trash step has not succeeded for {MAX_SWEEP_SILENCE_S + 1:.0f} s "
        f"(allowed: {MAX_SWEEP_SILENCE_S:g} s; {sweeps} failures); "
        "last error: RecursionError: maximum recursion depth exceeded"
    )
    monkeypatch.undo()
    dirs.sweep()
    assert health.problem() is None


def test_a_step_that_never_succeeded_is_counted_from_the_start(
    dirs: TenantDirs, clock: Clock
) -> None:
    health = Health(sockets=lambda: None, publications=lambda: None, max_silence_s=1e9,
                    sweep_steps=dirs.steps, clock=clock)  # fmt: skip
    clock.now += MAX_SWEEP_SILENCE_S
    assert health.problem() is None
    clock.now += 1
    problem = health.problem()
    assert problem is not None
    assert problem.startswith("the sweep's claim-dirs step has not succeeded for 301 s")


def test_a_socket_problem_is_named_before_a_stuck_sweep(dirs: TenantDirs, clock: Clock) -> None:
    health = Health(sockets=lambda: "the DRA socket is gone", publications=lambda: None,
                    max_silence_s=1e9, sweep_steps=dirs.steps, clock=clock)  # fmt: skip
    clock.now += MAX_SWEEP_SILENCE_S + 1
    assert health.problem() == "the DRA socket is gone"


def test_entries_the_agent_could_not_delete_are_exported_by_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "trash"
    (root / "claim").mkdir(parents=True)
    (root / "claim" / "stuck").touch()
    real_unlink = os.unlink

    def refusing_unlink(path: str, *, dir_fd: int | None = None) -> None:
        if path == "stuck":
            raise PermissionError(1, "Operation not permitted", path)
        real_unlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "unlink", refusing_unlink)
    with capture_logs() as logs:
        assert remove_tree(root, root / "claim") is True
    monkeypatch.undo()
    registry = CollectorRegistry()
    registry.register(TenantFilesCollector(dict))
    text = generate_latest(registry).decode()
    assert 'vgpu_bridge_tenant_entries_not_deleted_total{reason="EPERM"}' in text
    assert [e["not_deleted"] for e in logs if "not_deleted" in e] == [2]  # it and the claim dir
