"""A node where NVML finds no GPU: the agent waits there instead of crash-looping.

The DaemonSet runs only on nodes labelled as GPU nodes by default, but labels can be wrong, a
pool can be mixed, and the GPU operator often installs the driver after DaemonSets start. Exiting
would crash-loop the pod and fire `VgpuBridgeAgentDown`; publishing would offer the scheduler
nothing. So, until NVML lists at least one GPU it may publish (not a card in MIG mode, nor any
card while NVIDIA's device plugin is registered on the node: `skipped_gpus.py`), the agent:

- logs once why it waits (NVML unavailable, no GPU listed, or none to publish), and once when it
  stops waiting;
- registers no kubelet plugin and publishes no ResourceSlice (nothing can be allocated here);
- answers `/healthz` 200 with `{"status": "ok", "waiting": <why>}` and serves `/metrics` with
  `vgpu_bridge_agent_waiting_for_gpus 1` and `vgpu_bridge_agent_healthy 1`, so no alert fires,
  and whatever collectors the caller adds (the skipped cards' gauge);
- looks again every `--gpu-wait-seconds` (60 s by default) and starts as usual once GPUs appear.

Mock GPUs never wait: a bad mock list is a configuration error and the agent exits 1.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from vgpu_bridge.build_info import register_standard
from vgpu_bridge.logs import get_logger
from vgpu_bridge.node.gpus import Gpu, GpuDiscoveryError
from vgpu_bridge.node.health import with_healthz
from vgpu_bridge.node.metrics import MetricsServer

log = get_logger("vgpu_bridge.node.no_gpu")


def why_no_gpus(find: Callable[[], tuple[Gpu, ...]]) -> tuple[tuple[Gpu, ...], str | None]:
    """The GPUs `find` lists, and None; or nothing and why there is nothing to serve."""
    try:
        gpus = find()
    except GpuDiscoveryError as error:
        return (), str(error)
    return (gpus, None) if gpus else ((), "NVML lists no GPU on this node")


class _WaitingCollector(Collector):
    """Served only while the agent waits: waiting, and healthy."""

    def collect(self) -> Iterator[Metric]:
        waiting = GaugeMetricFamily(
            "vgpu_bridge_agent_waiting_for_gpus",
            "1 while the agent waits for a GPU it may publish (nothing published or registered)",
        )
        waiting.add_metric([], 1)
        healthy = GaugeMetricFamily(
            "vgpu_bridge_agent_healthy", "1 when /healthz answers 200, 0 when it answers 503"
        )
        healthy.add_metric([], 1)
        yield from (waiting, healthy)


def wait_for_gpus(
    find: Callable[[], tuple[Gpu, ...]],
    *,
    stop: threading.Event,
    recheck_s: float,
    host_port: tuple[str, int] | None,
    collectors: Sequence[Collector] = (),
) -> tuple[Gpu, ...] | None:
    """The GPUs `find` lists, at once or after waiting for them; None when `stop` is set first.
    While waiting, `/healthz` and `/metrics` are served on `host_port` (freed before returning,
    so the agent can serve there next), with `collectors` beside the waiting gauges."""
    gpus, reason = why_no_gpus(find)
    if reason is None:
        return gpus
    log.warning("no GPU on this node: waiting for one; nothing is published or registered",
                reason=reason, recheck_seconds=recheck_s)  # fmt: skip
    server = None
    if host_port is not None:
        registry = CollectorRegistry()
        register_standard(registry)
        registry.register(_WaitingCollector())
        for collector in collectors:
            registry.register(collector)
        server = MetricsServer(host_port)
        app = with_healthz(make_wsgi_app(registry), None, details=lambda: {"waiting": reason or ""})
        server.set_app(app)
        threading.Thread(target=server.serve_forever, name="metrics-waiting", daemon=True).start()
    try:
        while not stop.wait(recheck_s):
            gpus, reason = why_no_gpus(find)
            if reason is None:
                log.info("GPUs found: starting", gpus=len(gpus))
                return gpus
        return None
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
