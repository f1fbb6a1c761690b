"""A loopback API server for the status command's real client: each GET answers what is set for
its path and query (`serve`), else for its path, else 404; every request's path and query kept.
Text answers (an agent's /metrics through the pod proxy) as well as JSON. A list's page size
(`limit`) is not part of the match: a list is answered whole unless pages are served for its
`continue` tokens."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

Query = frozenset[tuple[str, str]]


@dataclass
class ServedApi:
    port: int = 0
    answers: dict[tuple[str, Query | None], tuple[int, bytes, str]] = field(default_factory=dict)
    asked: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def serve(self, path: str, body: object, *, status: int = 200, **query: str) -> None:
        """`body` (JSON; a str is served as text) for GETs of `path`, with exactly `query`
        when one is given."""
        self._set(path, body, status, query)

    def serve_page(
        self, path: str, body: object, query: dict[str, str], *, status: int = 200
    ) -> None:
        """`body` for GETs of `path` with exactly `query` (which may hold `continue`)."""
        self._set(path, body, status, query)

    def _set(self, path: str, body: object, status: int, query: dict[str, str]) -> None:
        text = isinstance(body, str)
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        key = frozenset(query.items()) if query else None
        self.answers[(path, key)] = (status, data, "text/plain" if text else "application/json")

    def drop(self, path: str) -> None:
        """GETs of `path` get no answer: the connection is closed."""
        self.answers[(path, None)] = (0, b"", "")

    def forbid(self, path: str, **query: str) -> None:
        self._set(path, {"kind": "Status", "code": 403, "reason": "Forbidden"}, 403, query)

    def list_of(self, path: str, items: Sequence[object], **query: str) -> None:
        self._set(path, {"kind": "List", "items": list(items)}, 200, query)

    def kubeconfig(
        self,
        directory: Path,
        *,
        context: str = "served",
        namespace: str | None = None,
        current: str = "other",
        nowhere: int = 9,
    ) -> Path:
        """A kubeconfig whose context `context` points here (in `namespace`, if given), and
        whose context `other` (the current one unless `current` says) at port `nowhere`, where
        nothing listens."""
        clusters = [
            {"name": "served", "cluster": {"server": f"http://127.0.0.1:{self.port}"}},
            {"name": "nowhere", "cluster": {"server": f"http://127.0.0.1:{nowhere}"}},
        ]
        served = {
            "cluster": "served",
            "user": "u",
            **({"namespace": namespace} if namespace else {}),
        }
        config = {
            "apiVersion": "v1", "kind": "Config", "clusters": clusters,
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": context, "context": served},
                         {"name": "other", "context": {"cluster": "nowhere", "user": "u"}}],
            "current-context": current,
        }  # fmt: skip
        path = directory / "kubeconfig"
        path.write_text(json.dumps(config))
        return path


def _handler(served: ServedApi) -> type[http.server.BaseHTTPRequestHandler]:
    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = dict(parse_qsl(url.query))
            served.asked.append((url.path, query))
            matched = {key: value for key, value in query.items() if key != "limit"}
            found = served.answers.get((url.path, frozenset(matched.items()))) or (
                served.answers.get((url.path, None))
            )
            status, data, kind = found or (404, b'{"kind": "Status", "code": 404}', "json")
            if status == 0:
                self.close_connection = True
                return
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: tests read `served.asked`."""

    return Answer


@contextmanager
def served_api() -> Iterator[ServedApi]:
    served = ServedApi()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    served.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
