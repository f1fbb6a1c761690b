"""The webhook refuses a pod template that claims devices of our class beside the claims it
translates, and looks only at the templates the plan translated: a Volcano Job's task without GPU
requests may claim our devices directly."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.webhook.admission import Admitter

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/team-a"


@pytest.fixture
def admitter(recorded: RecordingApi) -> Admitter:
    return admitter_over(recorded)


OUR_CLAIM = {
    "spec": {
        "devices": {
            "requests": [{"name": "g", "exactly": {"deviceClassName": DEFAULT.device_class}}]
        }
    }
}


def review(obj: dict[str, Any], kind: dict[str, str]) -> bytes:
    request = {
        "uid": "u-1", "kind": kind, "operation": "CREATE", "namespace": "team-a", "object": obj,
        "dryRun": True,
    }  # fmt: skip
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


def answer(admitter: Admitter, body: bytes) -> dict[str, Any]:
    status, data = admitter.review_body(body)
    assert status == 200, data
    response: dict[str, Any] = json.loads(data)["response"]
    return response


def pod_spec(limits: dict[str, Any], **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "cuda", "resources": {"limits": {"cpu": "1", **limits}}}
    return {"containers": [container], **spec}


def task(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "replicas": 1, "template": {"spec": spec}}


OWN_CLAIM = {"resourceClaims": [{"name": "own", "resourceClaimName": "mine"}]}
GPU = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}


def test_a_pod_claiming_our_devices_beside_translated_requests_is_refused(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    recorded.objects[f"{CLAIMS}/resourceclaims/mine"] = OUR_CLAIM
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": pod_spec(GPU, **OWN_CLAIM),
    }
    response = answer(admitter, review(pod, {"group": "", "version": "v1", "kind": "Pod"}))
    assert response["allowed"] is False
    assert (
        "spec.resourceClaims[0]: already claims devices of class" in response["status"]["message"]
    )


def test_a_volcano_task_claiming_our_devices_directly_does_not_refuse_its_gpu_sibling(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    recorded.objects[f"{CLAIMS}/resourceclaims/mine"] = OUR_CLAIM
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {"tasks": [task("gpu", pod_spec(GPU)), task("direct", pod_spec({}, **OWN_CLAIM))]},
    }
    kind = {"group": "batch.volcano.sh", "version": "v1alpha1", "kind": "Job"}
    response = answer(admitter, review(job, kind))
    assert response["allowed"] is True, response
    assert "patch" in response
    assert recorded.paths == []
