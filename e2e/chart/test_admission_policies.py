"""The chart's ValidatingAdmissionPolicies (admissionPolicies.*, docs/admission-policies.md) on the
real API server, allowed and refused cases, each refusal naming the field and the reason:

- claims and claim templates of our DeviceClass are refused where the webhook does not serve
  the namespace (a legacy namespace of the migration, the release namespace), exactly or in a
  firstAvailable subrequest, and let through where it does, for other classes, and for
  kube-scheduler (its extended-resource claims);
- the webhook's service account may rotate the caBundle of its configuration and change nothing
  else there (rules, clientConfig, failurePolicy, labels), while an administrator still may;
- pods that set NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES or name the NVIDIA
  RuntimeClass are refused where the webhook serves, and let through in the allowed namespaces.

Requests that would create pods or claims are server-side dry runs: admission runs in full."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.chart.cluster_api import Identity, request_as, server_side_apply
from e2e.chart.policy_objects import (
    ADMIN,
    POLICY_KINDS,
    SCHEDULER,
    applied,
    claim_asking,
    dry_run_create,
    make_namespace,
    refusal,
    template_asking,
)
from e2e.chart.rendering import Helm, Json, of_kind, one
from e2e.cluster import KubeClient
from e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
OUR_CLASS = "gpu.vgpu-bridge.io"
LEGACY = {"vgpu-bridge.io/pool": "legacy"}
MIGRATION = {
    "webhook": {
        "namespaceSelectorExpressions": [
            {"key": "vgpu-bridge.io/pool", "operator": "NotIn", "values": ["legacy"]}
        ],
        # the configuration is created for real here: it must call no webhook for anything
        "failurePolicy": "Ignore",
        "objectSelector": {"matchLabels": {"e2e.vgpu-bridge.io/never": "set"}},
    },
}
STRATEGIC = "application/strategic-merge-patch+json"
RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass(frozen=True)
class Installed:
    release_namespace: str
    legacy: str
    served: str
    configuration: str
    webhook: Identity
    #: (path, object) of each policy and binding, as applied
    policies: tuple[tuple[str, Json], ...]


@pytest.fixture(scope="module")
def installed(helm: Helm, kube: KubeClient) -> Iterator[Installed]:
    """The chart's policies and bindings, the webhook's configuration, service account and
    certificate role, created for real with the migration's values; a legacy and a served
    namespace beside the release's."""
    release_namespace = make_namespace(kube, "vb-policies")
    legacy = make_namespace(kube, "team-legacy", LEGACY)
    served = make_namespace(kube, "team-dra")
    release = f"vb-{secrets.token_hex(3)}"
    objects = helm.template(MIGRATION, release=release, namespace=release_namespace)
    kinds = POLICY_KINDS | {"ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                            "MutatingWebhookConfiguration"}  # fmt: skip
    wanted = [obj for obj in objects if obj["kind"] in kinds]
    account = next(
        obj["metadata"]["name"]
        for obj in of_kind(objects, "ServiceAccount")
        if obj["metadata"]["name"].endswith("-webhook")
    )
    with applied(kube, wanted) as paths:
        yield Installed(
            release_namespace=release_namespace,
            legacy=legacy,
            served=served,
            configuration=one(objects, "MutatingWebhookConfiguration")["metadata"]["name"],
            webhook=Identity.service_account(release_namespace, account),
            policies=tuple(
                (path, obj)
                for path, obj in zip(paths, wanted, strict=True)
                if obj["kind"] in POLICY_KINDS
            ),
        )
    for namespace in (release_namespace, legacy, served):
        kube.delete(f"/api/v1/namespaces/{namespace}")


def request_body(name: str, device_class: str, *, first_available: bool = False) -> Json:
    if first_available:
        subrequests = [
            {"name": "other", "deviceClassName": "other.example.com"},
            {"name": "ours", "deviceClassName": device_class},
        ]
        return {"name": name, "firstAvailable": subrequests}
    return {"name": name, "exactly": {"deviceClassName": device_class}}


def a_claim(device_class: str, *, first_available: bool = False) -> Json:
    return claim_asking(request_body("gpu", device_class, first_available=first_available))


def a_template(device_class: str) -> Json:
    return template_asking(request_body("gpu", device_class))


def wait_until_refused(probe: Any) -> str:
    """The policies reach admission through an informer: the first refusal's message."""

    def answer() -> str | None:
        status, body = probe()
        return str(body.get("message", "")) if status in (403, 422) else None

    return wait_for(answer, timeout_s=30, what="the admission policy to apply")


# --- claims of our class where the webhook does not serve ---------------------------------------


def test_a_claim_of_our_class_in_a_legacy_namespace_is_refused_naming_the_request(
    kube: KubeClient, installed: Installed
) -> None:
    message = wait_until_refused(
        lambda: dry_run_create(kube, installed.legacy, "resourceclaims", a_claim(OUR_CLASS))
    )
    assert "spec.devices.requests[gpu]: asks for a DeviceClass of vgpu-bridge" in message
    assert f"its webhook does not serve namespace {installed.legacy}" in message
    assert "privileged containers, two claims per container, the namespace GPU quota" in message


def test_a_first_available_subrequest_of_our_class_is_refused_too(
    kube: KubeClient, installed: Installed
) -> None:
    body = a_claim(OUR_CLASS, first_available=True)
    message = wait_until_refused(
        lambda: dry_run_create(kube, installed.legacy, "resourceclaims", body)
    )
    assert "spec.devices.requests[gpu]" in message


def test_a_claim_template_of_our_class_in_a_legacy_namespace_is_refused(
    kube: KubeClient, installed: Installed
) -> None:
    body = a_template(OUR_CLASS)
    message = wait_until_refused(
        lambda: dry_run_create(kube, installed.legacy, "resourceclaimtemplates", body)
    )
    assert "spec.spec.devices.requests[gpu]: asks for a DeviceClass of vgpu-bridge" in message


def test_the_release_namespace_is_not_served_either(kube: KubeClient, installed: Installed) -> None:
    body = a_claim(OUR_CLASS)
    message = wait_until_refused(
        lambda: dry_run_create(kube, installed.release_namespace, "resourceclaims", body)
    )
    assert f"does not serve namespace {installed.release_namespace}" in message


def test_claims_where_the_webhook_serves_or_of_other_classes_are_admitted(
    kube: KubeClient, installed: Installed
) -> None:
    wait_until_refused(
        lambda: dry_run_create(kube, installed.legacy, "resourceclaims", a_claim(OUR_CLASS))
    )
    cases = [
        (installed.served, "resourceclaims", a_claim(OUR_CLASS)),
        (installed.served, "resourceclaimtemplates", a_template(OUR_CLASS)),
        (installed.legacy, "resourceclaims", a_claim("other.example.com")),
        (installed.legacy, "resourceclaimtemplates", a_template("other.example.com")),
    ]
    for namespace, resource, body in cases:
        status, answer = dry_run_create(kube, namespace, resource, body)
        assert status == 201, (namespace, resource, answer)


def test_kube_schedulers_extended_resource_claims_are_let_through(
    kube: KubeClient, installed: Installed
) -> None:
    wait_until_refused(
        lambda: dry_run_create(kube, installed.legacy, "resourceclaims", a_claim(OUR_CLASS))
    )
    status, answer = dry_run_create(
        kube, installed.legacy, "resourceclaims", a_claim(OUR_CLASS), identity=SCHEDULER
    )
    assert status == 201, answer


# --- the webhook's account and its configuration ------------------------------------------------


def patch_configuration(
    kube: KubeClient, installed: Installed, body: Json, *, identity: Identity
) -> tuple[int, Json]:
    path = f"{CONFIGURATIONS}/{installed.configuration}"
    return request_as(kube, identity, "PATCH", path, body=body, content_type=STRATEGIC)


def hook_patch(**fields: Any) -> Json:
    return {"webhooks": [{"name": "pods.vgpu-bridge.io", **fields}]}


SECRETS_RULE = {
    "apiGroups": [""],
    "apiVersions": ["v1"],
    "operations": ["CREATE"],
    "resources": ["secrets"],
    "scope": "Namespaced",
}
CA_BUNDLE = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="  # any bytes: the API does not parse it


def test_the_webhooks_account_rotates_the_ca_bundle(kube: KubeClient, installed: Installed) -> None:
    widen = hook_patch(rules=[SECRETS_RULE])
    wait_until_refused(
        lambda: patch_configuration(kube, installed, widen, identity=installed.webhook)
    )
    body = hook_patch(clientConfig={"caBundle": CA_BUNDLE})
    status, answer = patch_configuration(kube, installed, body, identity=installed.webhook)
    assert status == 200, answer
    hooks = kube.get(f"{CONFIGURATIONS}/{installed.configuration}")["webhooks"]
    assert hooks[0]["clientConfig"]["caBundle"] == CA_BUNDLE


REFUSED_CHANGES = [
    pytest.param(
        hook_patch(rules=[SECRETS_RULE]),
        "webhooks[pods.vgpu-bridge.io]: the webhook's service account may change only "
        "clientConfig.caBundle",
        id="rules-widened-to-secrets",
    ),
    pytest.param(
        hook_patch(clientConfig={"service": {"namespace": "kube-system", "name": "elsewhere"}}),
        "webhooks[pods.vgpu-bridge.io]: the webhook's service account may change only",
        id="client-config-pointed-elsewhere",
    ),
    pytest.param(
        hook_patch(failurePolicy="Fail"),
        "webhooks[pods.vgpu-bridge.io]",
        id="failure-policy",
    ),
    pytest.param(
        hook_patch(objectSelector={"matchLabels": None}),  # null deletes: every object sent
        "webhooks[pods.vgpu-bridge.io]",
        id="object-selector-dropped",
    ),
    pytest.param(
        {"metadata": {"labels": {"app.kubernetes.io/instance": "stolen"}}},
        "metadata: the webhook's service account may not change the labels",
        id="labels",
    ),
]


@pytest.mark.parametrize(("change", "reason"), REFUSED_CHANGES)
def test_the_webhooks_account_changes_nothing_else_of_its_configuration(
    kube: KubeClient, installed: Installed, change: Json, reason: str
) -> None:
    message = wait_until_refused(
        lambda: patch_configuration(kube, installed, change, identity=installed.webhook)
    )
    assert reason in message


def test_an_administrator_still_changes_the_configuration(
    kube: KubeClient, installed: Installed
) -> None:
    body = hook_patch(timeoutSeconds=7)
    wait_until_refused(
        lambda: patch_configuration(kube, installed, body, identity=installed.webhook)
    )
    status, answer = patch_configuration(kube, installed, body, identity=ADMIN)
    assert status == 200, answer
    patch_configuration(kube, installed, hook_patch(timeoutSeconds=10), identity=ADMIN)


# --- the NVIDIA runtime's variables and RuntimeClass --------------------------------------------


@pytest.fixture(scope="module")
def nvidia_runtime_class(kube: KubeClient) -> Iterator[str]:
    """A RuntimeClass named nvidia (pods naming a missing one are refused before any policy)."""
    path = "/apis/node.k8s.io/v1/runtimeclasses"
    made = not kube.exists(f"{path}/nvidia")
    if made:
        body = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                "metadata": {"name": "nvidia"}, "handler": "nvidia"}  # fmt: skip
        kube.create(path, body)
    yield "nvidia"
    if made:
        kube.delete(f"{path}/nvidia")


def a_pod(*, env: list[Json] | None = None, init_env: list[Json] | None = None,
          runtime: str | None = None, claim_template: str | None = None) -> Json:  # fmt: skip
    container: Json = {"name": "main", "image": "busybox", "env": env or []}
    spec: Json = {"containers": [container]}
    if claim_template is not None:  # as the webhook leaves a translated GPU pod
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claim_template}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    if init_env is not None:
        spec["initContainers"] = [{"name": "setup", "image": "busybox", "env": init_env}]
    if runtime is not None:
        spec["runtimeClassName"] = runtime
    name = f"pod-{secrets.token_hex(3)}"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


ALL_GPUS = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
ALL_CAPABILITIES = [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "all"}]
FROM_A_FIELD = {
    "name": "NVIDIA_VISIBLE_DEVICES",
    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
}


def test_a_pod_setting_nvidia_visible_devices_is_refused_naming_the_container(
    kube: KubeClient, installed: Installed
) -> None:
    message = wait_until_refused(
        lambda: dry_run_create(kube, installed.served, "pods", a_pod(env=ALL_GPUS))
    )
    assert message.endswith(
        "spec.containers[main]: env NVIDIA_VISIBLE_DEVICES (other than void, none or empty), and "
        "NVIDIA_DRIVER_CAPABILITIES in a pod without resource claims, are refused outside "
        f"namespaces {installed.release_namespace}, "
        "gpu-operator, nvidia-gpu-operator, nvidia-device-plugin, nvidia-dra-driver-gpu: the "
        "NVIDIA container runtime in its legacy mode gives a container every GPU they name, past "
        "claims, shares and quotas; GPUs come from a claim (docs/runtime.md)"
    )


REFUSED_PODS = [
    pytest.param(
        a_pod(init_env=[FROM_A_FIELD]),
        "spec.initContainers[setup]",
        id="init-container-value-from",
    ),
    pytest.param(
        a_pod(env=[{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}]),
        "spec.containers[main]",
        id="driver-capabilities",
    ),
    pytest.param(
        a_pod(runtime="nvidia"),
        "spec.runtimeClassName: nvidia is the NVIDIA container runtime",
        id="runtime-class",
    ),
    pytest.param(
        a_pod(env=ALL_GPUS, runtime="nvidia", claim_template="gpu-share"),
        "spec.containers[main]: env NVIDIA_VISIBLE_DEVICES",
        id="all-gpus-beside-a-claim",
    ),
]


@pytest.mark.parametrize(("pod", "reason"), REFUSED_PODS)
def test_pods_asking_the_nvidia_runtime_for_gpus_are_refused(
    kube: KubeClient, installed: Installed, nvidia_runtime_class: str, pod: Json, reason: str
) -> None:
    message = wait_until_refused(lambda: dry_run_create(kube, installed.served, "pods", pod))
    assert reason in message


def test_pods_that_switch_the_nvidia_runtime_off_or_live_where_allowed_are_admitted(
    kube: KubeClient, installed: Installed, nvidia_runtime_class: str
) -> None:
    wait_until_refused(lambda: dry_run_create(kube, installed.served, "pods", a_pod(env=ALL_GPUS)))
    cases = [
        (installed.served, a_pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}])),
        (installed.served, a_pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}])),
        (installed.served, a_pod(env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}])),
        (installed.release_namespace, a_pod(env=ALL_GPUS, runtime="nvidia")),
        (installed.legacy, a_pod(env=ALL_GPUS, runtime="nvidia")),  # the legacy pool's own ways
        # a GPU pod of ours: its GPUs come from its claim, the runtime may still bring libcuda
        (installed.served, a_pod(env=ALL_CAPABILITIES, runtime="nvidia", claim_template="share")),
    ]
    for namespace, pod in cases:
        status, answer = dry_run_create(kube, namespace, "pods", pod)
        assert status == 201, (namespace, pod["spec"], answer)


def test_an_ephemeral_container_setting_the_variable_is_refused_when_added(
    kube: KubeClient, installed: Installed
) -> None:
    pods = f"/api/v1/namespaces/{installed.served}/pods"
    pod = kube.create(pods, a_pod())  # pending for good: no node runs it
    path = f"{pods}/{pod['metadata']['name']}/ephemeralcontainers"

    def add(name: str, env: list[Json]) -> tuple[int, Json]:
        debug = {"name": name, "image": "busybox", "env": env}
        body = {"spec": {"ephemeralContainers": [debug]}}
        return request_as(kube, ADMIN, "PATCH", path, body=body, content_type=STRATEGIC,
                          query={"dryRun": "All"})  # fmt: skip

    wait_until_refused(lambda: dry_run_create(kube, installed.served, "pods", a_pod(env=ALL_GPUS)))
    message = refusal(add("debug", ALL_GPUS))
    assert "spec.ephemeralContainers[debug]: env NVIDIA_VISIBLE_DEVICES" in message
    status, answer = add("plain", [])
    assert status == 200, answer["message"]


def test_the_webhooks_account_cannot_delete_its_configuration_even_if_granted(
    kube: KubeClient, installed: Installed
) -> None:
    """RBAC grants no delete; the policy refuses it too, for a cluster that adds the grant."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    name = f"{installed.configuration}-test-delete"
    rule = {"apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": [installed.configuration], "verbs": ["delete"]}  # fmt: skip
    kube.create(f"{rbac}/clusterroles", {"metadata": {"name": name}, "rules": [rule]})
    subject = {"kind": "User", "name": installed.webhook.user, "apiGroup": RBAC_GROUP}
    role = {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name}
    binding = {"metadata": {"name": name}, "subjects": [subject], "roleRef": role}
    kube.create(f"{rbac}/clusterrolebindings", binding)
    path = f"{CONFIGURATIONS}/{installed.configuration}"
    try:
        message = wait_until_refused_by_policy(
            lambda: request_as(kube, installed.webhook, "DELETE", path, query={"dryRun": "All"})
        )
    finally:
        kube.delete(f"{rbac}/clusterrolebindings/{name}")
        kube.delete(f"{rbac}/clusterroles/{name}")
    assert "may not create or delete its MutatingWebhookConfiguration" in message


def wait_until_refused_by_policy(probe: Any) -> str:
    """As wait_until_refused, past refusals that are not the policy's (RBAC's, until the
    authorizer sees a new binding)."""

    def answer() -> str | None:
        status, body = probe()
        message = str(body.get("message", ""))
        return message if status == 403 and "ValidatingAdmissionPolicy" in message else None

    return wait_for(answer, timeout_s=30, what="the admission policy's refusal")


def test_applying_the_policies_again_changes_nothing(
    kube: KubeClient, installed: Installed
) -> None:
    """Argo CD and Flux apply the same render again and again: the API server keeps each object
    as it is (no new resourceVersion), so nothing shows as drift or churns."""
    before = {path: kube.get(path)["metadata"]["resourceVersion"] for path, _ in installed.policies}
    for path, obj in installed.policies:
        server_side_apply(kube, path, obj, dry_run=False)
    after = {path: kube.get(path)["metadata"]["resourceVersion"] for path, _ in installed.policies}
    assert after == before
    assert len(before) == 12  # 5 policies (the agent's own-node slices too), 7 bindings
