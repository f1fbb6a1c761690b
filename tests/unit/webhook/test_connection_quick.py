"""Quick requests are answered on the selector thread while the turn's budget lasts (no hand-off
to a worker and back); past it, or when the route gives up, a worker answers. Over a real
listening socket and plain HTTP."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator

import pytest

from vgpu_bridge.webhook import connections
from vgpu_bridge.webhook.connections import ConnectionLoop, Limits, Reply, Request, bind


class ThreadNamingRoutes:
    """Answers with the name of the thread that answered; `quick` only for /quick."""

    def inline(self, request: Request) -> Reply | None:
        return None

    def side(self, request: Request) -> bool:
        return False

    def quick(self, request: Request) -> Reply | None:
        if request.head.path != "/quick":
            return None
        return Reply(200, threading.current_thread().name.encode())

    def handle(self, request: Request) -> Reply:
        return Reply(200, threading.current_thread().name.encode())

    def queue_key(self, request: Request) -> str:
        return "all"


@pytest.fixture
def port() -> Iterator[int]:
    listener = bind(("127.0.0.1", 0))
    loop = ConnectionLoop(listener, routes=ThreadNamingRoutes(), limits=Limits(workers=2))
    thread = threading.Thread(target=loop.serve_forever, name="selector", daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    loop.shutdown()
    loop.close()


def answered_by(port: int, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=b"{}")
        return conn.getresponse().read().decode()
    finally:
        conn.close()


def test_a_quick_request_is_answered_on_the_selector_thread(port: int) -> None:
    assert answered_by(port, "/quick") == "selector"


def test_a_request_the_route_gives_up_on_goes_to_a_worker(port: int) -> None:
    assert answered_by(port, "/slow").startswith("worker-")


def test_past_the_turns_budget_a_quick_request_goes_to_a_worker(
    port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "QUICK_BUDGET_S", -1.0)
    assert answered_by(port, "/quick").startswith("worker-")


def test_started_is_called_once_the_workers_run_before_any_connection_is_served() -> None:
    listener = bind(("127.0.0.1", 0))
    loop = ConnectionLoop(listener, routes=ThreadNamingRoutes(), limits=Limits(workers=3))
    seen: list[list[str]] = []
    earlier = set(threading.enumerate())  # other tests' workers may still be winding down

    def started() -> None:
        ours = set(threading.enumerate()) - earlier
        seen.append(sorted(t.name for t in ours if t.name.startswith("worker-")))

    thread = threading.Thread(target=loop.serve_forever, args=(started,), daemon=True)
    thread.start()
    try:
        assert answered_by(listener.getsockname()[1], "/slow").startswith("worker-")
        assert seen == [["worker-0", "worker-1", "worker-2"]]
    finally:
        loop.shutdown()
        loop.close()
