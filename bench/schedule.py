"""Scheduling throughput of GPU shares: pods/s until 1,000 pods are bound on 50 nodes.

Each row gets its workload on a fresh private control plane (e2e/cluster), 50 fake nodes and
1,000 pods created by 8 client threads; the resourceclaim controller makes their claims. Then
the scheduler starts, and a watch notes when each pod is bound (``nodeName`` set): pods/s is
the rate from the first pod bound to the last, the scheduler's work alone (creating the pods
and claims took longer than scheduling them once the client limit was lifted, so timing both
measured the creation). No kubelet: binding is measured. ``algo ms/pod`` is kube-scheduler's
own mean scheduling-algorithm time per pod (filter and score, where the DRA allocator runs),
read from its /metrics: the allocator's cost apart from the API server's, which on a busy
machine moves pods/s far more. Two workloads (``WORKLOADS``):

- ``shares``: each node publishes what our node agent publishes for 8 mock 80Gi cards
  (``node.slices.build_slices``), and one ResourceClaimTemplate is what the translator writes for
  8Gi and 10% of the cores (``core.claims.claim_spec``; ten fit on a card);
- ``shares-unbooked``: the same without the core booking (``milliCores``, the capacity that
  keeps HAMi's exclusivity rules; profile without ``core_booking_capacity``): what the booking
  costs the allocator;
- ``whole``: the baseline without consumable capacity: each node publishes 20 plain devices
  (no ``allowMultipleAllocations``, no capacity; 1,000 pods need 1,000 devices) and each claim
  asks for one whole device.

Schedulers are rows of ``RUNNERS``: a name, the pods' ``schedulerName`` and what starts it on the
cluster. kube-scheduler runs as a second instance with its own name and no client rate limit
(the harness's instance is capped at 200 requests/s, which capped every row at ~54 pods/s, a
measure of the limit rather than of the allocator); Volcano (vc-scheduler +
vc-controller-manager, built by ``python -m e2e.volcano build``) is started beside it. A KAI row
is one more runner.

One row's throughput moves by a third between runs on a busy machine, more than the gap between
the workloads, so a row is run ``--repeats N`` times (default 3), interleaved: every round runs
each row once, in order, so a slow spell of the machine hits both workloads of a round rather
than all repeats of one. The table gives each row's median and its range (min..max), and the
shares / whole ratio as the median of the rounds' own ratios, with their range.
``python bench/schedule.py [--repeats N] [scheduler[/workload]...]``; ``make bench``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import ssl
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.scaling.scheduling import profile_summary, scaling_table
from e2e.cluster import (
    KubeClient,
    LocalCluster,
    Settings,
    create_fake_nodes,
    processes,
    running_cluster,
)
from e2e.cluster.client import Json
from e2e.cluster.controlplane import FEATURE_GATES
from e2e.dra_objects import RESOURCE_V1, pod_with_claim_template, resource_slice
from e2e.kai.bench_runner import SCHEDULER_NAME as KAI_SCHEDULER_NAME
from e2e.kai.bench_runner import kai_starter
from e2e.volcano.build import VolcanoBuild, ensure_binary
from e2e.volcano.components import install_crds, running_volcano
from e2e.webhook.our_driver import RESOURCE
from vgpu_bridge.core import DEFAULT, DeviceFilter, DriverProfile, GpuRequest, Inventory
from vgpu_bridge.core.claims import claim_spec
from vgpu_bridge.core.models import Problems
from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.slices import build_slices

GPUS_PER_NODE, CLIENT_THREADS = 8, 8
CARD_MEMORY, SHARE_MEMORY_MIB, SHARE_CORES = 80 * 2**30, 8192, 10
TIMEOUT_S, STALL_S = 240.0, 30.0  # give up when nothing more got bound for STALL_S
BENCH_SCHEDULER = "bench-scheduler"
UNLIMITED_QPS, UNLIMITED_BURST = 100_000, 100_000
WHOLE_DRIVER = "whole-gpu.bench.vgpu-bridge.io"
ALGORITHM_SUM_AND_COUNT = (
    "scheduler_scheduling_algorithm_duration_seconds_sum",
    "scheduler_scheduling_algorithm_duration_seconds_count",
)
ATTEMPTS = "scheduler_schedule_attempts_total"
UNBOOKED = replace(DEFAULT, core_booking_capacity=None)
NAMESPACE = "bench"
MAX_SCALE_PODS, SHARES_PER_CARD, FILL = 20_000, 100 // SHARE_CORES, 0.8  # issue 26's steps


@dataclass(frozen=True)
class Scale:
    """How many fake nodes, pods, and plain devices per node the baseline publishes."""

    nodes: int = 50
    pods: int = 1000
    whole_per_node: int = 20

    @classmethod
    def at_gpus(cls, gpus: int) -> Scale:
        """Issue 26's step of `gpus` cards: 20,000 share pods, or 80 % of what the cards hold
        (the last shares of a full card are found by retries, which measure the queue's backoff,
        not the allocator); the baseline's plain devices are as many as the pods."""
        nodes = -(-gpus // GPUS_PER_NODE)
        pods = min(MAX_SCALE_PODS, int(FILL * nodes * GPUS_PER_NODE * SHARES_PER_CARD))
        return cls(nodes, pods, -(-pods // nodes))

    @property
    def timeout_s(self) -> float:
        return max(TIMEOUT_S, self.pods / 20)


#: Starts a scheduler on a running cluster.
Starter = Callable[[LocalCluster, KubeClient, Path], AbstractContextManager[object]]


@dataclass(frozen=True)
class Runner:
    name: str
    scheduler_name: str
    start: Starter


@dataclass(frozen=True)
class Workload:
    """What the nodes publish and the one claim spec every pod's template holds."""

    name: str
    publish: Callable[[KubeClient, list[str], Scale], None]
    claim: Callable[[], Json]


@dataclass(frozen=True)
class Result:
    runner: str
    workload: str
    seconds: float  # first pod bound to last pod bound
    first_bound_s: float  # scheduler started to first pod bound
    created_s: float  # pods and their claims made, before the scheduler starts
    bound: int
    algorithm_ms: float  # the scheduler's mean scheduling-algorithm time per pod (0: unknown)
    attempts: float = 0.0  # scheduling attempts per bound pod (1: none retried; 0: unknown)
    scale: Scale = Scale()
    watch_restarts: int = 0  # the bind watch started over (its times then are not the binds')

    @property
    def pods_per_s(self) -> float:
        return (self.bound - 1) / self.seconds if self.seconds > 0 else 0.0


def _loopback_get(port: int, path: str) -> str | None:
    """GET on loopback, self-signed certificate (not verified); None unless 200."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with contextlib.suppress(OSError):
        url = f"https://127.0.0.1:{port}{path}"
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return response.read().decode() if response.status == 200 else None
    return None


@dataclass(frozen=True)
class SchedulerMetrics:
    """The bench kube-scheduler's own account of its time, apart from the API server's."""

    port: int

    def _samples(self) -> dict[str, float]:
        """Each sample of the scheduler's /metrics by its name with labels, as written."""
        text = _loopback_get(self.port, "/metrics") or ""
        samples = {}
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if name and not line.startswith("#"):
                with contextlib.suppress(ValueError):
                    samples[name] = float(value)
        return samples

    def algorithm_ms_per_pod(self) -> float:
        """Mean ``scheduler_scheduling_algorithm_duration_seconds`` (filter and score, where the
        DRA allocator runs) in ms; 0 when the scheduler does not say."""
        samples = self._samples()
        total, count = (samples.get(name, 0.0) for name in ALGORITHM_SUM_AND_COUNT)
        return 1000 * total / count if count else 0.0

    def attempts(self) -> float:
        """Scheduling attempts of every result (scheduled, unschedulable, error), all told."""
        return sum(v for k, v in self._samples().items() if k.startswith(ATTEMPTS + "{"))


@contextlib.contextmanager
def _kube_scheduler(cluster: LocalCluster, kube: KubeClient, workdir: Path) -> Iterator[object]:
    """A second kube-scheduler, named ``BENCH_SCHEDULER``, whose client is not rate limited."""
    config = workdir / "kube-scheduler.json"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "kubescheduler.config.k8s.io/v1",
                "kind": "KubeSchedulerConfiguration",
                "clientConnection": {
                    "kubeconfig": str(cluster.kubeconfig),
                    "qps": UNLIMITED_QPS,
                    "burst": UNLIMITED_BURST,
                },
                "leaderElection": {"leaderElect": False},
                "profiles": [{"schedulerName": BENCH_SCHEDULER}],
            }
        )
    )
    port = processes.free_port()
    argv = [str(cluster.binary), "kube-scheduler", f"--config={config}"]
    argv += ["--bind-address=127.0.0.1", f"--secure-port={port}"]
    argv += ["--authorization-always-allow-paths=/healthz,/metrics,/debug/pprof/*"]
    argv += [f"--feature-gates={FEATURE_GATES}"]
    log = workdir / "kube-scheduler.log"
    scheduler = processes.start("bench kube-scheduler", argv, log=log, die_with_parent=True)
    try:
        processes.wait_until(
            lambda: _loopback_get(port, "/healthz") is not None,
            timeout_s=120,
            what="bench kube-scheduler",
            watch=(scheduler,),
        )
        yield SchedulerMetrics(port)
    finally:
        processes.stop(scheduler)


@contextlib.contextmanager
def _volcano(cluster: LocalCluster, kube: KubeClient, workdir: Path) -> Iterator[object]:
    build = VolcanoBuild.from_env()
    binary = ensure_binary(build).binary
    install_crds(kube, build.crd_files())
    with running_volcano(binary, kube, cluster.kubeconfig, workdir) as volcano:
        yield volcano


RUNNERS: list[Runner] = [
    Runner("kube-scheduler", BENCH_SCHEDULER, _kube_scheduler),
    Runner("volcano", "volcano", _volcano),
]

# KAI: only when a build is given (KAI_BIN_DIR, KAI_CRD_DIR, KAI_VERSION), as its module is not
# served here (docs/kai.md); the bench's bare pods are grouped as KAI's podgrouper would group them.
_kai = kai_starter("bench")
if _kai is not None:
    RUNNERS.append(Runner("kai", KAI_SCHEDULER_NAME, _kai))


def _device_class(name: str, expression: str) -> Json:
    return {
        "apiVersion": RESOURCE_V1,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def _publish_shares(
    kube: KubeClient, nodes: list[str], scale: Scale, *, profile: DriverProfile = DEFAULT
) -> None:
    """Our DeviceClass, with the chart's selector, and per node the slices our agent publishes
    for 8 mock cards."""
    expression = f'device.driver == "{DEFAULT.driver}" && device.allowMultipleAllocations == true'
    kube.create(f"{RESOURCE}/deviceclasses", _device_class(DEFAULT.device_class, expression))
    for node in nodes:
        gpus = [
            Gpu(i, f"GPU-{node}-{i}", "NVIDIA H100 80GB HBM3", CARD_MEMORY)
            for i in range(GPUS_PER_NODE)
        ]
        for body in build_slices(gpus, node=node, profile=profile, generation=1):
            kube.create(f"{RESOURCE}/resourceslices", body)


def _share_claim(*, profile: DriverProfile = DEFAULT) -> Json:
    """What the translator writes for ``gpumem: 8192, gpucores: 10``."""
    request = GpuRequest(count=1, memory_mib=SHARE_MEMORY_MIB, cores=SHARE_CORES)
    problems = Problems()
    spec = claim_spec(
        request,
        DeviceFilter(),
        profile=profile,
        inventory=Inventory(),
        percent_path="-",
        problems=problems,
    )
    assert spec is not None, problems.errors
    return spec


def _publish_whole(kube: KubeClient, nodes: list[str], scale: Scale) -> None:
    """Plain devices (one claim each, no capacity) and a class for them."""
    expression = f'device.driver == "{WHOLE_DRIVER}"'
    kube.create(f"{RESOURCE}/deviceclasses", _device_class(WHOLE_DRIVER, expression))
    for node in nodes:
        devices: list[Json] = [
            {"name": f"gpu-{i}", "attributes": {"uuid": {"string": f"GPU-{node}-{i}"}}}
            for i in range(scale.whole_per_node)
        ]
        body = resource_slice(f"{node}-whole", driver=WHOLE_DRIVER, node=node, devices=devices)
        kube.create(f"{RESOURCE}/resourceslices", body)


def _publish_unbooked(kube: KubeClient, nodes: list[str], scale: Scale) -> None:
    _publish_shares(kube, nodes, scale, profile=UNBOOKED)


def _unbooked_claim() -> Json:
    return _share_claim(profile=UNBOOKED)


def _whole_claim() -> Json:
    request = {"name": "gpu", "exactly": {"deviceClassName": WHOLE_DRIVER}}
    return {"devices": {"requests": [request]}}


WORKLOADS = [
    Workload("shares", _publish_shares, _share_claim),
    Workload("shares-unbooked", _publish_unbooked, _unbooked_claim),
    Workload("whole", _publish_whole, _whole_claim),
]


def _tls_connection(kube: KubeClient, *, timeout: float) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cafile=str(kube.ca_file))
    context.load_cert_chain(str(kube.client.cert), str(kube.client.key))
    return http.client.HTTPSConnection(kube.host, kube.port, context=context, timeout=timeout)


def _create_all(kube: KubeClient, path: str, bodies: list[Json]) -> None:
    """POST every body from CLIENT_THREADS threads, each on one kept-alive TLS connection (the
    e2e client opens a connection per call, which would make the client the bottleneck)."""
    local = threading.local()
    headers = {"Accept": "application/json", "Content-Type": "application/json"}

    def post(body: Json) -> None:
        if not hasattr(local, "connection"):
            local.connection = _tls_connection(kube, timeout=30)
        local.connection.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        response = local.connection.getresponse()
        text = response.read()
        if response.status >= 300:
            raise RuntimeError(f"POST {path}: HTTP {response.status}: {text[:300]!r}")

    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        list(pool.map(post, bodies))


class _BindWatch:
    """Watches the namespace's bound pods and notes when each one was first seen bound; a watch
    the server ends is resumed from the last event's resourceVersion."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self._kube, self._namespace = kube, namespace
        self.bound_at: dict[str, float] = {}
        self.restarts = 0  # watches started over without a version: their ADDED are old binds
        self._changed = threading.Condition()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._response: http.client.HTTPResponse | None = None

    def __enter__(self) -> _BindWatch:
        """Opens the watch before returning, so no binding is missed."""
        self._response = self._open(None)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()

    def _open(self, resource_version: str | None) -> http.client.HTTPResponse:
        path = (
            f"/api/v1/namespaces/{self._namespace}/pods?watch=1&fieldSelector=spec.nodeName!%3D"
            f"&timeoutSeconds={int(TIMEOUT_S)}"
        )
        if resource_version:
            path += f"&resourceVersion={resource_version}"
        connection = _tls_connection(self._kube, timeout=TIMEOUT_S)
        connection.request("GET", path, headers={"Accept": "application/json"})
        return connection.getresponse()

    def _watch(self) -> None:
        resource_version = None
        while not self._stopped.is_set():
            response = self._response or self._open(resource_version)
            self._response = None
            with contextlib.suppress(OSError, http.client.HTTPException):
                for line in iter(response.readline, b""):
                    event = json.loads(line)
                    if event.get("type") == "ERROR":  # e.g. 410 Gone: list again
                        resource_version = None
                        self.restarts += 1
                        break
                    metadata = event["object"]["metadata"]
                    resource_version = metadata["resourceVersion"]
                    with self._changed:
                        self.bound_at.setdefault(metadata["name"], time.monotonic())
                        self._changed.notify_all()
            response.close()

    def wait(self, count: int, *, first_s: float = STALL_S) -> None:
        """Until `count` pods are bound, or nothing more got bound for STALL_S (for `first_s`
        before the first: a scheduler that starts with 20,000 pods and claims pending spends
        minutes on their events before it binds one, issue 26's 10,000-GPU step)."""
        with self._changed:
            while len(self.bound_at) < count:
                before = len(self.bound_at)
                self._changed.wait(STALL_S if before else first_s)
                if len(self.bound_at) == before:
                    return


def _count(kube: KubeClient, path: str) -> int:
    """Objects at `path`, from a one-item page (its remaining count), not a whole list."""
    page = kube.get(path, limit="1")
    remaining = (page.get("metadata") or {}).get("remainingItemCount") or 0
    return len(page.get("items") or []) + int(remaining)


def _create_pods(kube: KubeClient, runner: Runner, workload: Workload, scale: Scale) -> float:
    """The namespace, the template and every pod; returns once every claim exists (seconds)."""
    started = time.monotonic()
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    kube.create("/api/v1/namespaces", namespace)
    template = {
        "apiVersion": RESOURCE_V1,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu"},
        "spec": {"spec": workload.claim()},
    }
    kube.create(f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaimtemplates", template)
    bodies = []
    for index in range(scale.pods):
        body = pod_with_claim_template(f"p-{index:05d}", template="gpu")
        body["spec"]["schedulerName"] = runner.scheduler_name
        body["spec"]["terminationGracePeriodSeconds"] = 0
        bodies.append(body)
    _create_all(kube, f"/api/v1/namespaces/{NAMESPACE}/pods", bodies)
    claims = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
    deadline = time.monotonic() + scale.timeout_s
    while _count(kube, claims) < scale.pods:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the claims of {scale.pods} pods were not all made in {scale.timeout_s:.0f}s"
            )
        time.sleep(0.5)
    return time.monotonic() - started


def _explain_stall(kube: KubeClient, workdir: Path) -> None:
    """Why pods are left: one unbound pod's scheduling condition and the scheduler's log tail."""
    pods = kube.items(f"/api/v1/namespaces/{NAMESPACE}/pods", fieldSelector="spec.nodeName=")
    conditions = pods[0]["status"].get("conditions") if pods else None
    print(f"{len(pods)} pods unbound; one of them: {conditions}", file=sys.stderr)
    for log in workdir.glob("*.log"):
        print(f"--- {log.name}", *log.read_text().splitlines()[-30:], sep="\n", file=sys.stderr)


def _profile_into(port: int, seconds: int, target: Path) -> threading.Thread:
    """A thread that takes `seconds` of the bench scheduler's CPU profile into `target`."""

    def take() -> None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        url = f"https://127.0.0.1:{port}/debug/pprof/profile?seconds={seconds}"
        with urllib.request.urlopen(url, timeout=seconds + 60, context=context) as response:
            target.write_bytes(response.read())

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    return thread


def run(
    runner: Runner,
    workload: Workload,
    settings: Settings,
    scale: Scale,
    *,
    profile: Path | None = None,
    profile_seconds: int = 30,
) -> Result:
    """One row on a fresh cluster, so no scheduler sees another's pods or claims. The pods and
    their claims exist before the scheduler starts: what is timed is the scheduler's work."""
    with running_cluster(settings) as cluster, tempfile.TemporaryDirectory() as tmp:
        kube = cluster.client()
        workload.publish(kube, create_fake_nodes(kube, scale.nodes, prefix="bench-node-"), scale)
        created_s = _create_pods(kube, runner, workload, scale)
        with _BindWatch(kube, NAMESPACE) as watch:
            started = time.monotonic()
            with runner.start(cluster, kube, Path(tmp)) as scheduler:
                profiling = None
                if profile is not None and isinstance(scheduler, SchedulerMetrics):
                    profiling = _profile_into(scheduler.port, profile_seconds, profile)
                watch.wait(scale.pods, first_s=scale.timeout_s)
                if profiling is not None:
                    profiling.join()
                if len(watch.bound_at) < scale.pods:
                    _explain_stall(kube, Path(tmp))
                algorithm_ms, attempts = 0.0, 0.0
                if isinstance(scheduler, SchedulerMetrics):
                    algorithm_ms, attempts = scheduler.algorithm_ms_per_pod(), scheduler.attempts()
            times = sorted(watch.bound_at.values()) or [started]
    first, last = times[0] - started, times[-1] - started
    tenths = [round(t - times[0], 2) for t in times[:: max(1, len(times) // 10)]]
    print(f"{runner.name}/{workload.name}: every tenth bound at {tenths}", file=sys.stderr)
    bound = len(watch.bound_at)
    per_pod = attempts / bound if bound else 0.0
    return Result(runner.name, workload.name, last - first, first, created_s, bound, algorithm_ms,
                  per_pod, scale, watch.restarts)  # fmt: skip


def _spread(values: list[float], digits: int) -> str:
    """``median (min..max)``; the median alone for one value."""
    median = f"{statistics.median(values):.{digits}f}"
    if len(values) < 2:
        return median
    return f"{median} ({min(values):.{digits}f}..{max(values):.{digits}f})"


def _by_row(results: list[Result]) -> dict[tuple[str, str], list[Result]]:
    grouped: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        grouped.setdefault((r.runner, r.workload), []).append(r)
    return grouped


def table(results: list[Result]) -> str:
    """One line per row: medians of its runs, with the range where it ran more than once."""
    runs = max((len(group) for group in _by_row(results).values()), default=0)
    scale = results[0].scale if results else Scale()
    lines = [
        f"schedule {scale.pods} pods on {scale.nodes} nodes: shares = 8 shareable cards per node, "
        f"{SHARE_MEMORY_MIB}Mi + {SHARE_CORES}% each; whole = {scale.whole_per_node} plain "
        f"devices per node, one each; median (min..max) of {runs} interleaved runs",
        f"{'scheduler':<16}{'workload':<17}{'bound':>6}{'pods/s':>22}{'first..last s':>22}"
        f"{'start..first s':>22}{'algo ms/pod':>22}{'tries/pod':>11}",
    ]
    for (runner, workload), group in _by_row(results).items():
        lines.append(
            f"{runner:<16}{workload:<17}{min(r.bound for r in group):>6}"
            f"{_spread([r.pods_per_s for r in group], 1):>22}"
            f"{_spread([r.seconds for r in group], 2):>22}"
            f"{_spread([r.first_bound_s for r in group], 2):>22}"
            f"{_spread([r.algorithm_ms for r in group], 2):>22}"
            f"{statistics.median(r.attempts for r in group):>11.2f}"
        )
    lines.extend(_ratios(results))
    return "\n".join(lines)


def _ratios(results: list[Result]) -> list[str]:
    """shares / whole per scheduler that ran both: each round's ratio (runs paired in order),
    then their median and range."""
    grouped, lines = _by_row(results), []
    for runner in dict.fromkeys(r.runner for r in results):
        whole = grouped.get((runner, "whole"))
        for name in ("shares", "shares-unbooked"):
            shares = grouped.get((runner, name))
            if not shares or not whole:
                continue
            pairs = list(zip(shares, whole, strict=False))
            rate = [s.pods_per_s / w.pods_per_s for s, w in pairs if w.pods_per_s > 0]
            algo = [s.algorithm_ms / w.algorithm_ms for s, w in pairs if w.algorithm_ms > 0]
            lines.append(
                f"{runner}: {name} / whole = {_spread(rate, 2)}x pods/s, "
                f"{_spread(algo, 2) if algo else 'n/a'}x algorithm time per pod"
            )
    return lines


def rows(wanted: list[str]) -> list[tuple[Runner, Workload]]:
    """``kube-scheduler`` (every workload), ``kube-scheduler/whole``; none wanted: every row but
    the whole-device baseline of the other schedulers."""
    every = [(r, w) for r in RUNNERS for w in WORKLOADS]
    if not wanted:
        return [(r, w) for r, w in every if w.name == "shares" or r.name == "kube-scheduler"]
    return [(r, w) for r, w in every if r.name in wanted or f"{r.name}/{w.name}" in wanted]


def _gpu_steps(text: str) -> list[int]:
    try:
        steps = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of whole numbers: {text!r}") from None
    if not steps or min(steps) < GPUS_PER_NODE:
        raise argparse.ArgumentTypeError(f"GPU counts of at least {GPUS_PER_NODE}: {text!r}")
    return steps


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/schedule.py", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each row")
    parser.add_argument("--nodes", type=int, default=Scale.nodes, help="fake nodes (default 50)")
    parser.add_argument("--pods", type=int, default=Scale.pods, help="pods (default 1000)")
    whole_help = "plain devices per node of the whole baseline (default 20)"
    parser.add_argument("--whole-per-node", type=int, default=Scale.whole_per_node, help=whole_help)
    steps_help = (
        "issue 26: steps of GPUs (e.g. 1000,2500,10000), each with 20,000 share pods or as many "
        "as its cards hold, and as many whole-card pods; rows default to kube-scheduler/shares "
        "and kube-scheduler/whole"
    )
    parser.add_argument("--gpu-steps", type=_gpu_steps, default=None, help=steps_help)
    parser.add_argument("--profile", type=Path, default=None,
                        help="with --gpu-steps: CPU profiles of the bench kube-scheduler at the "
                        "last step into this directory, summed by where the time goes")  # fmt: skip
    parser.add_argument("--profile-seconds", type=int, default=60, help="length of a profile")
    parser.add_argument("rows", nargs="*", help="scheduler or scheduler/workload (default: all)")
    arguments = parser.parse_args(argv)
    if arguments.repeats < 1 or arguments.nodes < 1 or arguments.pods < 1:
        parser.error("--repeats, --nodes and --pods: must be at least 1")
    return arguments


def main(argv: list[str]) -> int:
    arguments, settings = _arguments(argv), Settings.from_env()
    if arguments.gpu_steps:
        return scaling_main(arguments, settings)
    scale = Scale(arguments.nodes, arguments.pods, arguments.whole_per_node)
    results = []
    for round_ in range(arguments.repeats):
        for runner, workload in rows(arguments.rows):
            results.append(run(runner, workload, settings, scale))
            print(f"round {round_ + 1}: " + table(results[-1:]).splitlines()[2], file=sys.stderr,
                  flush=True)  # fmt: skip
    print(table(results))
    return 0 if all(r.bound == r.scale.pods for r in results) else 1


def scaling_main(arguments: argparse.Namespace, settings: Settings) -> int:
    """Issue 26's part 2: each step's rows, interleaved `--repeats` times, then one table."""
    wanted = arguments.rows or ["kube-scheduler/shares", "kube-scheduler/whole"]
    results: list[Result] = []
    summaries = []
    for gpus in arguments.gpu_steps:
        scale = Scale.at_gpus(gpus)
        last = gpus == arguments.gpu_steps[-1]
        for round_ in range(arguments.repeats):
            for runner, workload in rows(wanted):
                profile = None
                if last and round_ == 0 and arguments.profile is not None:
                    arguments.profile.mkdir(parents=True, exist_ok=True)
                    profile = arguments.profile / f"{workload.name}-{gpus}.pprof"
                result = run(runner, workload, settings, scale, profile=profile,
                             profile_seconds=arguments.profile_seconds)  # fmt: skip
                results.append(result)
                print(f"{gpus:,} GPUs, round {round_ + 1}: " + table([result]).splitlines()[2],
                      file=sys.stderr, flush=True)  # fmt: skip
                if profile is not None and profile.exists():
                    summaries.append(profile_summary(profile, f"{workload.name} at {gpus:,} GPUs"))
    print(scaling_table(results))
    for summary in summaries:
        print()
        print(summary)
    return 0 if all(r.bound == r.scale.pods for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
