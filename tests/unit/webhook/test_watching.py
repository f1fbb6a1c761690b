"""The list-then-watch loop behind the webhook's caches, against a real `KubeApi` and a loopback
API server that serves one list and scripted watches: a watch the server ends is resumed from the
last version it reported (a deletion between two watches is still an event, never lost in a
relist); an ERROR (a version too old) relists. While the server refuses connections (it is down)
the list is tried again every second; a server that answers with errors is backed off from."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import parse_qsl, urlsplit

import pytest
import urllib3
from kubernetes import client

from vgpu_bridge.core import DEFAULT
from vgpu_bridge.core.dialects import hami
from vgpu_bridge.kube import Json, KubeApi, KubeError, Listed
from vgpu_bridge.webhook.claim_bookings import ClaimBookings
from vgpu_bridge.webhook.pending_pods import PendingWholeCards
from vgpu_bridge.webhook.quotas import QuotaCache
from vgpu_bridge.webhook.watching import (
    LAST_RETRY_S,
    UNREACHABLE_RETRY_S,
    WATCH_TIMEOUT_S,
    follow,
)

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
    #: asked as each watch request arrives, before it is answered; what it said, in order
    probe: Callable[[], object] = lambda: None
    probed: list[object] = field(default_factory=list)
    #: watch requests refused (429, Retry-After: 1) before the first is answered, as a restarted
    #: API server refuses them while its watch cache initializes
    refusals: int = 0


def _handler(script: Script) -> type[http.server.BaseHTTPRequestHandler]:
    class Server(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = dict(parse_qsl(urlsplit(self.path).query))
            script.queries.append(query)
            if query.get("watch") != "true":
                body = {"metadata": {"resourceVersion": "10"}, "items": script.listed}
                lines = [json.dumps(body).encode()]
            elif script.refusals:
                script.probed.append(script.probe())
                script.refusals -= 1
                self._refuse()
                return
            elif script.watches:
                script.probed.append(script.probe())
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

        def _refuse(self) -> None:
            data = b'{"kind":"Status","code":429,"message":"storage is (re)initializing"}'
            self.send_response(429)
            self.send_header("Retry-After", "1")
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


class WaitsRecorded(threading.Event):
    """A `stop` whose waits return at once and are recorded (no test sleeps through a backoff)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(0.0 if timeout is None else timeout)
        return self.is_set()


def refused() -> Exception:
    """What `KubeApi` raises while nothing listens on the API server's port."""
    failure = "Failed to establish a new connection"
    reason = urllib3.exceptions.NewConnectionError(None, failure)  # type: ignore[arg-type]
    reason.__cause__ = ConnectionRefusedError(111, "Connection refused")
    return urllib3.exceptions.MaxRetryError(None, PATH, reason)  # type: ignore[arg-type]


@dataclass
class Outage:
    """An API server whose lists fail with `failures` in turn, then answer (empty); its watches
    end at once, and the first one sets `stop`."""

    failures: list[Exception]
    stop: WaitsRecorded = field(default_factory=WaitsRecorded)
    waits_before_list: list[float] | None = None

    def list_all(self, path: str, **_query: Any) -> Listed:
        if self.failures:
            raise self.failures.pop(0)
        self.waits_before_list = list(self.stop.waits)
        return Listed([], "7")

    def watch(self, path: str, **_query: Any) -> Iterator[Json]:
        self.stop.set()
        return iter(())


def follow_through(outage: Outage) -> list[float]:
    """`follow` against `outage` until its first watch; the waits between its tries to list."""
    follow(cast(KubeApi, outage), PATH, stop=outage.stop, on_list=lambda _items: None,
           on_event=lambda _kind, _obj: None, what="template")  # fmt: skip
    assert outage.waits_before_list is not None, "never listed"
    return outage.waits_before_list


def test_while_the_api_server_refuses_connections_the_list_is_tried_again_every_second() -> None:
    """A refused connection costs the server nothing: no backoff grows while it is down, so the
    caches follow it again within a second of its return, not up to LAST_RETRY_S later."""
    waits = follow_through(Outage([refused() for _ in range(10)]))
    assert waits == [UNREACHABLE_RETRY_S] * 10


def test_a_server_that_answers_with_errors_is_backed_off_from() -> None:
    failures: list[Exception] = [KubeError("GET", PATH, 500, "etcd") for _ in range(8)]
    waits = follow_through(Outage(failures))
    assert waits == [0.5, 1, 2, 4, 8, 16, LAST_RETRY_S, LAST_RETRY_S]


def test_the_backoff_starts_over_once_the_server_is_back_after_refusing() -> None:
    """Errors, then the server gone, then errors from it back (its start): backed off from 0.5 s
    again, not from where the errors before the outage had left it."""
    failures: list[Exception] = [KubeError("GET", PATH, 500, "etcd") for _ in range(4)]
    failures += [refused(), refused()]
    failures += [KubeError("GET", PATH, 503, "starting") for _ in range(2)]
    waits = follow_through(Outage(failures))
    assert waits == [0.5, 1, 2, 4, UNREACHABLE_RETRY_S, UNREACHABLE_RETRY_S, 0.5, 1]


def test_a_connection_reset_half_way_through_is_backed_off_from() -> None:
    """The server did work for a list it dropped (or is shedding load): not a refused port."""

    def reset() -> Exception:
        error = urllib3.exceptions.ProtocolError("Connection broken")
        error.__cause__ = ConnectionResetError(104, "Connection reset by peer")
        return error

    waits = follow_through(Outage([reset() for _ in range(3)]))
    assert waits == [0.5, 1, 2]


def test_each_watch_asks_for_a_minute_so_a_silent_connection_is_given_up_within_70_s() -> None:
    """A watch whose connection died without a word (an API server gone without a reset, a
    load balancer that forgot it) is noticed by the read timeout, the watch's timeout + 10 s;
    at 300 s the caches could follow nothing for five minutes while other API servers called
    the webhook. A live watch is never that silent: the server sends a bookmark 2 s before the
    timeout it was asked for."""
    script = Script(listed=[], watches=[[]])
    run(script)
    asked = {int(q["timeoutSeconds"]) for q in script.queries if q.get("watch") == "true"}
    assert asked == {WATCH_TIMEOUT_S}
    assert WATCH_TIMEOUT_S + 10 <= 70


class Cache:
    """One of the caches the quota gate reads: `run` follows the API, `answer` is what a
    decision would read of namespace team-a (None: not current, the gate lists instead)."""

    def __init__(self, kind: str, api: KubeApi) -> None:
        self.kind = kind
        self.run: Callable[[threading.Event], None]
        self.answer: Callable[[], object]
        if kind == "quotas":
            quotas = QuotaCache(api, names=hami.RESOURCES)
            self.run, self.answer = quotas.run, lambda: quotas.in_namespace("team-a")
        elif kind == "claims":
            claims = ClaimBookings(api, profile=DEFAULT)
            self.run = claims.run
            self.answer = lambda: claims.used("team-a", None, leaving_out=set())
        else:
            pending = PendingWholeCards(api, names=("nvidia.com/gpu",))
            self.run, self.answer = pending.run, lambda: pending.waiting("team-a")


CACHES = ("quotas", "claims", "pending pods")


def followed(kind: str, script: Script) -> Cache:
    """The cache of `kind` following `script` until it has no watch left; the script probes
    what the cache answers as each watch request arrives."""
    with serving(script) as api:
        cache = Cache(kind, api)
        script.probe = cache.answer
        cache.run(script.stop)
    return cache


@pytest.mark.parametrize("kind", CACHES)
def test_a_cache_listed_again_decides_nothing_until_its_watch_is_established(kind: str) -> None:
    """Issue 38 (kind, right after an API server outage): the relist was read, the watch from
    its version not yet answered (a restarted server refuses watches while its own watch cache
    initializes: 429, which the HTTP client retries after each Retry-After), and a quota raised
    meanwhile went unseen: every decision of those seconds used the list from before the raise.
    Until the watch's response has come, the cache answers None (the gate lists)."""
    script = Script(listed=[], watches=[[], []], refusals=2)
    followed(kind, script)
    assert script.probed[:3] == [None, None, None]  # two refused, the first answered


@pytest.mark.parametrize("kind", CACHES)
def test_a_watch_that_ended_leaves_its_cache_not_current_until_the_next_one_answers(
    kind: str,
) -> None:
    """A watch the server ends cleanly (its timeout, or a server shutting down) is resumed, not
    relisted: what changed after it ended is only known once the next watch is established,
    which on a server just restarted can take seconds."""
    script = Script(listed=[], watches=[[], [], []])
    followed(kind, script)
    assert script.probed == [None, None, None]


def test_the_rule_between_list_watch_and_end() -> None:
    """`follow` calls `on_current` once a watch after a list or a resume is established (its
    response headers came), `on_stale` each time a watch ends, whatever the reason."""
    added = {"type": "ADDED", "object": template("vgpu-2", "11")}
    script = Script(listed=[template("vgpu-1", "9")], watches=[[added], []])
    said: list[str] = []
    with serving(script) as api:
        follow(api, PATH, stop=script.stop, on_list=lambda _items: said.append("list"),
               on_event=lambda kind, _obj: said.append(kind),
               on_current=lambda: said.append("current"), on_stale=lambda: said.append("stale"),
               what="template")  # fmt: skip
    assert said[:6] == ["list", "current", "ADDED", "stale", "current", "stale"]
