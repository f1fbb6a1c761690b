"""`vgpu-bridge webhook` drains on SIGTERM (issue 38, scenario 1): during a rolling update the API
server still routes reviews to a terminating replica until kube-proxy has seen its endpoint go,
and a connection refused there is a refused pod (no retry of a webhook POST). So the replica keeps
answering for `--drain-seconds`, each reply with `Connection: close` (the API server's kept-alive
connections end cleanly), then stops accepting, lets the requests in flight finish, and exits 0.
A second signal ends the drain; `--drain-seconds 0` stops at once, as before.

The real process over real TLS and real signals; no cluster (the API is unreachable: these
reviews need none). Nothing here measures time: each wait is bounded far above what it needs."""

from __future__ import annotations

import http.client
import signal
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.integration.webhook_harness import REVIEW, WebhookProcess, webhook_process

LONG_DRAIN = "300"  # longer than any wait below: only a second signal or a bug ends it sooner
EXIT_WAIT_S = 60


def wait_until(condition: Callable[[], bool], *, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def logged(webhook: WebhookProcess, event: str) -> bool:
    return any(f'"{event}"' in line for line in webhook.lines())


def post_review(webhook: WebhookProcess) -> http.client.HTTPResponse:
    conn = webhook.connection()
    conn.request("POST", "/mutate", body=REVIEW, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


def terminate_and_wait_for_drain(webhook: WebhookProcess) -> None:
    webhook.process.send_signal(signal.SIGTERM)
    wait_until(lambda: logged(webhook, "draining"), what="the drain's log line")


@contextmanager
def half_sent_review(webhook: WebhookProcess) -> Iterator[ssl.SSLSocket]:
    """A TLS connection that has sent a review's head and half its body: a request in flight."""
    context = ssl.create_default_context(cafile=str(webhook.cert_file))
    raw = socket.create_connection(("127.0.0.1", webhook.port), timeout=30)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        head = f"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: {len(REVIEW)}\r\n\r\n"
        sock.sendall(head.encode() + REVIEW[: len(REVIEW) // 2])
        yield sock


def read_until_closed(sock: ssl.SSLSocket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_a_review_during_the_drain_is_answered_with_connection_close(tmp_path: Path) -> None:
    with webhook_process(tmp_path, "--drain-seconds", LONG_DRAIN) as webhook:
        terminate_and_wait_for_drain(webhook)
        response = post_review(webhook)
        assert response.status == 200
        assert response.getheader("Connection") == "close"
        assert webhook.process.poll() is None  # still draining: a second review is answered too
        assert post_review(webhook).status == 200


def test_the_readiness_probe_fails_during_the_drain_and_liveness_does_not(tmp_path: Path) -> None:
    with webhook_process(tmp_path, "--drain-seconds", LONG_DRAIN) as webhook:
        terminate_and_wait_for_drain(webhook)
        conn = webhook.connection()
        conn.request("GET", "/healthz")
        assert conn.getresponse().status == 200
        conn.close()
        conn = webhook.connection()
        conn.request("GET", "/readyz")
        answer = conn.getresponse()
        assert (answer.status, answer.read()) == (503, b"draining: not ready")
        conn.close()


def test_the_process_exits_0_once_the_drain_is_over(tmp_path: Path) -> None:
    with webhook_process(tmp_path, "--drain-seconds", "1") as webhook:
        terminate_and_wait_for_drain(webhook)
        assert webhook.process.wait(timeout=EXIT_WAIT_S) == 0, webhook.lines()
        assert logged(webhook, "drained; stopped")


def test_a_second_signal_ends_the_drain(tmp_path: Path) -> None:
    with webhook_process(tmp_path, "--drain-seconds", LONG_DRAIN) as webhook:
        terminate_and_wait_for_drain(webhook)
        webhook.process.send_signal(signal.SIGINT)
        assert webhook.process.wait(timeout=EXIT_WAIT_S) == 0, webhook.lines()


def test_a_review_in_flight_when_the_drain_ends_is_answered_before_the_exit(
    tmp_path: Path,
) -> None:
    with webhook_process(tmp_path, "--drain-seconds", "1") as webhook:
        with half_sent_review(webhook) as sock:
            terminate_and_wait_for_drain(webhook)
            wait_until(lambda: logged(webhook, "stopped accepting; finishing what is in flight"),
                       what="the end of the drain")  # fmt: skip
            assert webhook.process.poll() is None  # it waits for our review
            sock.sendall(REVIEW[len(REVIEW) // 2 :])
            reply = read_until_closed(sock)
        assert reply.startswith(b"HTTP/1.1 200 OK\r\n"), reply[:200]
        assert b"\r\nConnection: close\r\n" in reply.split(b"\r\n\r\n")[0] + b"\r\n"
        assert webhook.process.wait(timeout=EXIT_WAIT_S) == 0, webhook.lines()


def test_no_drain_stops_at_once_without_waiting_for_a_request_in_flight(tmp_path: Path) -> None:
    with webhook_process(tmp_path, "--drain-seconds", "0") as webhook:
        with half_sent_review(webhook) as sock:
            webhook.process.send_signal(signal.SIGTERM)
            assert webhook.process.wait(timeout=EXIT_WAIT_S) == 0, webhook.lines()
            assert read_until_closed(sock) == b""  # closed unanswered: never completed
        assert not logged(webhook, "draining")
