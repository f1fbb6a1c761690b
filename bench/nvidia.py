"""Issue 37's benchmark: NVIDIA's DRA driver with our enforcer (profile ``nvidia``, agent in
enforcer mode) beside our own driver, on the same machine in the same run, interleaved.

Three parts (``--parts``, default all), each a table:

- ``admission``: HAMi-style GPU pods created through the API server of a private control plane
  (``e2e/cluster``) by the Go generator (``bench/goload``), paced 50/s, each admitted by a real
  webhook replica (``vgpu-bridge webhook``) registered for its namespace as the chart registers
  it: one replica with the default profile, one with ``--profile nvidia`` (``<N>`` = 100), each
  namespace holding a gpumem quota and ``QUOTA_CLAIMS`` claims of its profile's class. The
  replicas' runs alternate, the order swapped each round (the shared machine's pace drifts
  more than the gap measured). p50/p99 are the user's whole create (authentication, our webhook
  over TLS, validation, the etcd write); ``hook`` is the webhook's own time per admission from
  its log. Goal: nvidia p99 <= 1.2x ours (the median of the rounds' p99), and the same for the
  webhook's own p99. Left out: pods are not scheduled (no kubelet).
- ``prepare``: NodePrepareResources over the agent's unix socket, as the kubelet calls it (as
  ``bench/node.py``): our agent with 8 mock cards on one fake node, and our agent in enforcer
  mode (``--enforce-driver gpu.nvidia.com``) on another whose NVIDIA slice is in the API; claims
  allocated through the status subresource as the scheduler allocates them (ours: one share;
  nvidia: NVIDIA's share + the enforcer device, the translator's claim with its config), one
  call each, the two agents' calls alternating, in ``PREPARE_ROUNDS`` rounds of new claims.
  Goal: enforcer p99 <= 1.2x ours, on the median of the rounds' p99. Left out:
  NVIDIA's own Prepare (its plugin runs beside ours on a real node and the kubelet calls the
  two in turn: the pod waits for both), and no container starts.
- ``schedule``: pods/s until every pod is bound, by a second kube-scheduler without a client
  limit (``bench/schedule.py``'s machinery, a fresh cluster per row), at ``--gpus`` (default
  1,000) cards of 8 per fake node: ``shares`` on our agent's slices, ``nvidia-shares`` on
  NVIDIA-shaped slices (one slice per node, ``--consumable-shares=100``) plus the enforcer's
  slice of each node, and ``whole`` (plain devices, one each) as the baseline; the claims are
  what the translator writes for ``gpumem: 8192, gpucores: 10``. Reported: each shares / whole
  and nvidia-shares / shares, per round, median. ``--workloads`` also offers ``nvidia-alone``
  (the same share without the enforcer request: NVIDIA's driver alone), which tells the
  enforcer's cost from that of NVIDIA's shapes. Left out: binding is measured, no pod runs.

``.venv/bin/python bench/nvidia.py [--parts admission,prepare,schedule] [--repeats N] [--gpus N]
[--workloads shares,nvidia-shares,nvidia-alone,whole]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc

from bench import schedule
from bench.goref import go_load_generator
from bench.node import mock_gpus, prepare_request, timed_prepare
from bench.nvidia_shapes import (
    ENFORCER_DEVICE,
    allocation,
    enforcer_device_class,
    enforcer_slice,
    node_cards,
)
from bench.scaling.admission import UNSCHEDULED, admission_times
from bench.scaling.bulk import ApiConnection, in_threads
from bench.scaling.fleet import node_slices, share_spec
from bench.scaling.replica_start import running_replica
from bench.webhook import Load, finished_load, write_bodies
from e2e.cluster import (
    KubeClient,
    LocalCluster,
    Settings,
    create_fake_node,
    create_fake_nodes,
    running_cluster,
)
from e2e.cluster.client import Json
from e2e.dra_objects import RESOURCE_V1, device_class
from e2e.node.agent import AgentProcess, running_agent
from e2e.node.claims import allocated_claim, result
from e2e.nvidia.slices import NVIDIA_DRIVER, nvidia_device_class, nvidia_resource_slice
from e2e.webhook.process import CONFIGS, WebhookProcess, configuration
from vgpu_bridge.core import (
    DEFAULT,
    ENFORCER_DRIVER,
    ENFORCER_REQUEST,
    DeviceFilter,
    DriverProfile,
    GpuRequest,
    Inventory,
)
from vgpu_bridge.core.claims import claim_spec
from vgpu_bridge.core.models import Problems
from vgpu_bridge.core.profiles import nvidia_profile
from vgpu_bridge.node.kubeletapi import dra_v1_pb2_grpc

RESOURCE = f"/apis/{RESOURCE_V1}"
NVIDIA_SHARES, NVIDIA_ALONE = "nvidia-shares", "nvidia-alone"
DEFAULT_WORKLOADS = ("shares", NVIDIA_SHARES, "whole")
WORKLOADS = ("shares", NVIDIA_SHARES, NVIDIA_ALONE, "whole")
GOAL_RATIO = 1.2
PARTS = ("admission", "prepare", "schedule")
CARD_MEMORY = schedule.CARD_MEMORY


def translated_claim(profile: DriverProfile, *, memory_mib: int, cores: int) -> Json:
    """The claim spec the translator writes under `profile` for ``gpumem``/``gpucores``."""
    problems = Problems()
    spec = claim_spec(GpuRequest(count=1, memory_mib=memory_mib, cores=cores), DeviceFilter(),
                      profile=profile, inventory=Inventory(), percent_path="-",
                      problems=problems)  # fmt: skip
    if spec is None:
        raise ValueError(f"no claim for {memory_mib} MiB and {cores}%: {problems.errors}")
    return spec


# --- part: schedule ------------------------------------------------------------------------


def publish_nvidia(kube: KubeClient, nodes: list[str], scale: schedule.Scale) -> None:
    """NVIDIA's DeviceClass and per node its one slice of 8 cards (``<N>`` = 100), with our
    enforcer's class and per node its one device."""
    kube.create(f"{RESOURCE}/deviceclasses", nvidia_device_class())
    kube.create(f"{RESOURCE}/deviceclasses", enforcer_device_class())
    for node in nodes:
        cards = node_cards(node, schedule.GPUS_PER_NODE, memory_bytes=schedule.CARD_MEMORY)
        kube.create(f"{RESOURCE}/resourceslices", nvidia_resource_slice(node, cards, "100"))
        kube.create(f"{RESOURCE}/resourceslices", enforcer_slice(node))


def nvidia_share_claim() -> Json:
    """What the translator writes under profile nvidia for ``gpumem: 8192, gpucores: 10``:
    8Gi and 10 of 100 shares, and the enforcer device (ten fit on a card, as ours)."""
    return translated_claim(nvidia_profile("100"), memory_mib=schedule.SHARE_MEMORY_MIB,
                            cores=schedule.SHARE_CORES)  # fmt: skip


def without_enforcer() -> Json:
    """The nvidia share claim without its enforcer request and config: NVIDIA's driver alone,
    which tells the enforcer's cost from the cost of NVIDIA's shapes."""
    spec = nvidia_share_claim()
    devices = spec["devices"]
    requests = [r for r in devices["requests"] if r["name"] != ENFORCER_REQUEST]
    return {"devices": {k: v for k, v in devices.items() if k not in ("requests", "config")}
            | {"requests": requests}}  # fmt: skip


def schedule_workloads(wanted: Sequence[str] = DEFAULT_WORKLOADS) -> list[schedule.Workload]:
    """`wanted` of ours (``bench/schedule.py``'s shares and whole), nvidia-shares and
    nvidia-alone (nvidia-shares without the enforcer request), in that order."""
    every = {w.name: w for w in schedule.WORKLOADS} | {
        NVIDIA_SHARES: schedule.Workload(NVIDIA_SHARES, publish_nvidia, nvidia_share_claim),
        NVIDIA_ALONE: schedule.Workload(NVIDIA_ALONE, publish_nvidia, without_enforcer),
    }
    return [every[name] for name in wanted]


def _spread(values: list[float]) -> str:
    """``median (min..max)`` with two decimals; the median alone for one value; n/a for none."""
    if not values:
        return "n/a"
    median = f"{statistics.median(values):.2f}"
    return median if len(values) < 2 else f"{median} ({min(values):.2f}..{max(values):.2f})"


def schedule_ratios(results: Sequence[schedule.Result]) -> list[str]:
    """Per round (runs paired in order): nvidia-shares / whole and nvidia-shares / shares (the
    table gives shares / whole), in pods/s and in algorithm time per pod; median and range."""
    runs: dict[str, list[schedule.Result]] = {}
    for run in results:
        runs.setdefault(run.workload, []).append(run)
    lines = []
    pairs_wanted = ((NVIDIA_SHARES, "whole"), (NVIDIA_SHARES, "shares"),
                    (NVIDIA_SHARES, NVIDIA_ALONE))  # fmt: skip
    for top, bottom in pairs_wanted:
        pairs = list(zip(runs.get(top, []), runs.get(bottom, []), strict=False))
        if not pairs:
            continue
        rate = [t.pods_per_s / b.pods_per_s for t, b in pairs if b.pods_per_s > 0]
        algo = [t.algorithm_ms / b.algorithm_ms for t, b in pairs if b.algorithm_ms > 0]
        lines.append(f"{top} / {bottom} = {_spread(rate)}x pods/s, {_spread(algo)}x algorithm "
                     "time per pod")  # fmt: skip
    return lines


def schedule_part(
    settings: Settings, *, gpus: int, repeats: int, workloads: Sequence[str] = DEFAULT_WORKLOADS
) -> tuple[str, bool]:
    """Every workload once per round, interleaved; the table and whether every pod was bound."""
    scale = schedule.Scale.at_gpus(gpus)
    runner = schedule.RUNNERS[0]  # kube-scheduler
    results = []
    for round_ in range(repeats):
        for workload in schedule_workloads(workloads):
            result = schedule.run(runner, workload, settings, scale)
            results.append(result)
            print(f"round {round_ + 1}: " + schedule.table([result]).splitlines()[2],
                  file=sys.stderr, flush=True)  # fmt: skip
    text = "\n".join([
        f"schedule at {gpus:,} GPUs ({NVIDIA_SHARES}: NVIDIA-shaped slices, --consumable-shares="
        "100, 8Gi + 10 shares each, plus one enforcer device per node)",
        schedule.table(results), *schedule_ratios(results),
    ])  # fmt: skip
    return text, all(r.bound == r.scale.pods for r in results)


# --- part: admission -----------------------------------------------------------------------

QUOTA_CLAIMS, ADMIT_NODES = 1_000, 4
ADMIT_RATE, ADMIT_SECONDS, ADMIT_ROUNDS, ADMIT_CONNECTIONS = 50, 15, 3, 8
WARM_SECONDS, SETTLE_S = 2, 2.0
ADMIT_LABEL = "bench.vgpu-bridge.io/nvidia-admit"


@dataclass(frozen=True)
class Replica:
    """One profile's webhook replica, its namespace and what it admitted."""

    profile: str
    namespace: str
    process: subprocess.Popen[bytes]
    webhook: WebhookProcess
    loads: list[Load] = field(default_factory=list)
    hook_ms: list[float] = field(default_factory=list)  # its own time per admission, its log


def admit_pods() -> list[bytes]:
    """The HAMi pods every replica admits, in turn: 10,000 MiB and 10% of one card, and 25 % of
    one card's memory and cores (a percentage: translated from the cards the cluster has)."""
    shapes = [{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000", "nvidia.com/gpucores": "10"},
              {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25",
               "nvidia.com/gpucores": "25"}]  # fmt: skip
    bodies = []
    for limits in shapes:
        container = {"name": "main", "image": "cuda:12.4", "resources": {"limits": limits}}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "load-"},
               "spec": {"schedulerName": UNSCHEDULED, "containers": [container]}}  # fmt: skip
        bodies.append(json.dumps(pod).encode())
    return bodies


def publish_cards(kube: KubeClient) -> None:
    """Cards for the percentages: ADMIT_NODES nodes of 8, published by our agent's code on half
    of them and as NVIDIA publishes on the other half (each replica reads its own driver's)."""
    names = create_fake_nodes(kube, 2 * ADMIT_NODES, prefix="bench-admit-")
    kube.create(f"{RESOURCE}/deviceclasses", nvidia_device_class())
    kube.create(f"{RESOURCE}/deviceclasses", enforcer_device_class())
    kube.create(f"{RESOURCE}/deviceclasses", device_class(DEFAULT.device_class,
                                                          driver=DEFAULT.driver))  # fmt: skip
    for node in names[:ADMIT_NODES]:
        for body in node_slices(node):
            kube.create(f"{RESOURCE}/resourceslices", body)
    for node in names[ADMIT_NODES:]:
        cards = node_cards(node, schedule.GPUS_PER_NODE, memory_bytes=CARD_MEMORY)
        kube.create(f"{RESOURCE}/resourceslices", nvidia_resource_slice(node, cards, "100"))
        kube.create(f"{RESOURCE}/resourceslices", enforcer_slice(node))


def admit_namespace(kube: KubeClient, namespace: str, claim: Json) -> None:
    """`namespace`, labelled for its replica, with a gpumem quota and QUOTA_CLAIMS claims of
    `claim` (each admission runs the quota gate over them)."""
    meta = {"name": namespace, "labels": {ADMIT_LABEL: namespace}}
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpu-memory"},
             "spec": {"hard": {"limits.nvidia.com/gpumem": "1000000000"}}}  # fmt: skip
    kube.create(f"/api/v1/namespaces/{namespace}/resourcequotas", quota)
    path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    bodies: list[Json] = [
        {"apiVersion": RESOURCE_V1, "kind": "ResourceClaim", "metadata": {"name": f"held-{n:05d}"},
         "spec": claim}
        for n in range(QUOTA_CLAIMS)
    ]  # fmt: skip

    def create(connection: ApiConnection, body: Json) -> None:
        connection.send("POST", path, body)

    in_threads(kube, bodies, create)


def generate(kube: KubeClient, namespace: str, bodies: Path, *, seconds: float) -> Load:
    """Pods from `bodies` created in `namespace` through the API server, paced ADMIT_RATE/s."""
    url = f"https://{kube.host}:{kube.port}/api/v1/namespaces/{namespace}/pods"
    command = [str(go_load_generator()), "--url", url, "--cafile", str(kube.ca_file),
               "--cert", str(kube.client.cert), "--key", str(kube.client.key),
               "--bodies", str(bodies), "--conns", str(ADMIT_CONNECTIONS),
               "--duration", f"{seconds}s", "--rate", str(ADMIT_RATE)]  # fmt: skip
    load = finished_load(subprocess.Popen(command, stdout=subprocess.PIPE))
    refused = load.sent - load.statuses.get("201", 0)
    if refused:
        raise RuntimeError(f"{namespace}: {refused} of {load.sent} pods not created: "
                           f"{load.first_errors}")  # fmt: skip
    return load


def admit_round(kube: KubeClient, replica: Replica, bodies: Path) -> None:
    offset = replica.webhook.log_file.stat().st_size
    replica.loads.append(generate(kube, replica.namespace, bodies, seconds=ADMIT_SECONDS))
    replica.hook_ms.extend(admission_times(replica.webhook.log_file, offset))


@contextlib.contextmanager
def registered_replica(cluster: LocalCluster, workdir: Path, profile: str) -> Iterator[Replica]:
    """A webhook replica of `profile` registered for namespace ``admit-<profile>``."""
    kube, namespace = cluster.client(), f"admit-{profile}"
    environ = {"VGPU_BRIDGE_PROFILE": profile}
    with running_replica(cluster.kubeconfig, workdir / profile, environ=environ) as started:
        process, webhook, _ = started
        name = f"vgpu-bridge-bench-{profile}"
        selector = {"matchLabels": {ADMIT_LABEL: namespace}}
        kube.create(CONFIGS, configuration(name, webhook, namespace_selector=selector,
                                           workloads=False))  # fmt: skip
        try:
            yield Replica(profile, namespace, process, webhook)
        finally:
            kube.delete(f"{CONFIGS}/{name}")


def check_translated(kube: KubeClient, replica: Replica) -> None:
    """The pods' templates ask what the replica's profile asks for (NVIDIA's class and the
    enforcer under nvidia, ours under default): else the wrong thing was measured."""
    path = f"{RESOURCE}/namespaces/{replica.namespace}/resourceclaimtemplates"
    templates = kube.items(path)
    wanted = ({NVIDIA_DRIVER, ENFORCER_DRIVER} if replica.profile == "nvidia"
              else {DEFAULT.device_class})  # fmt: skip
    for template in templates:
        asked = {r["exactly"]["deviceClassName"] if "exactly" in r
                 else r["firstAvailable"][0]["deviceClassName"]
                 for r in template["spec"]["spec"]["devices"]["requests"]}  # fmt: skip
        if asked != wanted:
            name = template["metadata"]["name"]
            raise RuntimeError(f"{replica.profile}: template {name} asks {asked}, not {wanted}")
    if len(templates) < len(admit_pods()):
        raise RuntimeError(f"{replica.profile}: {len(templates)} templates for the pods' shapes")


def admission_part(settings: Settings) -> str:
    """Both replicas on one cluster, their paced runs alternating, the order swapped a round."""
    with running_cluster(settings) as cluster, tempfile.TemporaryDirectory() as tmp:
        kube, workdir = cluster.client(), Path(tmp)
        publish_cards(kube)
        nvidia_claim = translated_claim(nvidia_profile("100"), memory_mib=8192, cores=10)
        admit_namespace(kube, "admit-default", share_spec(10.0))
        admit_namespace(kube, "admit-nvidia", nvidia_claim)
        bodies = write_bodies(workdir / "pods.jsonl", admit_pods())
        with registered_replica(cluster, workdir, "default") as ours, \
                registered_replica(cluster, workdir, "nvidia") as nvidia:  # fmt: skip
            time.sleep(SETTLE_S)  # the API server picks up configurations asynchronously
            for replica in (ours, nvidia):
                generate(kube, replica.namespace, bodies, seconds=WARM_SECONDS)
            for index in range(ADMIT_ROUNDS):
                for replica in (ours, nvidia) if index % 2 == 0 else (nvidia, ours):
                    admit_round(kube, replica, bodies)
        for replica in (ours, nvidia):
            check_translated(kube, replica)
    return "\n".join(admission_lines([ours, nvidia]))


def _quantile(values: Sequence[float], q: float) -> float:
    """The value at quantile `q` of `values` (0 for none)."""
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if ordered else 0.0


def judged(value: float, base: float, *, goal: float = GOAL_RATIO) -> str:
    """``1.10x (goal <= 1.2x): met`` for `value` over `base`."""
    ratio = value / base if base else float("inf")
    return f"{ratio:.2f}x (goal <= {goal}x): {'met' if ratio <= goal else 'MISSED'}"


def admission_lines(replicas: Sequence[Replica]) -> list[str]:
    """Per profile: each round's p99, the median p50/p99 of the rounds, the webhook's own p50/p99;
    then nvidia's median p99 over the default's, judged against the goal."""
    lines = [
        f"admission: HAMi GPU pods created through the API server, paced {ADMIT_RATE}/s over "
        f"{ADMIT_CONNECTIONS} connections, {ADMIT_ROUNDS} rounds of {ADMIT_SECONDS} s per profile "
        f"(alternating), each namespace with a gpumem quota and {QUOTA_CLAIMS:,} claims",
        f"{'profile':<10}{'pods':>7}{'p50 ms':>9}{'p99 ms':>9}{'p99 per round':>26}"
        f"{'hook p50':>10}{'hook p99':>10}",
    ]
    for replica in replicas:
        p99s = [load.p99_ms for load in replica.loads]
        rounds = "/".join(f"{p:.1f}" for p in p99s)
        lines.append(
            f"{replica.profile:<10}{sum(load.sent for load in replica.loads):>7}"
            f"{statistics.median(load.p50_ms for load in replica.loads):>9.1f}"
            f"{statistics.median(p99s):>9.1f}{rounds:>26}"
            f"{_quantile(replica.hook_ms, 0.5):>10.2f}{_quantile(replica.hook_ms, 0.99):>10.2f}"
        )
    base, last = (statistics.median(load.p99_ms for load in r.loads) for r in replicas)
    lines.append(f"nvidia / default p99 = {judged(last, base)}")
    base, last = (_quantile(r.hook_ms, 0.99) for r in replicas)
    lines.append(f"nvidia / default hook p99 = {judged(last, base)}")
    lines.append("(p50/p99: a pod's whole create as its client waits for it; hook: the webhook's "
                 "own time per admission in ms, from its log)")  # fmt: skip
    return lines


# --- part: prepare -------------------------------------------------------------------------

PREPARE_CALLS, PREPARE_ROUNDS, PREPARE_CARDS = 200, 3, 8
#: latencies in ms by case ("new", "already prepared"), then by agent, one list per round
PrepareRuns = dict[str, dict[str, list[list[float]]]]
PREPARE_MEMORY_MIB, PREPARE_CORES = 1024, 5


def enforcer_agent(node: str, kubeconfig: Path) -> AbstractContextManager[AgentProcess]:
    """`vgpu-bridge node --enforce-driver gpu.nvidia.com` for `node`, as the chart runs it in
    nvidia mode: no mock cards (refused in that mode), driver name enforcer.vgb.io."""
    enforce = {"VGPU_BRIDGE_ENFORCE_DRIVER": NVIDIA_DRIVER}
    return running_agent(node, kubeconfig, None, driver=ENFORCER_DRIVER, extra_env=enforce)


def nvidia_claims(kube: KubeClient, namespace: str, node: str, prefix: str) -> list[Json]:
    """PREPARE_CALLS claims as the translator writes them under profile nvidia (1Gi, 5 shares, the
    enforcer device), allocated on the node's cards in turn as the scheduler would."""
    spec = translated_claim(nvidia_profile("100"), memory_mib=PREPARE_MEMORY_MIB,
                            cores=PREPARE_CORES)  # fmt: skip
    claims = []
    for index in range(PREPARE_CALLS):
        body = {"apiVersion": RESOURCE_V1, "kind": "ResourceClaim",
                "metadata": {"name": f"{prefix}-{index}"}, "spec": spec}  # fmt: skip
        claim = kube.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaims", body)
        device = f"gpu-{index % PREPARE_CARDS}"
        claim["status"] = {"allocation": allocation(node, spec, device=device)}
        path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{claim['metadata']['name']}"
        claims.append(kube.replace(f"{path}/status", claim))
    return claims


def our_claims(kube: KubeClient, namespace: str, node: str, prefix: str) -> list[Json]:
    """PREPARE_CALLS claims of one share of our cards (1Gi, 5%), as ``bench/node.py`` makes them."""
    return [
        allocated_claim(kube, namespace, f"{prefix}-{index}", node=node, results=[
            result(node, f"gpu-{index % PREPARE_CARDS}", memory="1Gi", cores="5")])
        for index in range(PREPARE_CALLS)
    ]  # fmt: skip


def stub_of(agent: AgentProcess) -> dra_v1_pb2_grpc.DRAPluginStub:
    return dra_v1_pb2_grpc.DRAPluginStub(grpc.insecure_channel(f"unix:{agent.dra_socket}"))


def alternating(
    stubs: dict[str, dra_v1_pb2_grpc.DRAPluginStub], claims: dict[str, list[Json]]
) -> dict[str, list[float]]:
    """One claim per call, the agents' calls alternating (the order swapped every call), ms."""
    times: dict[str, list[float]] = {name: [] for name in stubs}
    names = list(stubs)
    for index in range(min(len(c) for c in claims.values())):
        for name in names if index % 2 == 0 else names[::-1]:
            times[name].append(timed_prepare(stubs[name], [claims[name][index]]))
    return times


def quantiles(latencies: Sequence[float]) -> tuple[float, float]:
    """p50 and p99 (the 99th of 100 quantiles; the one value for one)."""
    if len(latencies) < 2:
        return latencies[0], latencies[0]
    return statistics.median(latencies), statistics.quantiles(latencies, n=100)[98]


def ratio_lines(
    title: str, rows: dict[str, list[list[float]]], *, goal: float | None = GOAL_RATIO
) -> list[str]:
    """Per row: calls, p50 of every call, each round's p99, their median; then the last row's
    median p99 over the first's, judged against `goal` (a slow spell of the machine spoils one
    round, not all); None: shown, not judged."""
    lines = [f"{title:<52}{'calls':>6}{'p50 ms':>9}{'p99 ms':>9}  p99 per round"]
    medians = []
    for name, rounds in rows.items():
        p99s = [quantiles(latencies)[1] for latencies in rounds]
        medians.append(statistics.median(p99s))
        every = [latency for latencies in rounds for latency in latencies]
        lines.append(f"  {name:<50}{len(every):>6}{quantiles(every)[0]:>9.2f}{medians[-1]:>9.2f}"
                     f"  {'/'.join(f'{p:.1f}' for p in p99s)}")  # fmt: skip
    first, *_, last = rows
    if goal is None:
        ratio = f"{medians[-1] / medians[0]:.2f}x (no goal)" if medians[0] else "n/a"
    else:
        ratio = judged(medians[-1], medians[0], goal=goal)
    lines.append(f"  p99 {last} / {first} = {ratio}")
    return lines


def check_enforced(stub: dra_v1_pb2_grpc.DRAPluginStub, claim: Json, node: str) -> None:
    """The enforcer answers a prepared claim with its one device, for every container (no
    request names) and with CDI devices: else the wrong thing was measured."""
    request = prepare_request([claim])
    (answer,) = stub.NodePrepareResources(request, timeout=45).claims.values()
    devices = [(d.pool_name, d.device_name, list(d.request_names)) for d in answer.devices]
    if devices != [(node, ENFORCER_DEVICE, [])] or not answer.devices[0].cdi_device_ids:
        raise RuntimeError(f"the enforcer answered {answer}")


def prepare_rounds(kube: KubeClient, cluster: LocalCluster, nodes: dict[str, str]) -> PrepareRuns:
    """PREPARE_ROUNDS rounds, each with new claims: every claim prepared once (new), then again
    (already prepared), the two agents' calls alternating."""
    runs: PrepareRuns = {"new": {"ours": [], "enforcer": []},
                         "already prepared": {"ours": [], "enforcer": []}}  # fmt: skip
    namespace = "bench-prepare"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": namespace}})  # fmt: skip
    with running_agent(nodes["ours"], cluster.kubeconfig, mock_gpus(PREPARE_CARDS)) as ours, \
            enforcer_agent(nodes["enforcer"], cluster.kubeconfig) as enforcer:  # fmt: skip
        stubs = {"ours": stub_of(ours), "enforcer": stub_of(enforcer)}
        for index in range(PREPARE_ROUNDS):
            claims = {
                "ours": our_claims(kube, namespace, nodes["ours"], f"ours-{index}"),
                "enforcer": nvidia_claims(kube, namespace, nodes["enforcer"], f"nv-{index}"),
            }
            for case in runs:
                for name, latencies in alternating(stubs, claims).items():
                    runs[case][name].append(latencies)
            check_enforced(stubs["enforcer"], claims["enforcer"][0], nodes["enforcer"])
    return runs


def prepare_part(settings: Settings) -> str:
    """Both agents on one cluster, each on its own fake node (NVIDIA's slice on the enforcer's);
    the agents' logs go to stderr."""
    with running_cluster(settings) as cluster, contextlib.redirect_stdout(sys.stderr):
        kube, tag = cluster.client(), secrets.token_hex(3)
        nodes = {"ours": f"bench-ours-{tag}", "enforcer": f"bench-nv-{tag}"}
        for node in nodes.values():
            create_fake_node(kube, node)
        cards = node_cards(nodes["enforcer"], PREPARE_CARDS, memory_bytes=CARD_MEMORY)
        kube.create(f"{RESOURCE}/resourceslices",
                    nvidia_resource_slice(nodes["enforcer"], cards, "100"))  # fmt: skip
        runs = prepare_rounds(kube, cluster, nodes)
    lines = [
        "prepare: NodePrepareResources over each agent's unix socket, 1 claim per call, real API "
        f"server; {PREPARE_ROUNDS} rounds of {PREPARE_CALLS} new claims per agent, the agents' "
        "calls alternating; ours: one share of our card; enforcer: NVIDIA's share + the "
        "enforcer device (its CDI: libvgpu, ld.so.preload, limits file)"
    ]
    lines += ratio_lines("new (API read + NVIDIA's slice + CDI + checkpoint)", runs["new"])
    lines += ratio_lines("already prepared (the checkpoint's answer; no goal: 1 ms, noise)",
                         runs["already prepared"], goal=None)  # fmt: skip
    return "\n".join(lines)


# --- command line ---------------------------------------------------------------------------


def _parts(text: str) -> list[str]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if not parts or unknown:
        raise argparse.ArgumentTypeError(f"parts of {', '.join(PARTS)}; got {text!r}")
    return parts


def _workloads(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = sorted(set(names) - set(WORKLOADS))
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"workloads of {', '.join(WORKLOADS)}; got {text!r}")
    return names


def _arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/nvidia.py", description=__doc__.split("\n")[0])
    parser.add_argument("--parts", type=_parts, default=list(PARTS), help="comma list")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved rounds of schedule")
    parser.add_argument("--gpus", type=int, default=1_000, help="cards of the schedule part")
    workloads_help = f"of the schedule part, a comma list of {', '.join(WORKLOADS)}"
    parser.add_argument("--workloads", type=_workloads, default=list(DEFAULT_WORKLOADS),
                        help=workloads_help)  # fmt: skip
    arguments = parser.parse_args(argv)
    if arguments.repeats < 1 or arguments.gpus < schedule.GPUS_PER_NODE:
        parser.error(f"--repeats >= 1, --gpus >= {schedule.GPUS_PER_NODE}")
    return arguments


def main(argv: Sequence[str]) -> int:
    arguments, settings = _arguments(argv), Settings.from_env()
    ok, tables = True, []
    if "admission" in arguments.parts:
        tables.append(admission_part(settings))
    if "prepare" in arguments.parts:
        tables.append(prepare_part(settings))
    if "schedule" in arguments.parts:
        text, bound = schedule_part(settings, gpus=arguments.gpus, repeats=arguments.repeats,
                                    workloads=arguments.workloads)  # fmt: skip
        tables.append(text)
        ok = ok and bound
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print("\n\n".join(tables))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
