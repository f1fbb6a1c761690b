"""Scheduling throughput of GPU shares: pods/s until 1,000 pods are bound on 50 nodes x 8 GPUs.

Each scheduler gets the same workload on a fresh private control plane (e2e/cluster): 50 fake
nodes, our driver's DeviceClass and one ResourceSlice per node (8 shareable 80Gi cards, published
through the API), one ResourceClaimTemplate asking for a share of 8Gi and 10% of the cores (ten
fit on a card), and 1,000 pods using it, created by 8 client threads. Timed from the first create
to the last pod bound (``nodeName`` set): the resourceclaim controller makes the claims, the
scheduler allocates them (consumable capacity) and binds. No kubelet: binding is measured.

Schedulers are rows of ``RUNNERS``: a name, the pods' ``schedulerName`` and what starts it on the
cluster. kube-scheduler is part of every cluster; Volcano (vc-scheduler + vc-controller-manager,
built by ``python -m e2e.volcano build``) is started beside it. A KAI row is one more runner.
Run with ``make bench``; a few minutes on 2 cores.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e.cluster import KubeClient, LocalCluster, Settings, create_fake_nodes, running_cluster
from e2e.cluster.client import Json
from e2e.dra_objects import pod_with_claim_template, share_template
from e2e.kai.bench_runner import SCHEDULER_NAME as KAI_SCHEDULER_NAME
from e2e.kai.bench_runner import kai_starter
from e2e.volcano.build import VolcanoBuild, ensure_binary
from e2e.volcano.components import install_crds, running_volcano
from e2e.webhook.our_driver import RESOURCE, Card, publish
from vgpu_bridge.core import DEFAULT

NODES, GPUS_PER_NODE, PODS, CLIENT_THREADS = 50, 8, 1000, 8
CARD_MEMORY, SHARE_MEMORY, SHARE_CORES = "80Gi", "8Gi", "10"
TIMEOUT_S, STALL_S = 240.0, 30.0  # give up when nothing more got bound for STALL_S

#: Starts a scheduler on a running cluster (nothing to start for kube-scheduler).
Starter = Callable[[LocalCluster, KubeClient, Path], AbstractContextManager[object]]


@dataclass(frozen=True)
class Runner:
    name: str
    scheduler_name: str
    start: Starter


@dataclass(frozen=True)
class Result:
    runner: str
    seconds: float
    first_bound_s: float
    created_s: float
    bound: int

    @property
    def pods_per_s(self) -> float:
        return self.bound / self.seconds


def _nothing(
    cluster: LocalCluster, kube: KubeClient, workdir: Path
) -> AbstractContextManager[object]:
    return contextlib.nullcontext()


@contextlib.contextmanager
def _volcano(cluster: LocalCluster, kube: KubeClient, workdir: Path) -> Iterator[object]:
    build = VolcanoBuild.from_env()
    binary = ensure_binary(build).binary
    install_crds(kube, build.crd_files())
    with running_volcano(binary, kube, cluster.kubeconfig, workdir) as volcano:
        yield volcano


RUNNERS: list[Runner] = [
    Runner("kube-scheduler", "default-scheduler", _nothing),
    Runner("volcano", "volcano", _volcano),
]

# KAI: only when a build is given (KAI_BIN_DIR, KAI_CRD_DIR, KAI_VERSION), as its module is not
# served here (docs/kai.md); the bench's bare pods are grouped as KAI's podgrouper would group them.
_kai = kai_starter("bench")
if _kai is not None:
    RUNNERS.append(Runner("kai", KAI_SCHEDULER_NAME, _kai))


def _prepare(kube: KubeClient) -> None:
    nodes = create_fake_nodes(kube, NODES, prefix="bench-node-")
    cards = {
        node: [
            Card(f"gpu-{i}", f"GPU-{node}-{i}", "NVIDIA H100 80GB HBM3", CARD_MEMORY)
            for i in range(GPUS_PER_NODE)
        ]
        for node in nodes
    }
    publish(kube, cards)


def _bound(kube: KubeClient, ns: str) -> int:
    return len(kube.items(f"/api/v1/namespaces/{ns}/pods", fieldSelector="spec.nodeName!="))


def _create_all(kube: KubeClient, path: str, bodies: list[Json]) -> None:
    """POST every body from CLIENT_THREADS threads, each on one kept-alive TLS connection (the
    e2e client opens a connection per call, which would make the client the bottleneck)."""
    context = ssl.create_default_context(cafile=str(kube.ca_file))
    context.load_cert_chain(str(kube.client.cert), str(kube.client.key))
    local = threading.local()
    headers = {"Accept": "application/json", "Content-Type": "application/json"}

    def post(body: Json) -> None:
        if not hasattr(local, "connection"):
            local.connection = http.client.HTTPSConnection(
                kube.host, kube.port, context=context, timeout=30
            )
        local.connection.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        response = local.connection.getresponse()
        text = response.read()
        if response.status >= 300:
            raise RuntimeError(f"POST {path}: HTTP {response.status}: {text[:300]!r}")

    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        list(pool.map(post, bodies))


def _measure(kube: KubeClient, runner: Runner) -> Result:
    ns = "bench"
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    kube.create("/api/v1/namespaces", namespace)
    capacity = {"memory": SHARE_MEMORY, "cores": SHARE_CORES}
    template = share_template("share", device_class_name=DEFAULT.device_class, capacity=capacity)
    kube.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", template)
    bodies = []
    for index in range(PODS):
        body = pod_with_claim_template(f"p-{index:04d}", template="share")
        body["spec"]["schedulerName"] = runner.scheduler_name
        body["spec"]["terminationGracePeriodSeconds"] = 0
        bodies.append(body)

    started = time.monotonic()
    creator = threading.Thread(
        target=_create_all, args=(kube, f"/api/v1/namespaces/{ns}/pods", bodies), daemon=True
    )
    creator.start()
    created_s = first_bound_s = 0.0
    bound, last_change = 0, time.monotonic()
    while time.monotonic() - started < TIMEOUT_S and time.monotonic() - last_change < STALL_S:
        if not created_s and not creator.is_alive():
            created_s = time.monotonic() - started
        now_bound = _bound(kube, ns)
        if now_bound != bound:
            bound, last_change = now_bound, time.monotonic()
        if bound and not first_bound_s:
            first_bound_s = time.monotonic() - started
        if bound == PODS:
            break
        time.sleep(0.25)
    seconds = (time.monotonic() if bound == PODS else last_change) - started
    creator.join()
    created_s = created_s or time.monotonic() - started
    return Result(runner.name, seconds, first_bound_s, created_s, bound)


def run(runner: Runner, settings: Settings) -> Result:
    """One runner on a fresh cluster, so no scheduler sees another's pods or claims."""
    with running_cluster(settings) as cluster, tempfile.TemporaryDirectory() as tmp:
        kube = cluster.client()
        _prepare(kube)
        with runner.start(cluster, kube, Path(tmp)):
            return _measure(kube, runner)


def table(results: list[Result]) -> str:
    lines = [
        f"schedule {PODS} pods with {SHARE_MEMORY} shares on {NODES} nodes x {GPUS_PER_NODE} GPUs",
        f"{'scheduler':<16}{'bound':>8}{'seconds':>10}{'pods/s':>10}{'first bound s':>15}"
        f"{'create s':>10}",
    ]
    for r in results:
        lines.append(
            f"{r.runner:<16}{r.bound:>8}{r.seconds:>10.1f}{r.pods_per_s:>10.1f}"
            f"{r.first_bound_s:>15.1f}{r.created_s:>10.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    wanted = set(argv)
    runners = [r for r in RUNNERS if not wanted or r.name in wanted]
    settings = Settings.from_env()
    results = []
    for runner in runners:
        results.append(run(runner, settings))
        print(table(results[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(table(results))
    return 0 if all(r.bound == PODS for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
