"""``up`` / ``down`` / ``status`` of the shared local cluster kept in ``Settings.state_dir``.

Tests that want a private cluster use ``start_cluster`` directly (see ``e2e/conftest.py``); these
functions serve ``python -m e2e.cluster`` and the demo, where the cluster outlives the command.
"""

from __future__ import annotations

import shutil

from e2e.cluster.build import ensure_binary
from e2e.cluster.controlplane import LocalCluster, start_cluster
from e2e.cluster.settings import Settings


def up(settings: Settings) -> LocalCluster:
    """Build or reuse the binary and start the cluster; an already healthy one is reused."""
    running = status(settings)
    if running is not None and running.version == settings.k8s_version:
        return running
    down(settings)
    binary = ensure_binary(settings).binary
    return start_cluster(
        binary, settings.k8s_version, state_dir=settings.state_dir, die_with_parent=False
    )


def status(settings: Settings) -> LocalCluster | None:
    """The running cluster if every component is alive and the apiserver is ready."""
    cluster = LocalCluster.load(settings.state_dir)
    if cluster is None or not cluster.healthy():
        return None
    return cluster


def down(settings: Settings) -> bool:
    """Stop what ``up`` started (healthy or not), remove its state; False if there was none."""
    cluster = LocalCluster.load(settings.state_dir)
    existed = cluster is not None or settings.state_dir.exists()
    if cluster is not None:
        cluster.stop()
    shutil.rmtree(settings.state_dir, ignore_errors=True)
    return existed


__all__ = ["down", "status", "up"]
