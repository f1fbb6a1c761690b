"""The Events the webhook posts about its decisions, through a real Admitter and a real API client
over the recording server: what `kubectl describe` shows for a translated pod, a refusal and a
warning, which object each regards, and that a storm of admissions stays a few Events."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry, Counter

from tests.unit.recording_api import Call, RecordingApi
from tests.unit.webhook.admitters import admitter_over
from vgpu_bridge.webhook.admission import Admitter
from vgpu_bridge.webhook.events import SERIES_EVERY_S, EventRecorder

NOW = 1_800_000_000.0  # the wall clock of every admission here
EVENTS = "/apis/events.k8s.io/v1/namespaces/team-a/events"
PODS = "/api/v1/namespaces/team-a/pods"
TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaimtemplates"
SHARE = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}
REFUSED = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 150}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def admitter(recorded: RecordingApi, clock: Clock) -> Admitter:
    recorded.answer("GET", TEMPLATES, 200, {"items": []})
    recorded.answer("POST", TEMPLATES, 201)
    recorded.answer("POST", EVENTS, 201)
    admitter = admitter_over(recorded)
    admitter.events = EventRecorder(
        recorded.api, controller="gpu.vgpu-bridge.io", instance="webhook-0",
        dropped=drop_counter(), clock=clock, wall=lambda: NOW, settle_s=0, retry_s=0,
    )  # fmt: skip
    return admitter


def drop_counter() -> Counter:
    """The webhook's drop counter, in a registry of the test's own."""
    return Counter(
        "vgpu_bridge_events_dropped", "dropped", ["reason"], registry=CollectorRegistry()
    )


def pod(limits: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "cuda", "resources": {"limits": limits}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [container]}}  # fmt: skip


def review(obj: dict[str, Any], *, uid: str = "review-1", dry_run: bool = False) -> bytes:
    kind = {"group": "", "version": "v1", "kind": obj["kind"]}
    if obj["kind"] == "Deployment":
        kind["group"] = "apps"
    request = {"uid": uid, "kind": kind, "operation": "CREATE", "namespace": "team-a",
               "object": obj, "dryRun": dry_run}  # fmt: skip
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


def admit(admitter: Admitter, obj: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    status, data = admitter.review_body(review(obj, **kwargs))
    assert status == 200, data
    response: dict[str, Any] = json.loads(data)["response"]
    return response


def stored(name: str, uid: str, *, created: float = NOW) -> dict[str, Any]:
    stamp = datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"items": [{"metadata": {"name": name, "uid": uid, "creationTimestamp": stamp}}]}


def posted(recorded: RecordingApi) -> list[dict[str, Any]]:
    return [c.body for c in recorded.made("POST") if c.path == EVENTS]


def work_off(admitter: Admitter) -> None:
    import threading

    assert admitter.events is not None
    admitter.events.work_off(threading.Event())


def dropped(admitter: Admitter, reason: str) -> float:
    assert admitter.events is not None
    counter = cast(Counter, admitter.events.dropped)  # the fixture's own Counter
    return float(counter.labels(reason)._value.get())


def test_a_translated_pod_is_told_what_each_container_got_once_it_exists(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    recorded.answer("GET", PODS, 200, stored("share", "pod-uid"))
    assert admit(admitter, pod(SHARE, name="share"))["allowed"]
    work_off(admitter)
    [event] = posted(recorded)
    [template] = [c.body["metadata"]["name"] for c in recorded.made("POST") if c.path == TEMPLATES]
    assert event["regarding"] == {
        "apiVersion": "v1", "kind": "Pod", "namespace": "team-a", "name": "share", "uid": "pod-uid"
    }  # fmt: skip
    assert (event["type"], event["reason"], event["action"]) == (
        "Normal", "GpuShareTranslated", "Translate"
    )  # fmt: skip
    assert (
        event["note"] == f"container main: 1 card, 3000 MiB, 30% cores (claim template {template})"
    )
    assert event["reportingController"] == "gpu.vgpu-bridge.io"
    assert event["reportingInstance"] == "webhook-0"
    assert event["eventTime"] == "2027-01-15T08:00:00.000000Z"
    assert event["metadata"]["name"].startswith("share.")
    [lookup] = [c for c in recorded.made("GET") if c.path == PODS]
    assert lookup.query == {"fieldSelector": "metadata.name=share"}


def test_an_older_pod_of_the_same_name_is_not_told_about_this_admission(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    recorded.answer("GET", PODS, 200, stored("share", "old-uid", created=NOW - 60))
    admit(admitter, pod(SHARE, name="share"))
    work_off(admitter)
    assert posted(recorded) == []
    assert dropped(admitter, "not-found") == 1


def test_a_pod_that_never_appears_gets_no_event(admitter: Admitter, recorded: RecordingApi) -> None:
    recorded.answer("GET", PODS, 200, {"items": []})
    admit(admitter, pod(SHARE, name="share"))
    work_off(admitter)
    assert posted(recorded) == []
    assert len([c for c in recorded.made("GET") if c.path == PODS]) == 3


def test_a_dry_run_posts_nothing(admitter: Admitter, recorded: RecordingApi) -> None:
    admit(admitter, pod(SHARE, name="share"), dry_run=True)
    admit(admitter, pod(REFUSED, name="refused"), dry_run=True)
    work_off(admitter)
    assert recorded.calls == []


def test_a_refused_pod_of_a_controller_is_told_on_its_owner(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "rs-uid",
             "controller": True}  # fmt: skip
    response = admit(admitter, pod(REFUSED, generateName="web-7d9f-", ownerReferences=[owner]))
    assert not response["allowed"]
    work_off(admitter)
    [event] = posted(recorded)
    assert event["regarding"] == {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "namespace": "team-a", "name": "web-7d9f",
        "uid": "rs-uid",
    }  # fmt: skip
    assert (event["type"], event["reason"], event["action"]) == (
        "Warning", "GpuShareRefused", "Refuse"
    )  # fmt: skip
    assert event["note"] == response["status"]["message"]
    assert event["note"].startswith("Pod/team-a/web-7d9f-*: spec.containers[0]")
    assert "gpucores" in event["note"]
    assert recorded.made("GET") == []  # the owner reference names the uid


def test_a_refused_pod_without_owner_is_told_by_name_and_a_nameless_one_not_at_all(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    admit(admitter, pod(REFUSED, name="refused"))
    admit(admitter, pod(REFUSED, generateName="anon-"), uid="review-2")
    work_off(admitter)
    [event] = posted(recorded)
    assert event["regarding"] == {
        "apiVersion": "v1", "kind": "Pod", "namespace": "team-a", "name": "refused"
    }  # fmt: skip


def test_200_identical_refusals_make_one_event_whose_series_counts_them(
    admitter: Admitter, recorded: RecordingApi, clock: Clock
) -> None:
    for i in range(200):
        admit(admitter, pod(REFUSED, name="refused"), uid=f"review-{i}")
        if i % 50 == 0:
            work_off(admitter)
    work_off(admitter)
    assert len(posted(recorded)) == 1
    clock.now += SERIES_EVERY_S
    work_off(admitter)
    [patch] = recorded.made("PATCH")
    assert patch.path == f"{EVENTS}/{posted(recorded)[0]['metadata']['name']}"
    assert patch.body == {
        "series": {"count": 200, "lastObservedTime": "2027-01-15T08:00:00.000000Z"}
    }
    work_off(admitter)
    assert len(recorded.made("PATCH")) == 1  # written once until it repeats again


def test_distinct_refusals_in_one_namespace_are_rate_limited_and_counted(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    for i in range(30):
        admit(admitter, pod(REFUSED, name=f"refused-{i}"), uid=f"review-{i}")
    work_off(admitter)
    assert len(posted(recorded)) == 20
    assert dropped(admitter, "rate-limited") == 10


def test_a_full_queue_drops_and_counts_and_the_admission_is_answered(
    recorded: RecordingApi,
) -> None:
    admitter = admitter_over(recorded)
    admitter.events = EventRecorder(
        recorded.api, controller="c", instance="i", dropped=drop_counter(),
        queue_size=2,
    )  # fmt: skip
    for i in range(5):
        assert not admit(admitter, pod(REFUSED, name=f"r-{i}"), uid=f"review-{i}")["allowed"]
    assert dropped(admitter, "queue-full") == 3


def test_a_warning_is_a_warning_event_beside_the_translation(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    recorded.answer("GET", PODS, 200, stored("policy", "pod-uid"))
    obj = pod({"nvidia.com/gpu": 1}, name="policy",
              annotations={"hami.io/gpu-scheduler-policy": "binpack"})  # fmt: skip
    warnings = admit(admitter, obj)["warnings"]
    work_off(admitter)
    translated, warned = posted(recorded)
    assert translated["reason"] == "GpuShareTranslated"
    assert "1 card, whole memory, 100% cores" in translated["note"]
    assert (warned["type"], warned["reason"]) == ("Warning", "GpuShareWarning")
    assert warned["note"] == "; ".join(warnings)
    assert warned["regarding"]["uid"] == "pod-uid"


def test_a_translated_deployment_is_looked_up_among_deployments(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    deployments = "/apis/apps/v1/namespaces/team-a/deployments"
    recorded.answer("GET", deployments, 200, stored("web", "deploy-uid"))
    template = {"metadata": {"labels": {"app": "web"}}, "spec": pod(SHARE)["spec"]}
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
           "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}}  # fmt: skip
    admit(admitter, obj)
    work_off(admitter)
    [event] = posted(recorded)
    assert event["regarding"]["kind"] == "Deployment"
    assert event["regarding"]["uid"] == "deploy-uid"
    assert event["note"].startswith("container main: 1 card, 3000 MiB, 30% cores")


def test_an_api_error_drops_the_event_and_counts_it(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    recorded.answer("POST", EVENTS, 403, {"kind": "Status", "code": 403})
    admit(admitter, pod(REFUSED, name="refused"))
    work_off(admitter)
    assert dropped(admitter, "api-error") == 1
    assert isinstance(recorded.made("POST")[0], Call)


def test_translated_pods_of_a_controller_aggregate_on_the_controller(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "rs-uid",
             "controller": True}  # fmt: skip
    for i in range(3):
        obj = pod(SHARE, generateName="web-7d9f-", ownerReferences=[owner])
        assert admit(admitter, obj, uid=f"review-{i}")["allowed"]
    work_off(admitter)
    [event] = posted(recorded)
    assert event["regarding"]["uid"] == "rs-uid"
    assert event["note"].startswith("Pod web-7d9f-*: container main: 1 card, 3000 MiB, 30% cores")
    assert [c for c in recorded.made("GET") if c.path == PODS] == []


def test_an_event_gone_from_the_api_server_is_posted_anew_on_the_next_repeat(
    admitter: Admitter, recorded: RecordingApi, clock: Clock
) -> None:
    for i in range(2):
        admit(admitter, pod(REFUSED, name="refused"), uid=f"review-{i}")
    work_off(admitter)
    [first] = posted(recorded)
    recorded.answer("PATCH", f"{EVENTS}/{first['metadata']['name']}", 404, {"code": 404})
    clock.now += SERIES_EVERY_S
    work_off(admitter)  # its series cannot be written: the Event expired
    admit(admitter, pod(REFUSED, name="refused"), uid="review-3")
    work_off(admitter)
    assert len(posted(recorded)) == 2
