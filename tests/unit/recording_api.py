"""A real API client (`KubeApi`) talking to a loopback HTTP server that records what it is asked.

The server answers every GET with 404, or with the object registered for that exact path.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from vgpu_bridge.kube import KubeApi


@dataclass
class RecordingApi:
    api: KubeApi = field(init=False)
    paths: list[str] = field(default_factory=list)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)


def _handler(recording: RecordingApi) -> type[http.server.BaseHTTPRequestHandler]:
    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            recording.paths.append(self.path)
            found = recording.objects.get(self.path)
            status = 200 if found is not None else 404
            body = json.dumps(found or {"kind": "Status", "code": 404}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: tests read `recording.paths`."""

    return Recorder


@contextmanager
def recording_api() -> Iterator[RecordingApi]:
    recording = RecordingApi()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(recording))
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    recording.api = KubeApi(client.ApiClient(configuration), timeout_s=5)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield recording
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
