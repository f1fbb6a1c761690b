"""Many API calls from a few client threads, each thread on one kept-alive TLS connection.

The e2e client (``KubeClient``) opens a connection per call; for 20,000 claims (two calls each)
that handshake would be most of the creation time, which is not a measurement here.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from e2e.cluster.client import ApiError, Json, KubeClient

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
CLIENT_THREADS = 8
T = TypeVar("T")


class ApiConnection:
    """One kept-alive TLS connection to the API server, with the client's admin certificate;
    a connection the server closed between calls is opened again once."""

    def __init__(self, kube: KubeClient, *, timeout_s: float = 60.0) -> None:
        self._kube, self._timeout_s = kube, timeout_s
        self._connection = self._open()

    def _open(self) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=str(self._kube.ca_file))
        context.load_cert_chain(str(self._kube.client.cert), str(self._kube.client.key))
        return http.client.HTTPSConnection(
            self._kube.host, self._kube.port, context=context, timeout=self._timeout_s
        )

    def send(
        self, method: str, path: str, body: Json | None = None, *, content_type: str = JSON
    ) -> bytes:
        """The answer's body; `ApiError` for an error status."""
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": JSON, "Content-Type": content_type}
        for attempt in (1, 2):
            try:
                self._connection.request(method, path, body=payload, headers=headers)
                response = self._connection.getresponse()
                data = response.read()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._connection.close()
                self._connection = self._open()
                if attempt == 2:
                    raise
        if response.status >= 400:
            raise ApiError(method, path, response.status, data.decode(errors="replace"))
        return data

    def close(self) -> None:
        self._connection.close()


def in_threads(
    kube: KubeClient,
    items: Sequence[T],
    work: Callable[[ApiConnection, T], None],
    *,
    threads: int = CLIENT_THREADS,
) -> None:
    """`work(connection, item)` for every item, from `threads` threads, each with a connection
    of its own; the first failure is raised."""
    local = threading.local()
    opened: list[ApiConnection] = []
    lock = threading.Lock()

    def run(item: T) -> None:
        if not hasattr(local, "connection"):
            local.connection = ApiConnection(kube)
            with lock:
                opened.append(local.connection)
        work(local.connection, item)

    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(run, items))
    finally:
        for connection in opened:
            connection.close()
