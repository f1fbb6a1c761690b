"""The real KAI scheduler and binder against the session's control plane: the build
``python -m e2e.kai build --source DIR`` made last (``<cache>/kai-current.json``, e2e/kai/build.py),
or binaries made elsewhere (``KAI_BIN_DIR``: ``scheduler`` and ``binder``; ``KAI_CRD_DIR``: KAI's
``deployments/kai-scheduler/crds``; ``KAI_VERSION``: what the build is).

Like KAI's own env-tests: its CRDs, Queues, a PodGroup per pod with the ``pod-group-name``
annotation (no podgrouper), and no admission, podgroupcontroller, queuecontroller or operator.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from e2e.cluster import Settings
from e2e.cluster.client import ApiError, Json, KubeClient
from e2e.cluster.crds import crds_in, create_crds
from e2e.kai.build import current_build
from e2e.webhook.process import free_port
from vgpu_bridge.adapters.kai.adapter import has_consumable_capacity

QUEUES = "/apis/scheduling.run.ai/v2/queues"
#: What KAI needs of its CRDs without the operator (the scheduler watches Topologies too).
NEEDED_CRDS = (
    "scheduling.run.ai_queues.yaml",
    "scheduling.run.ai_podgroups.yaml",
    "scheduling.run.ai_bindrequests.yaml",
    "kai.scheduler_topologies.yaml",
)


@dataclass(frozen=True)
class KaiBuild:
    scheduler: Path
    binder: Path
    crd_dir: Path
    version: str
    #: Whether the build includes KAI PR #2102 (consumable capacity): read from the source tree
    #: for builds made here; from the version (the adapter's gate) for binaries made elsewhere.
    has_consumable_capacity: bool

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KaiBuild | None:
        """``KAI_BIN_DIR``/``KAI_CRD_DIR`` when set, else the cache's newest build, else None."""
        env = os.environ if environ is None else environ
        bin_dir, crd_dir = env.get("KAI_BIN_DIR"), env.get("KAI_CRD_DIR")
        if bin_dir and crd_dir:
            version = env.get("KAI_VERSION", "unknown")
            build = cls(
                Path(bin_dir) / "scheduler",
                Path(bin_dir) / "binder",
                Path(crd_dir),
                version,
                has_consumable_capacity(version) is True,
            )
        else:
            record = current_build(Settings.from_env(env).cache_root)
            if record is None:
                return None
            where = Path(str(record["dir"]))
            build = cls(
                where / "bin" / "scheduler",
                where / "bin" / "binder",
                where / "crds",
                str(record.get("version", "unknown")),
                record.get("has_pr2102") is True,
            )
        missing = [p for p in (build.scheduler, build.binder, build.crd_dir) if not p.exists()]
        if missing:
            raise FileNotFoundError(f"KAI build: missing {missing}")
        return build


def install_crds(kube: KubeClient, crd_dir: Path) -> None:
    """Create (or keep) KAI's CRDs that the tier needs and wait until each is Established."""
    create_crds(kube, crds_in(crd_dir / file for file in NEEDED_CRDS), timeout_s=30)


def queue(name: str, *, parent: str | None = None, gpu_limit: float = -1) -> Json:
    """A Queue with explicit limits: KAI blocks any resource whose limit is unset or 0."""
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: Json = {
        "resources": {
            "gpu": {"quota": -1 if gpu_limit < 0 else gpu_limit, "limit": gpu_limit,
                    "overQuotaWeight": 1},
            "cpu": unlimited,
            "memory": unlimited,
        }
    }  # fmt: skip
    if parent:
        spec["parentQueue"] = parent
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def pod_group(name: str, queue_name: str) -> Json:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": 1, "queue": queue_name},
    }


@contextmanager
def running_kai(
    build: KaiBuild, kubeconfig: Path, workdir: Path, *, feature_gates: str = ""
) -> Iterator[Path]:
    """The scheduler and the binder as processes, all ports on 127.0.0.1; yields the log dir."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    gates = [f"--feature-gates={feature_gates}"] if feature_gates else []
    commands = {
        "scheduler": [
            str(build.scheduler),
            f"--listen-address=127.0.0.1:{free_port()}",
            f"--plugin-server-port={free_port()}",
            "--schedule-period=200ms",
            *gates,
        ],
        "binder": [
            str(build.binder),
            f"--kubeconfig={kubeconfig}",
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            *gates,
        ],
    }
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name, command in commands.items():
            with (workdir / f"{name}.log").open("w") as log:
                processes.append(
                    subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
                )
        yield workdir
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def grouping_pods(kube: KubeClient, namespace: str, *, interval_s: float = 0.2) -> Iterator[None]:
    """What KAI's podgrouper does for bare pods, for a namespace: each KAI pod without
    `pod-group-name` gets a PodGroup of its own (minMember 1, the pod's queue label, else
    `default-queue`) and the annotation. A thread, stopped on exit."""
    stop = threading.Event()

    def group_once() -> None:
        for pod in kube.items(f"/api/v1/namespaces/{namespace}/pods"):
            meta = pod["metadata"]
            if pod["spec"].get("schedulerName") != "kai-scheduler":
                continue
            if "pod-group-name" in (meta.get("annotations") or {}):
                continue
            name = f"pg-{meta['name']}"
            q = (meta.get("labels") or {}).get("kai.scheduler/queue", "default-queue")
            path = f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups"
            try:
                kube.create(path, pod_group(name, q))
            except ApiError as error:
                if error.status != 409:
                    raise
            patch = {"metadata": {"annotations": {"pod-group-name": name}}}
            kube.patch(f"/api/v1/namespaces/{namespace}/pods/{meta['name']}", patch)

    def loop() -> None:
        while not stop.is_set():
            with contextlib.suppress(ApiError, OSError):  # the next round retries
                group_once()
            stop.wait(interval_s)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
