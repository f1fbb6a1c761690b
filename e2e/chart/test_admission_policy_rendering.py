"""What `helm template` renders for the chart's admission policies (admissionPolicies.*): the
objects and their names per switch, the bindings that mirror the webhook's namespace selector,
values quoted into CEL, and the schema's refusals. e2e/chart/test_admission_policies.py checks
what they do on the real API server."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.chart.rendering import Helm, Json, of_kind
from vgpu_bridge.core.profiles import HAMI

pytestmark = pytest.mark.e2e

RELEASE = "vgpu-bridge"
LEGACY_EXPRESSION = {"key": "vgpu-bridge.io/pool", "operator": "NotIn", "values": ["legacy"]}
POLICIES = {
    "vgpu-bridge-claims-where-served",
    "vgpu-bridge-claim-templates-where-served",
    "vgpu-bridge-webhook-cabundle-only",
    "vgpu-bridge-nvidia-runtime",
}


def policies(objects: list[Json]) -> dict[str, Json]:
    found = of_kind(objects, "ValidatingAdmissionPolicy")
    return {obj["metadata"]["name"]: obj for obj in found if obj["metadata"]["name"] in POLICIES}


def bindings(objects: list[Json], policy: str) -> dict[str, Json]:
    found = of_kind(objects, "ValidatingAdmissionPolicyBinding")
    return {b["metadata"]["name"]: b for b in found if b["spec"]["policyName"] == policy}


def selector_terms(binding: Json) -> list[Json]:
    terms: list[Json] = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    return terms


def test_defaults_render_every_policy_each_bound_to_deny(helm: Helm) -> None:
    objects = helm.template()
    assert set(policies(objects)) == POLICIES
    for name, policy in policies(objects).items():
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert bindings(objects, name), name
        assert all(b["spec"]["validationActions"] == ["Deny"]
                   for b in bindings(objects, name).values())  # fmt: skip


@pytest.mark.parametrize(
    ("switch", "gone"),
    [
        ("claimsWhereServed", {"vgpu-bridge-claims-where-served",
                               "vgpu-bridge-claim-templates-where-served"}),
        ("caBundleOnly", {"vgpu-bridge-webhook-cabundle-only"}),
        ("nvidiaRuntime", {"vgpu-bridge-nvidia-runtime"}),
    ],
)  # fmt: skip
def test_each_policy_has_its_own_switch(helm: Helm, switch: str, gone: set[str]) -> None:
    objects = helm.template({"admissionPolicies": {switch: {"enabled": False}}})
    assert set(policies(objects)) == POLICIES - gone
    for name in gone:
        assert not bindings(objects, name)


def test_the_ca_bundle_policy_exists_only_where_the_webhook_may_patch_its_configuration(
    helm: Helm,
) -> None:
    for mode in ({"mode": "generate"}, {"mode": "cert-manager"}):
        assert "vgpu-bridge-webhook-cabundle-only" not in policies(helm.template({"tls": mode}))


def test_without_the_webhook_no_claim_policy_is_rendered(helm: Helm) -> None:
    objects = helm.template({"webhook": {"enabled": False}})
    assert set(policies(objects)) == {"vgpu-bridge-nvidia-runtime"}


def test_claim_bindings_are_the_complement_of_the_webhooks_namespace_selector(
    helm: Helm,
) -> None:
    expressions = [LEGACY_EXPRESSION, {"key": "team", "operator": "Exists"}]
    values = {"webhook": {"excludedNamespaces": ["kube-system", "batch"],
                          "namespaceSelectorExpressions": expressions}}  # fmt: skip
    objects = helm.template(values)
    found = bindings(objects, "vgpu-bridge-claims-where-served")
    assert {name: selector_terms(b) for name, b in found.items()} == {
        "vgpu-bridge-claims-where-served-excluded": [
            {"key": "kubernetes.io/metadata.name", "operator": "In",
             "values": ["kube-system", "batch", RELEASE]}
        ],
        "vgpu-bridge-claims-where-served-selector-0": [
            {"key": "vgpu-bridge.io/pool", "operator": "In", "values": ["legacy"]}
        ],
        "vgpu-bridge-claims-where-served-selector-1": [
            {"key": "team", "operator": "DoesNotExist"}
        ],
    }  # fmt: skip
    assert len(bindings(objects, "vgpu-bridge-claim-templates-where-served")) == 3


def test_claim_policy_names_every_class_of_ours_and_the_extra_ones(helm: Helm) -> None:
    values = {
        "deviceClasses": [{"name": "h100.gpu.vgpu-bridge.io", "selectors": ["true"]}],
        "admissionPolicies": {"claimsWhereServed": {"extraClasses": ["gpu.hami.io"]}},
    }
    policy = policies(helm.template(values))["vgpu-bridge-claims-where-served"]
    [ours] = policy["spec"]["variables"]
    classes = "['gpu.vgpu-bridge.io', 'h100.gpu.vgpu-bridge.io', 'gpu.hami.io']"
    assert ours["expression"] == (
        "object.spec.?devices.?requests.orValue([]).filter(r, r.?exactly.?deviceClassName"
        f".orValue('') in {classes} || r.?firstAvailable.orValue([]).exists(s, "
        f"s.deviceClassName in {classes})).map(r, r.name)"
    )
    template = policies(helm.template(values))["vgpu-bridge-claim-templates-where-served"]
    assert template["spec"]["variables"][0]["expression"].startswith("object.spec.?spec.?devices")


def test_under_the_hami_profile_the_class_its_claims_ask_for_is_guarded(helm: Helm) -> None:
    values = {"webhook": {"settings": {"profile": "hami"}}, "agent": {"enabled": False}}
    policy = policies(helm.template(values))["vgpu-bridge-claims-where-served"]
    assert f"'{HAMI.device_class}'" in policy["spec"]["variables"][0]["expression"]


def test_exempt_users_are_quoted_into_cel(helm: Helm) -> None:
    values = {"admissionPolicies": {"claimsWhereServed": {"exemptUsers": ["it's \\ odd"]}}}
    policy = policies(helm.template(values))["vgpu-bridge-claims-where-served"]
    [condition] = policy["spec"]["matchConditions"]
    assert condition["expression"] == "!(request.userInfo.username in ['it\\'s \\\\ odd'])"
    none: dict[str, Any] = {"admissionPolicies": {"claimsWhereServed": {"exemptUsers": []}}}
    assert (
        "matchConditions"
        not in policies(helm.template(none))["vgpu-bridge-claims-where-served"]["spec"]
    )


def test_ca_bundle_policy_matches_only_the_webhooks_account_and_configuration(
    helm: Helm,
) -> None:
    values = {"webhook": {"serviceAccount": {"create": False, "name": "gpu-admission"},
                          "configurationName": "a-gpu-sharing"}}  # fmt: skip
    policy = policies(helm.template(values, namespace="gpu-system"))[
        "vgpu-bridge-webhook-cabundle-only"
    ]
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resourceNames"] == ["a-gpu-sharing"]
    assert rule["operations"] == ["CREATE", "UPDATE", "DELETE"]
    [condition] = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:gpu-system:gpu-admission'"
    )


def runtime_binding_terms(helm: Helm, values: dict[str, Any]) -> list[Json]:
    found = bindings(helm.template(values), "vgpu-bridge-nvidia-runtime")
    return selector_terms(found["vgpu-bridge-nvidia-runtime"])


ALLOWED = ["gpu-operator", "nvidia-gpu-operator", "nvidia-device-plugin", "nvidia-dra-driver-gpu"]


def test_runtime_policy_binds_where_the_webhook_serves_but_the_allowed_namespaces(
    helm: Helm,
) -> None:
    values = {"webhook": {"namespaceSelectorExpressions": [LEGACY_EXPRESSION]}}
    assert runtime_binding_terms(helm, values) == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": ["kube-system", RELEASE, *ALLOWED]},
        LEGACY_EXPRESSION,
    ]  # fmt: skip


def test_runtime_policy_in_every_namespace_spares_only_the_release_and_allowed_ones(
    helm: Helm,
) -> None:
    values = {
        "webhook": {"namespaceSelectorExpressions": [LEGACY_EXPRESSION]},
        "admissionPolicies": {"nvidiaRuntime": {"allNamespaces": True,
                                                "allowedNamespaces": ["gpu-operator"]}},
    }  # fmt: skip
    assert runtime_binding_terms(helm, values) == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": [RELEASE, "gpu-operator"]},
    ]  # fmt: skip


def test_the_agents_pods_stay_outside_the_runtime_policy(helm: Helm) -> None:
    """The agent sets the variables and names the runtime (agent.runtimeClassName): it runs in
    the release namespace, which the binding always leaves out."""
    values = {"agent": {"runtimeClassName": "nvidia"}}
    objects = helm.template(values)
    [agent] = of_kind(objects, "DaemonSet")
    assert agent["metadata"]["namespace"] == RELEASE
    [term] = runtime_binding_terms(helm, values)
    assert RELEASE in term["values"]


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"admissionPolicies": {"nvidiaRuntime": {"allowedNamespaces": ["Not_A_Name"]}}},
         "allowedNamespaces"),
        ({"admissionPolicies": {"claimsWhereServed": {"extraClasses": ["bad class"]}}},
         "extraClasses"),
        ({"admissionPolicies": {"unknown": {}}}, "unknown"),
        ({"webhook": {"namespaceSelectorExpressions": [{"key": "a", "operator": "Within"}]}},
         "operator"),
    ],
)  # fmt: skip
def test_the_schema_refuses_bad_policy_values(helm: Helm, values: Json, field: str) -> None:
    assert field in helm.template_error(values)
