"""KAI as a scheduler of bench/schedule.py: its CRDs, a parent and a `default-queue` leaf without
limits, the real scheduler and binder from a given build (``KAI_BIN_DIR``, ``KAI_CRD_DIR``), and
the podgrouper's work for bare pods done by ``grouping_pods`` (the bench's pods carry no
``pod-group-name``). ``None`` without a build: KAI's module is not served here (docs/kai.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from e2e.cluster import KubeClient, LocalCluster
from e2e.kai.real_kai import QUEUES, KaiBuild, grouping_pods, install_crds, queue, running_kai

#: The scheduler name KAI answers to by default.
SCHEDULER_NAME = "kai-scheduler"

Starter = Callable[[LocalCluster, KubeClient, Path], AbstractContextManager[object]]


def kai_starter(namespace: str) -> Starter | None:
    """A starter for pods created in `namespace`, or None when no KAI build is given."""
    build = KaiBuild.from_env()
    if build is None:
        return None

    @contextmanager
    def start(cluster: LocalCluster, kube: KubeClient, workdir: Path) -> Iterator[object]:
        install_crds(kube, build.crd_dir)
        kube.create(QUEUES, queue("default-parent-queue"))
        kube.create(QUEUES, queue("default-queue", parent="default-parent-queue"))
        gates = "DRAConsumableCapacity=true"
        with (
            running_kai(build, cluster.kubeconfig, workdir, feature_gates=gates) as logs,
            grouping_pods(kube, namespace),
        ):
            yield logs

    return start
