"""`vgpu-bridge webhook`: wire the parts together and serve until SIGTERM."""

from __future__ import annotations

import argparse
import gc
import signal
import socket
import sys
import threading
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from vgpu_bridge import logs
from vgpu_bridge.adapters import default_registry
from vgpu_bridge.core.dialects import hami
from vgpu_bridge.kube import KubeApi, KubeConfigError, KubeError
from vgpu_bridge.logs import get_logger
from vgpu_bridge.webhook.admission import Admitter
from vgpu_bridge.webhook.claim_bookings import ClaimBookings
from vgpu_bridge.webhook.inventory import InventoryCache
from vgpu_bridge.webhook.legacy import legacy_hami_warnings
from vgpu_bridge.webhook.metrics import WebhookMetrics
from vgpu_bridge.webhook.ownership import Owner
from vgpu_bridge.webhook.pending_pods import PendingWholeCards
from vgpu_bridge.webhook.prevalidate import Prevalidator
from vgpu_bridge.webhook.quotas import QuotaCache, QuotaGate
from vgpu_bridge.webhook.restore import TemplateRestorer
from vgpu_bridge.webhook.server import ProbeServer, TLSFiles, WebhookServer, watch_tls
from vgpu_bridge.webhook.settings import Settings
from vgpu_bridge.webhook.templates import Sweeper, TemplateStore

if TYPE_CHECKING:
    from vgpu_bridge.webhook.cert_keeper import CertificateKeeper
    from vgpu_bridge.webhook.events import EventRecorder

log = get_logger("vgpu_bridge.webhook")


def build(settings: Settings, api: KubeApi) -> tuple[Admitter, InventoryCache, Sweeper]:
    profile = settings.driver_profile()
    config = settings.translator_config()
    inventory = InventoryCache(api, driver=profile.driver, memory_capacity=profile.memory_capacity)
    metrics = WebhookMetrics()
    metrics.unreadable_slices.set_function(lambda: len(inventory.unreadable()))
    hami_names = hami.for_config(config).names  # HAMi's quotas name its resources
    owner = Owner(api, settings.owner_configuration())  # uninstall deletes what we make
    store = TemplateStore(
        api,
        grace_s=settings.sweep_grace_seconds,
        max_per_namespace=settings.max_templates_per_namespace,
        owner=owner,
    )
    gate = QuotaGate(
        api=api,
        cache=QuotaCache(api, names=hami_names),
        profile=profile,
        names=hami_names,
        inventory=inventory.current,
        memory_factor=config.memory_factor,
        claims=ClaimBookings(api, profile=profile),
        extended_names=settings.extended_resource_names(),
    )
    gate.pending = PendingWholeCards(api, names=gate.whole_card_names)
    admitter = Admitter(
        settings=settings,
        registry=default_registry(
            volcano_scheduler_names=settings.volcano_names(),
            volcano_version=settings.volcano_version,
            kai_scheduler_names=settings.kai_names(),
            kai_version=settings.kai_version,
            kai_refuse_without_capacity=settings.kai_without_capacity == "refuse",
        ),
        profile=profile,
        config=config,
        inventory=inventory.current,
        store=store,
        api=api,
        metrics=metrics,
        quotas=gate,
        prevalidator=Prevalidator(),
    )
    sweeper = Sweeper(api, grace_s=settings.sweep_grace_seconds, extra=settings.extra_workloads(),
                      owner=owner)  # fmt: skip
    admitter.metrics.templates_left_behind.set_function(lambda: sweeper.left_behind)
    return admitter, inventory, sweeper


def housekeeping(
    admitter: Admitter, sweeper: Sweeper, stop: threading.Event, every_s: float
) -> None:
    """Sweep unused templates and look for legacy HAMi, every `every_s` seconds."""
    while True:
        try:
            admitter.legacy_warnings = legacy_hami_warnings(admitter.api)
            deleted = sweeper.sweep_once()
            if deleted:
                log.info("swept unused claim templates", templates=deleted)
        except Exception:
            log.exception("housekeeping failed; will retry")
        if stop.wait(every_s):
            return


class CannotStart(RuntimeError):
    """The webhook cannot serve (the message says why)."""


def own_certificate(settings: Settings, api: KubeApi) -> CertificateKeeper | None:
    """With `--tls-secret`: the keeper of our own certificate, the certificate in place (written
    to the TLS files, trusted by the configuration) before the server listens."""
    if settings.tls_secret is None or settings.tls_webhook_configuration is None:
        return None
    from vgpu_bridge.webhook import cert_keeper  # cryptography: only in this mode

    logs.load()  # the start waits for the API here anyway: its retries are logged as they happen
    places = cert_keeper.Places(
        namespace=settings.namespace,
        secret=settings.tls_secret,
        configuration=settings.tls_webhook_configuration,
        service=settings.tls_service,
        cert_file=Path(settings.tls_cert_file),
        key_file=Path(settings.tls_key_file),
    )
    keeper = cert_keeper.CertificateKeeper(api, places)
    try:
        keeper.ensure()
    except (KubeError, cert_keeper.CertificateSecretError) as error:
        raise CannotStart(f"no serving certificate: {error}") from None
    return keeper


def tls_files(settings: Settings) -> TLSFiles:
    return TLSFiles(
        settings.tls_cert_file, settings.tls_key_file, client_ca_file=settings.client_ca_file
    )


def listen(
    settings: Settings, admitter: Admitter, *, tls: TLSFiles, ready: Callable[[], bool]
) -> tuple[WebhookServer, ProbeServer | None]:
    """The HTTPS server, and the plain-HTTP one when `--metrics-listen` is set (bound, not yet
    serving)."""
    limits = settings.limits()
    server = WebhookServer(settings.host_port, admitter=admitter, tls=tls, ready=ready,
                           limits=limits)  # fmt: skip
    if settings.metrics_host_port is None:
        return server, None
    probes = ProbeServer(settings.metrics_host_port, admitter=admitter, ready=ready, limits=limits)
    return server, probes


def api_workers(
    admitter: Admitter,
    inventory: InventoryCache,
    sweeper: Sweeper,
    *,
    stop: threading.Event,
    every_s: float,
) -> list[threading.Thread]:
    """The threads that follow the API: inventory, template index (and the restorer of deleted
    templates still in use), quotas, housekeeping, and the one that posts Events. Its recorder is
    made and attached to the admitter here, once the client has loaded: no Event can be posted
    before, and its module stays off the start path. The child process that reads big reviews
    first is started by the first such review, not here: most clusters never send one, and it
    holds 18 MiB."""
    quotas: list[QuotaCache | ClaimBookings | PendingWholeCards] = []
    if admitter.quotas:
        quotas.append(admitter.quotas.cache)
        # not their truth: an empty one has len 0
        followed = (admitter.quotas.claims, admitter.quotas.pending)
        quotas += [cache for cache in followed if cache is not None]
    synced = [inventory.synced, *(q.synced for q in quotas)]
    restorer = TemplateRestorer(admitter.api, ensure=admitter.store.ensure,
                                owner=admitter.store.owner)  # fmt: skip
    admitter.store.index.on_deleted = restorer.deleted
    events = attach_events(admitter)
    return [
        threading.Thread(target=events.run, args=(stop,), name="events", daemon=True),
        threading.Thread(target=inventory.run, args=(stop,), name="inventory", daemon=True),
        *(threading.Thread(target=q.run, args=(stop,), name="quotas", daemon=True) for q in quotas),
        threading.Thread(
            target=admitter.store.index.run, args=(stop,), name="templates", daemon=True
        ),
        threading.Thread(target=restorer.run, args=(stop,), name="restore", daemon=True),
        threading.Thread(
            target=freeze_when_synced, args=(synced, stop), name="freeze", daemon=True
        ),
        threading.Thread(
            target=housekeeping,
            args=(admitter, sweeper, stop, every_s),
            name="housekeeping",
            daemon=True,
        ),
    ]


def freeze_when_synced(synced: list[threading.Event], stop: threading.Event) -> None:
    """Once every cache has listed, collect once and freeze the heap: the caches' objects (at
    10,000 GPUs 20,000 claim bookings and the slices) live as long as their list, and each full
    pass of the cyclic collector over them took ~40 ms, a pause every admission then in flight
    waited for. Frozen, later passes skip them; what a relist replaces is still freed by its
    reference count (the caches hold no cycles)."""
    for event in synced:
        while not event.wait(1.0):
            if stop.is_set():
                return
    gc.collect()
    gc.freeze()


def attach_events(admitter: Admitter) -> EventRecorder:
    """The recorder of Events about the admitter's decisions, attached to it."""
    from vgpu_bridge.webhook.events import EventRecorder  # off the start path (api_workers)

    recorder = EventRecorder(
        admitter.api,
        controller=admitter.settings.driver_name,
        instance=socket.gethostname(),
        dropped=admitter.metrics.events_dropped,
    )
    admitter.events = recorder
    return recorder


def connect_then_start(
    api: KubeApi,
    workers: Callable[[], list[threading.Thread]],
    failed: Callable[[KubeConfigError], None],
    *,
    metrics: WebhookMetrics,
) -> None:
    """Load structlog (writing the lines kept until now), make the metrics and load the client
    (the slow parts of a start, done while reviews are already answered), then make and start
    the threads that need it; or report why it cannot be loaded."""
    logs.load()
    metrics.load()
    try:
        api.connected()
    except KubeConfigError as error:
        failed(error)
        return
    for worker in workers():
        worker.start()


def background(
    api: KubeApi,
    following: Callable[[], list[threading.Thread]],
    *,
    metrics: WebhookMetrics,
    tls: TLSFiles,
    probes: ProbeServer | None,
    stop: threading.Event,
    failed: Callable[[KubeConfigError], None],
) -> list[threading.Thread]:
    """Connecting (then following the API), watching the TLS files, and the probe server."""
    threads = [
        threading.Thread(target=connect_then_start, args=(api, following, failed),
                         kwargs={"metrics": metrics}, name="connect", daemon=True),
        threading.Thread(target=watch_tls, args=(tls, stop), name="tls", daemon=True),
    ]  # fmt: skip
    if probes is not None:
        threads.append(threading.Thread(target=probes.serve_forever, name="probes", daemon=True))
    return threads


def start_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.start()


class Stopper:
    """What SIGTERM and SIGINT do. A rolling update ends a replica while kube-proxy still sends it
    new connections for a moment, and the API server retries no webhook POST that was refused or
    broken (client-go retries a write only on a Retry-After answer; Go's transport only one that
    never left on a reused connection): so the first signal drains (issue 38). Both servers turn
    not ready and close each connection after its reply; reviews are answered `drain_s` longer;
    then the webhook server stops accepting and answers what is in flight (at most
    `in_flight_s`). A second signal during the drain, a drain of 0, or an unusable API
    (`now`) stop at once. `stop` tells the background threads, which the reviews of the drain
    still need, once the server has stopped."""

    def __init__(
        self,
        server: WebhookServer,
        probes: ProbeServer | None,
        *,
        drain_s: float,
        in_flight_s: float,
        stop: threading.Event,
    ) -> None:
        self.server, self.probes, self.stop = server, probes, stop
        self.drain_s, self.in_flight_s = drain_s, in_flight_s
        self.draining = threading.Event()
        self.hurried = threading.Event()

    def signalled(self, signum: int, _frame: object) -> None:
        if self.drain_s == 0 or self.draining.is_set():
            self.now()
            return
        self.draining.set()
        for server in (self.server, self.probes):
            if server is not None:
                server.drain()
        log.info("draining", seconds=self.drain_s, signal=signal.Signals(signum).name)
        threading.Thread(target=self._finish_after_drain, name="drain", daemon=True).start()

    def now(self) -> None:
        self.hurried.set()
        self.stop.set()
        threading.Thread(target=self.server.shutdown, daemon=True).start()

    @property
    def drained(self) -> bool:
        return self.draining.is_set() and not self.hurried.is_set()

    def _finish_after_drain(self) -> None:
        if self.hurried.wait(self.drain_s):
            return
        self.server.finish(within_s=self.in_flight_s)
        self.stop.set()


def serve(settings: Settings) -> int:
    # structlog loads in the background, below
    logs.configure_json_logging(defer=True, level=settings.log_level)
    api = KubeApi.connect_on_first_use(settings.kubeconfig)
    admitter, inventory, sweeper = build(settings, api)
    keeper = own_certificate(settings, api)
    try:
        tls = tls_files(settings)
        server, probes = listen(settings, admitter, tls=tls, ready=inventory.synced.is_set)
    except OSError:
        api.connected()  # an unusable kubeconfig is named first, as when it was read up front
        raise
    stop = threading.Event()
    unusable: list[KubeConfigError] = []
    stopper = Stopper(server, probes, drain_s=settings.drain_seconds,
                      in_flight_s=settings.request_timeout_seconds, stop=stop)  # fmt: skip

    def cannot_connect(error: KubeConfigError) -> None:
        unusable.append(error)
        stopper.now()

    following = partial(
        api_workers,
        admitter,
        inventory,
        sweeper,
        stop=stop,
        every_s=settings.sweep_interval_seconds,
    )
    threads = background(api, following, metrics=admitter.metrics, tls=tls, probes=probes,
                         stop=stop, failed=cannot_connect)  # fmt: skip
    if keeper is not None:
        threads.append(threading.Thread(target=keeper.keep, args=(stop,),
                                        kwargs={"every_s": settings.tls_check_seconds},
                                        name="certificate", daemon=True))  # fmt: skip
    signal.signal(signal.SIGTERM, stopper.signalled)
    signal.signal(signal.SIGINT, stopper.signalled)
    log.info("serving", listen=settings.listen, metrics_listen=settings.metrics_listen,
             profile=settings.profile, driver=settings.driver_name)  # fmt: skip
    # the background starts once the server's workers run: a thread started while another
    # imports waits for the interpreter, and the workers are needed first
    server.serve_forever(started=lambda: start_all(threads))
    server.server_close()
    if stopper.drained:
        log.info("drained; stopped")
    if probes is not None:
        probes.shutdown()
        probes.server_close()
    if unusable:
        raise unusable[0]
    return 0


def main(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Exit 2 for bad settings, 1 when the webhook cannot start (with the reason on stderr)."""
    settings = Settings.from_namespace_or_report(args, environ)
    if settings is None:
        return 2
    try:
        return serve(settings)
    except (KubeConfigError, CannotStart, OSError) as error:  # ssl.SSLError is an OSError
        print(f"{Settings.prog}: cannot start: {error}", file=sys.stderr)
        return 1
