"""The real `vgpu-bridge webhook` process under attack, and a client that survives its closes."""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.abuse.fake_api import FakeApi
from tests.abuse.hostile import gpu_pod, review
from tests.abuse.processes import command, free_port, running, wait_until
from tests.tls import write_self_signed

ANSWER_DEADLINE_S = 10.0  # per input: longer means the webhook hangs (busy machines included)
PROBE_DEADLINE_S = 5.0


@dataclass
class Webhook:
    process: subprocess.Popen[bytes]
    port: int
    cafile: Path
    log_file: Path

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.cafile))

    def connection(self, timeout: float = ANSWER_DEADLINE_S) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1", self.port, context=self.context(), timeout=timeout
        )

    def get(self, path: str, timeout: float = PROBE_DEADLINE_S) -> tuple[int, bytes]:
        conn = self.connection(timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def admit_normal_pod(self) -> dict[str, Any]:
        """A plain GPU pod's review, on a fresh connection: the answer's `response`."""
        return self.admit(review(gpu_pod()))

    def admit(self, review_body: dict[str, Any]) -> dict[str, Any]:
        """`review_body` sent on a fresh connection, answered 200: the answer's `response`."""
        conn = self.connection()
        try:
            body = json.dumps(review_body).encode()
            conn.request("POST", "/mutate", body, {"Content-Type": "application/json"})
            answer = conn.getresponse()
            data = answer.read()
        finally:
            conn.close()
        assert answer.status == 200, (answer.status, data[:300])
        response: dict[str, Any] = json.loads(data)["response"]
        return response


class Client:
    """One keep-alive connection, reopened whenever the server closed it."""

    def __init__(self, webhook: Webhook) -> None:
        self._webhook = webhook
        self._conn: http.client.HTTPSConnection | None = None

    def post(
        self, body: bytes, content_type: str, *, target: str = "/mutate"
    ) -> tuple[int, bytes, float]:
        """(status, body, seconds); raises OSError (a timeout included) when unanswered."""
        if self._conn is None:
            self._conn = self._webhook.connection()
        headers = {"Content-Type": content_type} if content_type else {}
        start = time.monotonic()
        try:
            self._conn.request("POST", target, body, headers)
            response = self._conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as error:
            self.close()
            raise OSError(f"{type(error).__name__}: {error}") from None
        if response.will_close:
            self.close()
        return response.status, data, time.monotonic() - start

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@contextmanager
def running_webhook(directory: Path, api: FakeApi, *flags: str) -> Iterator[Webhook]:
    """The webhook with `flags` added to its command line."""
    cert, key = write_self_signed(directory)
    port = free_port()
    log_file = directory / "webhook.log"
    args = command(
        "webhook",
        "--listen",
        f"127.0.0.1:{port}",
        "--tls-cert-file",
        str(cert),
        "--tls-key-file",
        str(key),
        "--kubeconfig",
        str(api.kubeconfig(directory)),
        "--sweep-interval-seconds",
        "3600",
        *flags,
    )
    with running(args, log_file) as process:
        webhook = Webhook(process, port, cert, log_file)
        wait_until(lambda: webhook.get("/healthz")[0] == 200, process, log_file, "webhook /healthz")
        yield webhook
