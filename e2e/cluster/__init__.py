"""The local Kubernetes control plane of the e2e tier, and the parts tests build on.

Launcher (shared cluster, what ``python -m e2e.cluster up|down|status`` runs): ``up``, ``down``,
``status``. Private cluster for a test session: ``running_cluster``. Binaries: ``ensure_binary``.
Fake nodes: ``create_fake_nodes``. The kubelet's part: ``KubeletStandIn`` with a ``NodePreparer``.
"""

from e2e.cluster.build import BuildResult, ensure_binary
from e2e.cluster.client import ApiError, Json, KubeClient
from e2e.cluster.controlplane import LocalCluster, start_cluster
from e2e.cluster.kubelet_standin import (
    BoundPod,
    ClaimRef,
    KubeletStandIn,
    MarkRunningOnly,
    NodePreparer,
)
from e2e.cluster.launcher import down, status, up
from e2e.cluster.nodes import create_fake_node, create_fake_nodes
from e2e.cluster.session import running_cluster
from e2e.cluster.settings import Settings

__all__ = [
    "ApiError",
    "BoundPod",
    "BuildResult",
    "ClaimRef",
    "Json",
    "KubeClient",
    "KubeletStandIn",
    "LocalCluster",
    "MarkRunningOnly",
    "NodePreparer",
    "Settings",
    "create_fake_node",
    "create_fake_nodes",
    "down",
    "ensure_binary",
    "running_cluster",
    "start_cluster",
    "status",
    "up",
]
