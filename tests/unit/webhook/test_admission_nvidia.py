"""Under the nvidia profile (NVIDIA's DRA driver, our enforcer on its shares) no share reaches a
container without its limits: HAMi pods are translated, and lose `nvidia.com/gpu` (NVIDIA's
DeviceClass serves it as an extended resource: kube-scheduler would give the pod a card of
gpu.nvidia.com with no enforcer); a pod the webhook leaves untranslated that still asks for it
(opted out) is refused, and so is a pod naming a claim or claim template of gpu.nvidia.com
without our enforcer's request. Against a real KubeApi and a recorder."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.unit.recording_api import RecordingApi
from tests.unit.webhook.admitters import admitter_over, pod_response
from vgpu_bridge.core import DEFAULT, ENFORCER_DRIVER, ENFORCER_REQUEST, nvidia_profile
from vgpu_bridge.core.jsonpatch import apply_patch
from vgpu_bridge.webhook.admission import Admitter

RESOURCE_API = "/apis/resource.k8s.io/v1/namespaces/team-a"
NVIDIA = nvidia_profile()
OPTED_OUT = {"vgpu-bridge.io/ignore": "true"}
HAMI = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}
# each check once for a claim the pod names and once for a template it names
BY_CLAIM_OR_TEMPLATE = pytest.mark.parametrize(
    ("resource", "key"),
    [("resourceclaims", "resourceClaimName"),
     ("resourceclaimtemplates", "resourceClaimTemplateName")],
)  # fmt: skip


@pytest.fixture
def admitter(recorded: RecordingApi) -> Admitter:
    return admitter_over(recorded, profile=NVIDIA)


def pod(limits: dict[str, Any] | None = None, *, labels: dict[str, str] | None = None,
        **spec: Any) -> dict[str, Any]:  # fmt: skip
    container = {"name": "main", "image": "cuda",
                 "resources": {"limits": {"cpu": "1", **(limits or {})}}}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels or {}},
            "spec": {"containers": [container], **spec}}  # fmt: skip


def claim_spec(*classes: str) -> dict[str, Any]:
    requests = [{"name": f"r{i}", "exactly": {"deviceClassName": c, "count": 1}}
                for i, c in enumerate(classes)]  # fmt: skip
    return {"devices": {"requests": requests}}


def has(recorded: RecordingApi, resource: str, name: str, *classes: str) -> None:
    spec = claim_spec(*classes)
    body = {"spec": spec} if resource == "resourceclaims" else {"spec": {"spec": spec}}
    recorded.objects[f"{RESOURCE_API}/{resource}/{name}"] = {"metadata": {"name": name}, **body}


def refusal(response: dict[str, Any]) -> str:
    assert response["allowed"] is False, response
    return str(response["status"]["message"])


def patched(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    assert response["allowed"] is True, response
    patch = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = apply_patch(obj, patch)
    return result


def resource_names(obj: dict[str, Any]) -> set[str]:
    found = set()
    for container in obj["spec"]["containers"]:
        for kind in ("limits", "requests"):
            found |= set((container.get("resources") or {}).get(kind) or {})
    return found


def test_a_hami_pod_is_translated_and_keeps_no_nvidia_resource(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    obj = pod(HAMI)
    response = pod_response(admitter, obj, dry_run=True)
    translated = patched(obj, response)
    assert resource_names(translated) == {"cpu"}  # nothing left for DRAExtendedResource to map
    [entry] = translated["spec"]["resourceClaims"]
    assert "resourceClaimTemplateName" in entry


def test_a_translated_claim_asks_for_nvidias_share_and_our_enforcer(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    recorded.answer("GET", f"{RESOURCE_API}/resourceclaimtemplates", 200, {"items": []})
    recorded.answer("POST", f"{RESOURCE_API}/resourceclaimtemplates", 201)
    response = pod_response(admitter, pod(HAMI))
    assert response["allowed"] is True, response
    [created] = [call.body for call in recorded.made("POST") if call.body]
    requests = created["spec"]["spec"]["devices"]["requests"]
    classes = {r["name"]: r["exactly"]["deviceClassName"] for r in requests}
    assert classes[ENFORCER_REQUEST] == ENFORCER_DRIVER
    assert NVIDIA.device_class in classes.values()


@pytest.mark.parametrize(
    "limits",
    [{"nvidia.com/gpu": 1}, {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 2}],
    ids=["count", "implicit-class-name"],
)
def test_an_opted_out_pod_asking_nvidias_class_as_an_extended_resource_is_refused(
    admitter: Admitter, recorded: RecordingApi, limits: dict[str, Any]
) -> None:
    message = refusal(pod_response(admitter, pod(limits, labels=OPTED_OUT)))
    [name] = limits
    assert f"spec.containers[0].resources.limits[{name}]" in message
    assert "without our enforcer" in message
    assert not recorded.calls  # no API read needed


def test_such_a_pod_is_refused_without_the_opt_out_label_too(admitter: Admitter) -> None:
    """A pod asking only the implicit class name has nothing HAMi's to translate."""
    limits = {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}
    assert "without our enforcer" in refusal(pod_response(admitter, pod(limits)))


def test_a_renamed_count_and_nvidias_own_name_are_both_refused(recorded: RecordingApi) -> None:
    """NVIDIA's chart maps nvidia.com/gpu to its class whatever HAMi's count is called here."""
    from vgpu_bridge.core import TranslatorConfig

    config = TranslatorConfig(resource_count_name="example.com/vgpu")
    admitter = admitter_over(recorded, profile=NVIDIA, config=config)
    for name in ("nvidia.com/gpu", "example.com/vgpu"):
        message = refusal(pod_response(admitter, pod({name: 1}, labels=OPTED_OUT)))
        assert f"limits[{name}]" in message


def test_asking_for_none_of_it_is_not_refused(admitter: Admitter) -> None:
    response = pod_response(admitter, pod({"nvidia.com/gpu": 0}, labels=OPTED_OUT))
    assert response["allowed"] is True, response


def test_under_our_own_profile_an_opted_out_pod_keeps_its_extended_resource(
    recorded: RecordingApi,
) -> None:
    admitter = admitter_over(recorded, profile=DEFAULT)
    response = pod_response(admitter, pod({"nvidia.com/gpu": 1}, labels=OPTED_OUT))
    assert response["allowed"] is True, response


@BY_CLAIM_OR_TEMPLATE
def test_a_pod_naming_an_nvidia_claim_without_the_enforcer_is_refused(
    admitter: Admitter, recorded: RecordingApi, resource: str, key: str
) -> None:
    has(recorded, resource, "bare", NVIDIA.device_class)
    obj = pod(resourceClaims=[{"name": "gpu", key: "bare"}])
    message = refusal(pod_response(admitter, obj))
    assert f"spec.resourceClaims[0].{key}" in message
    assert f"without a request of class {ENFORCER_DRIVER}" in message
    assert "no share without its limits" in message


@BY_CLAIM_OR_TEMPLATE
def test_a_pod_naming_an_enforced_nvidia_claim_is_admitted(
    admitter: Admitter, recorded: RecordingApi, resource: str, key: str
) -> None:
    has(recorded, resource, "held", NVIDIA.device_class, ENFORCER_DRIVER)
    obj = pod(resourceClaims=[{"name": "gpu", key: "held"}])
    response = pod_response(admitter, obj)
    assert response["allowed"] is True, response


def test_a_pod_naming_a_claim_of_another_class_is_admitted(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    has(recorded, "resourceclaims", "nic", "rdma.example.com")
    response = pod_response(
        admitter, pod(resourceClaims=[{"name": "n", "resourceClaimName": "nic"}])
    )
    assert response["allowed"] is True, response


def test_a_pod_naming_a_claim_that_does_not_exist_yet_is_refused(admitter: Admitter) -> None:
    """It could be made without the enforcer after the pod: fail closed."""
    obj = pod(resourceClaims=[{"name": "gpu", "resourceClaimName": "later"}])
    message = refusal(pod_response(admitter, obj))
    assert "ResourceClaim later does not exist" in message


def test_a_translated_pod_that_also_names_an_unenforced_claim_is_refused(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    has(recorded, "resourceclaims", "bare", NVIDIA.device_class)
    obj = pod(HAMI, resourceClaims=[{"name": "own", "resourceClaimName": "bare"}])
    message = refusal(pod_response(admitter, obj, dry_run=True))
    assert "spec.resourceClaims[0]: already claims devices of class gpu.nvidia.com" in message


def review_bytes(obj: dict[str, Any]) -> bytes:
    request = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
               "operation": "CREATE", "namespace": "team-a", "object": obj}  # fmt: skip
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


def test_the_quick_path_refuses_the_implicit_class_name_too(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    """A pod naming no HAMi key is answered on the selector thread: it must not slip through."""
    limits = {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}
    answer = admitter.quick_review_body(review_bytes(pod(limits)))
    assert answer is not None
    status, data = answer
    assert status == 200
    assert "without our enforcer" in refusal(json.loads(data)["response"])
    assert not recorded.calls


def test_the_quick_path_leaves_a_pod_naming_claims_to_a_worker(admitter: Admitter) -> None:
    """Whether its claims ask for the enforcer takes the API."""
    obj = pod(resourceClaims=[{"name": "gpu", "resourceClaimName": "c"}])
    assert admitter.quick_review_body(review_bytes(obj)) is None


@pytest.mark.parametrize(
    ("renamed", "limits"),
    [(False, {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": 1}),
     (True, {"nvidia.com/gpu": 1})],
    ids=["implicit-class-name", "nvidia-count-beside-a-renamed-one"],
)  # fmt: skip
def test_a_translated_pod_whose_other_container_keeps_nvidias_resource_is_refused(
    recorded: RecordingApi, renamed: bool, limits: dict[str, Any]
) -> None:
    """Translation leaves a key it does not own as it is: the patched pod is checked too."""
    from vgpu_bridge.core import TranslatorConfig

    translator = TranslatorConfig()
    if renamed:
        translator = TranslatorConfig(resource_count_name="example.com/vgpu",
                                      resource_memory_name="example.com/vmem",
                                      resource_core_name="example.com/vcores")  # fmt: skip
    admitter = admitter_over(recorded, profile=NVIDIA, config=translator)
    hami = {translator.resource_count_name: 1, translator.resource_memory_name: 3000}
    obj = pod(hami)
    side = {"name": "side", "image": "cuda", "resources": {"limits": limits}}
    obj["spec"]["containers"].append(side)
    message = refusal(pod_response(admitter, obj, dry_run=True))
    [name] = limits
    assert f"spec.containers[1].resources.limits[{name}]" in message
    assert "without our enforcer" in message


def test_a_translated_pod_naming_a_claim_that_does_not_exist_yet_is_refused(
    admitter: Admitter,
) -> None:
    """As on the untranslated path: it could be made without the enforcer after the pod."""
    obj = pod(HAMI, resourceClaims=[{"name": "own", "resourceClaimName": "later"}])
    message = refusal(pod_response(admitter, obj, dry_run=True))
    assert "spec.resourceClaims[0].resourceClaimName" in message
    assert "ResourceClaim later does not exist" in message


def test_under_our_own_profile_a_translated_pod_may_name_a_claim_made_later(
    recorded: RecordingApi,
) -> None:
    admitter = admitter_over(recorded, profile=DEFAULT)
    obj = pod(HAMI, resourceClaims=[{"name": "own", "resourceClaimName": "later"}])
    response = pod_response(admitter, obj, dry_run=True)
    assert response["allowed"] is True, response


def nvidia_config(recorded: RecordingApi, resource: str, name: str) -> None:
    """Give a recorded claim or template an opaque config of NVIDIA's driver (a TimeSlicing
    GpuConfig): NVIDIA prepares shares of one card only when every claim's config is the same."""
    body = recorded.objects[f"{RESOURCE_API}/{resource}/{name}"]
    spec = body["spec"] if resource == "resourceclaims" else body["spec"]["spec"]
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                  "sharing": {"strategy": "TimeSlicing"}}  # fmt: skip
    spec["devices"]["config"] = [{"opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}]


@BY_CLAIM_OR_TEMPLATE
def test_a_pod_naming_an_enforced_claim_with_an_nvidia_config_is_refused(
    admitter: Admitter, recorded: RecordingApi, resource: str, key: str
) -> None:
    """Such a config would fail Prepare of every other tenant's share on that card."""
    has(recorded, resource, "tuned", NVIDIA.device_class, ENFORCER_DRIVER)
    nvidia_config(recorded, resource, "tuned")
    obj = pod(resourceClaims=[{"name": "gpu", key: "tuned"}])
    message = refusal(pod_response(admitter, obj))
    assert f"spec.resourceClaims[0].{key}" in message
    assert "gpu.nvidia.com" in message


def test_an_admin_access_claim_of_nvidias_class_is_not_an_unenforced_share(
    admitter: Admitter, recorded: RecordingApi
) -> None:
    """It books nothing, and the nvidiaEnforced policy admits it: the webhook agrees."""
    spec = {"devices": {"requests": [
        {"name": "watch", "exactly": {"deviceClassName": NVIDIA.device_class,
                                      "adminAccess": True}}]}}  # fmt: skip
    recorded.objects[f"{RESOURCE_API}/resourceclaims/watch"] = {"metadata": {"name": "watch"},
                                                               "spec": spec}  # fmt: skip
    response = pod_response(
        admitter, pod(resourceClaims=[{"name": "w", "resourceClaimName": "watch"}])
    )
    assert response["allowed"] is True, response
