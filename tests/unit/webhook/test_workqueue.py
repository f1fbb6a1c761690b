"""The worker queue (issue 25): bounded by count and bytes, round-robin between namespaces, the
namespace holding the most giving way when full; the caller's timeout read from the request
target; a review's namespace found in its opening bytes."""

from __future__ import annotations

import json
import threading

import pytest

from vgpu_bridge.webhook.workqueue import (
    FLOOR_BYTES,
    MAX_CALLER_TIMEOUT_S,
    FairQueue,
    Job,
    caller_timeout_s,
    go_duration_s,
    review_namespace,
)


def job(name: str, key: str, size: int = 10) -> Job[str]:
    return Job(name, key, size, deadline=0.0)


def drain(queue: FairQueue[str]) -> list[str]:
    queue.close()
    taken = []
    while (item := queue.get()) is not None:
        taken.append(item.item)
    return taken


def test_a_neighbours_review_is_served_before_the_floods_backlog() -> None:
    queue: FairQueue[str] = FairQueue(max_items=100, max_bytes=10**6)
    for index in range(5):
        assert queue.put(job(f"flood-{index}", "namespace/flood")) == []
    queue.put(job("neighbour", "namespace/quiet"))
    assert drain(queue) == ["flood-0", "neighbour", "flood-1", "flood-2", "flood-3", "flood-4"]


def test_keys_take_turns_one_review_each() -> None:
    queue: FairQueue[str] = FairQueue(max_items=100, max_bytes=10**6)
    for name in ("a1", "a2", "a3", "b1", "b2", "c1"):
        queue.put(job(name, name[0]))
    assert drain(queue) == ["a1", "b1", "c1", "a2", "b2", "a3"]


def test_when_full_the_namespace_holding_the_most_gives_way_to_a_neighbour() -> None:
    queue: FairQueue[str] = FairQueue(max_items=3, max_bytes=10**6)
    for index in range(3):
        queue.put(job(f"flood-{index}", "flood"))
    refused = queue.put(job("neighbour", "quiet"))
    assert [r.item for r in refused] == ["flood-2"]  # its newest
    assert len(queue) == 3
    assert drain(queue) == ["flood-0", "neighbour", "flood-1"]


def test_when_full_a_newcomer_of_the_heaviest_namespace_is_itself_refused() -> None:
    queue: FairQueue[str] = FairQueue(max_items=2, max_bytes=10**6)
    queue.put(job("flood-0", "flood"))
    queue.put(job("quiet-0", "quiet"))
    assert [r.item for r in queue.put(job("flood-1", "flood"))] == ["flood-1"]
    assert drain(queue) == ["flood-0", "quiet-0"]


def test_the_byte_bound_refuses_the_namespace_holding_the_most_bytes() -> None:
    queue: FairQueue[str] = FairQueue(max_items=100, max_bytes=10 * FLOOR_BYTES)
    queue.put(job("big-0", "big", size=6 * FLOOR_BYTES))
    refused = queue.put(job("small-0", "small", size=5 * FLOOR_BYTES))
    assert [r.item for r in refused] == ["big-0"]
    assert queue.queued_bytes == 5 * FLOOR_BYTES


def test_one_review_alone_is_never_too_big_for_the_byte_bound() -> None:
    queue: FairQueue[str] = FairQueue(max_items=100, max_bytes=1000)
    assert queue.put(job("huge", "a", size=5000)) == []
    assert drain(queue) == ["huge"]


def test_while_a_heavy_review_is_out_the_workers_take_the_other_keys_reviews() -> None:
    """Reading a big review holds the interpreter's lock for milliseconds: one at a time."""
    queue: FairQueue[str] = FairQueue(max_items=100, max_bytes=10**7, heavy_bytes=1000)
    for index in range(3):
        queue.put(job(f"big-{index}", "flood", size=5000))
    queue.put(job("small-0", "quiet", size=10))
    queue.put(job("small-1", "quiet", size=10))
    first = queue.get()
    assert first is not None
    assert first.item == "big-0"
    taken = [queue.get(), queue.get()]
    assert [t.item for t in taken if t is not None] == ["small-0", "small-1"]
    assert queue._next_key() is None  # only heavy ones are left, and one is out: get waits
    waiting: list[object] = []
    worker = threading.Thread(target=lambda: waiting.append(queue.get()))
    worker.start()
    queue.done(first)
    worker.join(timeout=30)
    assert [w.item for w in waiting if isinstance(w, Job)] == ["big-1"]


def test_close_lets_waiting_workers_stop() -> None:
    queue: FairQueue[str] = FairQueue(max_items=1, max_bytes=1)
    got: list[object] = []
    worker = threading.Thread(target=lambda: got.append(queue.get()))
    worker.start()
    queue.close()
    worker.join(timeout=30)
    assert got == [None]


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_items"):
        FairQueue(max_items=0, max_bytes=1)


@pytest.mark.parametrize(
    ("target", "seconds"),
    [
        ("/mutate?timeout=10s", 10.0),
        ("/mutate?timeout=500ms", 0.5),
        ("/mutate?timeout=2.5s", 2.5),
        ("/mutate?timeout=1m0s", MAX_CALLER_TIMEOUT_S),  # past the API server's own bound
        ("/mutate?other=1&timeout=3s", 3.0),
        ("/mutate", 7.0),
        ("/mutate?timeout=", 7.0),
        ("/mutate?timeout=ten", 7.0),
        ("/mutate?timeout=10", 7.0),  # Go always writes a unit
        ("/mutate?timeout=-5s", 7.0),
        ("/mutate?timeout=0s", 7.0),
        ("/mutate?timeout=" + "9" * 500 + "s", 7.0),
    ],
)
def test_the_callers_timeout_comes_from_the_timeout_query_parameter(
    target: str, seconds: float
) -> None:
    assert caller_timeout_s(target, default_s=7.0) == seconds


def test_go_durations_with_several_units_add_up() -> None:
    assert go_duration_s("1h2m3.5s") == 3723.5
    assert go_duration_s("1500us") == pytest.approx(0.0015)
    assert go_duration_s("3s junk") is None


def api_server_review(namespace: str, obj: object) -> bytes:
    """Fields in the API server's order: request.namespace before the object."""
    request = {"uid": "u", "kind": {"kind": "Pod"}, "namespace": namespace, "operation": "CREATE",
               "object": obj}  # fmt: skip
    body = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}
    return json.dumps(body, separators=(",", ":")).encode()


def test_a_reviews_namespace_is_the_first_one_it_names() -> None:
    obj = {"metadata": {"labels": {"namespace": "victim"}}}
    assert review_namespace(api_server_review("team-a", obj)) == "team-a"
    assert review_namespace(b'{"request": {"namespace": "team-b"}}') == "team-b"
    assert review_namespace(b'{"request": {"uid": "u"}}') is None
    assert review_namespace(b'{"a": "' + b"x" * 20000 + b'", "namespace": "late"}') is None


def test_bodiless_jobs_weigh_their_floor_so_a_review_is_not_shed_beside_them() -> None:
    """Issue 35: 0-byte jobs (GET /metrics) under one key weighed nothing, so a full queue
    refused the one real review of another key instead of any of them."""
    queue: FairQueue[str] = FairQueue(max_items=3, max_bytes=10**6)
    for index in range(3):
        assert queue.put(job(f"scrape-{index}", "other", size=0)) == []
    refused = queue.put(job("review", "namespace/quiet", size=FLOOR_BYTES - 1))
    assert [r.item for r in refused] == ["scrape-2"]
    assert drain(queue) == ["scrape-0", "review", "scrape-1"]


def test_the_byte_bound_counts_each_job_at_least_its_floor() -> None:
    queue: FairQueue[str] = FairQueue(max_items=100, max_bytes=3 * FLOOR_BYTES)
    for index in range(3):
        assert queue.put(job(f"tiny-{index}", "a", size=1)) == []
    assert queue.queued_bytes == 3 * FLOOR_BYTES
    assert [r.item for r in queue.put(job("tiny-3", "a", size=1))] == ["tiny-3"]
