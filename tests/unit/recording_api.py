"""A real API client (`KubeApi`) talking to a loopback HTTP server that records what it is asked.

The server answers every GET with 404, or with the object registered for that exact path, and
every other method with 501. An answer scripted in `answers` for a method and a path (without its
query) comes first, for any method: a list to serve, a 409 or 404 to return, or (body None) the
request's own body, as a create answers. Every request, with its query and its JSON body, is kept
in `calls`; `paths` keeps the GETs' paths as sent.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from kubernetes import client

from vgpu_bridge.kube import KubeApi


@dataclass(frozen=True, slots=True)
class Call:
    """One request as the server read it: the path without its query, the query, the body."""

    method: str
    path: str
    query: dict[str, str]
    body: Any


@dataclass
class RecordingApi:
    api: KubeApi = field(init=False)
    paths: list[str] = field(default_factory=list)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    answers: dict[tuple[str, str], tuple[int, dict[str, Any] | None]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)

    def answer(
        self, method: str, path: str, status: int, body: dict[str, Any] | None = None
    ) -> None:
        """`method` on `path` (whatever its query) answers `status` with `body` from now on;
        with no body, with the body it was sent."""
        self.answers[(method, path)] = (status, body)

    def made(self, method: str) -> list[Call]:
        """The requests of `method` received so far, in order."""
        return [call for call in self.calls if call.method == method]


def _status(code: int) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}


def _handler(recording: RecordingApi) -> type[http.server.BaseHTTPRequestHandler]:
    class Recorder(http.server.BaseHTTPRequestHandler):
        def _record(self) -> Call:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            call = Call(self.command, url.path, dict(parse_qsl(url.query)),
                        json.loads(raw) if raw else None)  # fmt: skip
            recording.calls.append(call)
            return call

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _answer_scripted_or(self, status: int, body: dict[str, Any]) -> None:
            call = self._record()
            status, scripted = recording.answers.get((call.method, call.path), (status, body))
            self._send(status, call.body if scripted is None else scripted)

        def do_GET(self) -> None:
            recording.paths.append(self.path)
            found = recording.objects.get(self.path)
            self._answer_scripted_or(200 if found is not None else 404, found or _status(404))

        def do_POST(self) -> None:
            self._answer_scripted_or(501, _status(501))

        def do_PUT(self) -> None:
            self._answer_scripted_or(501, _status(501))

        def do_PATCH(self) -> None:
            self._answer_scripted_or(501, _status(501))

        def do_DELETE(self) -> None:
            self._answer_scripted_or(501, _status(501))

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: tests read `recording.paths` and `recording.calls`."""

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
