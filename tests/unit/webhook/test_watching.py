"""The list-then-watch loop behind the webhook's caches, against a real `KubeApi` and a loopback
API server that serves one list and scripted watches: a watch the server ends is resumed from the
last version it reported (a deletion between two watches is still an event, never lost in a
relist); an ERROR (a version too old) relists."""

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

from vgpu_bridge.kube import Json, KubeApi
from vgpu_bridge.webhook.watching import follow

PATH = "/apis/resource.k8s.io/v1/resourceclaimtemplates"


def template(name: str, version: str) -> Json:
    return {"metadata": {"namespace": "team-a", "name": name, "resourceVersion": version}}


@dataclass
class Script:
    """What the server answers: the list, then one watch answer per watch request (a list of
    events each), then `stop` is set; every query it was sent, in order."""

    listed: list[Json]
    watches: list[list[Json]]
    stop: threading.Event = field(default_factory=threading.Event)
    queries: list[dict[str, str]] = field(default_factory=list)
    compact: bool = False  # events as the API server writes them: no spaces


def _handler(script: Script) -> type[http.server.BaseHTTPRequestHandler]:
    class Server(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = dict(parse_qsl(urlsplit(self.path).query))
            script.queries.append(query)
            if query.get("watch") != "true":
                body = {"metadata": {"resourceVersion": "10"}, "items": script.listed}
                lines = [json.dumps(body).encode()]
            elif script.watches:
                separators = (",", ":") if script.compact else None
                events = script.watches.pop(0)
                lines = [json.dumps(e, separators=separators).encode() for e in events]
            else:
                script.stop.set()
                lines = []
            data = b"\n".join(lines) + b"\n"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test reads `script.queries`."""

    return Server


@contextmanager
def serving(script: Script) -> Iterator[KubeApi]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield KubeApi(client.ApiClient(configuration), timeout_s=5)
    finally:
        server.shutdown()
        server.server_close()


def run(script: Script) -> tuple[list[list[Json]], list[tuple[str, Json]], int]:
    """`follow` until the script has no watch left: the lists, the events, the stale calls."""
    lists: list[list[Json]] = []
    events: list[tuple[str, Json]] = []
    stale: list[None] = []
    with serving(script) as api:
        follow(api, PATH, stop=script.stop, on_list=lists.append,
               on_event=lambda kind, obj: events.append((kind, obj)),
               on_stale=lambda: stale.append(None), what="template")  # fmt: skip
    return lists, events, len(stale)


def watched_from(script: Script) -> list[str]:
    return [q["resourceVersion"] for q in script.queries if q.get("watch") == "true"]


def test_a_watch_the_server_ends_is_resumed_from_its_last_version_not_relisted() -> None:
    script = Script(
        listed=[template("vgpu-1", "9")],
        watches=[
            [{"type": "ADDED", "object": template("vgpu-2", "11")}],
            [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}],
            [{"type": "DELETED", "object": template("vgpu-1", "17")}],
        ],
    )
    lists, events, _ = run(script)
    assert lists == [[template("vgpu-1", "9")]]  # listed once
    assert watched_from(script)[:4] == ["10", "11", "15", "17"]
    assert [(kind, obj["metadata"]["name"]) for kind, obj in events] == [
        ("ADDED", "vgpu-2"),
        ("DELETED", "vgpu-1"),
    ]
    assert all(q.get("allowWatchBookmarks") == "true" for q in script.queries if q.get("watch"))


def test_an_expired_version_relists_and_says_the_cache_is_stale_until_then() -> None:
    gone: dict[str, Any] = {"type": "ERROR", "object": {"code": 410, "message": "too old"}}
    script = Script(listed=[template("vgpu-1", "9")], watches=[[gone]])
    lists, _, stale = run(script)
    assert len(lists) == 2  # the ERROR made it list again
    assert stale >= 1
    assert watched_from(script)[:2] == ["10", "10"]
