"""What a container can put in its claim dir (mounted read-write): a `vgpu.cache` symlink to
/dev/zero, a FIFO in its place, a host-pids symlink to a host file, a link out of the dir, and
20,000 small files. The agent's /metrics and /healthz keep answering, its memory and threads stay
bounded, nothing outside the claim dir is written or deleted, and Unprepare removes it all while
a neighbour's Prepare is still answered."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.abuse.agent import Agent, AgentDirs, agent_dirs, claim, running_agent
from tests.abuse.fake_api import FakeApi, fake_api
from tests.abuse.probe import Prober
from tests.abuse.processes import proc_status

MAX_RSS_MB = 500
SCRAPES = 3
HOLD_S = 3.0  # the host-pids round reads each region every second
FLOOD = 20_000
LEAK_ALLOWANCE = 5  # threads: a blocked thread per scrape would add SCRAPES


@pytest.fixture
def dirs() -> Iterator[AgentDirs]:
    with agent_dirs() as made:
        yield made


@pytest.fixture
def node_api() -> Iterator[FakeApi]:
    with fake_api() as api:
        yield api


@pytest.fixture
def agent(dirs: AgentDirs, node_api: FakeApi) -> Iterator[Agent]:
    with running_agent(dirs, node_api) as running:
        yield running


def scrape(agent: Agent, times: int) -> list[str]:
    """Problems seen scraping /metrics `times` times (each within the probe deadline)."""
    problems = []
    for _ in range(times):
        try:
            status, _ = agent.http("/metrics")
        except OSError as error:
            problems.append(f"/metrics unanswered: {type(error).__name__}: {error}")
            continue
        if status != 200:
            problems.append(f"/metrics answered {status}")
    return problems


def threads_blocked_on_a_fifo(pid: int) -> list[str]:
    """The agent's threads the kernel shows waiting to open or read a pipe (a FIFO's reader
    blocks in open until a writer comes)."""
    blocked = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            wchan = (task / "wchan").read_text()
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        if "fifo" in wchan or "pipe" in wchan or "wait_for_partner" in wchan:
            blocked.append(f"{name} ({wchan})")
    return blocked


def watched(agent: Agent) -> Prober:
    return Prober(agent.process.pid, lambda: agent.http("/healthz")[0])


def test_a_region_symlinked_to_dev_zero_or_a_fifo_neither_grows_nor_blocks_the_agent(
    agent: Agent, dirs: AgentDirs, node_api: FakeApi
) -> None:
    mine = claim(node_api, "tenant")
    assert agent.prepare([mine])[mine.uid].devices
    region = dirs.claim_dir(mine.uid) / "vgpu.cache"
    with watched(agent) as prober:
        region.symlink_to("/dev/zero")
        time.sleep(HOLD_S)
        zero_problems = scrape(agent, SCRAPES)
        region.unlink()
        os.mkfifo(region)
        threads_before = proc_status(agent.process.pid, "Threads")
        time.sleep(HOLD_S)
        fifo_problems = scrape(agent, SCRAPES)
        prober.sample()
        threads_after = proc_status(agent.process.pid, "Threads")
        blocked = threads_blocked_on_a_fifo(agent.process.pid)
    print(f"\nabuse/node plants: {prober.summary()}")
    assert not zero_problems, zero_problems
    assert not fifo_problems, fifo_problems
    assert not prober.failures, prober.failures[:5]
    assert prober.max_rss_mb < MAX_RSS_MB, prober.summary()
    assert threads_after - threads_before < LEAK_ALLOWANCE, (threads_before, threads_after)
    assert not blocked, f"agent threads waiting on the planted FIFO: {blocked}"


def test_links_out_of_the_claim_dir_are_never_written_through_or_deleted_through(
    agent: Agent, dirs: AgentDirs, node_api: FakeApi
) -> None:
    canary = dirs.base / "canary"
    canary.mkdir()
    (canary / "file").write_text("canary")
    mine = claim(node_api, "tenant")
    assert agent.prepare([mine])[mine.uid].devices
    claim_dir = dirs.claim_dir(mine.uid)
    (claim_dir / "host-pids").symlink_to(canary / "file")
    (claim_dir / "escape").symlink_to(canary)
    with watched(agent) as prober:
        problems = scrape(agent, 3)
        assert agent.unprepare([mine]) == {mine.uid: ""}
    assert not problems, problems
    assert not prober.failures, prober.failures[:5]
    assert (canary / "file").read_text() == "canary"
    assert not claim_dir.exists()


def test_twenty_thousand_files_in_a_claim_dir_neither_stall_probes_nor_a_neighbours_prepare(
    agent: Agent, dirs: AgentDirs, node_api: FakeApi
) -> None:
    mine, neighbour = claim(node_api, "flooder"), claim(node_api, "neighbour", device="gpu-1")
    assert agent.prepare([mine])[mine.uid].devices
    claim_dir = dirs.claim_dir(mine.uid)
    for index in range(FLOOD):
        (claim_dir / f"f{index}").write_bytes(b"x")
    answers: dict[str, str] = {}
    with watched(agent) as prober:
        problems = scrape(agent, 3)
        unprepare = threading.Thread(target=lambda: answers.update(agent.unprepare([mine])))
        unprepare.start()
        neighbour_answer = agent.prepare([neighbour])[neighbour.uid]
        unprepare.join(timeout=120)
    print(f"\nabuse/node flood: {prober.summary()}")
    assert neighbour_answer.devices, neighbour_answer.error
    assert answers == {mine.uid: ""}
    assert not claim_dir.exists()
    assert not problems, problems
    assert not prober.failures, prober.failures[:5]
    assert prober.max_rss_mb < MAX_RSS_MB, prober.summary()
