"""A GPU node as clusters run it, as rendered: the driver root the agent reads and hands to claims
(a host install, GPU Operator's driver container), GPU Operator coexistence (the agent only where
the Operator's device plugin is off), both binaries' log level, the agents' rollout width, and an
image registry that must be named."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.chart.rendering import Helm, Json, containers, one

pytestmark = pytest.mark.e2e

MOCK = {"mockGpus": [{"uuid": "GPU-0", "productName": "NVIDIA H100", "memory": "80Gi"}]}
OPERATOR_DEVICE_PLUGIN = "nvidia.com/gpu.deploy.device-plugin"


def agent_pod(objects: list[Json]) -> Json:
    spec: Json = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def container_named(objects: list[Json], kind: str, name: str) -> Json:
    return next(c for c in containers(one(objects, kind)) if c["name"] == name)


def environ(container: Json) -> dict[str, str]:
    return {var["name"]: var["value"] for var in container.get("env") or () if "value" in var}


def driver_root_of(objects: list[Json]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the agent's driver-root volume, its mount in the agent container), None when absent."""
    spec = agent_pod(objects)
    volume = next((v for v in spec["volumes"] if v["name"] == "driver-root"), None)
    agent = container_named(objects, "DaemonSet", "agent")
    mount = next((m for m in agent["volumeMounts"] if m["name"] == "driver-root"), None)
    return volume, mount


def node_terms(objects: list[Json]) -> list[list[Json]]:
    """The agent's required node-affinity terms (ORed), each a list of ANDed expressions."""
    affinity = agent_pod(objects)["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return [term["matchExpressions"] for term in terms]


def test_the_agent_reads_a_host_installed_driver_at_slash_by_default(helm: Helm) -> None:
    objects = helm.template()
    volume, mount = driver_root_of(objects)
    assert volume == {"name": "driver-root", "hostPath": {"path": "/", "type": "Directory"}}
    assert mount == {
        "name": "driver-root",
        "mountPath": "/driver-root",
        "readOnly": True,
        # the host's later mounts (a driver container's root) reach the agent, and its
        # unmounts too: a private copy of / would pin every pod volume mounted at start
        "mountPropagation": "HostToContainer",
    }
    env = environ(container_named(objects, "DaemonSet", "agent"))
    assert env["VGPU_BRIDGE_DRIVER_ROOT"] == "/"
    assert env["VGPU_BRIDGE_DRIVER_ROOT_MOUNT"] == "/driver-root"


def test_a_driver_root_elsewhere_is_mounted_from_there(helm: Helm) -> None:
    objects = helm.template({"agent": {"driverRoot": "/opt/nvidia/driver"}})
    volume, _ = driver_root_of(objects)
    assert volume is not None
    assert volume["hostPath"]["path"] == "/opt/nvidia/driver"
    env = environ(container_named(objects, "DaemonSet", "agent"))
    assert env["VGPU_BRIDGE_DRIVER_ROOT"] == "/opt/nvidia/driver"


@pytest.mark.parametrize(
    "agent", [{"driverRoot": ""}, MOCK, {**MOCK, "gpuOperator": {"enabled": True}}],
    ids=["empty", "mock-gpus", "mock-gpus-under-the-operator"],
)  # fmt: skip
def test_no_driver_root_is_mounted_or_named_when_empty_or_with_mock_gpus(
    helm: Helm, agent: Json
) -> None:
    objects = helm.template({"agent": agent})
    assert driver_root_of(objects) == (None, None)
    env = environ(container_named(objects, "DaemonSet", "agent"))
    assert not {"VGPU_BRIDGE_DRIVER_ROOT", "VGPU_BRIDGE_DRIVER_ROOT_MOUNT"} & set(env)


@pytest.mark.parametrize("root", ["run/nvidia/driver", "/run/../etc", "/run/nvidia/driver/"])
def test_a_driver_root_that_is_not_a_plain_absolute_path_is_refused(helm: Helm, root: str) -> None:
    message = helm.template_error({"agent": {"driverRoot": root}})
    assert "at '/agent/driverRoot': " in message


def test_under_gpu_operator_the_driver_comes_from_its_driver_container(helm: Helm) -> None:
    objects = helm.template({"agent": {"gpuOperator": {"enabled": True}}})
    volume, mount = driver_root_of(objects)
    assert volume == {
        "name": "driver-root",
        "hostPath": {"path": "/run/nvidia/driver", "type": "Directory"},
    }
    assert mount is not None
    assert mount["mountPropagation"] == "HostToContainer"
    env = environ(container_named(objects, "DaemonSet", "agent"))
    assert env["VGPU_BRIDGE_DRIVER_ROOT"] == "/run/nvidia/driver"
    assert env["VGPU_BRIDGE_DRIVER_ROOT_MOUNT"] == "/driver-root"


def test_under_gpu_operator_with_a_host_driver_its_root_is_as_set(helm: Helm) -> None:
    operator = {"enabled": True, "driverRoot": "/"}
    objects = helm.template({"agent": {"gpuOperator": operator}})
    assert environ(container_named(objects, "DaemonSet", "agent"))["VGPU_BRIDGE_DRIVER_ROOT"] == "/"


def test_under_gpu_operator_the_agent_runs_only_where_its_device_plugin_is_labelled_off(
    helm: Helm,
) -> None:
    objects = helm.template({"agent": {"gpuOperator": {"enabled": True}}})
    device_plugin_off = {"key": OPERATOR_DEVICE_PLUGIN, "operator": "In", "values": ["false"]}
    assert node_terms(objects) == [
        [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In",
          "values": ["true"]}, device_plugin_off],
        [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
         device_plugin_off],
    ]  # fmt: skip


def test_under_gpu_operator_without_gpu_node_labels_the_device_plugin_label_alone_places_it(
    helm: Helm,
) -> None:
    agent = {"gpuNodeLabels": [], "gpuOperator": {"enabled": True}}
    objects = helm.template({"agent": agent})
    assert node_terms(objects) == [
        [{"key": OPERATOR_DEVICE_PLUGIN, "operator": "In", "values": ["false"]}]
    ]


def test_with_the_operators_device_plugin_off_cluster_wide_every_gpu_node_gets_an_agent(
    helm: Helm,
) -> None:
    operator = {"enabled": True, "devicePluginOff": "clusterPolicy"}
    objects = helm.template({"agent": {"gpuOperator": operator}})
    assert node_terms(objects) == [
        [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In",
          "values": ["true"]}],
        [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}],
    ]  # fmt: skip


def test_under_gpu_operator_the_agent_tolerates_its_gpu_taint_as_before(helm: Helm) -> None:
    objects = helm.template({"agent": {"gpuOperator": {"enabled": True}}})
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in agent_pod(
        objects
    )["tolerations"]


@pytest.mark.parametrize(
    "operator",
    [{"enabled": "yes"}, {"enabled": True, "devicePluginOff": "sometimes"},
     {"enabled": True, "driverRoot": "relative"}, {"enabled": True, "typo": 1}],
    ids=["enabled-not-bool", "unknown-mode", "relative-root", "unknown-key"],
)  # fmt: skip
def test_gpu_operator_values_are_schema_checked(helm: Helm, operator: Json) -> None:
    message = helm.template_error({"agent": {"gpuOperator": operator}})
    assert "gpuOperator" in message


@pytest.mark.parametrize(("part", "kind"), [("webhook", "Deployment"), ("agent", "DaemonSet")])
def test_log_level_reaches_each_binary_as_its_env_var(helm: Helm, part: str, kind: str) -> None:
    assert environ(container_named(helm.template(), kind, part))["VGPU_BRIDGE_LOG_LEVEL"] == "info"
    objects = helm.template({part: {"logLevel": "debug"}})
    assert environ(container_named(objects, kind, part))["VGPU_BRIDGE_LOG_LEVEL"] == "debug"


@pytest.mark.parametrize("part", ["webhook", "agent"])
def test_an_unknown_log_level_is_refused_naming_the_field(helm: Helm, part: str) -> None:
    message = helm.template_error({part: {"logLevel": "verbose"}})
    assert f"at '/{part}/logLevel': value must be one of 'debug', 'info', 'warning'" in message


def test_an_empty_image_registry_is_refused_with_the_reason(helm: Helm) -> None:
    message = helm.template_error({"image": {"registry": ""}})
    assert "image.registry is empty" in message
    assert "docker.io/library" in message  # how to say "Docker Hub" when that is meant


def test_the_chart_as_shipped_names_no_registry_and_so_refuses_to_render(helm: Helm) -> None:
    """What a user gets without --set image.registry: the refusal, not a pull from Docker Hub."""
    message = helm.template_error({"image": {"registry": None}})  # null: the chart's default
    assert "image.registry is empty" in message
