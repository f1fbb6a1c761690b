"""What `helm template` makes under nvidiaDriver.enabled (docs/nvidia-driver.md): NVIDIA's DRA
driver owns the cards, our agents run as enforcers (one enforcer device per node, no GPU, no
driver root), the webhook translates onto gpu.nvidia.com with profile nvidia, the chart makes only
the enforcer's DeviceClass, and the admission policies guard NVIDIA's class; values that
contradict the mode are refused with the reason. e2e/chart/test_nvidia_enforced_policy.py checks
the new policy on the real API server."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.chart.rendering import Helm, Json, containers, env_names, of_kind, one
from vgpu_bridge.node.settings import Settings as NodeSettings
from vgpu_bridge.webhook.settings import Settings as WebhookSettings

pytestmark = pytest.mark.e2e

NVIDIA: dict[str, Any] = {"nvidiaDriver": {"enabled": True}}
NVIDIA_CLASS = "gpu.nvidia.com"
ENFORCER = "enforcer.vgb.io"
ENFORCED_POLICIES = (
    "vgpu-bridge-nvidia-claims-enforced",
    "vgpu-bridge-nvidia-claim-templates-enforced",
)


@pytest.fixture(scope="module")
def nvidia_mode(helm: Helm) -> list[Json]:
    return helm.template(NVIDIA)


def env(container: Json) -> dict[str, str]:
    return {var["name"]: var.get("value", "") for var in container.get("env") or ()}


def webhook_env(objects: list[Json]) -> dict[str, str]:
    (webhook,) = containers(one(objects, "Deployment"))
    return env(webhook)


def agent_container(objects: list[Json]) -> Json:
    return next(c for c in containers(one(objects, "DaemonSet")) if c["name"] == "agent")


def policy_named(objects: list[Json], name: str) -> Json | None:
    found = [p for p in of_kind(objects, "ValidatingAdmissionPolicy")
             if p["metadata"]["name"] == name]  # fmt: skip
    return found[0] if found else None


def test_the_webhook_translates_with_profile_nvidia_and_nvidias_mode(
    nvidia_mode: list[Json],
) -> None:
    found = webhook_env(nvidia_mode)
    assert found["VGPU_BRIDGE_PROFILE"] == "nvidia"
    assert found["VGPU_BRIDGE_NVIDIA_CONSUMABLE_SHARES"] == "100"
    assert found["VGPU_BRIDGE_ENFORCER_DRIVER"] == ENFORCER


@pytest.mark.parametrize("mode", ["memory", "unlimited", "4", 4])
def test_nvidias_mode_reaches_the_webhook_as_text(helm: Helm, mode: object) -> None:
    values = {"nvidiaDriver": {"enabled": True, "consumableShares": mode}}
    assert webhook_env(helm.template(values))["VGPU_BRIDGE_NVIDIA_CONSUMABLE_SHARES"] == str(mode)


def test_the_webhook_starts_with_what_the_chart_sets(nvidia_mode: list[Json]) -> None:
    """The binary's own settings accept the rendered environment (profile nvidia included)."""
    found = webhook_env(nvidia_mode)
    assert set(found) <= {"VGPU_BRIDGE_" + n.upper() for n in WebhookSettings.setting_names()}
    settings = WebhookSettings.from_env(found)
    assert (settings.profile, settings.enforcer_driver) == ("nvidia", ENFORCER)


def test_the_agent_runs_as_the_enforcer_of_nvidias_shares(nvidia_mode: list[Json]) -> None:
    agent = agent_container(nvidia_mode)
    found = env(agent)
    assert found["VGPU_BRIDGE_ENFORCE_DRIVER"] == NVIDIA_CLASS
    assert found["VGPU_BRIDGE_DRIVER_NAME"] == ENFORCER
    assert found["VGPU_BRIDGE_PLUGIN_DIR"] == f"/var/lib/kubelet/plugins/{ENFORCER}"
    assert set(found) <= {"VGPU_BRIDGE_" + n.upper() for n in NodeSettings.setting_names()}
    settings = NodeSettings.from_env({**found, "VGPU_BRIDGE_NODE_NAME": "n1"})
    assert settings.enforcer_mode


def test_the_enforcer_reads_no_driver_root_and_no_gpu(nvidia_mode: list[Json]) -> None:
    """NVIDIA's kubelet plugin puts the card and the driver's libraries into its own CDI spec;
    the enforcer only mounts libvgpu and the limits (and must not be handed every card)."""
    agent = agent_container(nvidia_mode)
    assert not {"VGPU_BRIDGE_DRIVER_ROOT", "VGPU_BRIDGE_DRIVER_ROOT_MOUNT", "VGPU_BRIDGE_MOCK_GPUS",
                "NVIDIA_VISIBLE_DEVICES"} & set(env_names(agent))  # fmt: skip
    pod = one(nvidia_mode, "DaemonSet")["spec"]["template"]["spec"]
    assert "driver-root" not in {v["name"] for v in pod["volumes"]}
    assert "runtimeClassName" not in pod
    assert "vgpu" in {v["name"] for v in pod["volumes"]}  # libvgpu is still installed


def test_the_agent_still_runs_on_gpu_nodes_only(helm: Helm, nvidia_mode: list[Json]) -> None:
    pod = one(nvidia_mode, "DaemonSet")["spec"]["template"]["spec"]
    ours = one(helm.template(), "DaemonSet")["spec"]["template"]["spec"]
    assert pod["affinity"] == ours["affinity"]
    assert pod["tolerations"] == ours["tolerations"]


def test_the_agent_may_write_only_the_enforcers_slices(nvidia_mode: list[Json]) -> None:
    policy = policy_named(nvidia_mode, "vgpu-bridge-agent-own-node-slices")
    assert policy is not None
    driver_rule = policy["spec"]["validations"][-1]["expression"]
    assert driver_rule == f"variables.slice.spec.driver == '{ENFORCER}'"


def test_only_the_enforcers_device_class_is_made(nvidia_mode: list[Json]) -> None:
    [enforcer] = of_kind(nvidia_mode, "DeviceClass")
    assert enforcer["metadata"]["name"] == ENFORCER
    assert enforcer["spec"] == {
        "selectors": [
            {
                "cel": {
                    "expression": f'device.driver == "{ENFORCER}" && '
                    "device.allowMultipleAllocations == true"
                }
            }
        ]
    }  # fmt: skip (no extendedResourceName: NVIDIA's chart maps nvidia.com/gpu to its class)


def test_an_enforcer_of_another_name_is_named_everywhere(helm: Helm) -> None:
    objects = helm.template(
        {"nvidiaDriver": {"enabled": True, "enforcerDriver": "limits.example.com"}}
    )
    assert [c["metadata"]["name"] for c in of_kind(objects, "DeviceClass")] == [
        "limits.example.com"
    ]
    assert env(agent_container(objects))["VGPU_BRIDGE_DRIVER_NAME"] == "limits.example.com"
    assert webhook_env(objects)["VGPU_BRIDGE_ENFORCER_DRIVER"] == "limits.example.com"
    policy = policy_named(objects, ENFORCED_POLICIES[0])
    assert policy is not None
    assert "'limits.example.com'" in policy["spec"]["variables"][2]["expression"]


def test_claims_where_served_guards_nvidias_class_and_the_enforcers(
    nvidia_mode: list[Json],
) -> None:
    policy = policy_named(nvidia_mode, "vgpu-bridge-claims-where-served")
    assert policy is not None
    expression = policy["spec"]["variables"][0]["expression"]
    assert f"'{NVIDIA_CLASS}'" in expression
    assert f"'{ENFORCER}'" in expression


def test_the_webhook_is_sent_pods_asking_nvidias_class_as_an_extended_resource(
    nvidia_mode: list[Json],
) -> None:
    """kube-scheduler would give such a pod a card of gpu.nvidia.com without our enforcer: the
    webhook must see it to refuse it (gpuObjectsOnly sends only matching pods)."""
    configuration = one(nvidia_mode, "MutatingWebhookConfiguration")
    [condition] = configuration["webhooks"][0]["matchConditions"]
    assert "'deviceclass.resource.kubernetes.io/gpu.nvidia.com'" in condition["expression"]


def test_the_enforced_policies_refuse_nvidia_claims_without_the_enforcer(
    nvidia_mode: list[Json],
) -> None:
    for name, spec in zip(ENFORCED_POLICIES, ("object.spec", "object.spec.?spec"), strict=True):
        policy = policy_named(nvidia_mode, name)
        assert policy is not None, name
        assert policy["spec"]["failurePolicy"] == "Fail"
        rule = policy["spec"]["matchConstraints"]["resourceRules"][0]
        assert rule["operations"] == ["CREATE"]
        requests, shares, enforced, configured = policy["spec"]["variables"]
        assert requests["expression"] == f"{spec}.?devices.?requests.orValue([])"
        assert f"== '{NVIDIA_CLASS}'" in shares["expression"]
        assert "firstAvailable" in shares["expression"]
        assert enforced["expression"] == (
            f"variables.requests.exists(r, r.?exactly.?deviceClassName.orValue('') == '{ENFORCER}')"
        )
        validation, no_nvidia_config = policy["spec"]["validations"]
        assert validation["expression"] == "size(variables.shares) == 0 || variables.enforced"
        assert "enforces no memory or SM limit" in validation["messageExpression"]
        assert "c.?opaque.?driver.orValue('') == 'gpu.nvidia.com'" in configured["expression"]
        assert no_nvidia_config["expression"] == "!variables.nvidiaConfigured"
        assert "matchConditions" not in policy["spec"]  # no exempt user by default
        [binding] = [b for b in of_kind(nvidia_mode, "ValidatingAdmissionPolicyBinding")
                     if b["spec"]["policyName"] == name]  # fmt: skip
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in binding["spec"]  # every namespace


def test_the_enforced_policies_take_exempt_users_and_allowed_namespaces(helm: Helm) -> None:
    values = {**NVIDIA, "admissionPolicies": {"nvidiaEnforced": {
        "exemptUsers": ["it's"], "allowedNamespaces": ["nvidia-dra-driver-gpu"]}}}  # fmt: skip
    objects = helm.template(values)
    policy = policy_named(objects, ENFORCED_POLICIES[0])
    assert policy is not None
    [condition] = policy["spec"]["matchConditions"]
    assert condition["expression"] == "!(request.userInfo.username in ['it\\'s'])"
    [binding] = [b for b in of_kind(objects, "ValidatingAdmissionPolicyBinding")
                 if b["spec"]["policyName"] == ENFORCED_POLICIES[0]]  # fmt: skip
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": ["nvidia-dra-driver-gpu"]}
    ]  # fmt: skip


def test_the_enforced_policies_have_their_own_switch_and_need_the_mode(helm: Helm) -> None:
    off = helm.template({**NVIDIA, "admissionPolicies": {"nvidiaEnforced": {"enabled": False}}})
    assert all(policy_named(off, name) is None for name in ENFORCED_POLICIES)
    assert all(policy_named(helm.template(), name) is None for name in ENFORCED_POLICIES)


def test_without_the_mode_nothing_changes(helm: Helm) -> None:
    objects = helm.template()
    assert webhook_env(objects)["VGPU_BRIDGE_PROFILE"] == "default"
    assert "VGPU_BRIDGE_NVIDIA_CONSUMABLE_SHARES" not in webhook_env(objects)
    assert "VGPU_BRIDGE_ENFORCE_DRIVER" not in env(agent_container(objects))
    assert [c["metadata"]["name"] for c in of_kind(objects, "DeviceClass")] == [
        "gpu.vgpu-bridge.io"
    ]


def test_kai_counts_nvidia_shares_as_gpus(helm: Helm) -> None:
    """gpu.nvidia.com contains "gpu": KAI counts each share as one GPU of its queue."""
    helm.template({**NVIDIA, "kai": {"enabled": True}})
    message = helm.template_error({**NVIDIA, "kai": {"enabled": True, "sharesCountAsGpus": False}})
    assert 'DeviceClass "gpu.nvidia.com", whose name has "gpu" in it' in message
    # renaming our driver cannot help here: NVIDIA's class is what the shares ask for
    assert "Name driverName" not in message
    assert "nvidiaDriver.enabled needs kai.sharesCountAsGpus=true" in message


REFUSALS = [
    ("shares-disabled", {"consumableShares": "disabled"},
     "NVIDIA's driver must run with ConsumableShares"),
    ("hami-profile", {"webhook": {"settings": {"profile": "hami"}}},
     "nvidiaDriver.enabled sets the webhook's profile to nvidia"),
    ("enforcer-is-our-driver", {"enforcerDriver": "shares.example.com",
                                "driverName": "shares.example.com"},
     "the enforcer needs a driver name of its own"),
    ("device-classes", {"deviceClasses": [{"name": "h100.gpu.vgpu-bridge.io", "selectors": []}]},
     "which no agent publishes under nvidiaDriver.enabled"),
    ("extended-resource", {"deviceClass": {"extendedResourceName": "nvidia.com/gpu"}},
     "deviceClass.extendedResourceName is refused under nvidiaDriver.enabled"),
    ("mock-gpus", {"agent": {"mockGpus": [{"uuid": "GPU-0", "productName": "x", "memory": "1Gi"}]}},
     "agent.mockGpus is refused under nvidiaDriver.enabled"),
    ("gpu-operator", {"agent": {"gpuOperator": {"enabled": True}}},
     "set agent.gpuOperator.enabled=false"),
    ("runtime-class", {"agent": {"runtimeClassName": "nvidia"}},
     "agent.runtimeClassName is refused under nvidiaDriver.enabled"),
]  # fmt: skip


def with_mode(values: dict[str, Any]) -> dict[str, Any]:
    """`values` with nvidiaDriver.enabled; nvidiaDriver's own keys go under it."""
    own = {k: values.pop(k) for k in ("consumableShares", "enforcerDriver") if k in values}
    return {**values, "nvidiaDriver": {"enabled": True, **own}}


@pytest.mark.parametrize(
    ("values", "reason"), [c[1:] for c in REFUSALS], ids=[c[0] for c in REFUSALS]
)
def test_values_that_contradict_the_mode_fail_with_the_reason(
    helm: Helm, values: dict[str, Any], reason: str
) -> None:
    message = helm.template_error(with_mode(dict(values)))
    assert reason in message, message


def test_profile_nvidia_without_the_mode_is_refused(helm: Helm) -> None:
    message = helm.template_error({"webhook": {"settings": {"profile": "nvidia"}}})
    assert "webhook.settings.profile nvidia needs nvidiaDriver.enabled=true" in message


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"consumableShares": "off"}, "consumableShares"),
        ({"consumableShares": 0}, "consumableShares"),
        ({"consumableShares": "-1"}, "consumableShares"),
        ({"enforcerDriver": "vgpu-enforcer.example.com"}, "enforcerDriver"),
        ({"enforcerDriver": "gpu.nvidia.com"}, "enforcerDriver"),
        ({"enforcerDriver": "Enforcer"}, "enforcerDriver"),
        ({"enable": True}, "enable"),
    ],
)
def test_the_schema_refuses_a_mode_or_enforcer_name_that_cannot_work(
    helm: Helm, values: dict[str, Any], field: str
) -> None:
    message = helm.template_error({"nvidiaDriver": values})
    assert "values don't meet the specifications of the schema" in message
    assert field in message


def test_helm_lint_passes_in_the_mode(helm: Helm) -> None:
    assert "0 chart(s) failed" in helm.lint({**NVIDIA, "kai": {"enabled": True}})
