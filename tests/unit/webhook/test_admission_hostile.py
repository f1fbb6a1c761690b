"""Admission of hostile objects: names that would leave their API path, wrong types, deep nesting,
oversized selectors. Each is a denial naming the field (HTTP 200), never HTTP 500."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over
from vgpu_bridge.core import Inventory
from vgpu_bridge.webhook.admission import Admitter

INVENTORY = Inventory({"gpu.vgpu-bridge.io": frozenset({40 * 2**30, 80 * 2**30})})
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/team-a"


@pytest.fixture
def admitter(recorded: RecordingApi) -> Admitter:
    return admitter_over(recorded, inventory=lambda: INVENTORY)


def gpu_pod(**spec: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}
    container = {"name": "main", "image": "cuda", "resources": {"limits": limits}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [container], **spec},
    }


def review(obj: object, *, namespace: object = "team-a") -> bytes:
    request = {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": namespace,
        "object": obj,
        "dryRun": True,
    }
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


def answer(admitter: Admitter, body: bytes) -> dict[str, Any]:
    status, data = admitter.review_body(body)
    assert status == 200, data
    response: dict[str, Any] = json.loads(data)["response"]
    return response


def denial(admitter: Admitter, body: bytes) -> str:
    response = answer(admitter, body)
    assert response["allowed"] is False, response
    message: str = response["status"]["message"]
    return message


@pytest.mark.parametrize(
    "name", ["../../other-ns/resourceclaims/x", "?watch=true", "../../../../../api/v1/pods"]
)
@pytest.mark.parametrize("key", ["resourceClaimName", "resourceClaimTemplateName"])
def test_a_claim_name_that_is_no_dns_subdomain_is_denied_without_an_api_call(
    admitter: Admitter, recorded: RecordingApi, key: str, name: str
) -> None:
    pod = gpu_pod(resourceClaims=[{"name": "other", key: name}])
    message = denial(admitter, review(pod))
    assert f"spec.resourceClaims[0].{key}: must be a DNS subdomain" in message
    assert recorded.paths == []


def test_a_valid_claim_name_is_looked_up_in_the_pods_namespace_only(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    pod = gpu_pod(resourceClaims=[{"name": "other", "resourceClaimName": "shared.claim-1"}])
    assert answer(admitter, review(pod))["allowed"] is True
    assert recorded.paths == [f"{CLAIMS}/resourceclaims/shared.claim-1"]


@pytest.mark.parametrize("namespace", ["../kube-system", "a/b", "A_B", "x" * 64])
def test_a_namespace_that_is_no_dns_label_is_denied(
    admitter: Admitter, recorded: RecordingApi, namespace: str
) -> None:
    message = denial(admitter, review(gpu_pod(), namespace=namespace))
    assert "metadata.namespace: must be a DNS label" in message
    assert recorded.paths == []


WRONG_TYPES: list[tuple[str, dict[str, Any], str]] = [
    ("containers", {"containers": 5}, "spec.containers: must be a list"),
    ("container", {"containers": ["x"]}, "spec.containers[0]: must be a map"),
    ("claims", {"resourceClaims": 5}, "spec.resourceClaims: must be a list"),
    ("claim", {"resourceClaims": [7]}, "spec.resourceClaims[0]: must be a map"),
    ("claim name", {"resourceClaims": [{"name": "x", "resourceClaimName": {"a": 1}}]}, "must be a"),
]


@pytest.mark.parametrize(
    ("spec", "field"), [(s, f) for _, s, f in WRONG_TYPES], ids=[i for i, *_ in WRONG_TYPES]
)
def test_wrong_types_in_a_pod_are_denials_naming_the_field(
    admitter: Admitter, spec: dict[str, Any], field: str
) -> None:
    pod = gpu_pod()
    pod["spec"].update(spec)
    assert field in denial(admitter, review(pod))


@pytest.mark.parametrize(
    "metadata", ["x", [1], {"labels": [1]}, {"labels": {"a": 5}}, {"annotations": "x"}]
)
def test_wrong_types_in_metadata_are_denials_naming_the_field(
    admitter: Admitter, metadata: object
) -> None:
    pod = gpu_pod()
    pod["metadata"] = metadata
    assert "metadata" in denial(admitter, review(pod))


def test_a_volcano_job_whose_spec_is_a_string_is_denied(admitter: Admitter) -> None:
    job = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {}, "spec": "x"}
    assert "spec: must be a map" in denial(admitter, review(job))


@pytest.mark.parametrize("depth", [70, 470, 999, 5000, 100_000])
def test_deep_nesting_is_refused_never_an_internal_error(admitter: Admitter, depth: int) -> None:
    pod = gpu_pod(affinity="DEEP")
    depth_text = "[" * depth + "]" * depth
    body = review(pod).replace(b'"DEEP"', depth_text.encode())
    status, data = admitter.review_body(body)
    assert status in (200, 400), data
    assert b"nest" in data


def test_three_hundred_uuids_are_denied_before_the_api_server_refuses_the_selector(
    admitter: Admitter,
) -> None:
    uuids = ",".join(f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd" for i in range(300))
    pod = gpu_pod()
    pod["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": uuids}
    message = denial(admitter, review(pod))
    assert "metadata.annotations[nvidia.com/use-gpuuuid]" in message
    assert "10240" in message


def test_a_deeply_nested_quantity_is_denied_quoted_by_its_kind(admitter: Admitter) -> None:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "DEEP"
    body = review(pod).replace(b'"DEEP"', b"[" * 900 + b"]" * 900)
    message = denial(admitter, body)
    assert (
        "limits[nvidia.com/gpu]: must be a whole number of GPUs, between 0 and 32, got a list"
        in message
    )


@pytest.mark.parametrize(
    ("limits", "annotations", "field"),
    [
        ({"nvidia.com/gpu": "1e999999"}, {}, "limits[nvidia.com/gpu]"),
        ({"cpu": "1"}, {"gpu-memory": "1e999999"}, "annotations[gpu-memory]"),
        ({"nvidia.com/gpu": "1e9"}, {}, "limits[nvidia.com/gpu]"),
    ],
)
def test_an_out_of_range_quantity_is_denied_with_its_field(
    admitter: Admitter, limits: dict[str, Any], annotations: dict[str, str], field: str
) -> None:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["resources"]["limits"] = limits
    pod["metadata"]["annotations"] = annotations
    assert f"{field}: must be a whole number" in denial(admitter, review(pod))


def test_a_number_too_long_for_python_to_read_is_http_400(admitter: Admitter) -> None:
    body = review(gpu_pod()).replace(b'"nvidia.com/gpu": 1', b'"nvidia.com/gpu": ' + b"1" * 5000)
    status, data = admitter.review_body(body)
    assert status == 400
    assert b"not JSON" in data
