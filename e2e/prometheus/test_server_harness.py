"""The Prometheus harness while Prometheus starts: its API answers 503 "Service Unavailable" in
plain text until the TSDB is open, which must read as "not ready yet", never as a JSON error
that fails the test (seen under load). Against a real HTTP server answering the same way."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.prometheus.server import PrometheusQueryError, PrometheusServer, _ready


class Starting(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"Service Unavailable"
        self.send_response(503)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def starting(tmp_path: Path) -> Iterator[PrometheusServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Starting)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield PrometheusServer(server.server_address[1], log_file=tmp_path / "none.log")
    finally:
        server.shutdown()
        server.server_close()


def test_a_plain_text_503_is_a_query_error_naming_the_status(starting: PrometheusServer) -> None:
    with pytest.raises(PrometheusQueryError, match="HTTP 503"):
        starting.api("rules")


def test_a_starting_prometheus_is_not_ready_yet(starting: PrometheusServer) -> None:
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert _ready(starting, alive, rules=True) is False
    finally:
        alive.kill()
        alive.wait()
