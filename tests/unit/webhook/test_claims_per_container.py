"""Issue #25 item 3: a container that names two claims of our class is refused at admission.

Each claim's CDI spec mounts its limits file at the same path, so only one claim's limits could
reach the container and the other claim's GPU would have none (libvgpu refuses that GPU since
limits are keyed by UUID; the webhook refuses the pod first, with a message that says why).
Against the real Admitter over the recording API."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over, pod_response
from tests.unit.webhook.test_claimed_pod_guardrails import (
    GPU,
    admitted_unchanged,
    has_claim,
    has_template,
    refusal,
)
from vgpu_bridge.core import DEFAULT


def pod_with(
    containers: list[list[str]], claims: dict[str, dict[str, str]], *, init: bool = False
) -> dict[str, Any]:
    """A pod whose containers (`c0`, `c1`, …) name the given pod-claims; `claims` maps each
    pod-claim name to its source (resourceClaimName or resourceClaimTemplateName)."""
    bodies = [
        {"name": f"c{i}", "image": "cuda", "resources": {"claims": [{"name": n} for n in named]}}
        for i, named in enumerate(containers)
    ]
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": name, **source} for name, source in claims.items()],
        "initContainers" if init else "containers": bodies,
    }
    if init:
        spec["containers"] = [{"name": "app", "image": "cuda"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def claim(name: str) -> dict[str, str]:
    return {"resourceClaimName": name}


def template(name: str) -> dict[str, str]:
    return {"resourceClaimTemplateName": name}


def test_a_container_naming_two_hand_written_claims_of_our_class_is_refused(
    recorded: RecordingApi,
) -> None:
    has_claim(recorded, "big")
    has_claim(recorded, "small")
    obj = pod_with([["a", "b"]], {"a": claim("big"), "b": claim("small")})
    message = refusal(pod_response(admitter_over(recorded), obj))
    assert (
        "Pod/team-a/p: spec.containers[0].resources.claims: container 'c0' names 2 claims of "
        f"class {DEFAULT.device_class} (ResourceClaim big, ResourceClaim small): only one "
        "claim's limits can reach a container"
    ) in message


def test_a_container_naming_two_templates_of_our_class_is_refused(recorded: RecordingApi) -> None:
    has_template(recorded, "t1")
    has_template(recorded, "t2")
    obj = pod_with([["a", "b"]], {"a": template("t1"), "b": template("t2")})
    message = refusal(pod_response(admitter_over(recorded), obj))
    assert "a (from ResourceClaimTemplate t1), b (from ResourceClaimTemplate t2)" in message


def test_one_template_named_by_two_pod_claims_makes_two_claims_and_is_refused(
    recorded: RecordingApi,
) -> None:
    has_template(recorded, "t1")
    obj = pod_with([["a", "b"]], {"a": template("t1"), "b": template("t1")})
    assert "names 2 claims" in refusal(pod_response(admitter_over(recorded), obj))


def test_an_init_container_naming_two_claims_of_our_class_is_refused(
    recorded: RecordingApi,
) -> None:
    has_claim(recorded, "big")
    has_claim(recorded, "small")
    obj = pod_with([["a", "b"]], {"a": claim("big"), "b": claim("small")}, init=True)
    message = refusal(pod_response(admitter_over(recorded), obj))
    assert "spec.initContainers[0].resources.claims: container 'c0' names 2 claims" in message


def test_a_claim_that_cannot_be_read_counts_as_ours(recorded: RecordingApi) -> None:
    has_claim(recorded, "big")
    obj = pod_with([["a", "b"]], {"a": claim("big"), "b": claim("later")})
    assert "ResourceClaim big, ResourceClaim later" in refusal(
        pod_response(admitter_over(recorded), obj)
    )


def test_a_claim_of_another_class_beside_ours_is_admitted(recorded: RecordingApi) -> None:
    has_claim(recorded, "big")
    has_claim(recorded, "nic", device_class="rdma.example.com")
    obj = pod_with([["a", "b"]], {"a": claim("big"), "b": claim("nic")})
    assert admitted_unchanged(pod_response(admitter_over(recorded), obj))


def test_two_pod_claims_of_one_resource_claim_are_one_claim(recorded: RecordingApi) -> None:
    has_claim(recorded, "big")
    obj = pod_with([["a", "b"]], {"a": claim("big"), "b": claim("big")})
    assert admitted_unchanged(pod_response(admitter_over(recorded), obj))


def test_each_claim_in_its_own_container_is_admitted_without_a_look_up(
    recorded: RecordingApi,
) -> None:
    has_claim(recorded, "big")
    has_claim(recorded, "small")
    obj = pod_with([["a"], ["b"]], {"a": claim("big"), "b": claim("small")})
    assert admitted_unchanged(pod_response(admitter_over(recorded), obj))
    assert recorded.calls == []


def test_gpu_keys_in_a_container_that_names_a_claim_of_ours_are_refused_by_translation(
    recorded: RecordingApi,
) -> None:
    """Why translated pods need no check of their own: HAMi keys in a container that already
    names a claim of ours would make a second one, and core refuses that first."""
    has_claim(recorded, "mine")
    obj = pod_with([["hand"]], {"hand": claim("mine")})
    obj["spec"]["containers"][0]["resources"]["limits"] = GPU
    assert "already claims devices of class" in refusal(pod_response(admitter_over(recorded), obj))


def test_the_quick_path_leaves_a_container_naming_two_claims_to_the_full_path(
    recorded: RecordingApi,
) -> None:
    """Telling the claims' class takes the API, which the selector thread never calls."""
    has_claim(recorded, "big")
    has_claim(recorded, "small")
    obj = pod_with([["a", "b"]], {"a": claim("big"), "b": claim("small")})
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    request = {"uid": "u-1", "kind": kind, "operation": "CREATE", "namespace": "team-a",
               "object": obj}  # fmt: skip
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    assert admitter_over(recorded).quick_review_body(json.dumps(body).encode()) is None
    assert recorded.calls == []


def test_each_claim_is_read_once_per_admission_however_many_checks_ask(
    recorded: RecordingApi,
) -> None:
    """A privileged pod naming two claims of another class in one container is asked about by
    core's guardrails (does it claim our devices?) and by the one-claim-per-container check:
    one GET per claim all the same, and the pod is admitted (neither claim is ours)."""
    has_claim(recorded, "nic-a", device_class="nic.example.com")
    has_claim(recorded, "nic-b", device_class="nic.example.com")
    obj = pod_with([["a", "b"]], {"a": claim("nic-a"), "b": claim("nic-b")})
    obj["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert admitted_unchanged(pod_response(admitter_over(recorded), obj))
    reads = [call.path.rsplit("/", 1)[-1] for call in recorded.made("GET")]
    assert sorted(reads) == ["nic-a", "nic-b"]
