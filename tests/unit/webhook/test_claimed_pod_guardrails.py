"""Guardrails follow the claim, not the label: a pod the webhook does not translate (labelled
`vgpu-bridge.io/ignore: "true"`, asking for no GPU, or with nothing to translate) that names a
claim or claim template of our DeviceClass is refused for a privileged container or spec.nodeName,
as a translated GPU pod is. The opt-out label still only means "do not translate". Against a real
KubeApi and a recorder."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over, pod_response
from vgpu_bridge.core import DEFAULT, TranslatorConfig

RESOURCE_API = "/apis/resource.k8s.io/v1/namespaces/team-a"
OURS = "vgpu-0123456789abcdef"
OPTED_OUT = {"vgpu-bridge.io/ignore": "true"}
PRIVILEGED = {"privileged": True}
GPU = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000}


def claim_spec(device_class: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class, "count": 1}}
    return {"devices": {"requests": [request]}}


def has_template(api: RecordingApi, name: str, device_class: str = DEFAULT.device_class) -> None:
    api.objects[f"{RESOURCE_API}/resourceclaimtemplates/{name}"] = {
        "metadata": {"name": name},
        "spec": {"spec": claim_spec(device_class)},
    }


def has_claim(api: RecordingApi, name: str, device_class: str = DEFAULT.device_class) -> None:
    api.objects[f"{RESOURCE_API}/resourceclaims/{name}"] = {
        "metadata": {"name": name},
        "spec": claim_spec(device_class),
    }


def pod(
    limits: dict[str, Any] | None = None,
    *,
    labels: dict[str, str] | None = None,
    security: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    resources = {"limits": {"cpu": "1", **(limits or {})}}
    container: dict[str, Any] = {"name": "main", "image": "cuda", "resources": resources}
    if security is not None:
        container["securityContext"] = security
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels or {}},
            "spec": {"containers": [container], **spec}}  # fmt: skip


def template_claim(name: str = OURS) -> dict[str, Any]:
    return {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}]}


def refusal(response: dict[str, Any]) -> str:
    assert response["allowed"] is False, response
    return str(response["status"]["message"])


def admitted_unchanged(response: dict[str, Any]) -> bool:
    return response["allowed"] is True and "patch" not in response


def with_privileged_init(obj: dict[str, Any]) -> dict[str, Any]:
    init = {"name": "init", "image": "busybox", "securityContext": PRIVILEGED}
    return {**obj, "spec": {**obj["spec"], "initContainers": [init]}}


REFUSED = {
    "opted out, privileged, naming our template": (
        pod(labels=OPTED_OUT, security=PRIVILEGED, **template_claim()),
        "spec.containers[0].securityContext.privileged: is true",
    ),
    "opted out, bound by spec.nodeName, naming our template": (
        pod(labels=OPTED_OUT, nodeName="node-1", **template_claim()),
        "spec.nodeName: is set",
    ),
    "no GPU keys, privileged, naming our template directly": (
        pod(security=PRIVILEGED, **template_claim()),
        "spec.containers[0].securityContext.privileged: is true",
    ),
    "a GPU key with nothing to translate, privileged, naming our template": (
        pod({"nvidia.com/gpu": 0}, security=PRIVILEGED, **template_claim()),
        "spec.containers[0].securityContext.privileged: is true",
    ),
    "opted out, a privileged init container, naming our template": (
        with_privileged_init(pod(labels=OPTED_OUT, **template_claim())),
        "spec.initContainers[0].securityContext.privileged: is true",
    ),
}


@pytest.mark.parametrize(("obj", "why"), REFUSED.values(), ids=REFUSED.keys())
def test_a_pod_naming_a_template_of_our_class_is_held_to_the_gpu_guardrails(
    recorded: RecordingApi, obj: dict[str, Any], why: str
) -> None:
    has_template(recorded, OURS)
    message = refusal(pod_response(admitter_over(recorded), obj))
    assert f"Pod/team-a/p: {why}" in message
    assert (
        f"spec.resourceClaims[0].resourceClaimTemplateName: resourceclaimtemplate {OURS} claims "
        f"devices of class {DEFAULT.device_class}"
    ) in message


def test_an_opted_out_privileged_pod_naming_a_hand_written_claim_of_our_class_is_refused(
    recorded: RecordingApi,
) -> None:
    has_claim(recorded, "mine")
    claims = [{"name": "gpu", "resourceClaimName": "mine"}]
    obj = pod(labels=OPTED_OUT, security=PRIVILEGED, resourceClaims=claims)
    message = refusal(pod_response(admitter_over(recorded), obj))
    assert "spec.containers[0].securityContext.privileged: is true" in message
    assert "spec.resourceClaims[0].resourceClaimName: resourceclaim mine claims devices" in message


def test_an_opted_out_pod_naming_a_claim_of_another_class_is_admitted_unchanged(
    recorded: RecordingApi,
) -> None:
    has_template(recorded, "nic", device_class="rdma.example.com")
    obj = pod(labels=OPTED_OUT, security=PRIVILEGED, nodeName="node-1", **template_claim("nic"))
    assert admitted_unchanged(pod_response(admitter_over(recorded), obj))


def test_an_opted_out_pod_with_gpu_keys_and_no_claims_stays_untranslated(
    recorded: RecordingApi,
) -> None:
    """That is what opting out means: HAMi's keys are left for whoever else reads them."""
    obj = pod(GPU, labels=OPTED_OUT, security=PRIVILEGED)
    assert admitted_unchanged(pod_response(admitter_over(recorded), obj))
    assert recorded.calls == []


def test_a_privileged_pod_naming_a_claim_that_does_not_exist_is_refused(
    recorded: RecordingApi,
) -> None:
    """It could be made of our class after the pod: what cannot be read counts as ours."""
    obj = pod(labels=OPTED_OUT, security=PRIVILEGED, **template_claim("later"))
    assert (
        "spec.resourceClaims[0].resourceClaimTemplateName: resourceclaimtemplate later does not "
        "exist"
    ) in refusal(pod_response(admitter_over(recorded), obj))


def test_a_claim_name_that_is_no_dns_subdomain_is_refused_without_a_look_up(
    recorded: RecordingApi,
) -> None:
    obj = pod(labels=OPTED_OUT, security=PRIVILEGED, **template_claim("../../x"))
    assert "spec.resourceClaims[0].resourceClaimTemplateName: " in refusal(
        pod_response(admitter_over(recorded), obj)
    )
    assert recorded.calls == []


def test_a_pod_the_guardrails_would_admit_costs_no_look_up(recorded: RecordingApi) -> None:
    has_template(recorded, OURS)
    assert admitted_unchanged(
        pod_response(admitter_over(recorded), pod(labels=OPTED_OUT, **template_claim()))
    )
    assert recorded.calls == []


def test_an_administrator_may_allow_privileged_claimed_pods(recorded: RecordingApi) -> None:
    has_template(recorded, OURS)
    admitter = admitter_over(recorded, config=TranslatorConfig(allow_privileged=True))
    obj = pod(labels=OPTED_OUT, security=PRIVILEGED, **template_claim())
    assert admitted_unchanged(pod_response(admitter, obj))


def test_a_dry_run_is_refused_alike_and_only_reads(recorded: RecordingApi) -> None:
    has_template(recorded, OURS)
    obj = pod(labels=OPTED_OUT, security=PRIVILEGED, **template_claim())
    assert "securityContext.privileged" in refusal(
        pod_response(admitter_over(recorded), obj, dry_run=True)
    )
    assert {call.method for call in recorded.calls} == {"GET"}


def test_an_excluded_namespace_is_not_looked_at(recorded: RecordingApi) -> None:
    obj = pod(labels=OPTED_OUT, security=PRIVILEGED, **template_claim())
    assert admitted_unchanged(pod_response(admitter_over(recorded), obj, namespace="kube-system"))
    assert recorded.calls == []
