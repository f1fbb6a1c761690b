"""`vgpu-bridge node`: `build` wires the parts (starting nothing), `run` starts them and serves
until SIGTERM; tests build the same agent and start it themselves.

Start-up order: GPUs (a mock list, a mock label on the agent's Node read once: `mock_cards.py`,
or NVML; on a node where NVML lists none the agent waits for one, healthy and idle: `no_gpu.py`),
with `--mock-driver` the stand-in driver copied under the vgpu dir (`mock_driver.py`), the
driver's files under `--driver-root` (or that copy) at the GPUs' driver version (found once;
without libcuda there the agent does not start: `driver_root.py`),
the checkpoint (recovered), the DRA socket, then the
registration socket, the HTTP server (/metrics, /healthz), then the slices (republished on every
start and checked every resync period), then the periodic cleanup of prepared claims whose
ResourceClaim is gone, every `--device-health-seconds` the cards' health (an unhealthy card's
taint published at once, see `device_health`), every second the prepared claims' host-pids
files (`hostpids.py`: the host pids libvgpu cannot see from inside a pod, so that it measures
its own container's SM use), with a driver root every 30 s that the driver's libcuda is still
there (gone after a driver upgrade: the agent stops, and its restart finds the new driver), and
every 30 s the sweep of what containers can write
(`claimdirs.py`: the trash emptied, the priority dir cleaned, each claim dir measured; again
after 1 s while a deletion stopped at its pass's budget); with
`--hami-metrics true`, every 10 s the pods and containers using each claim (`hami_metrics.py`).

Enforcer mode (`--enforce-driver gpu.nvidia.com`): no card is ours, so no NVML, no mock GPUs, no
driver root, no device-plugin look and no device health (NVIDIA's plugin has all of these); the
agent publishes one `enforcer` device in its node's pool, and its Prepare holds each NVIDIA share
of a claim to its limits (`enforcer.py`), the cards read from NVIDIA's slice (`nvidia_slices.py`),
which metrics show too (`node_cards`). Everything else (checkpoint, sockets, sweep, host pids,
/metrics, HAMi's series) runs as above.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from prometheus_client import CollectorRegistry

from vgpu_bridge.core.profiles import DriverProfile, our_profile
from vgpu_bridge.kube import KubeApi, KubeConfigError
from vgpu_bridge.logs import configure_json_logging, get_logger
from vgpu_bridge.node.cdi import CdiLayout
from vgpu_bridge.node.claimdirs import RESUME_S, SWEEP_PERIOD_S, TenantDirs
from vgpu_bridge.node.device_health import DeviceHealthWatcher, HealthSource
from vgpu_bridge.node.device_health.metrics import DeviceHealthCollector
from vgpu_bridge.node.device_health.mock_source import MockHealthFiles
from vgpu_bridge.node.device_health.nvml_source import NvmlHealthOnFirstUse
from vgpu_bridge.node.driver_root import (
    DriverStack,
    discover,
    driver_version,
    preload_nvml,
    still_installed,
)
from vgpu_bridge.node.enforcer import enforcer_device
from vgpu_bridge.node.gpus import Cards, Gpu, GpuDiscoveryError, cards_now, mock_gpus
from vgpu_bridge.node.grpc import PluginServer
from vgpu_bridge.node.hami_metrics import SYNC_PERIOD_S as HAMI_SYNC_PERIOD_S
from vgpu_bridge.node.hami_metrics import HamiSeries, PodNames
from vgpu_bridge.node.health import Health
from vgpu_bridge.node.hostpids import PERIOD_S as HOST_PIDS_PERIOD_S
from vgpu_bridge.node.hostpids import HostPidFiles
from vgpu_bridge.node.metrics import CallMetrics, MetricsServer, serve_metrics
from vgpu_bridge.node.mock_cards import node_label_gpus
from vgpu_bridge.node.mock_driver import for_mock_driver, mock_driver_dir
from vgpu_bridge.node.mock_driver import install as install_mock_driver
from vgpu_bridge.node.no_gpu import wait_for_gpus
from vgpu_bridge.node.nvidia_slices import NvidiaCards, slices_reader
from vgpu_bridge.node.pod_resources import PodResources
from vgpu_bridge.node.publisher import SlicePublisher
from vgpu_bridge.node.settings import Settings
from vgpu_bridge.node.skipped_gpus import ShareableGpus
from vgpu_bridge.node.slices import DeviceTaint
from vgpu_bridge.node.state import DeviceState, StateLocked
from vgpu_bridge.node.uninstall import NodeFiles, OwnerWatch, Uninstall

log = get_logger("vgpu_bridge.node")
Found = TypeVar("Found")
WORKERS_END_S = 15.0  # on uninstall, what the periodic work may take to end its round (a sweep's
# pass is bounded by claimdirs.MAX_REMOVAL_PASS_S)
DRIVER_CHECK_PERIOD_S = 30  # how often the driver's libcuda is looked for (a few lstat calls)


def profile_for(settings: Settings) -> DriverProfile:
    """Our profile, under the driver name this agent was given."""
    return our_profile(settings.driver_name)


def every(
    seconds: float,
    stop: threading.Event,
    what: str,
    work: Callable[[], object],
    *,
    again_soon: Callable[[], bool] = lambda: False,
    soon_s: float | Callable[[], float] = RESUME_S,
) -> None:
    """Run `work` now and then every `seconds` until `stop`; failures are logged and retried.
    After a run that left work (`again_soon()`), the next comes after `soon_s` (or what it
    answers now; never later than `seconds`) instead."""
    while True:
        try:
            work()
        except Exception:
            log.exception(f"{what} failed; will retry")
        soon = soon_s() if callable(soon_s) else soon_s
        if stop.wait(min(soon, seconds) if again_soon() else seconds):
            return


@dataclass(frozen=True)
class Agent:
    """The agent's parts, wired by `build` and not yet started; `run` starts and serves them."""

    settings: Settings
    profile: DriverProfile
    gpus: tuple[Gpu, ...]
    registry: CollectorRegistry
    state: DeviceState
    server: PluginServer
    publisher: SlicePublisher
    health: Health
    host_pids: HostPidFiles
    tenant_dirs: TenantDirs
    device_health: DeviceHealthWatcher | None  # None: --device-health false
    pod_names: PodNames | None = None  # who uses each claim; None: --hami-metrics false
    driver_stack: DriverStack | None = None  # the driver files specs carry; None: no root
    # NVIDIA's device plugin's nvidia.com/gpu on our Node, or None (NVML cards only)
    device_plugin_on_node: Callable[[], str | None] | None = None
    # the cards metrics show: `gpus`, or in enforcer mode NVIDIA's, read when asked
    cards: Cards = ()
    # the agent's DaemonSet, watched: SIGTERM after it went is an uninstall; None: no --daemonset
    owner: OwnerWatch | None = None

    def start(self) -> MetricsServer | None:
        """Checkpoint recovered, DRA then registration socket, then /metrics and /healthz."""
        self.state.start()
        self.server.start()
        return serve_metrics(
            self.settings.metrics_host_port,
            registry=self.registry,
            health=self.health,
            state=self.state,
            gpus=self.cards or self.gpus,
            node=self.settings.node_name,
            vgpu_dir=self.settings.vgpu_dir,
            host_pids=self.host_pids.found,
            tenant_usage=self.tenant_dirs.usage,
            sweep_steps=self.tenant_dirs.steps,
            publications=lambda: self.publisher.last,
            hami=self._hami_series(),
        )

    def _hami_series(self) -> HamiSeries | None:
        if self.pod_names is None:
            return None
        return HamiSeries(self.pod_names, self.cards or self.gpus, node=self.settings.node_name)

    def close(self, *, grace_s: float = 5.0) -> None:
        """Sockets removed (registration first), then the checkpoint's lock released."""
        self.server.stop(grace_s=grace_s)
        self.state.close()


def driver_paths(settings: Settings) -> tuple[Path, Path] | None:
    """The containers' driver as (its root on the host, where this process reads it): the
    stand-in driver's copy under the vgpu dir (`mock_driver.py`, the same path in both), or
    --driver-root; None without either."""
    if settings.mock_driver:
        copy = mock_driver_dir(settings.vgpu_dir)
        return copy, copy
    root, mount = settings.driver_root_path, settings.driver_root_mount_path
    return (root, mount) if root is not None and mount is not None else None


def find_driver_stack(settings: Settings, gpus: Sequence[Gpu]) -> DriverStack | None:
    """The driver files at `driver_paths` at the GPUs' driver version, found once at start
    (DriverRootError when libcuda is not there; the stand-in's copy is made by `serve` first);
    None without a driver."""
    paths = driver_paths(settings)
    if paths is None:
        return None
    return discover(root=paths[0], mount=paths[1], version=driver_version(gpus),
                    machine=os.uname().machine)  # fmt: skip


def build(
    settings: Settings,
    api: KubeApi,
    *,
    gpus: tuple[Gpu, ...],
    driver_stack: DriverStack | None = None,
) -> Agent:
    """Every part of the agent from its settings; nothing is started, nothing is written. The
    driver files are `driver_stack` when given, else found under --driver-root. In enforcer
    mode (`--enforce-driver`) `gpus` is empty: the cards are NVIDIA's, read from its slices."""
    profile = profile_for(settings)
    registry = CollectorRegistry()
    driver_stack = driver_stack or find_driver_stack(settings, gpus)
    nvidia = None
    if settings.enforcer_mode:
        nvidia = NvidiaCards(slices_reader(api, node=settings.node_name), node=settings.node_name)
    layout = CdiLayout(cdi_dir=settings.cdi_dir, vgpu_dir=settings.vgpu_dir,
                       driver=profile.driver, driver_stack=driver_stack,
                       enforcer=nvidia is not None,
                       mock_driver=bool(settings.mock_driver))  # fmt: skip
    state = DeviceState(api, node=settings.node_name, profile=profile, gpus=gpus, layout=layout,
                        checkpoint_file=settings.checkpoint_file,
                        observer=CallMetrics(registry).observe,
                        removals_per_pass=settings.removals_per_pass,
                        nvidia_cards=nvidia)  # fmt: skip
    server = PluginServer(state, driver=profile.driver, dra_socket=settings.dra_socket,
                          registration_socket=settings.registration_socket)  # fmt: skip
    fixed = [enforcer_device(settings.enforce_driver)] if nvidia is not None else []
    publisher = SlicePublisher(api, node=settings.node_name, profile=profile, gpus=gpus,
                               fixed_devices=fixed)  # fmt: skip
    cards = gpus if nvidia is None else node_cards(nvidia, state)

    def claims() -> list[str]:
        return [claim.uid for claim in state.snapshot()]

    host_pids = HostPidFiles(claims, vgpu_dir=settings.vgpu_dir)
    tenant_dirs = TenantDirs(layout, claims=claims, gpu_uuids=CardUuids(cards_now(cards)),
                             removals_per_pass=settings.removals_per_pass)  # fmt: skip
    health = Health(sockets=server.problem, publications=lambda: publisher.last,
                    max_silence_s=settings.max_publication_silence_s,
                    sweep_steps=tenant_dirs.steps)  # fmt: skip
    device_health = None  # in enforcer mode NVIDIA's plugin watches its cards' health
    if nvidia is None:
        device_health = health_watcher(settings, publisher, gpus=gpus, driver=profile.driver)
    if device_health is not None:
        registry.register(DeviceHealthCollector(lambda: device_health.taints, gpus=gpus,
                                                node=settings.node_name))  # fmt: skip
    pod_names = None
    if settings.hami_metrics:
        kubelet = PodResources(settings.pod_resources_socket)
        pod_names = PodNames(api, state.snapshot, pod_resources=kubelet)
    return Agent(settings, profile, gpus, registry, state, server, publisher, health, host_pids,
                 tenant_dirs, device_health, pod_names, driver_stack, cards=cards,
                 owner=owner_watch(settings, api))  # fmt: skip


def owner_watch(settings: Settings, api: KubeApi) -> OwnerWatch | None:
    """The agent's own DaemonSet, when the chart names it (`uninstall.py`)."""
    if not settings.daemonset:
        return None
    return OwnerWatch(api, namespace=settings.daemonset_namespace, name=settings.daemonset)


def node_cards(nvidia: NvidiaCards, state: DeviceState) -> Callable[[], tuple[Gpu, ...]]:
    """Enforcer mode's cards, for metrics and the priority dir: those NVIDIA's slice publishes
    (read again when older than its max age), and the card of every prepared share besides,
    so that a card whose slice cannot be read now keeps its series and its priority board."""

    def now() -> tuple[Gpu, ...]:
        published = {card.uuid: card.gpu for card in nvidia.cards()}
        for claim in state.snapshot():
            for device in claim.devices:
                if device.uuid not in published:
                    published[device.uuid] = Gpu(index=len(published), uuid=device.uuid,
                                                 product_name="", memory=0)  # fmt: skip
        return tuple(published.values())

    return now


class CardUuids(Collection[str]):
    """The uuids of the node's cards as they are now (a priority board of any other is removed)."""

    def __init__(self, cards: Callable[[], Sequence[Gpu]]) -> None:
        self._cards = cards

    def _now(self) -> set[str]:
        return {gpu.uuid for gpu in self._cards()}

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._now()

    def __iter__(self) -> Iterator[str]:
        return iter(self._now())

    def __len__(self) -> int:
        return len(self._now())


def health_source(settings: Settings, gpus: Sequence[Gpu]) -> HealthSource:
    """Mock GPUs' health files, or NVML's events for real cards."""
    if settings.mock_mode:
        return MockHealthFiles(settings.mock_health_dir, gpus)
    return NvmlHealthOnFirstUse(gpus)


def health_watcher(
    settings: Settings, publisher: SlicePublisher, *, gpus: Sequence[Gpu], driver: str
) -> DeviceHealthWatcher | None:
    """The cards' health, each change of a taint published at once; None when switched off."""
    if not settings.device_health:
        return None

    def publish(taints: Mapping[str, DeviceTaint]) -> None:
        publisher.set_taints(taints)
        publisher.sync()

    return DeviceHealthWatcher(health_source(settings, gpus), gpus=gpus, driver=driver,
                               effect=settings.device_taint_effect, on_change=publish)  # fmt: skip


def workers(agent: Agent, stop: threading.Event) -> list[threading.Thread]:
    """The periodic work: slices, cleanup of gone claims, host pids, container-writable dirs."""
    settings = agent.settings
    periodic = [
        ("slices", settings.resync_seconds, "publishing slices", agent.publisher.sync),
        ("cleanup", settings.cleanup_seconds, "cleaning up", agent.state.cleanup_stale),
        ("host-pids", HOST_PIDS_PERIOD_S, "writing host pids", agent.host_pids.sync),
        ("tenant-dirs", SWEEP_PERIOD_S, "sweeping container-writable dirs",
         agent.tenant_dirs.sweep),
    ]  # fmt: skip
    if agent.pod_names is not None:
        periodic.append(("hami-names", HAMI_SYNC_PERIOD_S, "looking up the claims' pods",
                         agent.pod_names.sync))  # fmt: skip
    if agent.device_health is not None:
        periodic.append(("device-health", settings.device_health_seconds,
                         "checking the cards' health", agent.device_health.check))  # fmt: skip
    if agent.driver_stack is not None:
        periodic.append(("driver-files", DRIVER_CHECK_PERIOD_S, "checking the driver's files",
                         driver_watch(agent, stop)))  # fmt: skip
    if agent.device_plugin_on_node is not None:
        periodic.append(("device-plugin", settings.gpu_wait_seconds, "looking for the plugin",
                         device_plugin_watch(agent)))  # fmt: skip
    soon: dict[str, dict[str, object]] = {
        "tenant-dirs": {"again_soon": lambda: agent.tenant_dirs.unfinished},
        "slices": {"again_soon": agent.publisher.failing, "soon_s": agent.publisher.retry_in_s},
    }
    return [
        threading.Thread(
            target=every, args=(seconds, stop, what, work), kwargs=soon.get(name, {}), name=name,
            daemon=True,
        )
        for name, seconds, what, work in periodic
    ]  # fmt: skip


def driver_watch(agent: Agent, stop: threading.Event) -> Callable[[], None]:
    """A check that sets `stop` once the driver's libcuda is gone (a driver upgrade or removal):
    the agent's restart, the DaemonSet's, then finds the new driver (or waits for it)."""
    stack, paths = agent.driver_stack, driver_paths(agent.settings)
    mount = paths[1] if paths else None

    def check() -> None:
        if stack is None or mount is None or still_installed(stack, mount):
            return
        log.error("the driver's libcuda is gone (driver upgraded or removed); stopping so that "
                  "the restarted agent finds the new one", driver_root=str(stack.root),
                  driver_version=stack.version)  # fmt: skip
        stop.set()

    return check


def device_plugin_watch(agent: Agent) -> Callable[[], None]:
    """A check that withdraws our devices (the next publication has none) while NVIDIA's device
    plugin is registered on our Node, and publishes them again once it is gone: two bookkeepers
    of one card would both give it away. The agent keeps serving, so the kubelet can still
    unprepare the claims it prepared (their pods could not finish terminating otherwise)."""
    look = agent.device_plugin_on_node
    withdrawn = False

    def check() -> None:
        nonlocal withdrawn
        try:
            plugin = None if look is None else look()
        except GpuDiscoveryError:  # the Node unread now: keep what is published
            return
        if (plugin is not None) == withdrawn:
            return
        if plugin is not None:
            log.error("NVIDIA's device plugin registered on this node; our devices withdrawn",
                      resource="nvidia.com/gpu", capacity=plugin)  # fmt: skip
        else:
            log.warning("NVIDIA's device plugin is gone from this node; our devices published")
        agent.publisher.set_gpus(() if plugin is not None else agent.gpus)
        agent.publisher.sync()
        withdrawn = plugin is not None

    return check


def stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM and SIGINT set `stop` (only the main thread can install handlers)."""

    def shut_down(signum: int, _frame: object) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, shut_down)
        signal.signal(signal.SIGINT, shut_down)


def run(agent: Agent, *, stop: threading.Event) -> int:
    """Start `agent`, serve until `stop` (set by SIGTERM/SIGINT on the main thread), shut down."""
    metrics = agent.start()
    threads = workers(agent, stop)
    if agent.owner is not None:
        threads.append(threading.Thread(target=agent.owner.run, args=(stop,), daemon=True,
                                        name="owner-watch"))  # fmt: skip
    for worker in threads:
        worker.start()

    stop_on_signals(stop)
    stack = agent.driver_stack
    log.info("node agent started", node=agent.settings.node_name, driver=agent.profile.driver,
             enforces=agent.settings.enforce_driver or None,
             gpus=len(agent.gpus), mock=agent.settings.mock_mode,
             driver_root=str(stack.root) if stack else None,
             driver_version=stack.version if stack else None,
             driver_libraries=[lib.path for lib in stack.libraries] if stack else [])  # fmt: skip
    for reason in stack.passed_over if stack else ():
        log.warning("a driver file is not given to containers", reason=reason)
    stop.wait()
    if agent.owner is not None and agent.owner.uninstalling():
        uninstall_from_node(agent, threads)
    agent.close()
    if metrics is not None:
        metrics.shutdown()
    log.info("node agent stopped")
    return 0


def uninstall_from_node(agent: Agent, threads: Sequence[threading.Thread]) -> None:
    """SIGTERM of an uninstall (`uninstall.py`). The periodic work ends its round during the
    drain: none writes into a dir being removed after."""
    assert agent.owner is not None
    settings = agent.settings

    def workers_done() -> None:
        deadline = time.monotonic() + WORKERS_END_S
        for thread in threads:
            if thread.name != "owner-watch":
                thread.join(timeout=max(deadline - time.monotonic(), 0))

    Uninstall(
        state=agent.state,
        workers_done=workers_done,
        stop_serving=agent.server.stop,
        files=NodeFiles(agent.state.layout, settings.checkpoint_file),
        drain_seconds=settings.uninstall_drain_seconds,
        successor=agent.owner.successor,
    ).run()


def serve(settings: Settings, *, stop: threading.Event | None = None) -> int:
    """Mock GPUs at once; NVML's once it lists a GPU (`no_gpu`: the agent waits, healthy and
    idle, on a node without one); then the agent, until `stop` or SIGTERM."""
    stop = stop or threading.Event()
    gpus = mock_gpus(settings.mock_gpus) if settings.mock_gpus else None  # logs nothing
    configure_json_logging(level=settings.log_level)
    if settings.enforcer_mode:  # no card of ours: NVIDIA's plugin publishes them
        return run(build(settings, KubeApi.connect(settings.kubeconfig), gpus=()), stop=stop)
    api = None
    if settings.mock_gpus_node_label:  # the Node's label names them (mock_cards.py)
        api = KubeApi.connect(settings.kubeconfig)
        gpus = node_label_gpus(api, node=settings.node_name, label=settings.mock_gpus_node_label)
        log.info("mock GPUs from the node's label", label=settings.mock_gpus_node_label,
                 gpus=len(gpus), product=gpus[0].product_name, memory=gpus[0].memory)  # fmt: skip
    shareable = None
    if gpus is None:
        stop_on_signals(stop)
        shareable = ShareableGpus.on_node(settings.node_name, driver=settings.driver_name,
                                          kubeconfig=settings.kubeconfig)  # fmt: skip
        wait = functools.partial(wait_for_gpus, stop=stop, recheck_s=settings.gpu_wait_seconds,
                                 host_port=settings.metrics_host_port,
                                 collectors=(shareable.gauge,))  # fmt: skip
        gpus = wait(nvml_finder(settings, shareable))
        if gpus is not None:  # and NVIDIA's device plugin is not on this node (skipped_gpus.py)
            gpus = wait(shareable.unless_device_plugin(gpus))
        if gpus is None:
            log.info("node agent stopped while waiting for a GPU")
            return 0
    if settings.mock_driver_path is not None:
        gpus = mock_driver_gpus(settings.mock_driver_path, settings.vgpu_dir, gpus)
    driver_stack = find_driver_stack(settings, gpus)  # before the API: a node-local reason
    api = api or KubeApi.connect(settings.kubeconfig)
    agent = build(settings, api, gpus=gpus, driver_stack=driver_stack)
    if shareable is not None:  # the skipped cards stay on /metrics; the plugin is looked for
        agent.registry.register(shareable.gauge)
        agent = dataclasses.replace(agent, device_plugin_on_node=shareable.device_plugin_on_node)
    return run(agent, stop=stop)


def mock_driver_gpus(source: Path, vgpu_dir: Path, gpus: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
    """The stand-in driver copied to the host (`mock_driver.py`), and the mock cards at its
    driver version."""
    copy = install_mock_driver(source, vgpu_dir)
    log.info("mock driver in place", source=str(source), root=str(copy.root),
             driver_version=copy.version, written=list(copy.written),
             unchanged=len(copy.unchanged))  # fmt: skip
    return for_mock_driver(gpus, copy.version)


def nvml_finder(settings: Settings, read: Callable[[], Found]) -> Callable[[], Found]:
    """`read` (what reads NVML: `ShareableGpus`). With a driver root, NVML is the root's
    libnvidia-ml (the agent's image has none), loaded before each look until it loads: GPU
    Operator's driver container fills the root after the agent starts. Until then the agent
    waits, saying why (DriverRootError). Whatever reads NVML at start goes through here."""
    mount = settings.driver_root_mount_path
    if mount is None:
        return read
    loaded: list[Path] = []

    def find() -> Found:
        if not loaded:
            loaded.append(preload_nvml(mount, machine=os.uname().machine))
            log.info("NVML from the driver root", library=str(loaded[0]))
        return read()

    return find


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Exit 2 for bad settings, 1 when the agent cannot start (with the reason on stderr)."""
    settings = Settings.from_namespace_or_report(args, environ)
    if settings is None:
        return 2
    try:
        return serve(settings)
    except (GpuDiscoveryError, StateLocked, KubeConfigError, OSError) as error:
        print(f"{Settings.prog}: cannot start: {error}", file=sys.stderr)
        return 1
