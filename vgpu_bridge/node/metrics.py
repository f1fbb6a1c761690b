"""Prometheus metrics of the node agent: what is allocated (from the checkpoint) and what is used
(from libvgpu's shared regions, one per claim: `<vgpu-dir>/claims/<uid>/vgpu.cache`).

The region is read by `region.py`; a file that is not a region this agent reads is skipped
(reported by `vgpu_bridge_claim_region_readable`), never guessed at.

The agent's HTTP server serves these at `/metrics` and its health at `/healthz` (`health.py`);
`AgentCollector` turns that health and the last ResourceSlice publication into series too, so an
alert can say which of the two is wrong. The rules that watch all of these are
charts/vgpu-bridge/files/alerts.yaml (docs/monitoring.md). Ratios are 0-1 (`_ratio`). The
registry also serves the build and process series (`build_info`), and, with `--hami-metrics`,
HAMi's series computed from the same readings of the regions (`hami_metrics.py`).
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any, NamedTuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, Histogram, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vgpu_bridge.build_info import register_standard
from vgpu_bridge.node.cdi import SHARED_REGION_FILE, claim_dir
from vgpu_bridge.node.checkpoint import PreparedClaim
from vgpu_bridge.node.claimdirs import DirUsage, SweepStep
from vgpu_bridge.node.files import not_deleted, skipped
from vgpu_bridge.node.gpus import Cards, cards_now
from vgpu_bridge.node.hami_metrics import ClaimReading, HamiSeries
from vgpu_bridge.node.health import Health, with_healthz
from vgpu_bridge.node.hostpids import HostPidTable
from vgpu_bridge.node.publisher import Publication
from vgpu_bridge.node.region import RegionError, RegionUsage, read_region_file
from vgpu_bridge.node.state import DeviceState

_CONTAINER_ID = re.compile(r"([0-9a-f]{64})")
#: the kubelet's pod cgroup: `pod<uid>` (cgroupfs) or `pod<uid with _ for ->.slice` (systemd)
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)


class Container(NamedTuple):
    """Where a process runs: the runtime's container id and the pod's uid ("" when unknown)."""

    container_id: str
    pod_uid: str


def container_of(host_pid: int, proc: Path = Path("/proc")) -> Container:
    """The container (64 hex digits, as CRI runtimes name cgroups) and pod (the kubelet's pod
    cgroup) of a host process; empty fields when unknown (pid 0, gone, or not in a pod)."""
    if host_pid <= 0:
        return Container("", "")
    try:
        text = (proc / str(host_pid) / "cgroup").read_text()
    except OSError:
        return Container("", "")
    found = _CONTAINER_ID.findall(text)
    pods = _POD_UID.findall(text)
    return Container(found[-1] if found else "", pods[-1].replace("_", "-") if pods else "")


def _by_container(
    usage: RegionUsage, proc: Path, found: HostPidTable
) -> dict[Container, dict[str, int]]:
    totals: dict[Container, dict[str, int]] = {}
    for owner, per_uuid in usage.by_process.items():
        host_pid = owner.host_pid or found.get((owner.pid, owner.start_time), 0)
        mine = totals.setdefault(container_of(host_pid, proc), {})
        for uuid, value in per_uuid.items():
            mine[uuid] = mine.get(uuid, 0) + value
    return totals


class NodeCollector(Collector):
    def __init__(
        self,
        state: DeviceState,
        gpus: Cards,
        *,
        node: str,
        vgpu_dir: Path,
        host_pids: Callable[[str], HostPidTable] = lambda _uid: {},
        proc: Path = Path("/proc"),
        hami: HamiSeries | None = None,
    ):
        """`host_pids(claim uid)`: what the agent found for the claim's slots libvgpu could not
        tell (`HostPidFiles.found`), so a pod's memory is counted to its container and pod.
        `hami`: HAMi's series too (`--hami-metrics`), from the regions read for ours."""
        self._hami = hami
        self._host_pids = host_pids
        self._proc = proc
        self._state = state
        self._gpus = cards_now(gpus)
        self._node = node
        self._vgpu_dir = vgpu_dir

    def collect(self) -> Iterator[Metric]:
        claims = self._state.snapshot()
        card = ["node", "device", "uuid", "product"]
        total = GaugeMetricFamily("vgpu_bridge_gpu_memory_bytes", "GPU memory", labels=card)
        memory = GaugeMetricFamily(
            "vgpu_bridge_gpu_memory_allocated_bytes", "memory of prepared shares", labels=card
        )
        cores = GaugeMetricFamily(
            "vgpu_bridge_gpu_cores_allocated_ratio",
            "SM share of prepared shares (0-1: 1 is the whole card)",
            labels=card,
        )
        shares = GaugeMetricFamily("vgpu_bridge_gpu_shares", "prepared shares", labels=card)
        for gpu in self._gpus():
            devices = [d for c in claims for d in c.devices if d.uuid == gpu.uuid]
            labels = [self._node, gpu.device_name, gpu.uuid, gpu.product_name]
            total.add_metric(labels, gpu.memory)
            memory.add_metric(labels, sum(d.memory for d in devices))
            cores.add_metric(labels, sum(d.cores for d in devices) / 100)
            shares.add_metric(labels, len(devices))
        yield from (total, memory, cores, shares)
        readings = [self._reading(claim) for claim in claims]
        yield from self._claims(readings)
        if self._hami is not None:
            yield from self._hami.families(readings)

    def _reading(self, claim: PreparedClaim) -> ClaimReading:
        """The claim's region, read once a scrape, and its memory by container."""
        usage = self._usage(claim.uid)
        if usage is None:
            return ClaimReading(claim, None)
        by_owner = _by_container(usage, self._proc, self._host_pids(claim.uid))
        return ClaimReading(
            claim, usage, {(c.pod_uid, c.container_id): v for c, v in by_owner.items()}
        )

    def _claims(self, readings: list[ClaimReading]) -> Iterator[Metric]:
        share = ["namespace", "claim", "claim_uid", "device", "uuid"]
        limit = GaugeMetricFamily(
            "vgpu_bridge_claim_memory_limit_bytes", "a share's memory limit", labels=share
        )
        sm = GaugeMetricFamily(
            "vgpu_bridge_claim_cores_limit_ratio",
            "a share's SM limit (0-1; 0: no limit)",
            labels=share,
        )
        region = ["namespace", "claim", "claim_uid"]
        used = GaugeMetricFamily(
            "vgpu_bridge_claim_memory_used_bytes",
            "memory its containers use (libvgpu shared region)",
            labels=[*region, "uuid"],
        )
        processes = GaugeMetricFamily(
            "vgpu_bridge_claim_processes", "CUDA processes in the region", labels=region
        )
        launches = GaugeMetricFamily(
            "vgpu_bridge_claim_kernel_launches", "kernel launches of live processes", labels=region
        )
        by_container = GaugeMetricFamily(
            "vgpu_bridge_container_memory_used_bytes",
            "memory each container uses in a claim (runtime container id and pod uid from the "
            "process's cgroup; empty if unknown)",
            labels=[*region, "pod_uid", "container_id", "uuid"],
        )
        refused = CounterMetricFamily(
            "vgpu_bridge_claim_allocations_refused",
            "allocations libvgpu refused because the share's memory limit was reached",
            labels=[*region, "uuid"],
        )
        sm_util = GaugeMetricFamily(
            "vgpu_bridge_claim_sm_utilization_ratio",
            "SM utilization its containers' processes last measured (libvgpu, highest of them; "
            "0-1 of the card)",
            labels=region,
        )
        readable = GaugeMetricFamily(
            "vgpu_bridge_claim_region_readable",
            "1 when the claim's shared region was read, 0 when absent or not a region this agent "
            "reads (versions 1 and 2)",
            labels=region,
        )
        prepared = GaugeMetricFamily("vgpu_bridge_prepared_claims", "claims prepared on the node")
        prepared.add_metric([], len(readings))
        for reading in readings:
            claim, usage = reading.claim, reading.usage
            for device in claim.devices:
                labels = [claim.namespace, claim.name, claim.uid, device.device_name, device.uuid]
                limit.add_metric(labels, device.memory)
                sm.add_metric(labels, device.cores / 100)
            labels = [claim.namespace, claim.name, claim.uid]
            readable.add_metric(labels, 0 if usage is None else 1)
            if usage is not None:
                for uuid, value in usage.used.items():
                    used.add_metric([*labels, uuid], value)
                for uuid, value in usage.refused.items():
                    refused.add_metric([*labels, uuid], value)
                sm_util.add_metric(labels, usage.sm_util / 100)
                processes.add_metric(labels, usage.processes)
                launches.add_metric(labels, usage.launches)
                for (pod_uid, container_id), per_uuid in reading.by_container.items():
                    for uuid, value in per_uuid.items():
                        by_container.add_metric([*labels, pod_uid, container_id, uuid], value)
        yield from (limit, sm, used, refused, sm_util, processes, launches, by_container)
        yield from (readable, prepared)

    def _usage(self, claim_uid: str) -> RegionUsage | None:
        path = claim_dir(self._vgpu_dir, claim_uid) / SHARED_REGION_FILE
        try:
            return read_region_file(path)
        except (OSError, RegionError):
            return None


class AgentCollector(Collector):
    """The agent's own state: healthy as `/healthz` says, and how long ago its ResourceSlices
    were last published (counted from the collector's creation until the first publication)."""

    def __init__(
        self,
        health: Health,
        publications: Callable[[], Publication | None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock` must be the publisher's (`Publication` times are read on it)."""
        self._health = health
        self._publications = publications
        self._clock = clock
        self._started_at = clock()

    def collect(self) -> Iterator[Metric]:
        healthy = GaugeMetricFamily(
            "vgpu_bridge_agent_healthy", "1 when /healthz answers 200, 0 when it answers 503"
        )
        healthy.add_metric([], 0 if self._health.problem() is not None else 1)
        last = self._publications()
        since = self._started_at if last is None or last.succeeded_at is None else last.succeeded_at
        age = GaugeMetricFamily(
            "vgpu_bridge_slices_seconds_since_publication",
            "seconds since the node's ResourceSlices were last published successfully",
        )
        age.add_metric([], max(self._clock() - since, 0.0))
        yield from (healthy, age)


class TenantFilesCollector(Collector):
    """What containers put where the agent looks: refused files, entries it could not delete,
    each claim dir's size, and how each step of the sweep of those dirs went (seconds since it
    last succeeded, counted from the collector's creation until it first does; failures)."""

    def __init__(
        self,
        usage: Callable[[], Mapping[str, DirUsage]],
        sweep_steps: Callable[[], Mapping[str, SweepStep]] = dict,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`clock` must be the sweeper's (`SweepStep` times are read on it)."""
        self._usage = usage
        self._sweep_steps = sweep_steps
        self._clock = clock
        self._started_at = clock()

    def collect(self) -> Iterator[Metric]:
        yield from self._files()
        yield from self._claim_dirs()
        yield from self._sweep()

    def _files(self) -> Iterator[Metric]:
        refused = CounterMetricFamily(
            "vgpu_bridge_untrusted_files_refused",
            "files in container-writable dirs the agent refused to read (a link, a FIFO, ...)",
            labels=["reason"],
        )
        for reason, count in sorted(skipped.counts().items()):
            refused.add_metric([reason], count)
        left = CounterMetricFamily(
            "vgpu_bridge_tenant_entries_not_deleted",
            "entries of container-writable trees the agent failed to delete, by errno (each try)",
            labels=["reason"],
        )
        for reason, count in sorted(not_deleted.counts().items()):
            left.add_metric([reason], count)
        yield from (refused, left)

    def _claim_dirs(self) -> Iterator[Metric]:
        entries = GaugeMetricFamily(
            "vgpu_bridge_claim_dir_entries",
            "entries in a claim's shared-region dir (a lower bound past the walk's limit)",
            labels=["claim_uid"],
        )
        used = GaugeMetricFamily(
            "vgpu_bridge_claim_dir_bytes", "disk used by those entries", labels=["claim_uid"]
        )
        for uid, usage in sorted(self._usage().items()):
            entries.add_metric([uid], usage.entries)
            used.add_metric([uid], usage.bytes)
        yield from (entries, used)

    def _sweep(self) -> Iterator[Metric]:
        failures = CounterMetricFamily(
            "vgpu_bridge_node_sweep_failures",
            "times a step of the sweep of container-writable dirs raised",
            labels=["step"],
        )
        age = GaugeMetricFamily(
            "vgpu_bridge_node_sweep_seconds_since_success",
            "seconds since a step of the sweep of container-writable dirs last succeeded",
            labels=["step"],
        )
        now = self._clock()
        for name, step in sorted(self._sweep_steps().items()):
            failures.add_metric([name], step.failures)
            age.add_metric([name], max(step.silent_for(now=now, started_at=self._started_at), 0.0))
        yield from (failures, age)


class CallMetrics:
    """Per-claim outcomes and latency of Prepare and Unprepare (a `DeviceState` observer)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.seconds = Histogram(
            "vgpu_bridge_claim_call_seconds",
            "time spent on one claim of a Prepare or Unprepare call",
            ["call", "decision"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 45),
            registry=registry,
        )

    def observe(self, call: str, decision: str, seconds: float) -> None:
        self.seconds.labels(call=call, decision=decision).observe(seconds)


class MetricsServer(ThreadingMixIn, WSGIServer):
    """The agent's HTTP server (`/metrics`, `/healthz`), a thread per request."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int]) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _QuietHandler)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log: Prometheus and the kubelet's probe call all the time."""


def serve_metrics(
    host_port: tuple[str, int] | None,
    *,
    registry: CollectorRegistry,
    health: Health,
    state: DeviceState,
    gpus: Cards,
    node: str,
    vgpu_dir: Path,
    host_pids: Callable[[str], HostPidTable],
    tenant_usage: Callable[[], Mapping[str, DirUsage]] = dict,
    sweep_steps: Callable[[], Mapping[str, SweepStep]] = dict,
    publications: Callable[[], Publication | None] = lambda: None,
    hami: HamiSeries | None = None,
) -> MetricsServer | None:
    """Serve `/metrics` and `/healthz` on `host_port` from a daemon thread; the server (stop it
    with `.shutdown()`), or None when disabled. `publications`: the publisher's `last`;
    `tenant_usage` and `sweep_steps`: the sweeper's (`TenantDirs.usage`, `.steps`); `hami`:
    HAMi's series too (`--hami-metrics`)."""
    if host_port is None:
        return None
    register_standard(registry)
    registry.register(AgentCollector(health, publications))
    registry.register(NodeCollector(state, gpus, node=node, vgpu_dir=vgpu_dir, host_pids=host_pids,
                                    hami=hami))  # fmt: skip
    registry.register(TenantFilesCollector(tenant_usage, sweep_steps))
    server = MetricsServer(host_port)
    server.set_app(with_healthz(make_wsgi_app(registry), health))
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
