"""Pods of thousands of containers, and a flood of big dry runs while another namespace admits
its GPU pods (issue 25), against the real webhook process. Outcomes only, never speed (that is
`bench/webhook.py`'s row): the big pods are refused naming the list; under the flood every one of
the neighbour's reviews is admitted, every flood review is refused naming the list or turned away
by the full queue with a 503 that the metrics count; work whose caller's timeout has passed is
dropped with a 504 and counted; memory stays bounded and the process serves on."""

from __future__ import annotations

import json
import re
import statistics
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.abuse.fake_api import FakeApi
from tests.abuse.hostile import gpu_pod, review
from tests.abuse.probe import Prober
from tests.abuse.processes import rss_mb, tail
from tests.abuse.webhook_client import Client, Webhook, running_webhook

FLOOD_CLIENTS = 12  # each on its own keep-alive connection, as the API server's are
FLOOD_EACH = 6
FLOOD_CONTAINERS = 5_000  # 0.5 MB of review, as the issue's `kubectl create --dry-run=server`
NEIGHBOUR_REVIEWS = 20
MAX_RSS_MB = 500
#: a small queue and two workers, so that the flood overfills it on any machine
TIGHT = ("--workers", "2", "--max-queued-reviews", "4")


def containers(count: int, **fields: Any) -> list[dict[str, Any]]:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}
    return [{"name": f"c{i}", "image": "cuda:12", "resources": {"limits": limits}, **fields}
            for i in range(count)]  # fmt: skip


def claimed_pod(count: int) -> dict[str, Any]:
    pod = gpu_pod()
    pod["spec"]["resourceClaims"] = [{"name": f"c{i}"} for i in range(count)]
    return pod


def big_pod(count: int, **fields: Any) -> dict[str, Any]:
    pod = gpu_pod()
    pod["spec"]["containers"] = containers(count, **fields)
    return pod


def body(obj: dict[str, Any], **request: Any) -> bytes:
    return json.dumps(review(obj, **request)).encode()


def denial(client: Client, data: bytes) -> str:
    status, answer, _ = client.post(data, "application/json")
    assert status == 200, answer[:300]
    response = json.loads(answer)["response"]
    assert response["allowed"] is False, response
    return str(response["status"]["message"])


def shed(webhook: Webhook, reason: str) -> float:
    status, text = webhook.get("/metrics")
    assert status == 200
    found = re.search(rf'vgpu_bridge_requests_shed_total{{reason="{reason}"}} (\S+)', text.decode())
    return float(found.group(1)) if found else 0.0


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory, api: FakeApi) -> Iterator[Webhook]:
    with running_webhook(tmp_path_factory.mktemp("tight"), api, *TIGHT) as running:
        yield running


@pytest.mark.parametrize(
    ("obj", "named"),
    [
        (big_pod(FLOOD_CONTAINERS), "spec.containers: a pod may have at most 256 containers"),
        (big_pod(10_000), "spec.containers: a pod may have at most 256 containers"),
        (
            big_pod(1, env=[{"name": f"E{i}", "value": "x"} for i in range(5_000)]),
            "spec.containers[0].env: at most 1024 env entries per container, got 5000",
        ),
        (
            claimed_pod(1_000),
            "spec.resourceClaims: at most 128 claims per pod, got 1000",
        ),
    ],
    ids=["5,000 containers", "10,000 containers", "5,000 env entries", "1,000 claims"],
)
def test_a_pod_past_a_bound_is_refused_naming_the_list(
    webhook: Webhook, obj: dict[str, Any], named: str
) -> None:
    client = Client(webhook)
    try:
        assert named in denial(client, body(obj))
    finally:
        client.close()


@dataclass
class Flood:
    answers: list[tuple[int, str]] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, webhook: Webhook, data: bytes) -> None:
        client = Client(webhook)
        for _ in range(FLOOD_EACH):
            try:
                status, answer, _ = client.post(data, "application/json")
            except OSError as error:
                with self.lock:
                    self.unanswered.append(str(error))
                continue
            with self.lock:
                self.answers.append((status, answer[:2000].decode("utf-8", "replace")))
        client.close()

    def problems(self) -> list[str]:
        """Answers that are neither a denial naming the list nor the full queue's 503."""
        found = []
        for status, text in self.answers:
            refused = status == 503 and "refused without waiting" in text
            denied = status == 200 and '"allowed": false' in text and "spec.containers" in text
            if not (refused or denied):
                found.append(f"HTTP {status}: {text[:300]}")
        return found


def test_under_a_flood_of_big_dry_runs_a_neighbours_gpu_pods_are_all_admitted(
    tight: Webhook,
) -> None:
    rss_before = rss_mb(tight.process.pid)
    shed_before = shed(tight, "queue-full")
    flood, data = Flood(), body(big_pod(FLOOD_CONTAINERS), namespace="flood")
    threads = [threading.Thread(target=flood.send, args=(tight, data))
               for _ in range(FLOOD_CLIENTS)]  # fmt: skip
    neighbour, seconds = Client(tight), []
    with Prober(tight.process.pid, lambda: tight.get("/healthz")[0]) as prober:
        for thread in threads:
            thread.start()
        for index in range(NEIGHBOUR_REVIEWS):
            pod = gpu_pod(name=f"neighbour-{index}")
            status, answer, took = neighbour.post(
                body(pod, namespace="neighbour", uid=f"n-{index}", dryRun=False), "application/json"
            )
            assert status == 200, answer[:300]
            assert json.loads(answer)["response"]["allowed"] is True, answer[:300]
            seconds.append(took)
        for thread in threads:
            thread.join()
    neighbour.close()
    refused = sum(1 for status, _ in flood.answers if status == 503)
    print(
        f"\nabuse/flood: {len(flood.answers)} flood answers ({refused} refused by the full queue); "
        f"neighbour p50 {statistics.median(seconds) * 1000:.0f} ms, max {max(seconds) * 1000:.0f}"
        f" ms; RSS {rss_before:.0f} MB before, {rss_mb(tight.process.pid):.0f} MB after; "
        f"{prober.summary()}"
    )
    assert not flood.unanswered, flood.unanswered[:5]
    assert len(flood.answers) == FLOOD_CLIENTS * FLOOD_EACH
    assert not flood.problems(), flood.problems()[:5]
    assert shed(tight, "queue-full") - shed_before == refused
    assert not prober.failures, prober.failures[:10]
    assert prober.max_rss_mb < MAX_RSS_MB, prober.summary()
    assert tight.process.poll() is None, tail(tight.log_file)
    assert tight.admit_normal_pod()["allowed"] is True


def test_a_review_whose_callers_timeout_passed_in_the_queue_is_dropped_and_counted(
    tight: Webhook,
) -> None:
    """A timeout of 1 ns has passed before any worker takes the review: never computed."""
    before = shed(tight, "expired")
    client = Client(tight)
    try:
        status, answer, _ = client.post(
            body(gpu_pod(), namespace="late"), "application/json", target="/mutate?timeout=1ns"
        )
        assert status == 504, answer[:300]
        assert b"caller's timeout" in answer
        status, answer, _ = client.post(
            body(gpu_pod(), namespace="late"), "application/json", target="/mutate?timeout=10s"
        )
        assert status == 200, answer[:300]
    finally:
        client.close()
    assert shed(tight, "expired") == before + 1


def test_the_log_holds_no_line_longer_than_a_few_kib(tight: Webhook) -> None:
    """A 1,000,000-character name is logged cut short (it was logged whole per dry run)."""
    client = Client(tight)
    try:
        status, answer, _ = client.post(body(gpu_pod(name="n" * 1_000_000)), "application/json")
        assert status == 200, answer[:300]
    finally:
        client.close()
    longest = max(len(line) for line in Path(tight.log_file).read_text().splitlines())
    assert longest < 8 * 1024, longest
