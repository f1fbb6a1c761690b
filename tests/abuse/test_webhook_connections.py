"""Slow, many and malformed connections against the real webhook process: held slow connections
cost no thread each and are closed by a whole-request deadline, while /healthz and ordinary
reviews keep being answered; odd request heads get an HTTP answer, never a silent drop."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from tests.abuse.probe import Prober
from tests.abuse.webhook_client import ANSWER_DEADLINE_S, Webhook

SLOW_EACH = 100  # of each kind below: 300 connections in all
HOLD_S = 6.0  # reviews and probes while all of them are held
CLOSE_DEADLINE_S = 40.0  # a whole-request deadline must have closed every one by then
MAX_RSS_MB = 500


@dataclass
class Slow:
    kind: str
    sock: socket.socket
    closed: bool = False


def _tls(webhook: Webhook) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", webhook.port), timeout=ANSWER_DEADLINE_S)
    return webhook.context().wrap_socket(raw, server_hostname="127.0.0.1")


def open_slow(webhook: Webhook) -> list[Slow]:
    """Silent TCP (a handshake never started), a head sent a few bytes at a time, and a full
    head whose body never comes."""
    slow = []
    for _ in range(SLOW_EACH):
        slow.append(Slow("silent", socket.create_connection(("127.0.0.1", webhook.port))))
        head = _tls(webhook)
        head.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")
        slow.append(Slow("dribbled head", head))
        body = _tls(webhook)
        body.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
        slow.append(Slow("missing body", body))
    for conn in slow:
        conn.sock.setblocking(False)
    return slow


def poll(conn: Slow) -> None:
    """Note whether the server has closed it; dribble one more byte of head if not."""
    try:
        while conn.sock.recv(4096):
            pass  # a reply (e.g. 408) before the close
        conn.closed = True
    except (ssl.SSLWantReadError, BlockingIOError):
        if conn.kind == "dribbled head":
            try:
                conn.sock.send(b"X")
            except (ssl.SSLWantWriteError, BlockingIOError):
                pass
            except OSError:
                conn.closed = True
    except OSError:
        conn.closed = True


@contextmanager
def dribbling(slow: list[Slow]) -> Iterator[None]:
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(1.0):
            for conn in slow:
                if not conn.closed:
                    poll(conn)

    thread = threading.Thread(target=run, name="dribble", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def test_three_hundred_slow_connections_hold_no_thread_each_and_are_closed_by_a_deadline(
    webhook: Webhook,
) -> None:
    prober = Prober(webhook.process.pid, lambda: webhook.get("/healthz")[0])
    prober.sample()
    threads_before = prober.max_threads
    opened = time.monotonic()
    slow = open_slow(webhook)
    reviews = []
    try:
        with prober, dribbling(slow):
            while time.monotonic() - opened < HOLD_S:
                reviews.append(webhook.admit_normal_pod()["allowed"])
                time.sleep(0.5)
            while not all(c.closed for c in slow) and time.monotonic() - opened < CLOSE_DEADLINE_S:
                time.sleep(0.5)
        open_left = [c.kind for c in slow if not c.closed]
    finally:
        for conn in slow:
            conn.sock.close()
    print(
        f"\nabuse/slow connections: {len(slow)} held, {len(reviews)} reviews answered, "
        f"all closed after {time.monotonic() - opened:.1f} s; {prober.summary()}"
    )
    assert reviews
    assert all(reviews)
    assert not prober.failures, prober.failures[:10]
    assert prober.max_threads - threads_before < len(slow) // 3, prober.summary()
    assert prober.max_rss_mb < MAX_RSS_MB, prober.summary()
    assert not open_left, f"{len(open_left)} still open after {CLOSE_DEADLINE_S} s: {open_left[:5]}"


def test_fifty_simultaneous_new_connections_are_all_answered(webhook: Webhook) -> None:
    statuses: list[int | str] = []

    def probe() -> None:
        try:
            statuses.append(webhook.get("/healthz", timeout=ANSWER_DEADLINE_S)[0])
        except OSError as error:
            statuses.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=probe) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [200] * 50


ODD_HEADS = {
    "5,000-digit Content-Length": b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: "
    + b"9" * 5000
    + b"\r\n\r\n",
    "Content-Length over the body limit": b"POST /mutate HTTP/1.1\r\nHost: x\r\n"
    b"Content-Length: 4194304\r\n\r\n",
    "negative Content-Length": b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    "chunked body": b"POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n0\r\n\r\n",
    "no Content-Length": b"POST /mutate HTTP/1.1\r\nHost: x\r\n\r\n",
    "100 KB header": b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 100_000 + b"\r\n\r\n",
    "2,000 headers": b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 2000 + b"\r\n",
    "garbage request line": b"\x00\xff GARBAGE\r\n\r\n",
    "HTTP/0.9": b"GET /healthz\r\n\r\n",
    "two Content-Lengths": b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
    b"Content-Length: 3\r\n\r\n{}",
}


@pytest.mark.parametrize("head", list(ODD_HEADS), ids=list(ODD_HEADS))
def test_an_odd_request_head_gets_an_http_answer_not_a_dropped_connection(
    webhook: Webhook, head: str
) -> None:
    sock = _tls(webhook)
    try:
        sock.sendall(ODD_HEADS[head])
        answer = b""
        while b"\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    finally:
        sock.close()
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.1 4"), f"{head}: answered {answer[:200]!r}"
    assert webhook.get("/healthz")[0] == 200
