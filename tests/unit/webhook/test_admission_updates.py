"""UPDATE reviews of translated workloads, as `kubectl apply`, `helm upgrade` and GitOps tools
send them (issue 24): re-applied, a workload carries our claims and its GPU requests again and is
translated back to the object it was; in translated form it is left alone; a changed request
replaces the earlier claims. Nothing the webhook added is refused as a conflict with itself."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.unit.core.test_translate_reapplied import reapplied
from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over
from vgpu_bridge.core.jsonpatch import apply_patch
from vgpu_bridge.webhook.admission import Admitter

APPS = {"group": "apps", "version": "v1", "kind": "Deployment"}
VOLCANO = {"group": "batch.volcano.sh", "version": "v1alpha1", "kind": "Job"}


@pytest.fixture
def admitter(recorded: RecordingApi) -> Admitter:
    return admitter_over(recorded)


def container(mib: int, image: str = "vllm:0.6") -> dict[str, Any]:
    return {"name": "vllm", "image": image,
            "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mib}}}  # fmt: skip


def deployment(mib: int = 4000, image: str = "vllm:0.6") -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": "vllm"}},
                "spec": {"containers": [container(mib, image)]}}  # fmt: skip
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "vllm", "namespace": "team-a"},
            "spec": {"replicas": 2, "template": template}}  # fmt: skip


def vcjob(mib: int = 4000) -> dict[str, Any]:
    task = {"name": "worker", "replicas": 2,
            "template": {"spec": {"schedulerName": "volcano",
                                  "containers": [container(mib)]}}}  # fmt: skip
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "team-a"},
            "spec": {"schedulerName": "volcano", "tasks": [task]}}  # fmt: skip


def admit(
    admitter: Admitter, obj: dict[str, Any], *, operation: str, kind: dict[str, str] = APPS
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The response, and the object as the API server stores it after the patch."""
    request = {"uid": "u-1", "kind": kind, "operation": operation, "namespace": "team-a",
               "object": obj, "dryRun": True}  # fmt: skip
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    status, data = admitter.review_body(json.dumps(body).encode())
    assert status == 200, data
    response: dict[str, Any] = json.loads(data)["response"]
    assert response["allowed"], response.get("status")
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return response, apply_patch(obj, patch)


@pytest.mark.parametrize(
    ("manifest", "kind"), [(deployment, APPS), (vcjob, VOLCANO)], ids=["deployment", "vcjob"]
)
def test_reapplied_workload_is_admitted_as_the_object_it_was(
    admitter: Admitter, manifest: Any, kind: dict[str, str]
) -> None:
    _, live = admit(admitter, manifest(), operation="CREATE", kind=kind)
    _, again = admit(admitter, reapplied(manifest(), live), operation="UPDATE", kind=kind)
    assert again == live


def test_workload_in_translated_form_is_allowed_unchanged(admitter: Admitter) -> None:
    """Server-side apply of the stored object, a `rollout restart`, the controllers' updates."""
    _, live = admit(admitter, deployment(), operation="CREATE")
    response, again = admit(admitter, live, operation="UPDATE")
    assert "patch" not in response
    assert again == live


def test_changed_image_keeps_the_claims_and_changed_gpumem_replaces_them(
    admitter: Admitter,
) -> None:
    _, live = admit(admitter, deployment(4000), operation="CREATE")
    _, new_image = admit(
        admitter, reapplied(deployment(4000, "vllm:0.7"), live), operation="UPDATE"
    )
    spec, before = new_image["spec"]["template"]["spec"], live["spec"]["template"]["spec"]
    assert spec["containers"][0]["image"] == "vllm:0.7"
    assert spec["resourceClaims"] == before["resourceClaims"]
    _, bigger = admit(admitter, reapplied(deployment(8000), new_image), operation="UPDATE")
    claims = bigger["spec"]["template"]["spec"]["resourceClaims"]
    assert len(claims) == 1
    assert claims[0]["name"] == "gpu-vllm"
    assert (
        claims[0]["resourceClaimTemplateName"]
        != before["resourceClaims"][0]["resourceClaimTemplateName"]
    )
    assert bigger["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "claims": [{"name": "gpu-vllm"}]
    }
