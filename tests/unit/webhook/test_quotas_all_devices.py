"""A claim of our class with `allocationMode: All` takes every matching device: under a GPU quota
it was counted as one device (issue 25). Unallocated, it cannot be counted and the pod is refused
naming the field; once allocated, its results are counted like any claim's."""

from __future__ import annotations

from typing import Any

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import pod_response
from tests.unit.webhook.test_quotas import (
    CLAIMS,
    TEMPLATES,
    admitter_for,
    held,
    message,
    namespace_holds,
    pod,
    quota,
)
from vgpu_bridge.core import DEFAULT

ALL = {"deviceClassName": DEFAULT.device_class, "allocationMode": "All"}
CARDS = quota("cards", **{"requests.nvidia.com/gpu": "4"})


def claim_spec(*requests: dict[str, Any]) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


def test_a_hand_written_claim_taking_all_devices_is_refused_under_a_quota(
    recorded: RecordingApi,
) -> None:
    namespace_holds(recorded, [CARDS], [])
    recorded.objects[f"{CLAIMS}/every-gpu"] = {"spec": claim_spec({"name": "gpu", "exactly": ALL})}
    claims = [{"name": "gpu", "resourceClaimName": "every-gpu"}]
    response = pod_response(admitter_for(recorded), pod({"cpu": "1"}, resourceClaims=claims))
    assert message(response) == (
        "spec.resourceClaims: resourceclaim every-gpu: devices.requests[0].exactly.allocationMode:"
        " All takes every matching device, which cannot be counted against the namespace's GPU "
        "quota before allocation; ask for a count (allocationMode: ExactCount)"
    )


def test_a_template_offering_all_devices_as_an_alternative_is_refused_under_a_quota(
    recorded: RecordingApi,
) -> None:
    namespace_holds(recorded, [CARDS], [])
    one = {"deviceClassName": DEFAULT.device_class, "count": 1}
    recorded.objects[f"{TEMPLATES}/any-gpus"] = {
        "spec": {"spec": claim_spec({"name": "gpu", "firstAvailable": [one, ALL]})}
    }
    claims = [{"name": "gpu", "resourceClaimTemplateName": "any-gpus"}]
    response = pod_response(admitter_for(recorded), pod({"cpu": "1"}, resourceClaims=claims))
    assert "devices.requests[0].firstAvailable[1].allocationMode: All takes" in message(response)


def test_another_class_taking_all_devices_is_not_ours_to_count(recorded: RecordingApi) -> None:
    namespace_holds(recorded, [CARDS], [])
    theirs = {"deviceClassName": "nic.example.com", "allocationMode": "All"}
    recorded.objects[f"{CLAIMS}/every-nic"] = {
        "spec": claim_spec({"name": "nic", "exactly": theirs})
    }
    claims = [{"name": "nic", "resourceClaimName": "every-nic"}]
    response = pod_response(admitter_for(recorded), pod({"cpu": "1"}, resourceClaims=claims))
    assert response["allowed"] is True


def test_an_allocated_claim_taking_all_devices_is_counted_by_what_it_holds(
    recorded: RecordingApi,
) -> None:
    namespace_holds(recorded, [CARDS], [])
    allocated = held(5, "1Gi", 0)
    allocated["spec"] = claim_spec({"name": "gpu", "exactly": ALL})
    recorded.objects[f"{CLAIMS}/every-gpu"] = allocated
    claims = [{"name": "gpu", "resourceClaimName": "every-gpu"}]
    response = pod_response(admitter_for(recorded), pod({"cpu": "1"}, resourceClaims=claims))
    assert message(response) == (
        "exceeded quota cards: requests.nvidia.com/gpu: requested 5, used 0, limited 4"
    )
