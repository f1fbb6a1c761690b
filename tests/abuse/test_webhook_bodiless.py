"""Bodiless requests from the pod network beside another namespace's GPU admissions (issue 35,
item 1), against the real webhook process: 300 TLS connections loop `GET /metrics` (no rights
needed, only the pod network), and, with `--client-ca-file`, `GET /nothing` without a
certificate, while a neighbour's GPU pods are reviewed one after another. Every review of the
neighbour is admitted (none refused with a 503: scrapes once filled the reviews' queue and a full
queue shed the reviews beside them); the flood gets its metrics, or a 503 of its own queue, or
its 403; the process serves on. Outcomes only, never speed: that is `bench/webhook.py`'s row."""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.abuse.fake_api import FakeApi
from tests.abuse.hostile import gpu_pod, review
from tests.abuse.probe import Prober
from tests.abuse.processes import tail
from tests.abuse.webhook_client import ANSWER_DEADLINE_S, Webhook, running_webhook
from tests.integration.test_webhook_connections import write_client_certificate
from tests.tls import write_self_signed

FLOOD_CONNECTIONS = 300
FLOOD_MOST_EACH = 200  # requests per flood connection at most: the flood ends with the reviews
NEIGHBOUR_REVIEWS = 32
MAX_RSS_MB = 500
#: few workers and a small queue, so that the flood would overfill it on any machine
TIGHT = ("--workers", "2", "--max-queued-reviews", "8")


@dataclass
class Flood:
    """FLOOD_CONNECTIONS keep-alive TLS connections, each looping one bodiless GET on one
    thread (asyncio), until `stop` or FLOOD_MOST_EACH requests each."""

    port: int
    context: ssl.SSLContext
    target: str
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        asyncio.run(self._all())

    async def _all(self) -> None:
        await asyncio.gather(*(self._loop() for _ in range(FLOOD_CONNECTIONS)))

    async def _loop(self) -> None:
        request = f"GET {self.target} HTTP/1.1\r\nHost: webhook\r\n\r\n".encode()
        sent = 0
        while sent < FLOOD_MOST_EACH and not self.stop.is_set():
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", self.port, ssl=self.context),
                    ANSWER_DEADLINE_S,
                )
            except (OSError, TimeoutError) as error:
                self.errors[type(error).__name__] += 1
                sent += 1
                continue
            try:
                while sent < FLOOD_MOST_EACH and not self.stop.is_set():
                    sent += 1
                    writer.write(request)
                    status, close = await asyncio.wait_for(_answer(reader), ANSWER_DEADLINE_S)
                    self.statuses[status] += 1
                    if close:
                        break
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as error:
                self.errors[type(error).__name__] += 1
            finally:
                writer.close()


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """One answer's status, read whole; whether the server closes the connection after it."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
    status = int(head.split(" ", 2)[1])
    length = 0
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name == "content-length":
            length = int(value)
    await reader.readexactly(length)
    return status, "connection: close" in head


@dataclass
class Neighbour:
    """Reviews of GPU pods in another namespace, one after another on a keep-alive connection."""

    webhook: Webhook
    context: ssl.SSLContext
    seconds: list[float] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def review_all(self) -> None:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.webhook.port, context=self.context, timeout=ANSWER_DEADLINE_S
        )
        try:
            for index in range(NEIGHBOUR_REVIEWS):
                self._review(conn, index)
        finally:
            conn.close()

    def _review(self, conn: http.client.HTTPSConnection, index: int) -> None:
        pod = gpu_pod(name=f"neighbour-{index}")
        data = json.dumps(review(pod, namespace="neighbour", uid=f"n-{index}")).encode()
        start = time.monotonic()
        conn.request("POST", "/mutate?timeout=10s", data, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        text = answer.read()
        self.seconds.append(time.monotonic() - start)
        if answer.status != 200 or json.loads(text)["response"]["allowed"] is not True:
            self.refused.append(f"HTTP {answer.status}: {text[:200]!r}")


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory, api: FakeApi) -> Iterator[Webhook]:
    with running_webhook(tmp_path_factory.mktemp("bodiless"), api, *TIGHT) as running:
        yield running


@dataclass(frozen=True)
class Guarded:
    webhook: Webhook
    client: tuple[Path, Path]  # a certificate and key signed by the webhook's client CA


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, api: FakeApi) -> Iterator[Guarded]:
    directory = tmp_path_factory.mktemp("bodiless-ca")
    (directory / "ca").mkdir()
    ca_cert, ca_key = write_self_signed(directory / "ca", common_name="client CA")
    client = write_client_certificate(directory / "ca", ca_cert, ca_key)
    flags = (*TIGHT, "--client-ca-file", str(ca_cert))
    with running_webhook(directory, api, *flags) as running:
        yield Guarded(running, client)


def flooded_reviews(webhook: Webhook, neighbour: Neighbour, target: str) -> Flood:
    """The neighbour's reviews while the flood loops `target`; the flood, once it is over."""
    flood = Flood(webhook.port, webhook.context(), target)
    flooding = threading.Thread(target=flood.run, daemon=True)
    with Prober(webhook.process.pid, lambda: webhook.get("/healthz")[0]) as prober:
        flooding.start()
        while sum(flood.statuses.values()) < FLOOD_CONNECTIONS and flooding.is_alive():
            time.sleep(0.05)  # the flood under way: every connection has had an answer
        neighbour.review_all()
        flood.stop.set()
        flooding.join(timeout=120)
    print(
        f"\nabuse/bodiless {target}: {sum(flood.statuses.values()):,} flood answers "
        f"{dict(flood.statuses)}, errors {dict(flood.errors)}; neighbour "
        f"{len(neighbour.seconds)} reviews, p50 {statistics.median(neighbour.seconds) * 1e3:.0f}"
        f" ms, max {max(neighbour.seconds) * 1e3:.0f} ms; {prober.summary()}"
    )
    assert not flooding.is_alive()
    assert not prober.failures, prober.failures[:10]
    assert prober.max_rss_mb < MAX_RSS_MB, prober.summary()
    assert webhook.process.poll() is None, tail(webhook.log_file)
    return flood


def test_a_flood_of_metrics_scrapes_refuses_none_of_a_neighbours_reviews(tight: Webhook) -> None:
    neighbour = Neighbour(tight, tight.context())
    flood = flooded_reviews(tight, neighbour, "/metrics")
    assert neighbour.refused == [], neighbour.refused[:5]
    assert len(neighbour.seconds) == NEIGHBOUR_REVIEWS
    assert set(flood.statuses) <= {200, 503}, flood.statuses  # 503: the scrapes' own queue
    assert flood.statuses[200] > 0


def test_without_a_client_certificate_a_flood_is_refused_before_any_queue(
    guarded: Guarded,
) -> None:
    """With --client-ca-file the certificate was checked by a worker, after the request had
    taken queue room: 2 of 83 reviews were still refused."""
    context = guarded.webhook.context()
    context.load_cert_chain(*map(str, guarded.client))
    neighbour = Neighbour(guarded.webhook, context)
    flood = flooded_reviews(guarded.webhook, neighbour, "/nothing")
    assert neighbour.refused == [], neighbour.refused[:5]
    assert len(neighbour.seconds) == NEIGHBOUR_REVIEWS
    assert set(flood.statuses) == {403}, flood.statuses
