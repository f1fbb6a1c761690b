"""Workers wake the selector thread through a socket pair: replies that queue up before the
selector looks share one wake-up byte (a write less per admission under load), and a reply
queued after the selector has taken its wake-ups sends a fresh one (none waits for a timeout)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from vgpu_bridge.webhook.connections import (
    ConnectionLoop,
    Limits,
    Reply,
    Request,
    _Connection,
    bind,
)
from vgpu_bridge.webhook.wire import Head
from vgpu_bridge.webhook.workqueue import Job


class OkRoutes:
    def inline(self, request: Request) -> Reply | None:
        return None

    def side(self, request: Request) -> bool:
        return False

    def quick(self, request: Request) -> Reply | None:
        return None

    def handle(self, request: Request) -> Reply:
        return Reply(200, b"ok")

    def queue_key(self, request: Request) -> str:
        return "all"


@pytest.fixture
def loop() -> Iterator[ConnectionLoop]:
    listener = bind(("127.0.0.1", 0))
    loop = ConnectionLoop(listener, routes=OkRoutes(), limits=Limits())
    loop._wake_r.setblocking(False)  # as serve_forever sets it
    yield loop
    loop.close()


def answer(loop: ConnectionLoop, count: int) -> None:
    """Run a worker (on this thread) over `count` requests, then let it stop."""
    with socket.socket() as sock:
        conn = _Connection(sock, "127.0.0.1:1", "busy", 0.0)
        request = Request(Head("POST", "/mutate", "HTTP/1.1"), b"{}", conn.peer, False)
        for _ in range(count):
            loop._work.put(Job((conn, request), "all", 2, deadline=float("inf")))
        loop._work.close()  # the worker takes what is queued, then stops
        loop._worker(loop._work)


def pending_wakeups(loop: ConnectionLoop) -> int:
    try:
        return len(loop._wake_r.recv(4096))
    except BlockingIOError:
        return 0


def test_replies_queued_before_the_selector_looks_share_one_wakeup(
    loop: ConnectionLoop,
) -> None:
    answer(loop, 3)
    assert loop._done.qsize() == 3
    assert pending_wakeups(loop) == 1


def test_a_reply_after_the_selector_took_its_wakeups_sends_a_new_one(
    loop: ConnectionLoop,
) -> None:
    answer(loop, 2)
    loop._drain_wakeups()
    answer(loop, 1)
    assert pending_wakeups(loop) == 1
    loop._drain_wakeups()
    assert pending_wakeups(loop) == 0
