"""Big reviews are read first by a child process (issue 25): a refused one is answered from its
verdict exactly as the webhook would answer it, without the webhook reading the body; a sound or
small one is left to the webhook; a child that dies or cannot start costs only the old way."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over
from vgpu_bridge.webhook import review
from vgpu_bridge.webhook.prevalidate import RETRY_S, Prevalidator, read

MIN_BYTES = 4096


def pod(containers: int, **meta: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": 1}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "big", **meta},
            "spec": {"containers": [{"name": f"c{i}", "image": "cuda:12",
                                     "resources": {"limits": limits}}
                                    for i in range(containers)]}}  # fmt: skip


def body(obj: dict[str, Any], *, dry_run: bool = True) -> bytes:
    request = {"uid": "u-big", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "operation": "CREATE", "namespace": "flood", "object": obj,
               "dryRun": dry_run}  # fmt: skip
    data = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(data).encode()


@pytest.fixture
def prevalidator() -> Iterator[Prevalidator]:
    child = Prevalidator(min_bytes=MIN_BYTES)
    yield child
    child.close()


def test_a_refused_big_review_is_answered_as_the_webhook_answers_it_without_reading_it(
    recorded: RecordingApi, prevalidator: Prevalidator, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = body(pod(300, ownerReferences=[{"kind": "Job", "name": "j", "controller": True}]))
    expected = admitter_over(recorded).review_body(big)
    admitter = admitter_over(recorded)
    admitter.prevalidator = prevalidator

    def unread(_: bytes) -> review.AdmissionRequest:
        raise AssertionError("the webhook read the body itself")

    monkeypatch.setattr(review, "parse_review", unread)  # admission reads it as review.…
    with capture_logs() as lines:
        assert admitter.review_body(big) == expected
    assert "spec.containers: a pod may have at most 256" in expected[1].decode()
    (line,) = [line for line in lines if line["event"] == "admission"]
    assert (line["name"], line["decision"], line["dry_run"]) == ("big", "denied", True)
    value = admitter.metrics.registry.get_sample_value
    assert value("vgpu_bridge_admissions_total", {"decision": "denied"}) == 1


def test_an_unreadable_big_body_is_a_400_as_ever(
    recorded: RecordingApi, prevalidator: Prevalidator
) -> None:
    admitter = admitter_over(recorded)
    admitter.prevalidator = prevalidator
    junk = b"{" * MIN_BYTES
    assert admitter.review_body(junk) == admitter_over(recorded).review_body(junk)
    assert admitter.review_body(junk)[0] == 400


def test_a_sound_big_review_and_a_small_one_are_left_to_the_webhook(
    prevalidator: Prevalidator,
) -> None:
    sound = body(pod(60))
    assert len(sound) >= MIN_BYTES
    assert prevalidator.verdict(sound) is None
    assert prevalidator.verdict(body(pod(300))) is not None
    small = body(pod(1, namespace=["wrong"]))
    assert len(small) < MIN_BYTES
    assert prevalidator.verdict(small) is None
    assert read(small)["refused"]  # the webhook refuses it itself


def test_a_child_that_dies_leaves_the_review_to_the_webhook(recorded: RecordingApi) -> None:
    dead = Prevalidator(min_bytes=MIN_BYTES, command=[sys.executable, "-c", "pass"])
    admitter = admitter_over(recorded)
    admitter.prevalidator = dead
    big = body(pod(300))
    with capture_logs() as lines:
        assert admitter.review_body(big) == admitter_over(recorded).review_body(big)
    assert "prevalidation failed; reading the review in-process" in [x["event"] for x in lines]
    dead.close()


def test_a_child_that_cannot_start_leaves_the_review_to_the_webhook(
    recorded: RecordingApi,
) -> None:
    now = [0.0]
    missing = Prevalidator(
        min_bytes=MIN_BYTES, command=["/nonexistent/python"], clock=lambda: now[0]
    )
    with capture_logs() as lines:
        assert missing.verdict(body(pod(300))) is None
        assert missing.verdict(body(pod(300))) is None  # not tried again so soon
        now[0] += RETRY_S
        assert missing.verdict(body(pod(300))) is None
    assert [x["event"] for x in lines] == [
        "prevalidation failed; reading the review in-process"
    ] * 2


def test_the_verdicts_object_keeps_only_short_names_and_owners() -> None:
    obj = pod(300, generateName="g" * 300, ownerReferences=[{"kind": "Job", "x": ["list"]}] * 40)
    stub = read(body(obj))["request"]["object"]
    assert stub["metadata"]["name"] == "big"
    assert "generateName" not in stub["metadata"]
    assert stub["metadata"]["ownerReferences"] == [{"kind": "Job"}] * 16
    assert "spec" not in stub


def test_the_child_can_be_started_ahead_of_the_first_big_review(
    prevalidator: Prevalidator,
) -> None:
    prevalidator.start()
    child = prevalidator._child
    assert child is not None
    assert child.poll() is None
    assert prevalidator.verdict(body(pod(300))) is not None
    assert prevalidator._child is child  # the same child answered


def test_a_child_that_cannot_start_ahead_is_logged_and_not_retried_at_once() -> None:
    missing = Prevalidator(min_bytes=MIN_BYTES, command=["/nonexistent/python"])
    with capture_logs() as lines:
        missing.start()
        assert missing.verdict(body(pod(300))) is None
    assert [x["event"] for x in lines] == ["cannot start the prevalidating child"]
