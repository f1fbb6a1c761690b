"""The connection loop's worker queue over a real listening socket and plain HTTP (issue 25): a
review whose caller's timeout passed while it waited is answered 504 and never handled; a full
queue refuses the namespace holding the most with a 503 at once; a neighbour's review is handled
before the flood's backlog. One worker held by a gate; time is a clock the test moves."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from vgpu_bridge.webhook.connections import ConnectionLoop, Limits, Reply, Request, bind

WAIT_S = 30.0  # a hang detector, never a latency bound


@dataclass
class GatedRoutes:
    """The first request holds the only worker until `gate` opens; keys are the path's first
    letter; every handled path is recorded in order."""

    gate: threading.Event = field(default_factory=threading.Event)
    handled: list[str] = field(default_factory=list)

    def inline(self, request: Request) -> Reply | None:
        return None

    def side(self, request: Request) -> bool:
        return request.head.path.startswith("/side")

    def quick(self, request: Request) -> Reply | None:
        return None

    def handle(self, request: Request) -> Reply:
        self.handled.append(request.head.path)
        if len(self.handled) == 1:
            assert self.gate.wait(WAIT_S)
        return Reply(200, b"handled")

    def queue_key(self, request: Request) -> str:
        return request.head.path[1]


@dataclass
class Served:
    loop: ConnectionLoop
    routes: GatedRoutes
    port: int
    now: list[float]
    shed: list[str]


@pytest.fixture
def served() -> Iterator[Served]:
    now: list[float] = [0.0]
    shed: list[str] = []
    routes = GatedRoutes()
    loop = ConnectionLoop(bind(("127.0.0.1", 0)), routes=routes, clock=lambda: now[0],
                          limits=Limits(workers=1, max_queued=3), shed=shed.append)  # fmt: skip
    thread = threading.Thread(target=loop.serve_forever, daemon=True)
    thread.start()
    yield Served(loop, routes, loop._listener.getsockname()[1], now, shed)
    routes.gate.set()
    loop.shutdown()
    loop.close()


class Background:
    """One request (a POST unless `method` says) on its own connection, answered in the
    background."""

    def __init__(self, port: int, target: str, *, method: str = "POST") -> None:
        self.answer: tuple[int, bytes] | None = None
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
        self._conn.request(method, target, body=b"{}" if method == "POST" else None)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        response = self._conn.getresponse()
        self.answer = (response.status, response.read())
        self._conn.close()

    def result(self) -> tuple[int, bytes]:
        self._thread.join(WAIT_S)
        assert self.answer is not None, "no answer"
        return self.answer


def wait_for(condition: Callable[[], bool]) -> None:
    done = threading.Event()
    for _ in range(int(WAIT_S * 100)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("condition not reached")


def test_a_review_whose_callers_timeout_passed_in_the_queue_is_dropped_unhandled(
    served: Served,
) -> None:
    first = Background(served.port, "/a0")
    wait_for(lambda: served.routes.handled == ["/a0"])
    late = Background(served.port, "/b0?timeout=5s")
    wait_for(lambda: served.loop.queued == 1)
    served.now[0] += 5.0  # the API server has given up on it
    served.routes.gate.set()
    assert first.result() == (200, b"handled")
    status, body = late.result()
    assert status == 504
    assert b"caller's timeout" in body
    assert served.routes.handled == ["/a0"]
    assert served.shed == ["expired"]


def test_a_review_within_its_callers_timeout_is_handled(served: Served) -> None:
    first = Background(served.port, "/a0")
    wait_for(lambda: served.routes.handled == ["/a0"])
    waiting = Background(served.port, "/b0?timeout=5s")
    wait_for(lambda: served.loop.queued == 1)
    served.now[0] += 4.9
    served.routes.gate.set()
    assert first.result()[0] == waiting.result()[0] == 200
    assert served.shed == []


def test_a_full_queue_refuses_the_floods_newest_at_once_and_serves_the_neighbour_first(
    served: Served,
) -> None:
    posts = [Background(served.port, "/f0")]
    wait_for(lambda: served.routes.handled == ["/f0"])
    for index in range(1, 4):
        posts.append(Background(served.port, f"/f{index}"))
        wait_for(lambda index=index: served.loop.queued == index)  # type: ignore[misc]
    neighbour = Background(served.port, "/n0")
    status, body = posts[3].result()  # while the only worker is still held
    assert status == 503
    assert b"refused without waiting" in body
    assert served.shed == ["queue-full"]
    served.routes.gate.set()
    assert neighbour.result()[0] == 200
    assert [p.result()[0] for p in posts[:3]] == [200, 200, 200]
    assert served.routes.handled == ["/f0", "/f1", "/n0", "/f2"]


def test_side_work_is_answered_while_every_review_worker_is_held_and_takes_no_review_room(
    served: Served,
) -> None:
    """Issue 35: scrapes waited in the reviews' queue, and a full queue refused reviews beside
    them; the side worker takes them, from a queue of their own."""
    first = Background(served.port, "/a0")
    wait_for(lambda: served.routes.handled == ["/a0"])
    waiting = [Background(served.port, f"/{name}0") for name in "bc"]
    wait_for(lambda: served.loop.queued == 2)
    scrapes = [Background(served.port, "/side", method="GET") for _ in range(5)]
    assert [s.result() for s in scrapes] == [(200, b"handled")] * 5  # the only worker is held
    assert served.loop.queued == 2
    assert served.shed == []
    served.routes.gate.set()
    assert first.result()[0] == 200
    assert [w.result()[0] for w in waiting] == [200, 200]


def test_a_full_side_queue_refuses_side_work_only() -> None:
    """The side worker held by a scrape, its queue of 2 full: the newest scrape is refused at
    once; a review is still handled by its worker and nothing of the reviews' is shed."""
    shed: list[str] = []
    routes = GatedRoutes()
    loop = ConnectionLoop(bind(("127.0.0.1", 0)), routes=routes, shed=shed.append,
                          limits=Limits(workers=1, max_queued=3, max_side_queued=2))  # fmt: skip
    threading.Thread(target=loop.serve_forever, daemon=True).start()
    port = loop._listener.getsockname()[1]
    try:
        held = Background(port, "/side-0", method="GET")
        wait_for(lambda: routes.handled == ["/side-0"])
        waiting = [
            Background(port, "/side-1", method="GET"),
            Background(port, "/side-2", method="GET"),
        ]
        wait_for(lambda: len(loop._side) == 2)
        status, body = Background(port, "/side-3", method="GET").result()
        assert status == 503
        assert b"other than reviews" in body
        assert shed == ["side-queue-full"]
        assert Background(port, "/a0").result() == (200, b"handled")
        routes.gate.set()
        assert [g.result()[0] for g in (held, *waiting)] == [200, 200, 200]
    finally:
        routes.gate.set()
        loop.shutdown()
        loop.close()


def test_past_the_budget_a_connection_asking_other_than_reviews_waits_reviews_do_not() -> None:
    """Issue 35: 300 connections looping GET /metrics kept the selector thread busy, and the
    neighbour's reviews beside them took 132x their quiet p99. Budget: 1 a second, 1 deep."""
    now: list[float] = [0.0]
    routes = GatedRoutes()
    routes.gate.set()
    loop = ConnectionLoop(bind(("127.0.0.1", 0)), routes=routes, clock=lambda: now[0],
                          limits=Limits(workers=1, others_per_s=1.0, others_burst=1))  # fmt: skip
    threading.Thread(target=loop.serve_forever, daemon=True).start()
    port = loop._listener.getsockname()[1]
    scraper = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT_S)
    try:
        for path in ("/side-1", "/side-2"):  # a first request is free, the second takes the token
            scraper.request("GET", path)
            assert scraper.getresponse().read() == b"handled"
        scraper.request("GET", "/side-3")  # read only once a token is back
        third = threading.Thread(target=lambda: routes.handled.append(
            f"answered {scraper.getresponse().read().decode()}"), daemon=True)  # fmt: skip
        third.start()
        assert [Background(port, f"/r{i}").result() for i in range(3)] == [(200, b"handled")] * 3
        assert "/side-3" not in routes.handled
        now[0] += 1.0
        third.join(WAIT_S)
        assert routes.handled[-2:] == ["/side-3", "answered handled"]
    finally:
        scraper.close()
        loop.shutdown()
        loop.close()
