"""HAMi-compatible series of the node agent (opt-in: `--hami-metrics true`, chart value
`metrics.hamiCompatible`), so that HAMi's Grafana dashboard and HAMi-WebUI's queries keep showing
a node moved over to vgpu-bridge.

Names, labels and units are those HAMi >= 2.9 exports (facts: its vGPU monitor's and scheduler's
collectors; docs/monitoring.md#hami-compatible-series says what differs), each with HAMi's
`zone="vGPU"`:
- per container and device, as HAMi's vGPU monitor: `hami_vgpu_memory_used_bytes`,
  `hami_vgpu_memory_limit_bytes`, `hami_container_device_memory_bytes` and
  `hami_container_device_utilization_ratio` {namespace, pod, container, vdevice_index,
  device_uuid}. HAMi's utilization "ratio" is a percent (0-100): kept so.
- per card, as HAMi's scheduler: `hami_gpu_memory_limit_bytes`, `hami_gpu_core_limit_ratio`,
  `hami_gpu_memory_allocated_bytes` (+ device_cores), `hami_gpu_core_allocated_ratio`,
  `hami_gpu_shared_count` {node, device_uuid, device_index, device_type} and
  `hami_node_gpu_memory_allocated_ratio` {node, device_uuid, device_index} (a 0-1 ratio there).

Values come from what the agent already holds: the shares of its checkpoint and libvgpu's shared
regions, which `metrics.NodeCollector` reads once a scrape and hands here (`ClaimReading`). A
claim's region is shared by every container that lists the claim: with one such container it
owns all of the region's memory; with several, each process's memory goes to the container its
cgroup names (the runtime's container id, matched against the pod's status). The utilization is
the one libvgpu measures for the claim's processes, so every container of a claim shows it.

Who uses a claim (`PodNames`): the pods of the claim's `status.reservedFor` (the claim is read
anyway: the agent may read claims), and in each the containers that list the claim. The
containers come from the kubelet's node-local pod-resources socket (`pod_resources`) where it
answers, so the agent needs no right to read pods (the chart grants none: a privileged pod on
every GPU node must not read every pod of the cluster, issue 35). Without that socket, the pods
are read by name from the API (`resources.claims` naming the pod's entry for the claim, and the
containers' runtime ids), where the agent's account may (an install of one's own, the e2e tier);
once refused (403), not again until the agent restarts. The kubelet does not say a container's
runtime id (a claim that several containers share then has their limits but not each one's
use), numbers a container's claims in the pod's order of claims rather than the container's, and
names all of a claim's devices whatever request a container takes; one container per claim of
our class (the webhook's rule) sees no difference.
Looked up by a worker (`sync`, every SYNC_PERIOD_S), never during a scrape, and cached: a claim
by uid (again only every REFRESH_S for a claim no pod owns, whose `reservedFor` may change), the
kubelet's answer once a sync, a pod by uid (again only when a process of it runs in a container
its cached status does not list, at most every POD_REFETCH_S); entries of claims no longer
prepared and pods no longer named are dropped, and a sync makes at most MAX_CALLS_PER_SYNC API
calls. A claim not yet looked up has only its card series.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from vgpu_bridge.kube import KubeApi, KubeError, api_path
from vgpu_bridge.logs import get_logger
from vgpu_bridge.node.checkpoint import PreparedClaim, PreparedDevice
from vgpu_bridge.node.gpus import Cards, Gpu, cards_now
from vgpu_bridge.node.pod_resources import (
    ClaimKey,
    ContainerUse,
    PodResources,
    PodResourcesUnavailable,
)
from vgpu_bridge.node.region import RegionUsage
from vgpu_bridge.node.state import CLAIMS

Json = dict[str, Any]
log = get_logger("vgpu_bridge.node.hami_metrics")

ZONE = "vGPU"  # the constant label HAMi's collectors are registered with
SYNC_PERIOD_S = 10.0
REFRESH_S = 60.0
POD_REFETCH_S = 30.0
MAX_CALLS_PER_SYNC = 200
CONTAINER_LABELS = ["namespace", "pod", "container", "vdevice_index", "device_uuid", "zone"]
CARD_LABELS = ["node", "device_uuid", "device_index", "device_type", "zone"]


@dataclass(frozen=True, slots=True)
class Consumer:
    """A container that lists a claim: its pod, its name, the claim's place among the claims it
    lists (its devices are numbered in that order), the requests it takes, or the (pool, device)
    pairs the kubelet says it got (both empty: all), and the runtime's ids of it (64 hex digits,
    from the pod's status; none known from the kubelet)."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    position: int
    requests: frozenset[str] = frozenset()
    container_ids: frozenset[str] = frozenset()
    devices: frozenset[tuple[str, str]] = frozenset()
    ids_known: bool = True  # False from the kubelet's socket, which names no runtime id

    def takes(self, device: PreparedDevice) -> bool:
        if self.devices:
            return (device.pool_name, device.device_name) in self.devices
        # a device without request names goes to every container of the claim (the kubelet's
        # rule): an enforced NVIDIA share's limits reach whichever request a container names
        if not self.requests or not device.request_names:
            return True
        return bool(self.requests.intersection(device.request_names))


@dataclass(frozen=True, slots=True)
class ClaimReading:
    """What a scrape read for one prepared claim: its region (None: absent or not readable) and
    its memory by (pod uid, container id) as the processes' cgroups name them."""

    claim: PreparedClaim
    usage: RegionUsage | None
    by_container: Mapping[tuple[str, str], Mapping[str, int]] = field(default_factory=dict)


def container_id(status_id: object) -> str:
    """`containerd://<id>` (or another runtime's scheme) as the cgroup names it: the bare id."""
    return str(status_id or "").rpartition("://")[2]


def consumers_in_pod(pod: Json, *, claim_name: str) -> list[Consumer]:
    """The containers (init containers too) of `pod` that list its entry for `claim_name`: the
    entry names the claim (`resourceClaimName`) or a template whose claim for this pod it is
    (`status.resourceClaimStatuses`)."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    generated = {
        s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []
    }
    entries = {
        entry.get("name")
        for entry in spec.get("resourceClaims") or []
        if (entry.get("resourceClaimName") or generated.get(entry.get("name"))) == claim_name
    }
    ids: dict[str, set[str]] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for s in status.get(key) or []:
            terminated = (s.get("lastState") or {}).get("terminated") or {}
            for found in (s.get("containerID"), terminated.get("containerID")):
                if found:
                    ids.setdefault(s.get("name", ""), set()).add(container_id(found))
    consumers = []
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        listed = (container.get("resources") or {}).get("claims") or []
        for position, ref in enumerate(listed):
            if ref.get("name") in entries:
                consumers.append(
                    Consumer(
                        namespace=meta.get("namespace", ""),
                        pod=meta.get("name", ""),
                        pod_uid=meta.get("uid", ""),
                        container=container.get("name", ""),
                        position=position,
                        requests=frozenset([ref["request"]] if ref.get("request") else []),
                        container_ids=frozenset(ids.get(container.get("name", ""), ())),
                    )
                )
    return consumers


class _Unanswered(Exception):
    """The API server did not answer a lookup: the rest of this sync is skipped."""


@dataclass
class _ClaimEntry:
    pods: tuple[tuple[str, str], ...]  # (name, uid) of reservedFor's pods
    owned: bool  # generated for one pod (ownerReferences): reservedFor never changes
    at: float


@dataclass
class _PodEntry:
    pod: Json | None  # None: gone, or another pod of that name now
    at: float
    stale: bool = False


class PodNames:
    """Which containers of which pods use each prepared claim, looked up by `sync` (a worker);
    `consumers` answers from the cache only."""

    def __init__(
        self,
        api: KubeApi,
        claims: Callable[[], Sequence[PreparedClaim]],
        *,
        pod_resources: PodResources | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_calls: int = MAX_CALLS_PER_SYNC,
    ) -> None:
        """`pod_resources`: the kubelet's socket, asked instead of reading pods while it
        exists; None: pods are read from the API."""
        self._api = api
        self._claims = claims
        self._pod_resources = pod_resources
        self._clock = clock
        self._max_calls = max_calls
        self._lock = threading.Lock()
        self._by_claim: dict[str, _ClaimEntry] = {}
        self._by_pod: dict[str, _PodEntry] = {}
        self._uses: dict[ClaimKey, list[ContainerUse]] | None = None  # the kubelet's last answer
        self._pods_forbidden = False

    def consumers(self, claim: PreparedClaim) -> list[Consumer]:
        """The containers using `claim`, as last looked up (none before its first lookup)."""
        with self._lock:
            entry = self._by_claim.get(claim.uid)
            if entry is None:
                return []
            if self._uses is not None:
                return _kubelet_consumers(self._uses.get((claim.namespace, claim.name), []), entry)
            found = []
            for _, uid in entry.pods:
                pod = self._by_pod.get(uid)
                if pod is not None and pod.pod is not None:
                    found += consumers_in_pod(pod.pod, claim_name=claim.name)
            return found

    def unknown_container(self, pod_uid: str) -> None:
        """A process of this pod runs in a container its cached status does not list (restarted
        since): the pod is read again by a later `sync`."""
        with self._lock:
            entry = self._by_pod.get(pod_uid)
            if entry is not None:
                entry.stale = True

    def sync(self) -> int:
        """Look up claims not yet known or due again, then pods not yet known or stale, within
        the call budget; drop what no prepared claim needs. The number of API calls made."""
        prepared = {claim.uid: claim for claim in self._claims()}
        calls = 0
        try:
            for uid, claim in prepared.items():
                if calls >= self._max_calls:
                    break
                if self._claim_due(uid):
                    calls += 1
                    self._look_up_claim(claim)
            if not self._ask_kubelet(prepared):
                for uid, name, namespace in self._pods_due(prepared):
                    if calls >= self._max_calls or self._pods_forbidden:
                        break
                    calls += 1
                    self._look_up_pod(uid, name=name, namespace=namespace)
        except _Unanswered:
            pass  # logged; the next sync tries again
        self._prune(prepared)
        return calls

    def _ask_kubelet(self, prepared: Mapping[str, PreparedClaim]) -> bool:
        """Who uses the prepared claims, from the kubelet's socket; False (pods are read
        instead) when there is none or it does not answer."""
        if self._pod_resources is None or not self._pod_resources.available():
            self._uses = None
            return False
        try:
            uses = self._pod_resources.list_claim_users()
        except PodResourcesUnavailable as error:
            log.warning("the kubelet's pod-resources socket did not answer; tried again at "
                        "the next sync", error=str(error))  # fmt: skip
            return True  # the last answer stays; pods are not read behind the kubelet's back
        wanted = {(claim.namespace, claim.name) for claim in prepared.values()}
        with self._lock:
            self._uses = {key: found for key, found in uses.items() if key in wanted}
        return True

    def _get(self, path: str, **fields: str) -> Json | None:
        """The object at `path`, or None when there is none (404). Any other failure (the API
        unreachable, a refusal) is logged and stops this sync: `_Unanswered`."""
        try:
            return self._api.get(path)
        except KubeError as error:
            if error.status == 404:
                return None
            if error.status == 403 and "pod_uid" in fields:
                self._refused_pods(str(error))
                return None
            failure = str(error)
        except Exception as error:  # the transport's, after the client's retries
            failure = str(error)
        log.warning("cannot look up who uses the claims; tried again at the next sync",
                    path=path, error=failure, **fields)  # fmt: skip
        raise _Unanswered

    def _refused_pods(self, error: str) -> None:
        """The agent may not read pods (the chart grants no such right): not asked again."""
        self._pods_forbidden = True
        log.warning("the agent may not read pods and the kubelet's pod-resources socket is not "
                    "there: HAMi's container series name no container until it is",
                    error=error)  # fmt: skip

    def _claim_due(self, uid: str) -> bool:
        with self._lock:
            entry = self._by_claim.get(uid)
        return entry is None or (not entry.owned and self._clock() - entry.at >= REFRESH_S)

    def _look_up_claim(self, claim: PreparedClaim) -> None:
        path = api_path(CLAIMS, "namespaces", claim.namespace, "resourceclaims", claim.name)
        current = self._get(path, claim_uid=claim.uid) or {}
        meta = current.get("metadata") or {}
        reserved = (current.get("status") or {}).get("reservedFor") or []
        if meta.get("uid") != claim.uid:  # gone, or replaced: the cleanup unprepares it
            reserved = []
        pods = tuple(
            (str(r.get("name", "")), str(r.get("uid", "")))
            for r in reserved
            if r.get("resource") == "pods" and not r.get("apiGroup") and r.get("uid")
        )
        owned = any(o.get("kind") == "Pod" and o.get("controller") for o in
                    meta.get("ownerReferences") or [])  # fmt: skip
        with self._lock:
            self._by_claim[claim.uid] = _ClaimEntry(pods, owned, self._clock())

    def _pods_due(self, prepared: Mapping[str, PreparedClaim]) -> list[tuple[str, str, str]]:
        """(uid, name, namespace) of pods named by a claim and not known, or stale and not read
        for POD_REFETCH_S."""
        now, due, seen = self._clock(), [], set()
        with self._lock:
            for uid, entry in self._by_claim.items():
                claim = prepared.get(uid)
                if claim is None:
                    continue
                for name, pod_uid in entry.pods:
                    pod = self._by_pod.get(pod_uid)
                    fresh = pod is not None and not (pod.stale and now - pod.at >= POD_REFETCH_S)
                    if not fresh and pod_uid not in seen:
                        seen.add(pod_uid)
                        due.append((pod_uid, name, claim.namespace))
        return due

    def _look_up_pod(self, uid: str, *, name: str, namespace: str) -> None:
        pod = self._get(api_path("/api/v1", "namespaces", namespace, "pods", name), pod_uid=uid)
        if pod is not None and (pod.get("metadata") or {}).get("uid") != uid:
            pod = None  # replaced by another pod of that name: the claim's is gone
        with self._lock:
            self._by_pod[uid] = _PodEntry(pod, self._clock())

    def _prune(self, prepared: Mapping[str, PreparedClaim]) -> None:
        with self._lock:
            for uid in set(self._by_claim) - set(prepared):
                del self._by_claim[uid]
            named = {pod_uid for e in self._by_claim.values() for _, pod_uid in e.pods}
            for uid in set(self._by_pod) - named:
                del self._by_pod[uid]


def _kubelet_consumers(uses: Sequence[ContainerUse], entry: _ClaimEntry) -> list[Consumer]:
    """The kubelet's containers using a claim, those of the pods it is reserved for (their uid
    from `reservedFor`: the kubelet names pods, not uids)."""
    uids = dict(entry.pods)
    return [
        Consumer(namespace=use.namespace, pod=use.pod, pod_uid=uids[use.pod],
                 container=use.container, position=use.position, devices=use.devices,
                 ids_known=False)
        for use in uses
        if use.pod in uids
    ]  # fmt: skip


class HamiSeries:
    """HAMi's families from one scrape's readings (see the module's docstring)."""

    def __init__(self, names: PodNames, gpus: Cards, *, node: str) -> None:
        self._names = names
        self._gpus = cards_now(gpus)
        self._node = node

    def families(self, readings: Sequence[ClaimReading]) -> Iterator[Metric]:
        yield from self._cards([reading.claim for reading in readings])
        yield from self._containers(readings)

    def _cards(self, claims: Sequence[PreparedClaim]) -> Iterator[Metric]:
        def family(name: str, text: str, labels: list[str] = CARD_LABELS) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=labels)

        limit = family("hami_gpu_memory_limit_bytes", "memory of the card")
        core_limit = family("hami_gpu_core_limit_ratio", "SM percent of the card (100)")
        memory = family(
            "hami_gpu_memory_allocated_bytes",
            "memory of the card's prepared shares",
            ["node", "device_uuid", "device_index", "device_cores", "device_type", "zone"],
        )
        cores = family("hami_gpu_core_allocated_ratio", "SM percent of the card's prepared shares")
        shared = family("hami_gpu_shared_count", "prepared shares of the card")
        ratio = family(
            "hami_node_gpu_memory_allocated_ratio",
            "memory of the card's prepared shares over the card's memory (0-1)",
            ["node", "device_uuid", "device_index", "zone"],
        )
        for gpu in self._gpus():
            devices = [d for c in claims for d in c.devices if d.uuid == gpu.uuid]
            allocated = sum(d.memory for d in devices)
            index = str(gpu.index)
            labels = [self._node, gpu.uuid, index, device_type(gpu), ZONE]
            limit.add_metric(labels, gpu.memory)
            core_limit.add_metric(labels, 100)
            memory.add_metric([self._node, gpu.uuid, index, "100", device_type(gpu), ZONE],
                              allocated)  # fmt: skip
            cores.add_metric(labels, min(sum(d.cores for d in devices), 100))
            shared.add_metric(labels, len(devices))
            if gpu.memory > 0:
                ratio.add_metric([self._node, gpu.uuid, index, ZONE], allocated / gpu.memory)
        yield from (limit, core_limit, memory, cores, shared, ratio)

    def _containers(self, readings: Sequence[ClaimReading]) -> Iterator[Metric]:
        def family(name: str, text: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, labels=CONTAINER_LABELS)

        used = family("hami_vgpu_memory_used_bytes", "memory the container uses on the device")
        limit = family("hami_vgpu_memory_limit_bytes", "the container's memory limit on the device")
        memory = family(
            "hami_container_device_memory_bytes", "memory the container uses on the device"
        )
        util = family(
            "hami_container_device_utilization_ratio",
            "SM utilization libvgpu last measured for the container's claim, percent (0-100)",
        )
        for row in self._rows(readings):
            labels = [row.consumer.namespace, row.consumer.pod, row.consumer.container,
                      str(row.vdevice_index), row.device.uuid, ZONE]  # fmt: skip
            limit.add_metric(labels, row.device.memory)
            if row.used is not None:
                used.add_metric(labels, row.used)
                memory.add_metric(labels, row.used)
                util.add_metric(labels, row.sm_util)
        yield from (used, limit, memory, util)

    def _rows(self, readings: Sequence[ClaimReading]) -> list[_Row]:
        """A row per (container, device), its devices numbered in the order the container lists
        its claims, then in each claim's allocation order."""
        rows: list[_Row] = []
        for reading in readings:
            consumers = self._names.consumers(reading.claim)
            if len(consumers) > 1:
                self._note_unknown_containers(reading, consumers)
            for consumer in consumers:
                for index, device in enumerate(reading.claim.devices):
                    if consumer.takes(device):
                        used = self._used(reading, consumer, device, among=consumers)
                        sm = reading.usage.sm_util if reading.usage is not None else 0
                        rows.append(_Row(consumer, (consumer.position, index), device, used, sm))
        rows.sort(key=lambda r: (r.consumer.pod_uid, r.consumer.container, r.order))
        counters: dict[tuple[str, str], int] = {}
        for row in rows:
            key = (row.consumer.pod_uid, row.consumer.container)
            row.vdevice_index = counters.get(key, 0)
            counters[key] = row.vdevice_index + 1
        return rows

    def _used(
        self,
        reading: ClaimReading,
        consumer: Consumer,
        device: PreparedDevice,
        *,
        among: Sequence[Consumer],
    ) -> int | None:
        """The container's bytes on the device: the region's, when it is the claim's only user;
        else those of its own processes (by their cgroup's container id, or their pod's when it
        is the only container of its pod that uses the claim). None when the region could not
        be read, or when the container's processes cannot be told from its pod's neighbours'
        (the kubelet's socket names no container id)."""
        if reading.usage is None:
            return None
        if len(among) == 1:
            return reading.usage.used.get(device.uuid, 0)
        alone_in_pod = sum(c.pod_uid == consumer.pod_uid for c in among) == 1
        if not consumer.ids_known and not alone_in_pod:
            return None
        return sum(
            per_uuid.get(device.uuid, 0)
            for (pod_uid, cid), per_uuid in reading.by_container.items()
            if pod_uid == consumer.pod_uid
            and (cid in consumer.container_ids or not consumer.ids_known)
        )

    def _note_unknown_containers(self, reading: ClaimReading, consumers: list[Consumer]) -> None:
        """A process in a pod of the claim, in a container no user of the claim is known by (it
        restarted since its pod was read): that pod is read again."""
        known = {(c.pod_uid, cid) for c in consumers for cid in c.container_ids}
        pods = {c.pod_uid for c in consumers}
        for pod_uid, cid in reading.by_container:
            if pod_uid in pods and cid and (pod_uid, cid) not in known:
                self._names.unknown_container(pod_uid)


@dataclass
class _Row:
    consumer: Consumer
    order: tuple[int, int]
    device: PreparedDevice
    used: int | None
    sm_util: int
    vdevice_index: int = 0


def device_type(gpu: Gpu) -> str:
    """HAMi's `device_type`: the vendor, a dash, and NVML's product name."""
    return f"NVIDIA-{gpu.product_name}"
