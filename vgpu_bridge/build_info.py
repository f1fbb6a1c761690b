"""The series every binary's `/metrics` serves besides its own: `vgpu_bridge_build_info` (the
installed version, always 1) and prometheus_client's process (`process_*`: CPU, memory, open
files, start time) and platform (`python_info`) collectors. Shared by the webhook and the agent.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vgpu_bridge.version import package_version


class BuildInfoCollector(Collector):
    """`vgpu_bridge_build_info{version}` 1, for joins (`* on (instance) group_left(version)`)
    and for seeing which replicas run which version during a rollout."""

    def __init__(self, version: str | None = None) -> None:
        self._version = version or package_version()

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "vgpu_bridge_build_info",
            "the running vgpu-bridge's version (always 1)",
            labels=["version"],
        )
        info.add_metric([self._version], 1)
        yield info


def register_standard(registry: CollectorRegistry) -> None:
    """Build info, process and platform collectors on `registry`."""
    registry.register(BuildInfoCollector())
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
