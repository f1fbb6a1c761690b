"""An admission's log line holds a review's strings cut short (issue 25: a dry run named by a
1,000,326-byte name was logged whole, once per create)."""

from __future__ import annotations

import json
from typing import Any

from structlog.testing import capture_logs

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over
from vgpu_bridge.webhook.review import MAX_LOGGED_CHARS, logged


def review(obj: dict[str, Any], *, namespace: object = "team-a") -> bytes:
    request = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "operation": "CREATE", "namespace": namespace, "object": obj}  # fmt: skip
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


def logged_admission(recorded: RecordingApi, body: bytes) -> dict[str, Any]:
    with capture_logs() as lines:
        status, _ = admitter_over(recorded).review_body(body)
    assert status == 200
    (line,) = [line for line in lines if line["event"] == "admission"]
    return dict(line)


def test_a_huge_name_is_logged_cut_short_with_its_length(recorded: RecordingApi) -> None:
    name = "n" * 1_000_000
    line = logged_admission(recorded, review({"metadata": {"name": name}, "spec": {}}))
    assert line["name"] == "n" * MAX_LOGGED_CHARS + "…(1000000 chars)"


def test_a_name_of_the_wrong_type_is_logged_by_its_type_only(recorded: RecordingApi) -> None:
    """Refused by the shape check, which names the field; the log line does not copy it."""
    obj = {"metadata": {"name": ["x" * 100_000]}, "spec": {}}
    line = logged_admission(recorded, review(obj))
    assert line["name"] == "(list)"
    assert line["decision"] == "denied"


def test_short_values_are_logged_as_they_are() -> None:
    assert logged("web-1") == "web-1"
    assert logged(None) is None
    assert logged(3) == 3
    assert logged({"a": 1}) == "(dict)"
