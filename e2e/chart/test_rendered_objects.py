"""What `helm template` makes: the objects the issue asks for, wired as the binaries expect."""

from __future__ import annotations

import _ctypes
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from e2e.chart.rendering import Helm, Json, containers, env_names, of_kind, one
from tests.cli_runner import run_cli
from vgpu_bridge.node.grpc import CONNECT_TIMEOUT_S
from vgpu_bridge.node.health import HEALTHZ
from vgpu_bridge.node.settings import InstallSettings
from vgpu_bridge.node.settings import Settings as NodeSettings
from vgpu_bridge.webhook.settings import Settings as WebhookSettings

pytestmark = pytest.mark.e2e

ENV_PREFIX = "VGPU_BRIDGE_"
WEBHOOK_ENV = {ENV_PREFIX + name.upper() for name in WebhookSettings.setting_names()}
NODE_ENV = {ENV_PREFIX + name.upper() for name in NodeSettings.setting_names()}
INSTALL_ENV = {ENV_PREFIX + name.upper() for name in InstallSettings.setting_names()}
MOCK = {"agent": {"mockGpus": [{"uuid": "GPU-0", "productName": "NVIDIA H100", "memory": "80Gi"}]}}


@pytest.fixture(scope="module")
def defaults(helm: Helm) -> list[Json]:
    return helm.template()


def webhook_config(objects: list[Json]) -> Json:
    return one(objects, "MutatingWebhookConfiguration")


def test_defaults_make_every_part(defaults: list[Json]) -> None:
    kinds = sorted({obj["kind"] for obj in defaults})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "Deployment",
        "DeviceClass",
        "Job",  # the pre-delete hook's (uninstall-hook.yaml)
        "MutatingWebhookConfiguration",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]  # fmt: skip (no NetworkPolicy: opt-in, docs/networkpolicy.md; no Secret: docs/tls.md)


def test_webhook_runs_two_spread_replicas_kept_by_a_budget(defaults: list[Json]) -> None:
    deployment = one(defaults, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    anti = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    budget = one(defaults, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]


@pytest.mark.parametrize("values", [{}, MOCK], ids=["defaults", "mock-gpus"])
def test_the_chart_only_sets_env_vars_the_binaries_read(helm: Helm, values: dict[str, Any]) -> None:
    objects = helm.template(values)
    (webhook,) = containers(one(objects, "Deployment"))
    assert webhook["args"] == ["webhook"]
    assert set(env_names(webhook)) <= WEBHOOK_ENV, set(env_names(webhook)) - WEBHOOK_ENV
    install, agent = containers(one(objects, "DaemonSet"))
    assert agent["args"] == ["node"]
    assert set(env_names(agent)) <= NODE_ENV, set(env_names(agent)) - NODE_ENV
    assert install["args"] == ["node", "install-libvgpu"]
    assert set(env_names(install)) == INSTALL_ENV
    for container in (webhook, install, agent):
        assert "command" not in container


def test_webhook_settings_from_the_chart_are_valid_settings(defaults: list[Json]) -> None:
    (webhook,) = containers(one(defaults, "Deployment"))
    environ = {var["name"]: var["value"] for var in webhook["env"]}
    settings = WebhookSettings.from_env(environ)
    assert settings.namespace == "vgpu-bridge"
    assert settings.excluded() == {"kube-system", "vgpu-bridge"}
    assert settings.host_port == ("0.0.0.0", 8443)


def test_webhook_plain_metrics_port_is_off_by_default_and_named_metrics_when_on(
    helm: Helm, defaults: list[Json]
) -> None:
    (off,) = containers(one(defaults, "Deployment"))
    assert [port["name"] for port in off["ports"]] == ["https"]
    assert WebhookSettings.from_env(_values(off)).metrics_host_port is None
    values = {"webhook": {"metrics": {"enabled": True, "port": 9500}}}
    (webhook,) = containers(one(helm.template(values), "Deployment"))
    ports = {port["name"]: port["containerPort"] for port in webhook["ports"]}
    assert ports == {"https": 8443, "metrics": 9500}
    assert WebhookSettings.from_env(_values(webhook)).metrics_host_port == ("0.0.0.0", 9500)
    for probe in ("readinessProbe", "livenessProbe"):  # the probes keep using HTTPS
        assert webhook[probe]["httpGet"]["port"] == "https"
        assert webhook[probe]["httpGet"]["scheme"] == "HTTPS"


def _values(container: Json) -> dict[str, str]:
    return {var["name"]: var["value"] for var in container["env"] if "value" in var}


def test_nvidia_runtime_class_also_asks_that_runtime_for_nvml(helm: Helm) -> None:
    daemonset = one(helm.template({"agent": {"runtimeClassName": "nvidia"}}), "DaemonSet")
    assert daemonset["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    (_, agent) = containers(daemonset)
    environ = {var["name"]: var.get("value") for var in agent["env"]}
    assert environ["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert environ["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert set(environ) - NODE_ENV == {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}


def test_agent_settings_from_the_chart_are_valid_settings(helm: Helm) -> None:
    (_, agent) = containers(one(helm.template(MOCK), "DaemonSet"))
    environ = {var["name"]: var["value"] for var in agent["env"] if "value" in var}
    assert agent["env"][0]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    settings = NodeSettings.from_env({**environ, "VGPU_BRIDGE_NODE_NAME": "node-a"})
    assert str(settings.dra_socket) == "/var/lib/kubelet/plugins/gpu.vgpu-bridge.io/dra.sock"
    expected_registration = "/var/lib/kubelet/plugins_registry/gpu.vgpu-bridge.io-reg.sock"
    assert str(settings.registration_socket) == expected_registration
    assert str(settings.mock_gpus) == "/etc/vgpu-bridge/mock-gpus.yaml"


def test_agent_liveness_asks_healthz_where_the_agent_serves_it(defaults: list[Json]) -> None:
    (_, agent) = containers(one(defaults, "DaemonSet"))
    probe = agent["livenessProbe"]
    assert probe["httpGet"]["path"] == HEALTHZ
    ports = {port["name"]: port["containerPort"] for port in agent["ports"]}
    environ = {var["name"]: var["value"] for var in agent["env"] if "value" in var}
    settings = NodeSettings.from_env({**environ, "VGPU_BRIDGE_NODE_NAME": "node-a"})
    assert settings.metrics_host_port == ("0.0.0.0", ports[probe["httpGet"]["port"]])
    assert probe["timeoutSeconds"] > 2 * CONNECT_TIMEOUT_S  # both sockets may take that long


def test_agent_sees_host_paths_at_the_same_paths(defaults: list[Json]) -> None:
    spec = one(defaults, "DaemonSet")["spec"]["template"]["spec"]
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    # the driver's install is read at /driver-root, whatever its host path (test_node_operations)
    del host["driver-root"]
    assert set(host) == {"plugin", "registry", "cdi", "vgpu"}
    for container in spec["initContainers"] + spec["containers"]:
        for mount in container["volumeMounts"]:
            if mount["name"] in host:
                assert mount["mountPath"] == host[mount["name"]]
    assert host["cdi"] == "/var/run/cdi"
    assert host["vgpu"] == "/usr/local/vgpu"
    assert spec["hostPID"] is True  # the metrics read /proc/<host pid>/cgroup


def test_hami_series_read_the_kubelets_pod_resources_socket_and_the_agent_no_pods(
    helm: Helm,
) -> None:
    """Issue 35, item 7: RBAC cannot narrow `get pods` to one node's pods, so the agent (a
    privileged pod on every GPU node) is granted none; the kubelet's socket names containers."""
    objects = helm.template({"metrics": {"hamiCompatible": True}})
    for role in of_kind(objects, "ClusterRole") + of_kind(objects, "Role"):
        if "agent" in role["metadata"]["name"]:
            assert not [r for r in role["rules"] if "pods" in r["resources"]], role
    daemonset = one(objects, "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host["pod-resources"] == "/var/lib/kubelet/pod-resources"
    (_, agent) = containers(daemonset)
    [mount] = [m for m in agent["volumeMounts"] if m["name"] == "pod-resources"]
    assert (mount["mountPath"], mount.get("readOnly")) == (host["pod-resources"], True)
    settings = NodeSettings.from_env({**_values(agent), "VGPU_BRIDGE_NODE_NAME": "node-a"})
    assert settings.pod_resources_socket == Path(host["pod-resources"], "kubelet.sock")
    assert settings.hami_metrics


def test_init_container_installs_libvgpu_and_preload_file_into_the_vgpu_dir(
    defaults: list[Json], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its args and env, run here with the host dir and the image's library moved to tmp_path."""
    (install,) = one(defaults, "DaemonSet")["spec"]["template"]["spec"]["initContainers"]
    environ = {var["name"]: var["value"] for var in install["env"]}
    settings = InstallSettings.from_env(environ)
    assert settings.vgpu_dir == Path("/usr/local/vgpu")  # where the agent and CDI expect them
    assert settings.libvgpu_source == Path("/opt/vgpu-bridge/lib/libvgpu.so")
    monkeypatch.setenv("VGPU_BRIDGE_VGPU_DIR", str(tmp_path / "vgpu"))
    monkeypatch.setenv("VGPU_BRIDGE_LIBVGPU_SOURCE", _ctypes.__file__)  # a real shared object
    done = run_cli(install["args"])
    assert done.code == 0, done.stderr
    assert (tmp_path / "vgpu" / "libvgpu.so").read_bytes() == Path(_ctypes.__file__).read_bytes()
    # the path CDI mounts the library at in containers; the host's own file is never touched
    assert (tmp_path / "vgpu" / "ld.so.preload").read_text() == "/usr/local/vgpu/libvgpu.so\n"


def test_no_init_container_when_the_library_is_installed_otherwise(helm: Helm) -> None:
    spec = one(helm.template({"agent": {"installLibrary": False}}), "DaemonSet")["spec"]
    assert "initContainers" not in spec["template"]["spec"]


def test_device_class_selects_shareable_devices_of_our_driver(helm: Helm) -> None:
    values = {
        "deviceClasses": [
            {"name": "gpu.vgpu-bridge.io"},
            {"name": "h100.gpu.vgpu-bridge.io", "selectors": ["device.attributes['x'].y"]},
        ]
    }
    ours, h100 = of_kind(helm.template(values), "DeviceClass")
    expected = 'device.driver == "gpu.vgpu-bridge.io" && device.allowMultipleAllocations == true'
    assert ours["metadata"]["name"] == "gpu.vgpu-bridge.io"
    assert [s["cel"]["expression"] for s in ours["spec"]["selectors"]] == [expected]
    assert [s["cel"]["expression"] for s in h100["spec"]["selectors"]] == [
        expected, "device.attributes['x'].y"
    ]  # fmt: skip


def test_extra_classes_only_add_to_the_drivers_own(helm: Helm) -> None:
    values = {"deviceClasses": [{"name": "h100.gpu.vgpu-bridge.io"}]}
    names = [c["metadata"]["name"] for c in of_kind(helm.template(values), "DeviceClass")]
    assert names == ["gpu.vgpu-bridge.io", "h100.gpu.vgpu-bridge.io"]


def test_one_driver_name_renames_the_class_the_webhook_and_the_agent_together(
    helm: Helm, defaults: list[Json]
) -> None:
    renamed = helm.template({"driverName": "gpu.example.com"})
    for objects, driver in ((defaults, "gpu.vgpu-bridge.io"), (renamed, "gpu.example.com")):
        (device_class,) = of_kind(objects, "DeviceClass")
        assert device_class["metadata"]["name"] == driver
        assert (
            f'device.driver == "{driver}"'
            in device_class["spec"]["selectors"][0]["cel"]["expression"]
        )
        (webhook,) = containers(one(objects, "Deployment"))
        (_, agent) = containers(one(objects, "DaemonSet"))
        assert _values(webhook)["VGPU_BRIDGE_DRIVER_NAME"] == driver
        assert _values(agent)["VGPU_BRIDGE_DRIVER_NAME"] == driver
        assert WebhookSettings.from_env(_values(webhook)).driver_name == driver
        plugin_dirs = [v["hostPath"]["path"] for v in one(objects, "DaemonSet")["spec"]["template"][
            "spec"]["volumes"] if "hostPath" in v]  # fmt: skip
        assert f"/var/lib/kubelet/plugins/{driver}" in plugin_dirs
    assert "gpu.vgpu-bridge.io" not in json.dumps(renamed)  # nothing else keeps the old name


def test_webhook_configuration_sorts_before_volcano_and_kai(defaults: list[Json]) -> None:
    name = webhook_config(defaults)["metadata"]["name"]
    assert name < "mutating-kai-admission"
    assert name < "volcano-admission-service-jobs-mutate"
    assert name < "hami-"  # and before HAMi-DRA's, should anyone run both (do not)


def test_webhook_configuration_fails_closed_and_skips_excluded_namespaces(
    defaults: list[Json],
) -> None:
    webhooks = webhook_config(defaults)["webhooks"]
    assert [w["name"] for w in webhooks] == ["pods.vgpu-bridge.io"]  # workloads at pod level
    assert webhooks[0]["rules"][0]["operations"] == ["CREATE"]  # a pod's claims are immutable
    for webhook in webhooks:
        assert webhook["failurePolicy"] == "Fail"
        assert webhook["sideEffects"] == "NoneOnDryRun"
        assert webhook["clientConfig"]["service"]["path"] == "/mutate"
        (expression,) = webhook["namespaceSelector"]["matchExpressions"]
        assert expression == {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": ["kube-system", "vgpu-bridge"],
        }


def test_workloads_toggle_sends_the_workload_kinds_on_create_and_update(helm: Helm) -> None:
    webhooks = webhook_config(helm.template({"webhook": {"workloads": True}}))["webhooks"]
    assert [w["name"] for w in webhooks] == ["pods.vgpu-bridge.io", "workloads.vgpu-bridge.io"]
    workloads = webhooks[1]
    assert {r for rule in workloads["rules"] for r in rule["resources"]} == {
        "deployments", "statefulsets", "daemonsets", "replicasets", "jobs", "cronjobs"
    }  # fmt: skip
    assert {op for rule in workloads["rules"] for op in rule["operations"]} == {"CREATE", "UPDATE"}


def test_volcano_toggle_adds_jobs_and_podgroups(helm: Helm) -> None:
    webhooks = webhook_config(helm.template({"volcano": {"enabled": True}}))["webhooks"]
    volcano = next(w for w in webhooks if w["name"] == "volcano.vgpu-bridge.io")
    assert [(r["apiGroups"], r["resources"], r["operations"]) for r in volcano["rules"]] == [
        (["batch.volcano.sh"], ["jobs"], ["CREATE", "UPDATE"]),
        (["scheduling.volcano.sh"], ["podgroups"], ["CREATE", "UPDATE"]),
    ]


def test_scheduler_toggles_reach_the_webhook_as_env(helm: Helm) -> None:
    values = {
        "volcano": {"enabled": True, "version": "v1.15.1", "schedulerNames": ["volcano", "vc2"]},
        "kai": {"enabled": True, "version": "v0.18.0", "withoutCapacity": "refuse"},
    }
    (webhook,) = containers(one(helm.template(values), "Deployment"))
    environ = {var["name"]: var["value"] for var in webhook["env"]}
    settings = WebhookSettings.from_env(environ)
    assert settings.volcano_names() == ("volcano", "vc2")
    assert settings.volcano_version == "v1.15.1"
    assert settings.kai_version == "v0.18.0"
    assert settings.kai_without_capacity == "refuse"


def test_kai_shares_outside_gpu_quota_take_a_driver_name_without_gpu(helm: Helm) -> None:
    """kai.sharesCountAsGpus=false with such a name: both binaries and the DeviceClass get it."""
    name = "shares.accel.example.com"
    values = {"kai": {"enabled": True, "sharesCountAsGpus": False}, "driverName": name}
    objects = helm.template(values)
    assert one(objects, "DeviceClass")["metadata"]["name"] == name
    for kind in ("Deployment", "DaemonSet"):
        values_seen = {
            var.get("value")
            for container in containers(one(objects, kind))
            for var in container.get("env") or []
            if var["name"] == "VGPU_BRIDGE_DRIVER_NAME"
        }
        assert values_seen == {name}, kind


def test_generated_certificate_is_signed_by_the_ca_bundle_for_the_service(helm: Helm) -> None:
    defaults = helm.template({"tls": {"mode": "generate"}})
    secret = one(defaults, "Secret")
    serving = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    bundle = webhook_config(defaults)["webhooks"][0]["clientConfig"]["caBundle"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(bundle))
    serving.verify_directly_issued_by(ca)
    service = webhook_config(defaults)["webhooks"][0]["clientConfig"]["service"]
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    host = f"{service['name']}.{service['namespace']}.svc"
    assert host in names.get_values_for_type(x509.DNSName)
    assert service["name"] in {s["metadata"]["name"] for s in of_kind(defaults, "Service")}


def test_cert_manager_mode_makes_a_certificate_and_injects_its_ca(helm: Helm) -> None:
    objects = helm.template({"tls": {"mode": "cert-manager"}})
    assert not of_kind(objects, "Secret")
    certificate, issuer = one(objects, "Certificate"), one(objects, "Issuer")
    assert certificate["spec"]["issuerRef"] == {
        "kind": "Issuer",
        "name": issuer["metadata"]["name"],
    }
    annotations = webhook_config(objects)["metadata"]["annotations"]
    assert annotations["cert-manager.io/inject-ca-from"] == (
        f"vgpu-bridge/{certificate['metadata']['name']}"
    )
    volume = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"][0]
    assert volume["secret"]["secretName"] == certificate["spec"]["secretName"]


def test_metrics_service_can_be_node_port_31995(helm: Helm) -> None:
    objects = helm.template({"metrics": {"service": {"type": "NodePort"}}})
    services = {s["metadata"]["name"]: s for s in of_kind(objects, "Service")}
    metrics = services["vgpu-bridge-agent-metrics"]
    assert metrics["spec"]["type"] == "NodePort"
    assert metrics["spec"]["ports"] == [
        {
            "name": "metrics",
            "port": 9401,
            "targetPort": "metrics",
            "protocol": "TCP",
            "nodePort": 31995,
        }
    ]
    selector = one(objects, "DaemonSet")["spec"]["selector"]["matchLabels"]
    assert metrics["spec"]["selector"] == selector


def agent_pod_spec(objects: list[Json]) -> Json:
    spec: Json = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def test_agent_runs_only_on_gpu_nodes_and_tolerates_gpu_taints_by_default(
    defaults: list[Json],
) -> None:
    spec = agent_pod_spec(defaults)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert [t["matchExpressions"] for t in terms["nodeSelectorTerms"]] == [
        [
            {
                "key": "feature.node.kubernetes.io/pci-10de.present",
                "operator": "In",
                "values": ["true"],
            }
        ],
        [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}],
    ]  # any one of them: terms are ORed
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]


def test_agent_affinity_set_by_the_user_replaces_the_gpu_node_labels(helm: Helm) -> None:
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["a100"]}]}]}}}  # fmt: skip
    assert agent_pod_spec(helm.template({"agent": {"affinity": own}}))["affinity"] == own


def test_agent_runs_anywhere_without_gpu_node_labels(helm: Helm) -> None:
    assert "affinity" not in agent_pod_spec(helm.template({"agent": {"gpuNodeLabels": []}}))


def test_agent_with_mock_gpus_runs_on_gpu_labelled_nodes_too(helm: Helm) -> None:
    spec = agent_pod_spec(helm.template(MOCK))
    assert spec["affinity"] == agent_pod_spec(helm.template())["affinity"]
