"""The pre-delete notice's parts (`uninstall_notice.py`): which claims and pods are ours, a wait
that ends on time, Events that skip a namespace gone and raise any other refusal, and a summary
that says the uninstall goes on. The API is a recording server; the real control plane runs the
whole command in e2e/test_uninstall_notice.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.recording_api import RecordingApi
from vgpu_bridge.kube import KubeError
from vgpu_bridge.uninstall_notice import (
    CLAIMS,
    EVENT_REASON,
    MAX_NOTE,
    Notice,
    PodRef,
    Pods,
    claim_pods,
    event_body,
    pods_holding_claims,
    sort_pods,
    summary,
    tell_running,
    wait_for_terminating,
)

Json = dict[str, Any]
OURS = frozenset({"gpu.vgpu-bridge.io"})


def _claim(name: str, driver: str, users: list[Json], namespace: str = "team") -> Json:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "status": {
            "allocation": {"devices": {"results": [{"driver": driver, "device": "gpu-0"}]}},
            "reservedFor": users,
        },
    }


def _pod(name: str) -> Json:
    return {"resource": "pods", "name": name, "uid": f"uid-{name}"}


def _ref(name: str, namespace: str = "team") -> PodRef:
    return PodRef(namespace, name, f"uid-{name}", "c", "gpu.vgpu-bridge.io")


def test_a_claim_of_our_driver_names_its_pods_and_nothing_else() -> None:
    other_user = {"apiGroup": "batch.example.io", "resource": "pods", "name": "x", "uid": "u"}
    pods = claim_pods(_claim("c", "gpu.vgpu-bridge.io", [_pod("a"), other_user]), OURS)
    assert pods == [_ref("a")]


@pytest.mark.parametrize(
    "claim",
    [
        _claim("c", "gpu.nvidia.com", [_pod("a")]),
        {"metadata": {"name": "c", "namespace": "team"}, "status": {}},  # not allocated
        {"metadata": {"name": "c", "namespace": "team"}},
    ],
    ids=["another-driver", "unallocated", "no-status"],
)
def test_claims_not_allocated_by_our_driver_are_not_kept(claim: Json) -> None:
    assert claim_pods(claim, OURS) is None


def test_pods_are_counted_once_and_bounded(recorded: RecordingApi) -> None:
    claims = [_claim("one", "gpu.vgpu-bridge.io", [_pod("a"), _pod("b")]),
              _claim("two", "gpu.vgpu-bridge.io", [_pod("a"), _pod("c")])]  # fmt: skip
    recorded.answer("GET", CLAIMS, 200, {"items": claims, "metadata": {}})
    found = pods_holding_claims(recorded.api, OURS, limit=2)
    assert [p.name for p in found.pods] == ["a", "b"]
    assert found.more == 1


def test_the_wait_ends_when_its_time_is_up_and_names_the_pods_left(recorded: RecordingApi) -> None:
    recorded.objects["/api/v1/namespaces/team/pods/stuck"] = {
        "metadata": {"uid": "uid-stuck", "deletionTimestamp": "2026-01-01T00:00:00Z"}
    }  # "gone" is not here: 404
    notice = Notice(OURS, wait_seconds=5, terminating=[_ref("stuck"), _ref("gone")])
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    wait_for_terminating(recorded.api, notice, clock=lambda: now[0], sleep=sleep)
    assert notice.still_terminating == [_ref("stuck")]
    assert notice.gone_while_waiting == [_ref("gone")]
    assert now[0] == 5


def test_reading_the_pods_stops_at_its_deadline_and_counts_the_pods_left(
    recorded: RecordingApi,
) -> None:
    recorded.objects["/api/v1/namespaces/team/pods/a"] = {
        "metadata": {"uid": "uid-a"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}
    }  # fmt: skip
    times = iter([0.0, 1.0, 100.0])  # the deadline, the first pod, the second: too late
    notice = Notice(OURS, 0)
    sort_pods(recorded.api, Pods([_ref("a"), _ref("b")], 0), notice, seconds=60,
              clock=lambda: next(times))  # fmt: skip
    assert notice.running == [(_ref("a"), "n1")]
    assert notice.unread == 1
    assert "1 pods not read within 60 s" in "\n".join(summary(notice))


def test_a_pod_replaced_under_its_name_counts_as_gone(recorded: RecordingApi) -> None:
    recorded.objects["/api/v1/namespaces/team/pods/p"] = {
        "metadata": {"uid": "another-uid", "deletionTimestamp": "2026-01-01T00:00:00Z"}
    }
    notice = Notice(OURS, wait_seconds=5, terminating=[_ref("p")])
    wait_for_terminating(recorded.api, notice, clock=lambda: 0.0, sleep=lambda _: None)
    assert notice.gone_while_waiting == [_ref("p")]


def test_a_namespace_gone_tells_nobody_there_and_the_others_are_told(
    recorded: RecordingApi,
) -> None:
    recorded.answer("POST", "/apis/events.k8s.io/v1/namespaces/gone/events", 404)
    recorded.answer("POST", "/apis/events.k8s.io/v1/namespaces/team/events", 201)
    notice = Notice(OURS, 0, running=[(_ref("a", "gone"), "n1"), (_ref("b"), "n1")])
    tell_running(recorded.api, notice)
    assert notice.not_told == [_ref("a", "gone")]
    assert notice.told == [_ref("b")]


def test_a_refused_event_is_raised(recorded: RecordingApi) -> None:
    recorded.answer("POST", "/apis/events.k8s.io/v1/namespaces/team/events", 403,
                    {"kind": "Status", "code": 403, "message": "forbidden"})  # fmt: skip
    notice = Notice(OURS, 0, running=[(_ref("b"), "n1")])
    with pytest.raises(KubeError):
        tell_running(recorded.api, notice)


def test_the_event_says_what_the_pod_loses_within_the_apis_bound() -> None:
    pod = PodRef("team", "p" * 253, "uid-p", "c" * 253, "gpu.vgpu-bridge.io")
    event = event_body(pod, node="n" * 253, wall=0)
    assert event["type"] == "Warning"
    assert event["reason"] == EVENT_REASON
    assert event["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "team",
                                  "name": pod.name, "uid": "uid-p"}  # fmt: skip
    assert len(event["note"]) <= MAX_NOTE
    assert len(event["metadata"]["name"]) <= 253
    short = event_body(_ref("a"), node="gpu-node-1", wall=0)["note"]
    assert "gpu-node-1" in short
    assert "Terminating" in short
    assert "--force" in short


def test_the_summary_says_the_uninstall_goes_on_past_pods_still_terminating() -> None:
    notice = Notice(OURS, 60, holding=3, terminating=[_ref("s"), _ref("g")],
                    gone_while_waiting=[_ref("g")], still_terminating=[_ref("s")],
                    told=[_ref("r")])  # fmt: skip
    text = "\n".join(summary(notice))
    assert "1 still terminating after 60 s" in text
    assert "the uninstall goes on" in text
    assert "team/s" in text
    assert f"told 1 running pods (Warning Event {EVENT_REASON}): team/r" in text
