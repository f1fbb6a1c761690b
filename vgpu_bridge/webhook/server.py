"""The HTTPS server: /mutate, /healthz, /readyz, /metrics, /bookings (what the allocated claims
consumed of each card, for `kubectl vgpu status` through the API server's service proxy to this
port). TLS reloads when the files change. An optional plain-HTTP server (`--metrics-listen`)
answers /metrics, /healthz and /readyz only, for scrapers without the webhook's CA; /mutate and
/bookings are never served without TLS.

Both run on `connections.ConnectionLoop`: one selector thread holds every connection (slow ones
cost a socket, never a thread) and a fixed pool of workers runs admissions. Whatever is no work
is answered on the selector thread: /healthz and /readyz (probes are answered while every worker
is busy and thousands of slow connections are held), a client without the required certificate,
an unknown path or method, a review without a body. So are small reviews that need no
translation and no API call (a pod without GPUs): no hand-off to a worker and back. /metrics and
/bookings are made by the side worker, never in the reviews' queue (issue 35: a flood of scrapes
from the pod network got other namespaces' reviews refused); a scrape gets metrics made after it
arrived, made at most every METRICS_EVERY_S however many scrape.

With `--client-ca-file`, /mutate, /metrics and /bookings answer only clients that presented a
certificate signed by that CA (the API server can be configured to present one); /healthz and
/readyz stay open to the kubelet's probes, which present none. Without it, /bookings answers any
client that reaches the port, as /metrics does: it holds per-card sums (node, device, memory,
cores, shares), no namespace, claim or pod.
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
from collections.abc import Callable

from vgpu_bridge.logs import get_logger
from vgpu_bridge.webhook.admission import Admitter
from vgpu_bridge.webhook.claim_bookings import bookings_document
from vgpu_bridge.webhook.connections import ConnectionLoop, Limits, Reply, Request, bind
from vgpu_bridge.webhook.workqueue import review_namespace

log = get_logger("vgpu_bridge.webhook.server")
NOT_FOUND = Reply(404, b"not found")
CLIENT_CERT_REQUIRED = Reply(403, b"a client certificate signed by --client-ca-file is required")
EMPTY_REVIEW = Reply(400, b"an AdmissionReview is required: the request has no body")
DRAINING = Reply(503, b"draining: not ready")
#: reviews up to this size may be answered on the selector thread (a pod without GPUs is a few
#: KiB, with managedFields and a long env rarely past 20); with `fastpath.QUICK_MAX_CONTAINERS`
#: this keeps one quick review near the turn's budget (issue 25: 64 KiB of 1,994 tiny containers
#: took 9.4 ms)
QUICK_REVIEW_BYTES = 32 * 1024
BOOKINGS_MAX_AGE_S = 1.0  # /bookings is made again at most this often
METRICS_EVERY_S = 0.1  # /metrics is made at most this often (scrapes meanwhile wait for the next)


class TLSFiles:
    """The serving SSLContext, built anew when the certificate, key or client CA file changes
    (new handshakes use the new one)."""

    def __init__(self, cert_file: str, key_file: str, *, client_ca_file: str | None = None) -> None:
        self.cert_file, self.key_file, self.client_ca_file = cert_file, key_file, client_ca_file
        self._stamp = self._mtimes()
        self.context = self._load()

    @property
    def requires_client_cert(self) -> bool:
        return self.client_ca_file is not None

    def _files(self) -> list[str]:
        return [f for f in (self.cert_file, self.key_file, self.client_ca_file) if f]

    def _mtimes(self) -> tuple[float, ...]:
        return tuple(os.stat(f).st_mtime for f in self._files())

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file:
            context.load_verify_locations(cafile=self.client_ca_file)
            context.verify_mode = ssl.CERT_OPTIONAL  # a wrong certificate fails the handshake
        return context

    def reload_if_changed(self) -> bool:
        stamp = self._mtimes()
        if stamp == self._stamp:
            return False
        self.context = self._load()
        self._stamp = stamp
        log.info("TLS files reloaded", cert_file=self.cert_file, client_ca_file=self.client_ca_file)
        return True


class ProbeRoutes:
    """GET /healthz and /readyz (on the selector thread), GET /metrics (on the side worker);
    everything else 404 on the selector thread."""

    #: the GET paths made by the side worker
    side_paths: tuple[str, ...] = ("/metrics",)

    def __init__(self, admitter: Admitter, ready: Callable[[], bool]) -> None:
        self.admitter, self.ready = admitter, ready
        self.draining = False  # stopping: never ready again, whatever `ready` says
        self._bookings_made: tuple[float, bytes | None] = (0.0, None)
        self._metrics_made: tuple[float, bytes | None] = (0.0, None)

    def inline(self, request: Request) -> Reply | None:
        """Probes; None for the side paths; 404 for the rest."""
        probe = self._probe(request)
        if probe is not None:
            return probe
        if request.head.method == "GET" and request.head.path in self.side_paths:
            return None
        return NOT_FOUND

    def _probe(self, request: Request) -> Reply | None:
        if request.head.method != "GET":
            return None
        if request.head.path == "/healthz":
            return Reply(200, b"ok")
        if request.head.path == "/readyz":
            if self.draining:
                return DRAINING
            ready = self.ready()
            return Reply(200 if ready else 503, b"ok" if ready else b"not ready")
        return None

    def quick(self, request: Request) -> Reply | None:
        return None

    def side(self, request: Request) -> bool:
        return True

    def queue_key(self, request: Request) -> str:
        return "probes"

    def handle(self, request: Request) -> Reply:
        if request.head.method != "GET" or request.head.path not in self.side_paths:
            return NOT_FOUND
        if request.head.path == "/bookings":
            return self._bookings()
        return self._metrics(asked_at=request.received_at)

    def _metrics(self, *, asked_at: float) -> Reply:
        """The metrics as they were at `asked_at` or later: the body made last if it was begun
        after then, else a new one, begun at least METRICS_EVERY_S after the last (scrapes in a
        loop cost the reviews beside them a few bodies a second, never one each)."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        made_at, body = self._metrics_made
        if body is None or made_at < asked_at:
            time.sleep(max(0.0, made_at + METRICS_EVERY_S - time.monotonic()))
            made_at = time.monotonic()
            body = generate_latest(self.admitter.metrics.registry)
            self._metrics_made = (made_at, body)
        return Reply(200, body, CONTENT_TYPE_LATEST)

    def _bookings(self) -> Reply:
        """What the allocated claims consumed of each card (`claim_bookings`), 503 until the
        claims' watch follows (the status view then lists the claims itself). Made at most once
        per BOOKINGS_MAX_AGE_S (10,000 cards take ~10 ms): viewers asking in a loop cost the
        admissions beside them no more than one does."""
        made_at, body = self._bookings_made
        if body is not None and time.monotonic() - made_at < BOOKINGS_MAX_AGE_S:
            return Reply(200, body, "application/json")
        held = self.admitter.quotas.claims if self.admitter.quotas else None
        cards = held.cards() if held is not None else None
        if cards is None:
            return Reply(503, b"claim bookings not followed yet")
        body = json.dumps(bookings_document(cards), separators=(",", ":")).encode()
        self._bookings_made = (time.monotonic(), body)
        return Reply(200, body, "application/json")


class AdmissionRoutes(ProbeRoutes):
    """The probe routes, GET /bookings and POST /mutate; with a client CA, all but the probes
    need a client certificate signed by it, refused on the selector thread."""

    side_paths = ("/metrics", "/bookings")

    def __init__(self, admitter: Admitter, ready: Callable[[], bool], *, tls: TLSFiles) -> None:
        super().__init__(admitter, ready)
        self.tls = tls

    def inline(self, request: Request) -> Reply | None:
        """Probes; a client without the required certificate refused before its request takes
        any queue room; a review without a body refused; None for a review and the side paths;
        404 for the rest."""
        probe = self._probe(request)
        if probe is not None:
            return probe
        if self._refused(request):
            return CLIENT_CERT_REQUIRED
        if _is_review(request):
            return None if request.body else EMPTY_REVIEW
        return super().inline(request)

    def side(self, request: Request) -> bool:
        return not _is_review(request)

    def quick(self, request: Request) -> Reply | None:
        """A small review that needs no translation and no API call, answered on the selector
        thread (most pods ask for no GPU)."""
        if self._refused(request) or not _is_review(request):
            return None
        if len(request.body) > QUICK_REVIEW_BYTES:
            return None
        answer = self.admitter.quick_review_body(request.body)
        return None if answer is None else _review_reply(*answer)

    def handle(self, request: Request) -> Reply:
        if self._refused(request):
            return CLIENT_CERT_REQUIRED
        if _is_review(request):
            return _review_reply(*self.admitter.review_body(request.body))
        return super().handle(request)

    def queue_key(self, request: Request) -> str:
        """A review's namespace (the API server sends every namespace's reviews on the same few
        connections); anything else shares one key."""
        if not _is_review(request):
            return "other"
        namespace = review_namespace(request.body)
        return "cluster" if namespace is None else f"namespace/{namespace}"

    def _refused(self, request: Request) -> bool:
        """A client certificate is required and this client presented none signed by the CA."""
        return self.tls.requires_client_cert and not request.client_verified


def _is_review(request: Request) -> bool:
    return request.head.method == "POST" and request.head.path == "/mutate"


def _review_reply(status: int, body: bytes) -> Reply:
    return Reply(status, body, "application/json" if status == 200 else "text/plain")


class ProbeServer:
    """Plain HTTP on `address`: the probe routes."""

    def __init__(
        self,
        address: tuple[str, int],
        *,
        admitter: Admitter,
        ready: Callable[[], bool],
        limits: Limits | None = None,
    ) -> None:
        self.admitter, self.ready = admitter, ready
        self.socket = bind(address)
        self.server_address: tuple[str, int] = self.socket.getsockname()[:2]
        self.routes = self._routes()
        self.loop = ConnectionLoop(
            self.socket,
            routes=self.routes,
            limits=limits or Limits(max_body_bytes=admitter.settings.max_body_bytes),
            tls=self._tls_context(),
            shed=self._shed,
        )

    def _routes(self) -> ProbeRoutes:
        return ProbeRoutes(self.admitter, self.ready)

    def _tls_context(self) -> Callable[[], ssl.SSLContext] | None:
        return None

    def _shed(self, reason: str) -> None:
        self.admitter.metrics.shed.labels(reason).inc()

    def serve_forever(self, started: Callable[[], None] | None = None) -> None:
        self.loop.serve_forever(started)

    def drain(self) -> None:
        """Not ready from now on, and every reply closes its connection (`ConnectionLoop`)."""
        self.routes.draining = True
        self.loop.drain()

    def finish(self, *, within_s: float) -> None:
        """Stop accepting, answer the requests in flight (at most `within_s`), stop."""
        self.loop.finish(within_s=within_s)

    def shutdown(self) -> None:
        self.loop.shutdown()

    def server_close(self) -> None:
        self.loop.close()


class WebhookServer(ProbeServer):
    """HTTPS on `address`: the probe routes and POST /mutate."""

    def __init__(
        self,
        address: tuple[str, int],
        *,
        admitter: Admitter,
        tls: TLSFiles,
        ready: Callable[[], bool],
        limits: Limits | None = None,
    ) -> None:
        self.tls = tls
        super().__init__(address, admitter=admitter, ready=ready, limits=limits)

    def _routes(self) -> ProbeRoutes:
        return AdmissionRoutes(self.admitter, self.ready, tls=self.tls)

    def _tls_context(self) -> Callable[[], ssl.SSLContext] | None:
        return lambda: self.tls.context


def watch_tls(tls: TLSFiles, stop: threading.Event, *, every_s: float = 2.0) -> None:
    while not stop.wait(every_s):
        try:
            tls.reload_if_changed()
        except (OSError, ssl.SSLError) as exc:  # a half-written rotation: keep the old pair
            log.warning("TLS reload failed; keeping the current certificate", error=str(exc))
