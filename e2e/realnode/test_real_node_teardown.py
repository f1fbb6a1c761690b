"""Teardown of the real node leaves the host as it found it (issue 10, item 4).

Collected only with ``VGPU_REALNODE=1`` (``make e2e-realnode``); see conftest.py. Runs in its own
module because it starts and stops a node of its own (the ``real_node`` fixture is module-scoped).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from e2e.cluster import LocalCluster, Settings
from e2e.realnode import host
from e2e.realnode.host import Layout
from e2e.realnode.kubelet import NODE_NAME
from e2e.realnode.node import our_processes
from e2e.realnode.spike import cluster_state_dir, node_and_cluster, probe_pod
from e2e.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]

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


def _default_runtime_paths() -> set[str]:
    found = set()
    for top in (Path("/run/containerd"), Path("/run/runc"), Path("/var/lib/kubelet")):
        if top.exists():
            found |= {str(top), *(str(p) for p in top.rglob("*"))}
    return found


def _realnode(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "e2e.realnode", command],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_down_from_another_process_after_the_starter_is_gone(e2e_settings: Settings) -> None:
    """What a crashed harness leaves (node, a running pod, the control plane) goes with ``down``."""
    layout = Layout()
    before = host.read_sysctls()
    default_paths = _default_runtime_paths()
    try:
        up = _realnode("up")
        assert up.returncode == 0, up.stdout + up.stderr
        cluster = LocalCluster.load(cluster_state_dir(e2e_settings))
        assert cluster is not None
        client = cluster.client()
        client.create(
            "/api/v1/namespaces/default/pods",
            probe_pod("left", NODE_NAME, args=("left", "0", "600")),
        )
        wait_for(
            lambda: (
                client.get("/api/v1/namespaces/default/pods/left")["status"].get("phase")
                == "Running"
            ),
            timeout_s=120,
            what="the pod left running",
        )
        # the kubelet's value; not "changed from before": a host may hold it already
        assert host.read_sysctls()["vm/overcommit_memory"] == "1"
        assert host.mounts_under(layout.run, layout.root)
        assert host.cgroup_pids(layout)
    finally:
        down = _realnode("down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert host.read_sysctls() == before
    assert not host.mounts_under(layout.run, layout.root)
    assert not our_processes(layout)
    assert not layout.root.exists()
    assert not layout.run.exists()
    assert not cluster_state_dir(e2e_settings).exists()
    # shim sockets and runc state stay in our dirs, never in the default /run/containerd
    assert _default_runtime_paths() == default_paths
    assert not any(
        (Path("/sys/fs/cgroup") / h / layout.cgroup_name).exists() for h in host.ALL_HIERARCHIES
    )
