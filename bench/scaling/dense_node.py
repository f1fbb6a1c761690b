"""Part 5 of issue 26: the node agent at the densest node we expect, 8 cards of 80 GiB with 48
shares each (384 claims: a node packed with inference pods), prepared and unprepared in bursts
through the kubelet's gRPC, and its /metrics scraped with every claim's dir present.

Setup: the local control plane (``e2e/cluster``), one fake Node, the real agent (``vgpu-bridge
node``, ``e2e/node/agent.py``) with ``--cards`` mock cards, and ``cards x shares-per-card``
claims allocated through the status subresource as a scheduler writes them (``e2e/node/
claims.py``: a shareID and consumedCapacity of 1/shares-per-card of the card's memory and 2 % of
its SMs). Measured, in this order, from ``--threads`` client threads on one gRPC channel (the
kubelet starts many pods at once and calls the agent from each pod's worker):

1. every claim prepared by a single-claim NodePrepareResources call, all calls in flight from
   the pool at once: each call's latency and the burst's wall time;
2. the agent's /metrics (``--metrics-listen``) scraped ``--scrapes`` times with every claim's
   dir present, first empty (pods not started), then with a libvgpu region in each dir (one
   process per claim, as once the pods run); each scrape's time and the response's size; and
   /healthz as often, the health check every scrape also runs (``vgpu_bridge_agent_healthy``):
   what a scrape costs whatever the node holds;
3. every claim unprepared by single-claim calls in a burst;
4. the same claims prepared, then unprepared, again in calls of ``--batch-size`` claims (a pod
   with that many claims), also in a burst.

Goals: prepare p99 per claim under bench/node.py's 50 ms (a call's p99 divided by the claims
it carries; queueing behind the agent's lock included, as a kubelet waits for it); a scrape
<= 250 ms. Unprepare has no goal of its own and is shown for the record.

Left out: no kubelet (its DRA manager, checkpoint and retries), no container runtime (the CDI
specs are written but nothing applies them), mock NVML (no driver calls), no libvgpu (the regions
are written by this benchmark, one process each, with this process's pid as the host pid), no
HAMi series (``--hami-metrics`` off, its default). The API server, etcd, the agent and the
client threads share this machine's cores: read the figures with the load printed beside them.

``python -m bench.scaling.dense_node [--cards 8] [--shares-per-card 48]``
"""

from __future__ import annotations

import argparse
import http.client
import os
import secrets
import statistics
import struct
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, redirect_stdout
from dataclasses import dataclass

import grpc

from bench.node import TARGET_P99_MS, mock_gpus, timed_prepare
from e2e.cluster import KubeClient, LocalCluster, Settings, create_fake_node, running_cluster
from e2e.cluster.client import Json
from e2e.node.agent import AgentProcess, running_agent
from e2e.node.claims import allocated_claim, result
from vgpu_bridge.node.cdi import SHARED_REGION_FILE
from vgpu_bridge.node.kubeletapi import dra_v1_pb2, dra_v1_pb2_grpc
from vgpu_bridge.node.region import (
    COUNTS_OFFSET,
    DEVICES_OFFSET,
    REGION_MAGIC,
    REGION_SIZE,
    REGION_VERSION,
    SLOTS_OFFSET,
    read_region,
)

CARD_MIB = 80 * 1024  # mock_gpus' cards
CORES_PER_SHARE = 2
SCRAPE_GOAL_MS = 250.0
NAMESPACE = "dense-node"
CREATE_THREADS = 8  # creating the claims is not measured


@dataclass(frozen=True)
class DenseNode:
    """The size of the node and of the bursts."""

    cards: int = 8
    shares_per_card: int = 48
    threads: int = 16  # kubelet calls in flight at once
    batch_size: int = 8  # claims per call in the batched run
    scrapes: int = 20

    @property
    def claims(self) -> int:
        return self.cards * self.shares_per_card

    @property
    def share_mib(self) -> int:
        return CARD_MIB // self.shares_per_card


@dataclass(frozen=True)
class Row:
    case: str
    latencies_ms: Sequence[float]
    wall_s: float | None  # a burst's, start of the first call to end of the last
    goal_ms: float | None  # on the p99 divided by `per_call`; None: no goal
    per_call: int = 1

    @property
    def p99_ms(self) -> float:
        return percentile(self.latencies_ms, 99)

    def met(self) -> str:
        if self.goal_ms is None:
            return "-"
        return "met" if self.p99_ms / self.per_call <= self.goal_ms else "MISSED"


@dataclass(frozen=True)
class DenseNodeRun:
    settings: DenseNode
    rows: Sequence[Row]
    scrape_bytes: tuple[int, int]  # response sizes: empty dirs, a region in each
    load: float


def percentile(values: Sequence[float], pct: int) -> float:
    """The `pct`th percentile, interpolated between samples, never past the largest."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def _create_claims(kube: KubeClient, node: str, settings: DenseNode) -> list[Json]:
    def one(index: int) -> Json:
        card, share = divmod(index, settings.shares_per_card)
        share_result = result(node, f"gpu-{card}", memory=f"{settings.share_mib}Mi",
                              cores=str(CORES_PER_SHARE))  # fmt: skip
        return allocated_claim(kube, NAMESPACE, f"share-{card}-{share}", node=node,
                               results=[share_result])  # fmt: skip

    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        return list(pool.map(one, range(settings.claims)))


def _batches(claims: Sequence[Json], size: int) -> list[list[Json]]:
    return [list(claims[i : i + size]) for i in range(0, len(claims), size)]


def _burst(
    call: Callable[[list[Json]], float], batches: Sequence[list[Json]], threads: int
) -> tuple[list[float], float]:
    """Every batch's call in flight from `threads` threads at once: each call's milliseconds
    and the burst's wall seconds."""
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        latencies = list(pool.map(call, batches))
    return latencies, time.perf_counter() - start


def _timed_unprepare(stub: dra_v1_pb2_grpc.DRAPluginStub, claims: list[Json]) -> float:
    """Milliseconds of one NodeUnprepareResources call with `claims`; exits on any claim error."""
    request = dra_v1_pb2.NodeUnprepareResourcesRequest(
        claims=[
            dra_v1_pb2.Claim(namespace=c["metadata"]["namespace"], name=c["metadata"]["name"],
                             uid=c["metadata"]["uid"])
            for c in claims
        ]
    )  # fmt: skip
    start = time.perf_counter()
    response = stub.NodeUnprepareResources(request, timeout=45)
    elapsed = (time.perf_counter() - start) * 1000
    errors = [a.error for a in response.claims.values() if a.error]
    if errors or len(response.claims) != len(claims):
        raise SystemExit(f"unprepare failed: {errors[:3] or dict(response.claims)}")
    return elapsed


def region(uuid: str, *, memory_limit: int, used: int, host_pid: int) -> bytes:
    """A version-2 libvgpu region (layout: vgpu_bridge/node/region.py) with one device and one
    live process using `used` bytes of it."""
    data = bytearray(REGION_SIZE)
    struct.pack_into("<IIQ", data, 0, REGION_MAGIC, REGION_VERSION, REGION_SIZE)
    struct.pack_into("<II", data, COUNTS_OFFSET, 1, 1)  # one device, one slot in use
    struct.pack_into("<48sQII", data, DEVICES_OFFSET, uuid.encode(), memory_limit,
                     CORES_PER_SHARE, 0)  # fmt: skip
    struct.pack_into("<iiQ", data, SLOTS_OFFSET, 1, host_pid, 1000)  # pid 1 in its container
    struct.pack_into("<I", data, SLOTS_OFFSET + 20, CORES_PER_SHARE)  # SM percent measured
    struct.pack_into("<Q", data, SLOTS_OFFSET + 24, used)  # bytes on the device
    struct.pack_into("<Q", data, SLOTS_OFFSET + 152, 12345)  # kernel launches
    if read_region(bytes(data)).used != {uuid: used}:
        raise SystemExit("the region written here is not what the agent reads")
    return bytes(data)


def _write_regions(agent: AgentProcess, claims: Sequence[Json], settings: DenseNode) -> None:
    share = settings.share_mib * 2**20
    assert agent.gpus is not None, "the dense node's agent runs with mock cards"
    for index, claim in enumerate(claims):
        uuid = agent.gpus[index // settings.shares_per_card]["uuid"]
        path = agent.layout.shared_dir(claim["metadata"]["uid"]) / SHARED_REGION_FILE
        path.write_bytes(region(uuid, memory_limit=share, used=share // 2, host_pid=os.getpid()))


def _scrapes(port: int, count: int, path: str = "/metrics") -> tuple[list[float], int]:
    """Milliseconds of `count` GETs of `path` (request to the body's last byte, a connection
    each, as Prometheus scrapes) and the last response's size."""
    latencies, size = [], 0
    for _ in range(count):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        start = time.perf_counter()
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        latencies.append((time.perf_counter() - start) * 1000)
        connection.close()
        if response.status != 200:
            raise SystemExit(f"{path} answered {response.status}: {body[:300]!r}")
        size = len(body)
    return latencies, size


def measure(cluster: LocalCluster, settings: DenseNode) -> DenseNodeRun:
    """Run the bursts and scrapes on `cluster` (a fresh node and namespace of its own)."""
    kube = cluster.client()
    node = f"dense-node-{secrets.token_hex(3)}"
    create_fake_node(kube, node)
    if not kube.exists(f"/api/v1/namespaces/{NAMESPACE}"):
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                          "metadata": {"name": NAMESPACE}})  # fmt: skip
    gpus = mock_gpus(settings.cards)
    # the agent's log tail, which running_agent prints as it stops, goes to stderr
    with redirect_stdout(sys.stderr), running_agent(node, cluster.kubeconfig, gpus) as agent:
        claims = _create_claims(kube, node, settings)
        with grpc.insecure_channel(f"unix:{agent.dra_socket}") as channel:
            stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
            rows, sizes = _measure_agent(stub, agent, claims, settings)
    return DenseNodeRun(settings, rows, sizes, os.getloadavg()[0])


def _measure_agent(
    stub: dra_v1_pb2_grpc.DRAPluginStub,
    agent: AgentProcess,
    claims: list[Json],
    settings: DenseNode,
) -> tuple[list[Row], tuple[int, int]]:
    def prepare(batch: list[Json]) -> float:
        return timed_prepare(stub, batch)

    def unprepare(batch: list[Json]) -> float:
        return _timed_unprepare(stub, batch)

    singles, batched = _batches(claims, 1), _batches(claims, settings.batch_size)
    per_claim = _burst(prepare, singles, settings.threads)
    health, _ = _scrapes(agent.metrics_port, settings.scrapes, "/healthz")
    empty, empty_size = _scrapes(agent.metrics_port, settings.scrapes)
    _write_regions(agent, claims, settings)
    full, full_size = _scrapes(agent.metrics_port, settings.scrapes)
    unprepared = _burst(unprepare, singles, settings.threads)
    per_batch = _burst(prepare, batched, settings.threads)
    unprepared_batched = _burst(unprepare, batched, settings.threads)
    size = settings.batch_size
    rows = [
        Row("prepare burst, 1 claim/call", per_claim[0], per_claim[1], TARGET_P99_MS),
        Row(f"prepare burst, {size} claims/call", per_batch[0], per_batch[1], TARGET_P99_MS,
            size),
        Row("metrics scrape, empty claim dirs", empty, None, SCRAPE_GOAL_MS),
        Row("metrics scrape, a region per dir", full, None, SCRAPE_GOAL_MS),
        Row("/healthz alone (sockets' probe)", health, None, None),
        Row("unprepare burst, 1 claim/call", unprepared[0], unprepared[1], None),
        Row(f"unprepare burst, {size} claims/call", unprepared_batched[0],
            unprepared_batched[1], None, size),
    ]  # fmt: skip
    return rows, (empty_size, full_size)


def _goal_text(row: Row) -> str:
    if row.goal_ms is None:
        return "-"
    return f"<= {row.goal_ms:g} ms" + ("/claim" if row.case.startswith("prepare") else "")


def table(run: DenseNodeRun) -> str:
    s = run.settings
    lines = [
        f"part 5, the dense node: {s.cards} cards x {s.shares_per_card} shares = {s.claims} "
        f"claims ({s.share_mib} MiB, {CORES_PER_SHARE} % SM each), the real agent over its "
        f"unix socket, {s.threads} calls in flight; {s.scrapes} scrapes of /metrics per row",
        f"{'case':<36}{'calls':>7}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}{'wall s':>9}"
        f"{'goal':>18}{'':>8}",
    ]
    for row in run.rows:
        wall = "" if row.wall_s is None else f"{row.wall_s:.2f}"
        lines.append(
            f"{row.case:<36}{len(row.latencies_ms):>7}{statistics.median(row.latencies_ms):>10.1f}"
            f"{row.p99_ms:>10.1f}{max(row.latencies_ms):>10.1f}{wall:>9}"
            f"{_goal_text(row):>18}{row.met():>8}"
        )
    empty, full = run.scrape_bytes
    lines.append(
        f"/metrics response: {empty / 1024:.0f} KiB with empty claim dirs, {full / 1024:.0f} KiB "
        f"with a region in each; machine load {run.load:.1f} on {os.cpu_count()} CPUs"
    )
    lines.append(
        "left out: no kubelet, no container runtime (CDI specs written, never applied), mock "
        "NVML, regions written by the benchmark (not libvgpu), HAMi series off"
    )
    return "\n".join(lines)


def dense_node_table(settings: DenseNode, *, cluster: LocalCluster | None = None) -> str:
    """The table for `settings`, on `cluster` or, when None, on a control plane of its own."""
    with ExitStack() as stack:
        if cluster is None:
            cluster = stack.enter_context(running_cluster(Settings.from_env()))
        return table(measure(cluster, settings))


def arguments(argv: list[str]) -> DenseNode:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling.dense_node",
                                     description=(__doc__ or "").split("\n")[0])  # fmt: skip
    parser.add_argument("--cards", type=int, default=DenseNode.cards, help="mock 80Gi cards")
    parser.add_argument("--shares-per-card", type=int, default=DenseNode.shares_per_card,
                        help=f"claims per card, each {CORES_PER_SHARE} %% of its SMs")  # fmt: skip
    parser.add_argument("--threads", type=int, default=DenseNode.threads,
                        help="calls in flight at once")  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=DenseNode.batch_size,
                        help="claims per call in the batched run")  # fmt: skip
    parser.add_argument("--scrapes", type=int, default=DenseNode.scrapes,
                        help="GETs of /metrics per row")  # fmt: skip
    args = parser.parse_args(argv)
    if min(args.cards, args.shares_per_card, args.threads, args.batch_size, args.scrapes) < 1:
        parser.error("every count must be at least 1")
    if args.shares_per_card * CORES_PER_SHARE > 100:
        parser.error(f"at most {100 // CORES_PER_SHARE} shares per card of {CORES_PER_SHARE} % SM")
    return DenseNode(args.cards, args.shares_per_card, args.threads, args.batch_size,
                     args.scrapes)  # fmt: skip


if __name__ == "__main__":
    print(dense_node_table(arguments(sys.argv[1:])))
