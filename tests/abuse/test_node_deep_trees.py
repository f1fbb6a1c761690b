"""Trees 3,000 directories deep (past Python's recursion limit), with links out to a canary at
the top, halfway and at the bottom: one left in the trash by a killed agent, one built in a
prepared claim's dir. The sweep empties the trash, Unprepare answers every claim of its call and
removes the dir, the canary survives, and `/healthz` stays 200 with no failed sweep step. A tree
bigger than a pass's budget (issue 35, item 8) goes in bounded passes, back to back, each one a
success: /healthz answers 200 throughout and the tree is gone in the end (counts, not times)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.abuse.agent import AgentDirs, agent_dirs, claim, running_agent
from tests.abuse.fake_api import FakeApi, fake_api
from tests.abuse.probe import Prober
from tests.abuse.processes import wait_until
from tests.unit.node.test_deep_trees import deep_tree


@pytest.fixture
def dirs() -> Iterator[AgentDirs]:
    """The agent's dirs, removed first with `rm -rf`: the fixture's own recursive removal
    cannot take what a failing test leaves 3,000 levels deep."""
    with agent_dirs() as made:
        try:
            yield made
        finally:
            subprocess.run(["rm", "-rf", "--", str(made.root)], check=False)


@pytest.fixture
def node_api() -> Iterator[FakeApi]:
    with fake_api() as api:
        yield api


def _canary(dirs: AgentDirs) -> Path:
    canary = dirs.base / "canary"
    canary.mkdir()
    (canary / "passwd").write_text("canary")
    return canary


def test_deep_trees_are_deleted_by_the_sweep_and_by_unprepare_and_the_agent_stays_healthy(
    dirs: AgentDirs, node_api: FakeApi
) -> None:
    canary = _canary(dirs)
    trash = dirs.vgpu / "trash"
    deep_tree(trash / "left-by-a-killed-agent.1", victim=canary)
    with running_agent(dirs, node_api) as agent:
        wait_until(lambda: not any(trash.iterdir()), agent.process, agent.log_file,
                   "the first sweep emptying the trash")  # fmt: skip
        mine, neighbour = claim(node_api, "deep"), claim(node_api, "neighbour", device="gpu-1")
        assert agent.prepare([mine])[mine.uid].devices
        assert agent.prepare([neighbour])[neighbour.uid].devices
        deep_tree(dirs.claim_dir(mine.uid), victim=canary)
        assert agent.unprepare([mine, neighbour]) == {mine.uid: "", neighbour.uid: ""}
        healthz = agent.http("/healthz")
        _, metrics = agent.http("/metrics")
    assert not dirs.claim_dir(mine.uid).exists()
    assert not any(trash.iterdir())
    assert (canary / "passwd").read_text() == "canary"
    assert healthz == (200, b'{"status": "ok"}\n')
    assert b'vgpu_bridge_node_sweep_failures_total{step="trash"} 0.0' in metrics


PER_PASS = 500
PLANTED_DEPTH = 1500  # 1,501 files, 1,500 directories, 3,000 renames up: 12 passes of 500


def test_a_tree_bigger_than_a_pass_goes_in_bounded_passes_and_healthz_stays_200(
    dirs: AgentDirs, node_api: FakeApi
) -> None:
    canary = _canary(dirs)
    trash = dirs.vgpu / "trash"
    deep_tree(trash / "planted.1", depth=PLANTED_DEPTH, victim=canary)
    extra = ("--removals-per-pass", str(PER_PASS))
    with running_agent(dirs, node_api, extra_args=extra) as agent:
        with Prober(agent.process.pid, lambda: agent.http("/healthz")[0]) as prober:
            wait_until(lambda: not any(trash.iterdir()), agent.process, agent.log_file,
                       "the sweep's passes emptying the trash")  # fmt: skip
        _, metrics = agent.http("/metrics")
    print(prober.summary())
    log = agent.log_file.read_text()
    passes = log.count("deletion stopped at this pass's budget")
    assert passes >= 10, passes  # never the whole tree in one pass
    assert prober.failures == []
    assert prober.probes > 0
    assert (canary / "passwd").read_text() == "canary"
    assert b'vgpu_bridge_node_sweep_failures_total{step="trash"} 0.0' in metrics
