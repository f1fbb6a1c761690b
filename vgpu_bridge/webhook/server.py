"""The HTTPS server: /mutate, /healthz, /readyz, /metrics. TLS reloads when the files change.
An optional plain-HTTP server (`--metrics-listen`) answers /metrics, /healthz and /readyz only,
for scrapers without the webhook's CA; /mutate is never served without TLS.

Why the standard library's threading HTTP server: the API server keeps its connections to a
webhook alive, so a thread per connection serves a handful of long-lived connections; the work per
request is ~0.1 ms of pure Python, so an event loop would add overhead without adding concurrency
on 2 cores; and it needs no dependency. TLS handshakes run in the connection's thread, so a slow
client never blocks accept.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from vgpu_bridge.webhook.admission import Admitter

log = structlog.get_logger("vgpu_bridge.webhook.server")
IDLE_TIMEOUT_S = 60


class TLSFiles:
    """An SSLContext that reloads its certificate and key when either file changes."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file, self.key_file = cert_file, key_file
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp = self._mtimes()
        self.context.load_cert_chain(cert_file, key_file)

    def _mtimes(self) -> tuple[float, float]:
        return os.stat(self.cert_file).st_mtime, os.stat(self.key_file).st_mtime

    def reload_if_changed(self) -> bool:
        stamp = self._mtimes()
        if stamp == self._stamp:
            return False
        self.context.load_cert_chain(self.cert_file, self.key_file)  # new handshakes use it
        self._stamp = stamp
        log.info("TLS certificate reloaded", cert_file=self.cert_file)
        return True


class ProbeServer(ThreadingHTTPServer):
    """Plain HTTP: /metrics, /healthz and /readyz; everything else is 404."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        *,
        admitter: Admitter,
        ready: Callable[[], bool],
        handler: type[BaseHTTPRequestHandler] | None = None,
    ) -> None:
        self.admitter, self.ready = admitter, ready
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler or _ProbeHandler)


class WebhookServer(ProbeServer):
    """HTTPS: the probe paths and POST /mutate."""

    def __init__(
        self,
        address: tuple[str, int],
        *,
        admitter: Admitter,
        tls: TLSFiles,
        ready: Callable[[], bool],
    ) -> None:
        self.tls = tls
        super().__init__(address, admitter=admitter, ready=ready, handler=_AdmissionHandler)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle delay on replies
        return self.tls.context.wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        ), addr


class _ProbeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connections
    timeout = IDLE_TIMEOUT_S
    server: ProbeServer

    def log_message(self, format: str, *args: Any) -> None:
        """Access logs are replaced by the one structured line per admission."""

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        """Status line, headers and body leave in one write."""
        head = [
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
        ]
        if self.close_connection:
            head.append("Connection: close")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, b"ok", "text/plain")
        elif self.path == "/readyz":
            ready = self.server.ready()
            self._send(200 if ready else 503, b"ok" if ready else b"not ready", "text/plain")
        elif self.path == "/metrics":
            self._send(
                200, generate_latest(self.server.admitter.metrics.registry), CONTENT_TYPE_LATEST
            )
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:
        self._refuse_body()

    def _refuse_body(self) -> None:
        """404, and close: the request body is not read."""
        self.close_connection = True
        self._send(404, b"not found", "text/plain")


class _AdmissionHandler(_ProbeHandler):
    server: WebhookServer

    def do_POST(self) -> None:
        if self.path.split("?")[0] != "/mutate":
            self._refuse_body()
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self._send(411, b"Content-Length required", "text/plain")
            return
        if int(length) > self.server.admitter.settings.max_body_bytes:
            self.close_connection = True
            self._send(413, b"request body too large", "text/plain")
            return
        status, body = self.server.admitter.review_body(self.rfile.read(int(length)))
        self._send(status, body, "application/json" if status == 200 else "text/plain")


def watch_tls(tls: TLSFiles, stop: threading.Event, *, every_s: float = 2.0) -> None:
    while not stop.wait(every_s):
        try:
            tls.reload_if_changed()
        except (OSError, ssl.SSLError) as exc:  # a half-written rotation: keep the old pair
            log.warning("TLS reload failed; keeping the current certificate", error=str(exc))
