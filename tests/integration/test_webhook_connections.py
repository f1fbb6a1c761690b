"""The webhook's connections over real loopback sockets: slow and many clients cost no thread and
never stop /healthz or an admission; every request has a deadline; bad heads get an HTTP error;
a garbage client is one JSON log line; `--client-ca-file` gates /mutate."""

from __future__ import annotations

import contextlib
import datetime
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.integration.webhook_harness import (
    REVIEW,
    RunningWebhook,
    answers_health,
    running_webhook,
    webhook_process,
)
from tests.tls import write_self_signed

SLOW = 300  # slow connections held at once: loopback only, closed by the test


def admitted(webhook: RunningWebhook) -> bool:
    status, body = webhook.post(REVIEW)
    return status == 200 and json.loads(body)["response"]["allowed"] is True


@contextmanager
def slow_connections(port: int, count: int, *, cafile: Path | None = None) -> Iterator[None]:
    """`count` connections that send part of a request head and then wait; half of them first
    finish a TLS handshake (with `cafile`), the rest send nothing at all."""
    with ExitStack() as stack:
        for index in range(count):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
            if cafile is not None and index % 2:
                context = ssl.create_default_context(cafile=str(cafile))
                sock = stack.enter_context(context.wrap_socket(sock, server_hostname="127.0.0.1"))
                sock.sendall(b"POST /mutate HTTP/1.1\r\nContent-Le")
        yield


def raw_exchange(port: int, data: bytes, *, cafile: Path) -> bytes:
    """Send `data` over TLS and read until the server closes (at most 10 s per read)."""
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
    ):
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[RunningWebhook]:
    with running_webhook(tmp_path, request_timeout_seconds=2, workers=2) as running:
        yield running


def test_slow_connections_hold_no_thread_and_stop_neither_health_nor_admission(
    webhook: RunningWebhook,
) -> None:
    threads_before = threading.active_count()
    with slow_connections(webhook.port, SLOW, cafile=webhook.cert_file):
        held_threads = threading.active_count() - threads_before
        assert webhook.get("/healthz") == (200, b"ok")
        assert admitted(webhook)
    assert held_threads < 20, f"{held_threads} threads for {SLOW} connections"


def test_a_request_dribbled_byte_by_byte_is_cut_at_its_deadline(webhook: RunningWebhook) -> None:
    """The deadline covers the whole request: bytes that keep arriving do not extend it."""
    context = ssl.create_default_context(cafile=str(webhook.cert_file))
    head = b"POST /mutate HTTP/1.1\r\nX-Padding: " + b"a" * 600
    with (
        socket.create_connection(("127.0.0.1", webhook.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
    ):
        for byte in head:  # 600 bytes at 0.1 s: 60 s, far past the 2 s deadline
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break  # closed by the server
            time.sleep(0.1)
        else:
            pytest.fail("the server kept a dribbling request open for 60 s")


def test_past_the_connection_cap_slow_clients_make_room_not_keep_alive_ones(
    tmp_path: Path,
) -> None:
    with running_webhook(tmp_path, max_connections=16) as webhook:
        api_server = webhook.connection()  # a keep-alive connection, as the API server keeps
        assert keep_alive_admission(api_server)
        with slow_connections(webhook.port, 40):
            assert webhook.get("/healthz") == (200, b"ok")
            assert admitted(webhook)
            assert keep_alive_admission(api_server)  # the same connection, never closed
        api_server.close()


def keep_alive_admission(conn: http.client.HTTPSConnection) -> bool:
    conn.request("POST", "/mutate", body=REVIEW)
    response = conn.getresponse()
    return response.status == 200 and json.loads(response.read())["response"]["allowed"] is True


@pytest.mark.parametrize(
    ("header", "status"),
    [
        pytest.param(b"Content-Length: " + b"9" * 5000, b"413", id="5000-digit-length"),
        pytest.param(b"Content-Length: 99999999999999999999999", b"413", id="huge-length"),
        pytest.param(b"Content-Length: 12x", b"400", id="not-a-number"),
        pytest.param(b"Content-Length: -1", b"400", id="negative"),
        pytest.param(b"Transfer-Encoding: chunked", b"411", id="chunked"),
        pytest.param(b"X-Long: " + b"a" * 40_000, b"431", id="head-too-large"),
    ],
)
def test_a_bad_request_head_gets_an_http_error_never_a_dropped_connection(
    webhook: RunningWebhook, header: bytes, status: bytes
) -> None:
    request = b"POST /mutate HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n\r\n"
    answer = raw_exchange(webhook.port, request, cafile=webhook.cert_file)
    assert answer.startswith(b"HTTP/1.1 " + status), answer[:200]
    assert webhook.get("/healthz") == (200, b"ok")


def test_a_malformed_request_line_is_400(webhook: RunningWebhook) -> None:
    answer = raw_exchange(webhook.port, b"HELLO\r\n\r\n", cafile=webhook.cert_file)
    assert answer.startswith(b"HTTP/1.1 400 ")


def test_pipelined_requests_are_all_answered_in_order(webhook: RunningWebhook) -> None:
    requests = (
        b"GET /healthz HTTP/1.1\r\n\r\n" * 50 + b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n"
    )
    answer = raw_exchange(webhook.port, requests, cafile=webhook.cert_file)
    assert answer.count(b"HTTP/1.1 200 OK") == 50
    assert answer.rstrip().endswith(b"not found")


def test_a_garbage_client_is_one_json_log_line(tmp_path: Path) -> None:
    with webhook_process(tmp_path) as webhook:
        with socket.create_connection(("127.0.0.1", webhook.port), timeout=10) as sock:
            peer_port = sock.getsockname()[1]
            sock.sendall(b"GET /healthz HTTP/1.1\r\n\r\n" + bytes(range(256)))  # not TLS
            with contextlib.suppress(OSError):
                sock.recv(100)  # the server ends it
        assert answers_health(webhook)  # and keeps serving
        webhook.process.terminate()
        webhook.process.wait(timeout=10)
        lines = webhook.lines()
    events = [json.loads(line) for line in lines]  # every line is JSON: no raw traceback
    mine = [e for e in events if e.get("peer") == f"127.0.0.1:{peer_port}"]
    assert len(mine) == 1, lines
    assert mine[0]["event"] == "connection failed"
    assert mine[0]["reason"].startswith("TLS")


# -- --client-ca-file -----------------------------------------------------------------------


def write_client_certificate(directory: Path, ca_cert: Path, ca_key: Path) -> tuple[Path, Path]:
    """A client certificate for CN=kube-apiserver signed by the CA in (ca_cert, ca_key)."""
    authority = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    authority_key: Any = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(authority.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(authority_key, hashes.SHA256())
    )
    cert_file, key_file = directory / "client.crt", directory / "client.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def post_with(webhook: RunningWebhook, client: tuple[Path, Path] | None) -> int:
    conn = webhook.connection()
    if client is not None:
        context = ssl.create_default_context(cafile=str(webhook.cert_file))
        context.load_cert_chain(*map(str, client))
        conn._context = context  # type: ignore[attr-defined]  # present a client certificate
    try:
        conn.request("POST", "/mutate", body=REVIEW)
        return conn.getresponse().status
    finally:
        conn.close()


def test_with_a_client_ca_only_its_clients_may_admit(tmp_path: Path) -> None:
    for name in ("trusted", "stranger", "server"):
        (tmp_path / name).mkdir()
    trusted_ca, trusted_key = write_self_signed(tmp_path / "trusted", common_name="trusted CA")
    trusted = write_client_certificate(tmp_path / "trusted", trusted_ca, trusted_key)
    stranger = write_client_certificate(
        tmp_path / "stranger", *write_self_signed(tmp_path / "stranger", common_name="other CA")
    )
    with running_webhook(tmp_path / "server", client_ca_file=str(trusted_ca)) as webhook:
        assert post_with(webhook, trusted) == 200
        assert post_with(webhook, None) == 403
        # the handshake fails: an SSLError, or a reset, depending on when TLS 1.3 reports it
        with pytest.raises(OSError):  # noqa: PT011
            post_with(webhook, stranger)
        assert webhook.get("/healthz") == (200, b"ok")  # the kubelet's probes present none
        assert webhook.get("/metrics")[0] == 403
