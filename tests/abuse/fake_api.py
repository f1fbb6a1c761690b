"""A loopback stand-in for the Kubernetes API server, for the abuse tier.

The binaries under attack need an API server to start (the webhook lists ResourceSlices, the
agent publishes them and reads ResourceClaims). This one answers just enough, over plain HTTP on
127.0.0.1, and records every request line, so a test can check that no hostile name ever became
part of a URL the binaries asked for. What it serves:

- `GET .../resourceslices` lists two card sizes of our driver and one foreign driver's slice with
  a capacity we cannot parse (issue 15, item 9). A watch (`?watch=true` on any collection) is
  answered at once (its head: the watch is established), held open, then ends empty.
- `GET .../resourceclaims/<name>` returns the claim registered under that name, else 404.
- `GET /api/v1/nodes/<name>` returns a node with a uid; other GETs of one object are 404.
- Lists return no items, except a collection a test put in `FakeApi.served` (resource plural →
  its items, made as they are sent): paged by `limit`/`continue` and streamed item by item, so
  hundreds of megabytes of claims never sit in this process.
- POST/PUT echo the body back; PATCH and DELETE answer `{}`.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from vgpu_bridge.core import DEFAULT

Json = dict[str, Any]
WATCH_HOLD_S = 20.0
# A path the binaries may ask for: segments of name characters, never "." or "..".
SAFE_SEGMENT = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?")
SAFE_QUERY_KEYS = frozenset(
    {
        "watch",
        "resourceVersion",
        "timeoutSeconds",
        "labelSelector",
        "fieldSelector",
        "limit",
        "continue",
        "allowWatchBookmarks",
        "dryRun",
        "fieldManager",
    }
)


def _slice(name: str, driver: str, memory: str, uuid: str) -> Json:
    device = {
        "name": "gpu-0",
        "attributes": {"uuid": {"string": uuid}, "productName": {"string": "NVIDIA H100"}},
        "capacity": {"memory": {"value": memory}, "cores": {"value": "100"}},
    }
    spec = {
        "driver": driver,
        "nodeName": name,
        "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
        "devices": [device],
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-{driver}"},
        "spec": spec,
    }


SLICES = [
    _slice("node-40", DEFAULT.driver, "40Gi", "GPU-40"),
    _slice("node-80", DEFAULT.driver, "80Gi", "GPU-80"),
    _slice("node-x", "foreign.example.com", "1e999999", "GPU-X"),  # not ours, and unparseable
]


@dataclass
class FakeApi:
    """The running stand-in: its port, what it was asked, and the claims it serves by name."""

    server: ThreadingHTTPServer
    stop: threading.Event
    requests: list[tuple[str, str]] = field(default_factory=list)
    claims: dict[str, Json] = field(default_factory=dict)
    #: resource plural → (namespace, or None for the cluster's) → its items, JSON-encoded
    served: dict[str, Callable[[str | None], Iterator[bytes]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "fake",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "abuse"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                }
            )
        )
        return path

    def unsafe_requests(self) -> list[str]:
        """Every request whose path or query a hostile name could have shaped."""
        with self.lock:
            seen = list(self.requests)
        return [f"{method} {target}" for method, target in seen if not _safe(method, target)]


def _safe(method: str, target: str) -> bool:
    parts = urlsplit(target)
    segments = parts.path.split("/")[1:]
    if not all(SAFE_SEGMENT.fullmatch(s) and s not in (".", "..") for s in segments):
        return False
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(key not in SAFE_QUERY_KEYS for key, _ in query):
        return False
    watching = ("watch", "true") in query
    return not watching or (method == "GET" and _is_list(parts.path))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the requests are recorded instead."""

    def _answer(self, status: int, body: Json) -> None:
        """Head and body in one write (two small writes meet Nagle and delayed ACKs: 40 ms)."""
        data = json.dumps(body).encode()
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        )
        self.wfile.write(head.encode() + data)

    def _hold_watch(self) -> None:
        """As the API server answers a watch: the head at once (the watch is established), then
        no event for WATCH_HOLD_S, then the end of the chunked body (the watch ends empty)."""
        head = "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        self.wfile.write(f"HTTP/1.1 200 OK\r\n{head}".encode())
        self.wfile.flush()
        self.server.api.stop.wait(WATCH_HOLD_S)
        self.wfile.write(b"0\r\n\r\n")

    def _body(self) -> Json:
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length) if length else b"{}"
        try:
            parsed = json.loads(data)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}

    def _record(self) -> tuple[str, dict[str, str]]:
        api = self.server.api
        with api.lock:
            api.requests.append((self.command, self.path))
        parts = urlsplit(self.path)
        return parts.path, dict(parse_qsl(parts.query))

    def do_GET(self) -> None:
        path, query = self._record()
        if query.get("watch") == "true":
            self._hold_watch()
        elif _is_list(path) and path.rsplit("/", 1)[1] in self.server.api.served:
            self._stream_list(path, query)
        elif path.endswith("/resourceslices"):
            self._answer(200, {"items": SLICES, "metadata": {"resourceVersion": "1"}})
        elif (claim := self._claim(path)) is not None:
            self._answer(200, claim)
        elif path.startswith("/api/v1/nodes/"):
            name = path.rsplit("/", 1)[1]
            self._answer(200, {"metadata": {"name": name, "uid": "node-uid-1"}})
        elif _is_list(path):
            self._answer(200, {"items": [], "metadata": {"resourceVersion": "1"}})
        else:
            self._answer(404, {"kind": "Status", "status": "Failure", "code": 404})

    def _stream_list(self, path: str, query: dict[str, str]) -> None:
        """One page of a served collection (`continue` is the offset), chunk by chunk: each item
        is made as it is sent, and one past the page tells whether there are more."""
        segments = path.strip("/").split("/")
        namespace = segments[-2] if "namespaces" in segments else None
        start, limit = int(query.get("continue") or 0), int(query.get("limit") or 1 << 30)
        made = self.server.api.served[segments[-1]](namespace)
        page = itertools.islice(made, start, start + limit)
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
        self._chunk(b'{"items": [')
        for index, item in enumerate(page):
            self._chunk(item if index == 0 else b"," + item)
        more = next(made, None) is not None
        meta = {"resourceVersion": "1", **({"continue": str(start + limit)} if more else {})}
        self._chunk(b'], "metadata": ' + json.dumps(meta).encode() + b"}")
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _claim(self, path: str) -> Json | None:
        head, _, name = path.rpartition("/")
        if not head.endswith("/resourceclaims"):
            return None
        with self.server.api.lock:
            return self.server.api.claims.get(name)

    def do_POST(self) -> None:
        self._record()
        body = self._body()
        meta = body.setdefault("metadata", {}) if isinstance(body.get("metadata"), dict) else {}
        meta.update(
            {
                "uid": "created-uid",
                "resourceVersion": "2",
                "creationTimestamp": "2024-01-01T00:00:00Z",
            }
        )
        self._answer(201, body)

    def do_PUT(self) -> None:
        self._record()
        self._answer(200, self._body())

    def do_PATCH(self) -> None:
        self._record()
        self._body()
        self._answer(200, {})

    def do_DELETE(self) -> None:
        self._record()
        self._body()
        self._answer(200, {})


def _is_list(path: str) -> bool:
    """`/api/v1/pods`, `/apis/g/v/namespaces/ns/kind`: an even count of segments after the
    group/version, i.e. a collection."""
    segments = path.strip("/").split("/")
    rest = segments[2:] if segments[0] == "api" else segments[3:]
    return len(rest) % 2 == 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    api: FakeApi

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hung up (a binary's timeout): nothing to report."""


@contextmanager
def fake_api() -> Iterator[FakeApi]:
    server = _Server(("127.0.0.1", 0), _Handler)
    api = FakeApi(server, threading.Event())
    server.api = api
    thread = threading.Thread(target=server.serve_forever, name="fake-api", daemon=True)
    thread.start()
    try:
        yield api
    finally:
        api.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
