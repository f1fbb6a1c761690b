"""Volcano on the local control plane: its CRDs, vc-scheduler and vc-controller-manager.

Both components run out of cluster from the multi-call binary (``build.py``) with the session's
admin kubeconfig, no leader election, their health endpoint on a free loopback port, and logs in a
work directory. vc-scheduler gets ``--feature-gates=DRAConsumableCapacity=true`` (Volcano v1.15.x
links the 1.35 libraries, where that gate is alpha and off) and a scheduler configuration whose
queue plugin is ``capacity``, the one plugin that counts DRA claims against queues.
"""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster import processes
from e2e.cluster.client import ApiError, KubeClient
from e2e.cluster.crds import crds_in, create_crds
from e2e.cluster.processes import Running

QUEUES = "/apis/scheduling.volcano.sh/v1beta1/queues"
#: The controllers the tests need: vcjobs, PodGroups for plain pods, queue state, job TTL.
CONTROLLERS = "job-controller,pg-controller,queue-controller,gc-controller"
START_TIMEOUT_S = 120.0

#: enqueue/allocate/backfill as upstream's default; ``capacity`` instead of ``proportion`` so
#: queue quotas see DRA claims (``deviceclass/<class>`` and ``<dim>.deviceclass/<class>``).
SCHEDULER_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: capacity
  - name: nodeorder
  - name: binpack
"""


@dataclass(frozen=True)
class Volcano:
    """The running vc-scheduler and vc-controller-manager of a test session."""

    scheduler: Running
    controller_manager: Running
    workdir: Path

    @property
    def components(self) -> tuple[Running, ...]:
        return (self.scheduler, self.controller_manager)

    def logs(self) -> dict[str, Path]:
        return {c.name: c.log for c in self.components}

    def alive(self) -> bool:
        return all(c.alive() for c in self.components)


def install_crds(kube: KubeClient, files: list[Path]) -> None:
    """Create (or keep) every CRD in ``files`` and wait until each is Established."""
    create_crds(kube, crds_in(files))


def scheduler_args(
    kubeconfig: Path, conf: Path, *, healthz_port: int, period: str = "1s"
) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        f"--scheduler-conf={conf}",
        "--leader-elect=false",
        "--feature-gates=DRAConsumableCapacity=true",
        f"--schedule-period={period}",
        "--enable-healthz=true",
        f"--healthz-address=127.0.0.1:{healthz_port}",
        f"--cache-dump-dir={conf.parent.parent}",
        "--logtostderr=true",
        "-v=3",
    ]


def controller_manager_args(kubeconfig: Path, *, healthz_port: int) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        f"--controllers={CONTROLLERS}",
        "--leader-elect=false",
        "--enable-healthz=true",
        f"--healthz-address=127.0.0.1:{healthz_port}",
        "--logtostderr=true",
        "-v=3",
    ]


@contextlib.contextmanager
def running_volcano(
    binary: Path,
    kube: KubeClient,
    kubeconfig: Path,
    workdir: Path,
    *,
    scheduler_conf: str = SCHEDULER_CONF,
    schedule_period: str = "1s",
) -> Iterator[Volcano]:
    """Start vc-controller-manager and vc-scheduler; wait for both and the ``default`` queue.

    The CRDs must be installed. Both processes are stopped (and reaped) on exit; they also die
    with the test process.
    """
    # vc-scheduler watches its configuration's directory and reloads on every event in it: keep
    # the file alone there (a log file beside it makes it reload on each line it writes).
    conf = workdir / "conf" / "scheduler.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(scheduler_conf)
    started: list[Running] = []
    try:
        cm_port = processes.free_port()
        controller_manager = processes.start(
            "vc-controller-manager",
            [
                str(binary),
                "controller-manager",
                *controller_manager_args(kubeconfig, healthz_port=cm_port),
            ],
            log=workdir / "vc-controller-manager.log",
            die_with_parent=True,
        )
        started.append(controller_manager)
        sched_port = processes.free_port()
        scheduler = processes.start(
            "vc-scheduler",
            [
                str(binary),
                "scheduler",
                *scheduler_args(kubeconfig, conf, healthz_port=sched_port, period=schedule_period),
            ],
            log=workdir / "vc-scheduler.log",
            die_with_parent=True,
        )
        started.append(scheduler)
        volcano = Volcano(scheduler, controller_manager, workdir)
        for name, port in (("vc-controller-manager", cm_port), ("vc-scheduler", sched_port)):
            processes.wait_until(
                lambda port=port: _healthz(port),  # type: ignore[misc]
                timeout_s=START_TIMEOUT_S,
                what=name,
                watch=volcano.components,
            )
        processes.wait_until(
            lambda: _queue_open(kube, "default"),
            timeout_s=START_TIMEOUT_S,
            what="the default queue Open",
            watch=volcano.components,
        )
        yield volcano
    finally:
        for component in reversed(started):
            processes.stop(component)


def _healthz(port: int) -> bool:
    with (
        contextlib.suppress(OSError),
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response,
    ):
        return bool(response.status == 200)
    return False


def _queue_open(kube: KubeClient, name: str) -> bool:
    try:
        queue = kube.get(f"{QUEUES}/{name}")
    except ApiError:
        return False
    return bool(queue.get("status", {}).get("state") == "Open")
