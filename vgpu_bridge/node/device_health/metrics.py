"""`vgpu_bridge_device_healthy{node, device, uuid, reason}`: 1 for a healthy card, 0 for one the
agent taints (`reason` its taint's value, empty when healthy)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from vgpu_bridge.node.gpus import Gpu
from vgpu_bridge.node.slices import DeviceTaint


class DeviceHealthCollector(Collector):
    def __init__(
        self, taints: Callable[[], Mapping[str, DeviceTaint]], *, gpus: Sequence[Gpu], node: str
    ) -> None:
        self._taints = taints
        self._gpus = tuple(gpus)
        self._node = node

    def collect(self) -> Iterator[GaugeMetricFamily]:
        healthy = GaugeMetricFamily(
            "vgpu_bridge_device_healthy",
            "1 when the card is healthy, 0 when the agent taints it (reason: the taint's value)",
            labels=["node", "device", "uuid", "reason"],
        )
        taints = self._taints()
        for gpu in self._gpus:
            taint = taints.get(gpu.uuid)
            reason = "" if taint is None else taint.value
            healthy.add_metric([self._node, gpu.device_name, gpu.uuid, reason], float(not taint))
        yield healthy
