"""Part 1: admission at each step, through the API server, and replicas side by side.

At each step one replica of the real webhook (started as ``replica_start.running_replica`` starts
it) is registered, as the chart registers it, for one namespace, ``admit-load``. That namespace
holds a ResourceQuota on HAMi's ``limits.nvidia.com/gpumem`` and ``QUOTA_CLAIMS`` claims of our
class (not allocated: each books what it asks), so every admission runs the quota gate. The Go
load generator (``bench/goload``, with the cluster's admin certificate) creates HAMi-style GPU pods
(one card, gpumem 10,000, gpucores 10, ``generateName``) through the API server: paced (open loop,
latency from each pod's scheduled send) for p50 and p99, then closed loop for pods/s. A pod's
latency is the whole create a user waits for: authentication, our webhook over TLS, validation,
the etcd write. The pods name a scheduler nobody runs, so kube-scheduler leaves them alone;
kube-controller-manager makes each pod's claim, as in a cluster. Read around the paced runs
(three, so that p99 is a median): the webhook's RSS (with its prevalidating child) and CPU per
pod, the control plane's CPU, and the requests the API server answered by verb and resource.
The webhook's own are its LISTs and its requests on claim templates, quotas and single claims;
the generator's are the pod creates, and the controller's the claims it makes and the pod
statuses it writes.

At the last step, replicas: 1, 2 and 4 replicas, each on its own port, receive GPU pod reviews
straight from the generator, its 8 connections spread over them in turn as a Service spreads
connections over endpoints. The API server is left out there on purpose: on this machine it is
the wall of the through-the-API rows (their control-plane CPU column says so), and the local
control plane has no kube-proxy to put a Service in front of processes on loopback. Those rows
give admissions/s, p99, and the cores kept busy by the replicas and by the generator.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from bench.goref import go_load_generator
from bench.scaling.api_counts import RequestKind, Requests, counted
from bench.scaling.bulk import ApiConnection, in_threads
from bench.scaling.fleet import RESOURCE, share_spec
from bench.scaling.replica_start import running_replica
from bench.scaling.tables import Step, slope_per_1000
from bench.webhook import Load, cpu_seconds, finished_load, review_of, rss_mb, write_bodies
from e2e.cluster import KubeClient, LocalCluster
from e2e.cluster.client import Json
from e2e.webhook.process import CONFIGS, configuration
from tests.tls import write_self_signed

NAMESPACE = "admit-load"
LABEL = "bench.vgpu-bridge.io/admit"
QUOTA_CLAIMS = 5_000
UNSCHEDULED = "bench-nobody-schedules"  # the pods stay unscheduled: admission is measured alone
PACED_RATE, PACED_SECONDS, PACED_RUNS, SATURATION_SECONDS, CONNECTIONS = 50, 15, 3, 10, 8
WARM_PODS, SETTLE_S = 40, 2.0
REPLICAS = (1, 2, 4)
REPLICA_SECONDS, REPLICA_CONNECTIONS = 8, 8
P99_GROWTH_GOAL, RSS_GOAL_MB_PER_1000 = 1.2, 10.0
WEBHOOK_RESOURCES = ("resourceclaimtemplates", "resourcequotas")
ADMISSION_LISTS = ("resourceclaims", "resourcequotas", "resourceclaimtemplates")


@dataclass(frozen=True)
class AdmissionRow:
    step: Step
    paced: Sequence[Load]  # PACED_RUNS runs, one after the other
    saturated: Load
    webhook_cpu_ms: float  # the webhook's CPU per pod admitted in the paced run
    plane_cores: float  # etcd, kube-apiserver and kube-controller-manager's cores, paced run
    rss_idle_mb: float  # after the warm-up, before the paced run
    rss_after_mb: float  # after the saturated run
    requests: Requests  # the API server's answers during the paced runs
    hook_ms: Sequence[float] = ()  # the webhook's own time per admission, paced runs (its log)

    @property
    def sent(self) -> int:
        return sum(load.sent for load in self.paced)

    @property
    def p50_ms(self) -> float:
        return statistics.median(load.p50_ms for load in self.paced)

    @property
    def p99_ms(self) -> float:
        return statistics.median(load.p99_ms for load in self.paced)

    def hook_quantile(self, q: float) -> float:
        """The webhook's own time per admission at quantile `q` (0 when none was logged)."""
        ordered = sorted(self.hook_ms)
        return ordered[int(q * (len(ordered) - 1))] if ordered else 0.0

    @property
    def webhook_lists(self) -> int:
        """LISTs an admission could make: a namespace's claims, quotas or templates (the
        housekeeping's periodic lists are of every namespace)."""
        return sum(n for kind, n in self.requests.counts.items() if kind.verb == "LIST"
                   and kind.scope == "namespace" and kind.resource in ADMISSION_LISTS)  # fmt: skip

    @property
    def webhook_requests(self) -> int:
        """Requests only the webhook makes: LISTs but the generator's, anything on claim
        templates and quotas, GETs of single claims."""
        return sum(n for kind, n in self.requests.counts.items() if _webhooks(kind))


@dataclass(frozen=True)
class ReplicaLoad:
    replicas: int
    load: Load
    replica_cores: float  # the replicas' CPU seconds per second, summed


def _webhooks(kind: RequestKind) -> bool:
    if kind.resource in WEBHOOK_RESOURCES:
        return True
    if kind.verb == "LIST":
        return kind.resource not in ("", "pods")
    return kind.resource == "resourceclaims" and kind.verb == "GET"


def load_pod() -> bytes:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000", "nvidia.com/gpucores": "10"}
    container = {"name": "main", "image": "cuda:12.4", "resources": {"limits": limits}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "load-"},
           "spec": {"schedulerName": UNSCHEDULED, "containers": [container]}}  # fmt: skip
    return json.dumps(pod).encode()


def gpu_pod(index: int) -> dict[str, object]:
    """A pod of the load's shape as a review carries it (not a dry run: the first review makes
    its template, every later one finds it in the replica's index and calls no API)."""
    pod = json.loads(load_pod())
    pod["metadata"] = {"name": f"load-{index}", "namespace": NAMESPACE}
    return dict(pod)


def prepare_namespace(kube: KubeClient, *, claims: int, threads: int) -> None:
    """The load namespace (labelled for the webhook) with its quota and `claims` claims."""
    if not kube.exists(f"/api/v1/namespaces/{NAMESPACE}"):
        meta = {"name": NAMESPACE, "labels": {LABEL: "true"}}
        kube.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
        )
        quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-memory"},
                 "spec": {"hard": {"limits.nvidia.com/gpumem": "1000000000"}}}  # fmt: skip
        kube.create(f"/api/v1/namespaces/{NAMESPACE}/resourcequotas", quota)
    spec = share_spec(8.0)
    path = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
    bodies: list[Json] = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": f"held-{n:05d}"}, "spec": spec}
        for n in range(claims)
    ]  # fmt: skip

    def create(connection: ApiConnection, body: Json) -> None:
        connection.send("POST", path, body)

    in_threads(kube, bodies, create, threads=threads)


def clear_namespace(kube: KubeClient) -> None:
    """Delete the load's pods, every claim and our claim templates of the namespace (its quota
    stays), so that the parts measured after this one find only their own objects."""
    kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods")
    kube.request("DELETE", f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaimtemplates")
    kube.request("DELETE", f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims")


def _generate(
    cluster: LocalCluster, bodies: Path, *, seconds: float, rate: float, connections: int
) -> Load:
    kube = cluster.client()
    url = f"https://{kube.host}:{kube.port}/api/v1/namespaces/{NAMESPACE}/pods"
    command = [str(go_load_generator()), "--url", url, "--cafile", str(kube.ca_file),
               "--cert", str(kube.client.cert), "--key", str(kube.client.key),
               "--bodies", str(bodies), "--conns", str(connections),
               "--duration", f"{seconds}s", "--rate", str(rate)]  # fmt: skip
    load = finished_load(subprocess.Popen(command, stdout=subprocess.PIPE))
    refused = load.sent - load.statuses.get("201", 0)
    if refused:
        raise RuntimeError(f"{refused} of {load.sent} pods not created: {load.first_errors}")
    return load


def _plane_cpu(cluster: LocalCluster) -> float:
    names = ("etcd", "kube-apiserver", "kube-controller-manager")
    return sum(cpu_seconds(c.pid) for c in cluster.components if c.name in names)


def measure_admission(
    cluster: LocalCluster, step: Step, *, workdir: Path, threads: int
) -> AdmissionRow:
    kube = cluster.client()
    prepare_namespace(kube, claims=QUOTA_CLAIMS, threads=threads)
    workdir.mkdir(parents=True, exist_ok=True)
    bodies = write_bodies(workdir / "pods.jsonl", [load_pod()])
    try:
        with running_replica(cluster.kubeconfig, workdir / "replica") as (process, webhook, _):
            name = "vgpu-bridge-bench-admission"
            selector = {"matchLabels": {LABEL: "true"}}
            kube.create(CONFIGS, configuration(name, webhook, namespace_selector=selector,
                                               workloads=False))  # fmt: skip
            try:
                time.sleep(SETTLE_S)  # the API server picks up configurations asynchronously
                _generate(cluster, bodies, seconds=WARM_PODS / 20, rate=20, connections=2)
                idle = rss_mb(process.pid)
                cpu_before, plane_before = cpu_seconds(process.pid), _plane_cpu(cluster)
                log_from = webhook.log_file.stat().st_size
                paced, requests = counted(kube, lambda: [_generate(
                    cluster, bodies, seconds=PACED_SECONDS, rate=PACED_RATE,
                    connections=CONNECTIONS) for _ in range(PACED_RUNS)])  # fmt: skip
                webhook_cpu = cpu_seconds(process.pid) - cpu_before
                hook_ms = admission_times(webhook.log_file, log_from)
                plane = _plane_cpu(cluster) - plane_before
                saturated = _generate(cluster, bodies, seconds=SATURATION_SECONDS, rate=0,
                                      connections=CONNECTIONS)  # fmt: skip
                after = rss_mb(process.pid)
            finally:
                kube.delete(f"{CONFIGS}/{name}")
    finally:
        clear_namespace(kube)
    sent = sum(load.sent for load in paced)
    return AdmissionRow(step, paced, saturated, 1000 * webhook_cpu / max(1, sent),
                        plane / (PACED_SECONDS * PACED_RUNS), idle, after, requests,
                        hook_ms)  # fmt: skip


def admission_times(log_file: Path, offset: int) -> list[float]:
    """The `duration_ms` of every admission the webhook logged after byte `offset`: its own time
    per review, from reading it to answering (TLS and the API server's side left out)."""
    with log_file.open("rb") as log:
        log.seek(offset)
        lines = log.read().splitlines()
    times = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == "admission":
            times.append(float(record.get("duration_ms", 0.0)))
    return times


def measure_replicas(cluster: LocalCluster, *, workdir: Path) -> list[ReplicaLoad]:
    """GPU pod reviews (dry runs) straight to 1, 2 and 4 replicas, connections spread."""
    shared = workdir / "tls"
    shared.mkdir(parents=True, exist_ok=True)
    cert, key = write_self_signed(shared)
    bodies = write_bodies(workdir / "reviews.jsonl", [review_of(i, gpu_pod(i)) for i in range(500)])
    rows = []
    for count in REPLICAS:
        with ExitStack() as stack:
            replicas = []
            for index in range(count):
                home = workdir / f"replicas-{count}-{index}"
                home.mkdir(parents=True, exist_ok=True)
                shutil.copy(cert, home / "tls.crt")
                shutil.copy(key, home / "tls.key")
                replicas.append(stack.enter_context(running_replica(cluster.kubeconfig, home)))
            urls = ",".join(
                f"https://127.0.0.1:{w.port}/mutate?timeout=10s" for _, w, _ in replicas
            )

            def run(seconds: float, urls: str = urls) -> Load:
                command = [str(go_load_generator()), "--url", urls, "--cafile", str(cert),
                           "--bodies", str(bodies), "--conns", str(REPLICA_CONNECTIONS),
                           "--duration", f"{seconds}s", "--rate", "0"]  # fmt: skip
                return finished_load(subprocess.Popen(command, stdout=subprocess.PIPE))

            run(2)  # warm-up: every replica's caches and first translation
            pids = [p.pid for p, _, _ in replicas]
            before = sum(cpu_seconds(pid) for pid in pids)
            load = run(REPLICA_SECONDS)
            if load.failed:
                raise RuntimeError(f"{load.failed} reviews failed: {load.first_errors}")
            busy = (sum(cpu_seconds(pid) for pid in pids) - before) / REPLICA_SECONDS
            rows.append(ReplicaLoad(count, load, busy))
    clear_namespace(cluster.client())  # the template the first review made
    return rows


def admission_table(rows: Sequence[AdmissionRow]) -> str:
    first_p99 = rows[0].p99_ms
    lines = [
        f"part 1, admission: GPU pods created through the API server into a namespace with a "
        f"gpumem quota and {QUOTA_CLAIMS:,} claims; paced {PACED_RATE}/s, {PACED_RUNS} runs of "
        f"{PACED_SECONDS} s (p50, p99: median of the runs, p99's range), then closed loop over "
        f"{CONNECTIONS} connections",
        f"{'GPUs':>7} {'p50 ms':>7} {'p99 ms':>7} {'p99 range':>13} {'p99/1st':>7} "
        f"{'hook p50/p99':>13} {'pods/s':>7} {'hook CPU':>9} "
        f"{'plane':>6} {'RSS MB':>13} {'hook req':>9} {'LISTs':>6}  goal",
    ]
    for row in rows:
        growth = row.p99_ms / first_p99 if first_p99 else 0.0
        verdict = "met" if growth <= P99_GROWTH_GOAL and row.webhook_lists == 0 else "MISSED"
        p99s = [load.p99_ms for load in row.paced]
        lines.append(
            f"{row.step.gpus:>7,} {row.p50_ms:>7.1f} {row.p99_ms:>7.1f} "
            f"{min(p99s):>5.1f}..{max(p99s):<6.1f} {growth:>6.2f}x "
            f"{row.hook_quantile(0.5):>6.2f}/{row.hook_quantile(0.99):<6.2f} "
            f"{row.saturated.rate:>7.0f} "
            f"{row.webhook_cpu_ms:>6.2f} ms "
            f"{row.plane_cores:>5.2f}c {row.rss_idle_mb:>5.0f} -> {row.rss_after_mb:>4.0f} "
            f"{row.webhook_requests / max(1, row.sent):>9.3f} {row.webhook_lists:>6}  "
            f"p99 <= {P99_GROWTH_GOAL}x the first, no LIST: {verdict}"
        )
    slope = slope_per_1000([(r.step.gpus, r.rss_idle_mb) for r in rows])
    rss = "n/a (one step)" if slope is None else f"{slope:+.1f} MB"
    lines += [
        f"slope per 1,000 GPUs: webhook RSS {rss} (goal <= {RSS_GOAL_MB_PER_1000:.0f} MB)",
        "(hook p50/p99: the webhook's own time per admission in ms, from its log, reading the "
        "review to answering it; hook CPU: the webhook's CPU per pod; plane: cores etcd, "
        "kube-apiserver and kube-controller-manager kept busy during the paced runs; hook req: "
        "the webhook's API requests per pod, its periodic housekeeping included; LISTs: a "
        "namespace's claims, "
        "quotas or templates listed during the paced runs)",
        "requests during the last step's paced runs: " + _breakdown(rows[-1].requests),
    ]
    return "\n".join(lines)


def replica_table(rows: Sequence[ReplicaLoad], *, cores: int | None = None) -> str:
    cores = cores or os.cpu_count() or 1
    base = rows[0].load.rate
    lines = [
        f"part 1, replicas: GPU pod reviews straight to N replicas, {REPLICA_CONNECTIONS} "
        f"connections spread over them, closed loop, {REPLICA_SECONDS} s ({cores} cores here)",
        f"{'replicas':>8} {'admissions/s':>13} {'x one':>6} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'replica cores':>14} {'gen cores':>10} {'CPU/review':>11}",
    ]
    for row in rows:
        per_review = 1000 * row.replica_cores / max(row.load.rate, 1e-9)
        lines.append(
            f"{row.replicas:>8} {row.load.rate:>13,.0f} {row.load.rate / base:>5.2f}x "
            f"{row.load.p50_ms:>7.2f} {row.load.p99_ms:>7.2f} {row.replica_cores:>14.2f} "
            f"{row.load.generator_cpu:>10.2f} {per_review:>8.2f} ms"
        )
    per_review = statistics.median(1000 * r.replica_cores / max(r.load.rate, 1e-9) for r in rows)
    lines.append(
        f"one core admits about {1000 / per_review:,.0f} GPU pods/s ({per_review:.2f} ms of CPU "
        "each): replicas add admissions/s while cores are free"
    )
    return "\n".join(lines)


def _breakdown(requests: Requests) -> str:
    counts = sorted(requests.counts.items(), key=lambda item: -item[1])
    return ", ".join(f"{k.verb} {k.resource or '-'} {n}" for k, n in counts if k.resource)
