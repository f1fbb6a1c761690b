"""`vgpu-bridge node`: wire the parts together and serve until SIGTERM.

Start-up order: GPUs (mock file or NVML), the checkpoint (recovered), the DRA socket, then the
registration socket, the HTTP server (/metrics, /healthz), then the slices (republished on every
start and checked every resync period), then the periodic cleanup of prepared claims whose
ResourceClaim is gone, every second the prepared claims' host-pids files (`hostpids.py`: the
host pids libvgpu cannot see from inside a pod, so that it measures its own container's SM use),
and every 30 s the sweep of what containers can write (`claimdirs.py`: the trash emptied, the
priority dir cleaned, each claim dir measured).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Mapping

import structlog
from prometheus_client import CollectorRegistry

from vgpu_bridge.core.profiles import DriverProfile, our_profile
from vgpu_bridge.kube import KubeApi, KubeConfigError
from vgpu_bridge.logs import configure_json_logging
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.claimdirs import SWEEP_PERIOD_S, TenantDirs
from vgpu_bridge.node.grpc import PluginServer
from vgpu_bridge.node.health import Health
from vgpu_bridge.node.hostpids import PERIOD_S as HOST_PIDS_PERIOD_S
from vgpu_bridge.node.hostpids import HostPidFiles
from vgpu_bridge.node.inventory import Gpu, InventoryError, mock_gpus, nvml_gpus
from vgpu_bridge.node.metrics import CallMetrics, serve_metrics
from vgpu_bridge.node.publisher import SlicePublisher
from vgpu_bridge.node.settings import Settings
from vgpu_bridge.node.state import DeviceState, StateLocked

log = structlog.get_logger("vgpu_bridge.node")


def profile_for(settings: Settings) -> DriverProfile:
    """Our profile, under the driver name this agent was given."""
    return our_profile(settings.driver_name)


def discover(settings: Settings) -> tuple[Gpu, ...]:
    return mock_gpus(settings.mock_gpus) if settings.mock_gpus else nvml_gpus()


def every(seconds: float, stop: threading.Event, what: str, work: Callable[[], object]) -> None:
    """Run `work` now and then every `seconds` until `stop`; failures are logged and retried."""
    while True:
        try:
            work()
        except Exception:
            log.exception(f"{what} failed; will retry")
        if stop.wait(seconds):
            return


def serve(settings: Settings, *, stop: threading.Event | None = None) -> int:
    gpus = discover(settings)
    configure_json_logging()
    stop = stop or threading.Event()
    profile = profile_for(settings)
    api = KubeApi.connect(settings.kubeconfig)
    registry = CollectorRegistry()
    calls = CallMetrics(registry)
    layout = CdiLayout(cdi_dir=settings.cdi_dir, vgpu_dir=settings.vgpu_dir, driver=profile.driver)
    state = DeviceState(
        api,
        node=settings.node_name,
        profile=profile,
        gpus=gpus,
        layout=layout,
        checkpoint_file=settings.checkpoint_file,
        observer=calls.observe,
    )
    state.start()
    server = PluginServer(
        state,
        driver=profile.driver,
        dra_socket=settings.dra_socket,
        registration_socket=settings.registration_socket,
    )
    server.start()
    publisher = SlicePublisher(api, node=settings.node_name, profile=profile, gpus=gpus)
    health = Health(
        sockets=server.problem,
        publications=lambda: publisher.last,
        max_silence_s=settings.max_publication_silence_s,
    )
    host_pids = HostPidFiles(
        lambda: [claim.uid for claim in state.snapshot()], vgpu_dir=settings.vgpu_dir
    )
    tenant_dirs = TenantDirs(
        layout,
        claims=lambda: [claim.uid for claim in state.snapshot()],
        gpu_uuids={gpu.uuid for gpu in gpus},
    )
    metrics = serve_metrics(
        settings.metrics_host_port,
        registry=registry,
        health=health,
        state=state,
        gpus=gpus,
        node=settings.node_name,
        vgpu_dir=settings.vgpu_dir,
        host_pids=host_pids.found,
        tenant_usage=tenant_dirs.usage,
    )
    workers = [
        threading.Thread(
            target=every,
            args=(settings.resync_seconds, stop, "publishing slices", publisher.sync),
            name="slices",
            daemon=True,
        ),
        threading.Thread(
            target=every,
            args=(settings.cleanup_seconds, stop, "cleaning up", state.cleanup_stale),
            name="cleanup",
            daemon=True,
        ),
        threading.Thread(
            target=every,
            args=(HOST_PIDS_PERIOD_S, stop, "writing host pids", host_pids.sync),
            name="host-pids",
            daemon=True,
        ),
        threading.Thread(
            target=every,
            args=(SWEEP_PERIOD_S, stop, "sweeping container-writable dirs", tenant_dirs.sweep),
            name="tenant-dirs",
            daemon=True,
        ),
    ]
    for worker in workers:
        worker.start()

    def shut_down(signum: int, _frame: object) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, shut_down)
        signal.signal(signal.SIGINT, shut_down)
    log.info("node agent started", node=settings.node_name, driver=profile.driver,
             gpus=len(gpus), mock=settings.mock_gpus is not None)  # fmt: skip
    stop.wait()
    server.stop()
    state.close()
    if metrics is not None:
        metrics.shutdown()
    log.info("node agent stopped")
    return 0


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Exit 2 for bad settings, 1 when the agent cannot start (with the reason on stderr)."""
    settings = Settings.from_namespace_or_report(args, environ)
    if settings is None:
        return 2
    try:
        return serve(settings)
    except (InventoryError, StateLocked, KubeConfigError, OSError) as error:
        print(f"{Settings.prog}: cannot start: {error}", file=sys.stderr)
        return 1
