"""What a container puts in its claim's dir, against the real agent binary: a FIFO or a symlink
to /dev/zero in place of the region file neither blocks a scrape nor grows the agent; the claim
reads as having no region and the refusal is counted."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import pytest

from e2e.cluster import KubeClient
from e2e.node.conftest import AgentOnNode
from e2e.node.test_agent import _share_pod
from e2e.pods import claim_of

pytestmark = pytest.mark.e2e


def _scrape(port: int, path: str) -> str:
    """One GET, with a generous deadline: a scrape that blocks on a FIFO never answers."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as response:
        text: str = response.read().decode()
    return text


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _sample(text: str, prefix: str, needle: str = "") -> float:
    (line,) = [row for row in text.splitlines() if row.startswith(prefix) and needle in row]
    return float(line.rsplit(" ", 1)[1])


def test_a_fifo_or_dev_zero_as_the_region_neither_blocks_nor_grows_the_agent(
    kube: KubeClient, namespace: str, agent_on_node: AgentOnNode
) -> None:
    pod = _share_pod(kube, namespace, "planter", agent_on_node.node, "1Gi", "10")
    uid = claim_of(kube, namespace, pod)["metadata"]["uid"]
    agent = agent_on_node.agent
    assert agent.process is not None
    region = agent.layout.shared_dir(uid) / "vgpu.cache"
    before_kib = _rss_kib(agent.process.pid)
    for plant in (os.mkfifo, lambda path: path.symlink_to("/dev/zero")):
        region.unlink(missing_ok=True)
        plant(region)
        for _ in range(3):  # several scrapes: none may leave a thread blocked behind
            text = _scrape(agent.metrics_port, "/metrics")
        assert _sample(text, "vgpu_bridge_claim_region_readable{", uid) == 0
        assert _scrape(agent.metrics_port, "/healthz")
    assert _sample(text, "vgpu_bridge_untrusted_files_refused_total{", "not a regular file") >= 3
    assert _sample(text, "vgpu_bridge_untrusted_files_refused_total{", "symlink") >= 3
    assert _rss_kib(agent.process.pid) - before_kib < 64 * 1024
    region.unlink()
