"""Teardown of the real node leaves the host as it found it (issue 10, item 4).

Collected only with ``VGPU_REALNODE=1`` (``make e2e-realnode``); see conftest.py. Runs in its own
module because it starts and stops a node of its own (the ``real_node`` fixture is module-scoped).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.cluster import Settings
from e2e.realnode import host
from e2e.realnode.host import Layout
from e2e.realnode.node import our_processes
from e2e.realnode.spike import node_and_cluster

pytestmark = pytest.mark.e2e


def test_down_puts_the_host_back(e2e_settings: Settings) -> None:
    layout = Layout()
    before = host.read_sysctls()
    log: list[str] = []
    with node_and_cluster(e2e_settings, log=log) as (_, node):
        assert host.read_sysctls()["vm/overcommit_memory"] == "1"  # the kubelet's value
        assert host.mounts_under(layout.run, layout.root)
        assert our_processes(layout)
    assert host.read_sysctls() == before
    assert not host.mounts_under(layout.run, layout.root)
    assert not our_processes(layout)
    assert not any(
        (Path("/sys/fs/cgroup") / h / layout.cgroup_name).exists() for h in host.ALL_HIERARCHIES
    )
    assert not layout.root.exists()
    assert not layout.run.exists()
    assert node.components
    assert not any(c.alive() for c in node.components)
