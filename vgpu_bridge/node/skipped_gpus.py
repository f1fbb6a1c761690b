"""What the agent does not publish, and why, said where an operator looks.

Two cases keep cards out of the node's ResourceSlices:
- a card NVML reports in MIG mode (`gpus.MIG_ENABLED`; or `MIG_MODE_UNKNOWN` when NVML cannot
  say): it runs CUDA only in its MIG instances, so a share of the whole card would fail every
  workload. The others are published under their own NVML index.
- NVIDIA's device plugin registered on this node (the Node's `status.capacity["nvidia.com/gpu"]`
  above 0; only a kubelet device plugin puts it there: a DeviceClass's `extendedResourceName` is
  served by the scheduler only where the Node does not have the resource, docs/mig.md): it hands
  out the same cards as whole GPUs, and two bookkeepers of one card would both give it away. The
  agent publishes nothing and looks again every `--gpu-wait-seconds`; this node's slices of our
  driver left by an earlier run are deleted (the scheduler would keep allocating from them). A
  running agent looks as often (`device_plugin_on_node`, app.py): while the plugin is there it
  publishes no device, and it keeps serving the kubelet (claims it prepared are unprepared).

Each is said three ways: a log line, a Warning Event `GpuSkipped` on the Node (one per card and
reason per agent start, however often the agent looks again), and the gauge
`vgpu_bridge_agent_gpus_skipped{gpu,reason}` (1 per card skipped now; `gpu="*"` for the device
plugin). `ShareableGpus` gives the agent two looks to wait on in turn (`no_gpu.wait_for_gpus`):
NVML's shareable cards, then those cards once the Node shows no device plugin; each raises
`NoShareableGpu` saying why there is nothing to publish yet.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vgpu_bridge.core.quantity import QuantityError, parse_quantity
from vgpu_bridge.kube import KubeApi, KubeConfigError, api_path
from vgpu_bridge.logs import get_logger
from vgpu_bridge.node.gpus import Gpu, GpuDiscoveryError, Inventory, nvml_inventory
from vgpu_bridge.node.publisher import SLICES, node_slices

log = get_logger("vgpu_bridge.node.skipped_gpus")

DEVICE_PLUGIN_PRESENT = "device-plugin-present"
DEVICE_PLUGIN_RESOURCE = "nvidia.com/gpu"
EVERY_CARD = "*"
EVENT_REASON = "GpuSkipped"
EVENTS_NAMESPACE = "default"  # where Events about cluster-scoped objects (Nodes) are kept
MAX_NOTE = 1024  # events.k8s.io/v1 refuses a longer note

_NOTES = {
    "mig-enabled": "the card is in MIG mode: only its MIG instances run CUDA, so it is not shared",
    "mig-mode-unknown": "NVML could not tell whether the card is in MIG mode, so it is not shared",
    DEVICE_PLUGIN_PRESENT: (
        "NVIDIA's device plugin registered nvidia.com/gpu on this node: nothing is published "
        "here while it runs (two bookkeepers of one card would both give it away); turn it off "
        "on this node (docs/gpu-operator.md) or keep the agent off it"
    ),
}


class NoShareableGpu(GpuDiscoveryError):
    """NVML lists cards, but none may be published now (every one skipped, or the device plugin
    owns them); the agent waits and looks again, as on a node without GPUs."""


@dataclass(frozen=True, slots=True)
class Skip:
    """A card (its uuid, or `EVERY_CARD`) kept out of the slices, and why."""

    gpu: str
    reason: str

    @property
    def note(self) -> str:
        what = "every card" if self.gpu == EVERY_CARD else self.gpu
        why = _NOTES.get(self.reason, self.reason)
        return f"{what} not published ({self.reason}): {why}"[:MAX_NOTE]


def skips_of(inventory: Inventory) -> list[Skip]:
    return [Skip(card.uuid, card.reason) for card in inventory.skipped]


def device_plugin_gpus(node: Any) -> str | None:
    """The Node's `status.capacity["nvidia.com/gpu"]` when above 0 (NVIDIA's device plugin is
    registered there), else None. A value that is no quantity counts as present: a Node's status
    is written by its kubelet, and a doubt must not put two bookkeepers on one card."""
    status = node.get("status") if isinstance(node, dict) else None
    capacity = status.get("capacity") if isinstance(status, dict) else None
    value = capacity.get(DEVICE_PLUGIN_RESOURCE) if isinstance(capacity, dict) else None
    if value is None:
        return None
    try:
        return None if parse_quantity(value) <= Decimal(0) else str(value)
    except QuantityError:
        return str(value)[:64]


class SkippedGauge(Collector):
    """`vgpu_bridge_agent_gpus_skipped{gpu,reason}`: 1 for each card skipped at the last look."""

    def __init__(self) -> None:
        self._skips: tuple[Skip, ...] = ()
        self._lock = threading.Lock()

    def set(self, skips: Iterable[Skip]) -> None:
        with self._lock:
            self._skips = tuple(dict.fromkeys(skips))

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily(
            "vgpu_bridge_agent_gpus_skipped",
            '1 for each card the agent does not publish, by reason (gpu="*": every card)',
            labels=["gpu", "reason"],
        )
        with self._lock:
            for skip in self._skips:
                gauge.add_metric([skip.gpu, skip.reason], 1)
        yield gauge


@dataclass
class NodeEvents:
    """Warning Events on this agent's Node, each skip at most once per agent start; an Event
    that cannot be posted is logged and tried again at the next look."""

    api: KubeApi
    node: str
    controller: str  # reportingController: the driver's name
    wall: Callable[[], float] = field(default=lambda: datetime.now(UTC).timestamp())
    _posted: set[Skip] = field(default_factory=set)

    def warn(self, skip: Skip) -> None:
        if skip in self._posted:
            return
        path = api_path("/apis/events.k8s.io/v1", "namespaces", EVENTS_NAMESPACE, "events")
        try:
            self.api.create(path, self.body(skip))
        except Exception as error:  # KubeError, or the API unreachable after the retries
            log.warning("cannot post the skipped card's Event", gpu=skip.gpu, reason=skip.reason,
                        error=str(error))  # fmt: skip
            return
        self._posted.add(skip)

    def body(self, skip: Skip) -> dict[str, Any]:
        """The Event; it regards the Node with its name as uid, as the kubelet's own Node Events
        do and as `kubectl describe node` looks them up."""
        stamp = datetime.fromtimestamp(self.wall(), UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {
                "name": f"{self.node[:236]}.{secrets.token_hex(8)}",
                "namespace": EVENTS_NAMESPACE,
            },
            "eventTime": stamp,
            "reportingController": self.controller,
            "reportingInstance": self.node[:128],
            "action": "Publish",
            "reason": EVENT_REASON,
            "type": "Warning",
            "regarding": {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": self.node},
            "note": skip.note,
        }


@dataclass
class ShareableGpus:
    """The cards to publish, found in two steps the agent waits on in turn: calling it lists
    NVML's shareable cards (no API call: a node without GPUs waits without one); then
    `unless_device_plugin(gpus)` holds them back while the Node shows NVIDIA's device plugin.
    Every look reports what is skipped (log and Event once per start, the gauge each time)."""

    inventory: Callable[[], Inventory]
    api: KubeApi
    node: str
    events: NodeEvents
    gauge: SkippedGauge = field(default_factory=SkippedGauge)
    _cards: list[Skip] = field(default_factory=list)  # the cards skipped at the last NVML look
    _logged: set[Skip] = field(default_factory=set)

    @classmethod
    def on_node(cls, node: str, *, driver: str, kubeconfig: str | None) -> ShareableGpus:
        """NVML's cards on `node`, for the agent of `driver`; the API is connected at the first
        call that needs it."""
        api = KubeApi.connect_on_first_use(kubeconfig)
        events = NodeEvents(api, node, controller=driver)
        return cls(nvml_inventory, api=api, node=node, events=events)

    def __call__(self) -> tuple[Gpu, ...]:
        """NVML's shareable cards; NoShareableGpu when it lists cards but every one is skipped."""
        inventory = self.inventory()
        self._cards = skips_of(inventory)
        self._report(self._cards)
        if not inventory.gpus and self._cards:
            raise NoShareableGpu("every card on this node is skipped: " + _listed(self._cards))
        return inventory.gpus

    def unless_device_plugin(self, gpus: tuple[Gpu, ...]) -> Callable[[], tuple[Gpu, ...]]:
        """A look that answers `gpus`, or raises NoShareableGpu while the Node shows NVIDIA's
        device plugin (or cannot be read)."""

        def look() -> tuple[Gpu, ...]:
            try:
                plugin = self.device_plugin_on_node()
            except NoShareableGpu:
                self._report(self._cards)
                raise
            if plugin is not None:
                self.withdraw_slices()
                raise NoShareableGpu(
                    f"NVIDIA's device plugin registered {DEVICE_PLUGIN_RESOURCE}={plugin} on "
                    f"Node {self.node}: nothing is published here"
                )
            return gpus

        return look

    def device_plugin_on_node(self) -> str | None:
        """NVIDIA's device plugin's `nvidia.com/gpu` capacity on our Node, reported (log, Event,
        gauge) when there is one, else None; NoShareableGpu when the Node cannot be read now (a
        running agent then keeps what it publishes: an API outage proves nothing either way)."""
        plugin = self._device_plugin_gpus()
        self._report([*self._cards, *([Skip(EVERY_CARD, DEVICE_PLUGIN_PRESENT)] if plugin else [])])
        return plugin

    def withdraw_slices(self) -> int:
        """Delete this node's ResourceSlices of our driver (what an earlier run published);
        how many. Failures are left to the next look."""
        deleted = 0
        try:
            for item in node_slices(self.api, node=self.node, driver=self.events.controller):
                self.api.delete(api_path(SLICES, item["metadata"]["name"]))
                deleted += 1
        except Exception as error:  # KubeError, or the API unreachable after the retries
            log.warning("could not withdraw this node's slices", error=str(error))
        if deleted:
            log.warning("withdrew this node's slices: NVIDIA's device plugin runs here",
                        deleted=deleted)  # fmt: skip
        return deleted

    def _device_plugin_gpus(self) -> str | None:
        """`device_plugin_gpus` of our Node; failing to read it is a reason to wait (publishing
        needs the Node anyway, and an unread capacity must not let a second bookkeeper in). A
        kubeconfig that cannot be read is not: KubeConfigError stops the start (exit 1)."""
        try:
            node = self.api.get(api_path("/api/v1", "nodes", self.node))
        except KubeConfigError:
            raise
        except Exception as error:  # KubeError, or the API unreachable after the retries
            raise NoShareableGpu(
                f"cannot read Node {self.node} to check for NVIDIA's device plugin: {error}"
            ) from None
        return device_plugin_gpus(node)

    def _report(self, skips: list[Skip]) -> None:
        self.gauge.set(skips)
        for skip in skips:
            if skip not in self._logged:
                log.warning("card not published", gpu=skip.gpu, reason=skip.reason,
                            note=skip.note)  # fmt: skip
                self._logged.add(skip)
            self.events.warn(skip)


def _listed(skips: Iterable[Skip]) -> str:
    return ", ".join(f"{skip.gpu} ({skip.reason})" for skip in skips)
