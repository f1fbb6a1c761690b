"""The values a real-cluster install sets, as rendered: images (registry, tag, digest), pull
secrets, service accounts, pod annotations and labels, priority classes, the agents' update
strategy, security contexts (the webhook pod meets Pod Security `restricted`), and which
Kubernetes versions the chart accepts. (test_on_cluster.py checks the Pod Security levels on the
real API server.)"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.chart.rendering import Helm, Json, containers, of_kind, one

pytestmark = pytest.mark.e2e

DIGEST = "sha256:" + "ab" * 32


def pod_spec(objects: list[Json], kind: str) -> Json:
    spec: Json = one(objects, kind)["spec"]["template"]["spec"]
    return spec


def images(objects: list[Json]) -> dict[str, str]:
    """Container name -> image, over the webhook's and the agents' pods."""
    return {
        container["name"]: container["image"]
        for kind in ("Deployment", "DaemonSet")
        for container in containers(one(objects, kind))
    }


def test_images_are_the_repositories_under_the_registry_at_the_charts_app_version(
    helm: Helm,
) -> None:
    assert images(helm.template({"image": {"registry": "r.example.com"}})) == {
        "webhook": "r.example.com/vgpu-bridge-webhook:0.1.0",
        "install-libvgpu": "r.example.com/vgpu-bridge-agent:0.1.0",
        "agent": "r.example.com/vgpu-bridge-agent:0.1.0",
    }


def test_registry_prefixes_both_repositories_and_tag_replaces_the_app_version(
    helm: Helm,
) -> None:
    values = {"image": {"registry": "registry.example.com:5000/gpu", "tag": "0.2.0-rc1"}}
    assert set(images(helm.template(values)).values()) == {
        "registry.example.com:5000/gpu/vgpu-bridge-webhook:0.2.0-rc1",
        "registry.example.com:5000/gpu/vgpu-bridge-agent:0.2.0-rc1",
    }


def test_a_digest_wins_over_the_tag_for_its_image_only(helm: Helm) -> None:
    values = {"image": {"registry": "r.example.com", "tag": "9.9.9", "agent": {"digest": DIGEST}}}
    assert images(helm.template(values)) == {
        "webhook": "r.example.com/vgpu-bridge-webhook:9.9.9",
        "install-libvgpu": f"r.example.com/vgpu-bridge-agent@{DIGEST}",
        "agent": f"r.example.com/vgpu-bridge-agent@{DIGEST}",
    }


def test_pull_policy_reaches_every_container(helm: Helm) -> None:
    objects = helm.template({"image": {"pullPolicy": "Always"}})
    policies = {
        container["imagePullPolicy"]
        for kind in ("Deployment", "DaemonSet")
        for container in containers(one(objects, kind))
    }
    assert policies == {"Always"}


def test_pull_secrets_reach_both_pods(helm: Helm) -> None:
    secrets = [{"name": "regcred"}, {"name": "mirror"}]
    objects = helm.template({"imagePullSecrets": secrets})
    for kind in ("Deployment", "DaemonSet"):
        assert pod_spec(objects, kind)["imagePullSecrets"] == secrets
    assert "imagePullSecrets" not in pod_spec(helm.template(), "Deployment")


IMAGE_REFUSALS = [
    ("digest-not-sha256", {"image": {"webhook": {"digest": "latest"}}}, "digest"),
    ("registry-with-scheme", {"image": {"registry": "https://r.example.com"}}, "registry"),
    ("tag-with-a-colon", {"image": {"tag": "a:b"}}, "tag"),
    ("old-webhookImage-key", {"webhookImage": {"repository": "x"}}, "webhookImage"),
]


@pytest.mark.parametrize(
    ("values", "field"), [c[1:] for c in IMAGE_REFUSALS], ids=[c[0] for c in IMAGE_REFUSALS]
)
def test_image_values_that_cannot_be_pulled_are_refused_naming_the_field(
    helm: Helm, values: dict[str, Any], field: str
) -> None:
    message = helm.template_error(values)
    assert "values don't meet the specifications of the schema" in message
    assert field in message


@pytest.mark.parametrize("part", ["webhook", "agent"])
def test_service_accounts_are_made_named_and_annotated(helm: Helm, part: str) -> None:
    kind = "Deployment" if part == "webhook" else "DaemonSet"
    default = helm.template()
    assert pod_spec(default, kind)["serviceAccountName"] == f"vgpu-bridge-{part}"
    role = "arn:aws:iam::123456789012:role/gpu"
    account_values = {
        "name": f"{part}-identity",
        "annotations": {"eks.amazonaws.com/role-arn": role},
    }
    values = {part: {"serviceAccount": account_values}}
    objects = helm.template(values)
    assert pod_spec(objects, kind)["serviceAccountName"] == f"{part}-identity"
    account = next(
        a for a in of_kind(objects, "ServiceAccount") if a["metadata"]["name"] == f"{part}-identity"
    )
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": role}
    binding = next(
        b
        for b in of_kind(objects, "ClusterRoleBinding")
        if b["metadata"]["name"] == f"vgpu-bridge-{part}"
    )
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{part}-identity", "namespace": "vgpu-bridge"}
    ]


@pytest.mark.parametrize("part", ["webhook", "agent"])
def test_an_existing_service_account_is_bound_and_not_made(helm: Helm, part: str) -> None:
    objects = helm.template({part: {"serviceAccount": {"create": False, "name": "platform-sa"}}})
    names = {a["metadata"]["name"] for a in of_kind(objects, "ServiceAccount")}
    assert "platform-sa" not in names
    assert f"vgpu-bridge-{part}" not in names  # the other part's account is still made
    subjects = [
        s for b in of_kind(objects, "ClusterRoleBinding") for s in b["subjects"]
    ]  # fmt: skip
    assert {"kind": "ServiceAccount", "name": "platform-sa", "namespace": "vgpu-bridge"} in subjects


@pytest.mark.parametrize("part", ["webhook", "agent"])
def test_an_existing_service_account_without_a_name_is_refused(helm: Helm, part: str) -> None:
    message = helm.template_error({part: {"serviceAccount": {"create": False}}})
    assert f"{part}.serviceAccount.create is false but {part}.serviceAccount.name is empty" in (
        message
    )


def test_the_agents_own_node_policy_follows_a_renamed_account(helm: Helm) -> None:
    objects = helm.template({"agent": {"serviceAccount": {"name": "gpu-agent"}}})
    [policy] = [
        obj
        for obj in of_kind(objects, "ValidatingAdmissionPolicy")
        if obj["metadata"]["name"].endswith("-own-node-slices")
    ]
    [condition] = policy["spec"]["matchConditions"]
    assert condition["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:vgpu-bridge:gpu-agent'"
    )


@pytest.mark.parametrize(("part", "kind"), [("webhook", "Deployment"), ("agent", "DaemonSet")])
def test_pod_annotations_and_labels_are_added_and_the_selector_labels_win(
    helm: Helm, part: str, kind: str
) -> None:
    values = {part: {
        "podAnnotations": {"example.com/team": "ml"},
        "podLabels": {"team": "ml", "app.kubernetes.io/component": "not-this"}}}  # fmt: skip
    workload = one(helm.template(values), kind)
    metadata = workload["spec"]["template"]["metadata"]
    assert metadata["annotations"]["example.com/team"] == "ml"
    assert metadata["labels"]["team"] == "ml"
    selector = workload["spec"]["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/component"] == part
    assert selector.items() <= metadata["labels"].items()


def test_mock_gpu_annotation_stays_beside_the_users(helm: Helm) -> None:
    mock = [{"uuid": "GPU-0", "productName": "NVIDIA H100", "memory": "80Gi"}]
    values = {"agent": {"mockGpus": mock, "podAnnotations": {"a": "b"}}}
    annotations = one(helm.template(values), "DaemonSet")["spec"]["template"]["metadata"][
        "annotations"
    ]
    assert set(annotations) == {"a", "vgpu-bridge.io/mock-gpus"}


def test_the_fail_closed_webhook_and_the_agents_get_critical_priority_by_default(
    helm: Helm,
) -> None:
    objects = helm.template()
    assert pod_spec(objects, "Deployment")["priorityClassName"] == "system-cluster-critical"
    assert pod_spec(objects, "DaemonSet")["priorityClassName"] == "system-node-critical"
    none = helm.template({"webhook": {"priorityClassName": ""}})
    assert "priorityClassName" not in pod_spec(none, "Deployment")


def test_agents_roll_a_tenth_of_the_nodes_at_a_time_by_default_or_as_set(helm: Helm) -> None:
    """An agent's restart leaves running GPU pods alone (prepared claims stay in its checkpoint)
    and only delays new ones on its node: a tenth of a pool of hundreds at a time, not one."""

    def strategy(values: dict[str, Any]) -> Json:
        found: Json = one(helm.template(values), "DaemonSet")["spec"]["updateStrategy"]
        return found

    assert strategy({}) == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}
    one_node = {"agent": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 1}}}}
    assert strategy(one_node) == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    # OnDelete takes no rollingUpdate (the API server refuses one), though the default has it
    assert strategy({"agent": {"updateStrategy": {"type": "OnDelete"}}}) == {"type": "OnDelete"}
    message = helm.template_error({"agent": {"updateStrategy": {"type": "Recreate"}}})
    assert "type" in message


@pytest.mark.parametrize("width", ["101%", "150%", "999%", "10"])
def test_a_rollout_width_the_api_server_would_refuse_is_refused_naming_the_field(
    helm: Helm, width: str
) -> None:
    """The API server refuses a DaemonSet whose maxUnavailable is a percentage above 100%: say
    so at render, naming the value, rather than half-way through `helm install`."""
    strategy = {"rollingUpdate": {"maxUnavailable": width}}
    message = helm.template_error({"agent": {"updateStrategy": strategy}})
    assert "at '/agent/updateStrategy/rollingUpdate/maxUnavailable'" in message


@pytest.mark.parametrize("width", ["1%", "10%", "99%", "100%"])
def test_a_rollout_width_of_a_percentage_up_to_all_nodes_renders(helm: Helm, width: str) -> None:
    strategy = {"rollingUpdate": {"maxUnavailable": width}}
    daemonset = one(helm.template({"agent": {"updateStrategy": strategy}}), "DaemonSet")
    assert daemonset["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": width}


def test_webhook_pod_meets_pod_security_restricted(helm: Helm) -> None:
    """The restricted level's rules that concern what the chart sets: non-root, no privilege
    escalation, every capability dropped, the runtime's seccomp profile; and a read-only root."""
    spec = pod_spec(helm.template(), "Deployment")
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    (webhook,) = spec["containers"]
    context = webhook["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert context["readOnlyRootFilesystem"] is True
    assert context["runAsUser"] != 0
    assert not spec.get("hostNetwork")
    assert not spec.get("hostPID")
    assert all("hostPath" not in volume for volume in spec["volumes"])


def test_security_contexts_can_be_set(helm: Helm) -> None:
    values = {
        "webhook": {"securityContext": {"runAsUser": 1000}, "podSecurityContext": {"fsGroup": 2}},
        "agent": {"podSecurityContext": {"seLinuxOptions": {"type": "spc_t"}}},
    }
    objects = helm.template(values)
    (webhook,) = containers(one(objects, "Deployment"))
    assert webhook["securityContext"]["runAsUser"] == 1000
    assert webhook["securityContext"]["capabilities"] == {"drop": ["ALL"]}  # the rest is kept
    assert pod_spec(objects, "Deployment")["securityContext"]["fsGroup"] == 2
    agent_spec = pod_spec(objects, "DaemonSet")
    assert agent_spec["securityContext"] == {"seLinuxOptions": {"type": "spc_t"}}
    assert agent_spec["containers"][0]["securityContext"] == {"privileged": True}


GATE_MESSAGE = "set kubernetes.allowGatedConsumableCapacity=true"


@pytest.mark.parametrize("version", ["v1.35.4", "v1.34.0", "v1.35.2-gke.1200"])
def test_kubernetes_before_1_36_is_refused_without_the_explicit_value(
    helm: Helm, version: str
) -> None:
    message = helm.template_error(kube_version=version)
    assert f"Kubernetes {version} serves consumable capacity only behind" in message
    assert "DRAConsumableCapacity" in message
    assert GATE_MESSAGE in message


@pytest.mark.parametrize("version", ["v1.35.4", "v1.34.0"])
def test_kubernetes_before_1_36_renders_with_the_explicit_value(helm: Helm, version: str) -> None:
    values = {"kubernetes": {"allowGatedConsumableCapacity": True}}
    objects = helm.template(values, kube_version=version)
    assert one(objects, "DeviceClass")["apiVersion"] == "resource.k8s.io/v1"


@pytest.mark.parametrize("version", ["v1.36.0", "v1.37.2", "v1.38.0-alpha.1"])
def test_kubernetes_1_36_and_later_need_nothing(helm: Helm, version: str) -> None:
    assert one(helm.template(kube_version=version), "Deployment")


def test_kubernetes_1_33_is_refused_by_the_charts_kube_version(helm: Helm) -> None:
    values = {"kubernetes": {"allowGatedConsumableCapacity": True}}
    message = helm.template_error(values, kube_version="v1.33.5")
    assert ">=1.34.0-0" in message
