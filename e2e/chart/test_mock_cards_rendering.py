"""What `helm template` makes with agent.mock (docs/kind-e2e.md): `--set agent.mock.enabled=true`
alone runs the agents on the nodes that have the mock label, each publishing the cards its value
names with the stand-in CUDA driver in every claim; agent.mockGpus keeps its meaning; values that
cannot work are refused with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.chart.rendering import Helm, Json, containers, of_kind, one
from vgpu_bridge.node.settings import Settings as NodeSettings

pytestmark = pytest.mark.e2e

LABEL = "vgpu-bridge.io/mock-gpus"
MOCK_DRIVER = "/opt/vgpu-bridge/mock-driver"
CONTROL_PLANE = {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                 "effect": "NoSchedule"}  # fmt: skip
LISTED = [{"uuid": "GPU-e2e00000-c1d0-4000-8000-000000000000", "productName": "NVIDIA H100",
           "memory": "80Gi"}]  # fmt: skip


def mock(**values: Any) -> dict[str, Any]:
    return {"agent": {"mock": {"enabled": True, **values}}}


def pod_spec(objects: list[Json]) -> Json:
    spec: Json = one(objects, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def agent_env(objects: list[Json]) -> dict[str, str]:
    agent = next(c for c in containers(one(objects, "DaemonSet")) if c["name"] == "agent")
    return {var["name"]: var.get("value", "") for var in agent.get("env") or ()}


def node_terms(objects: list[Json]) -> list[Json]:
    terms: list[Json] = pod_spec(objects)["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    return terms


@pytest.fixture(scope="module")
def label_mode(helm: Helm) -> list[Json]:
    return helm.template(mock())


def test_enabled_alone_names_the_label_and_the_stand_in_driver_to_the_agent(
    label_mode: list[Json],
) -> None:
    found = agent_env(label_mode)
    assert found["VGPU_BRIDGE_MOCK_GPUS_NODE_LABEL"] == LABEL
    assert found["VGPU_BRIDGE_MOCK_DRIVER"] == MOCK_DRIVER
    assert not {"VGPU_BRIDGE_MOCK_GPUS", "VGPU_BRIDGE_DRIVER_ROOT",
                "VGPU_BRIDGE_DRIVER_ROOT_MOUNT"} & set(found)  # fmt: skip
    settings = NodeSettings.from_env({**found, "VGPU_BRIDGE_NODE_NAME": "kind-worker"})
    assert settings.mock_mode
    assert settings.mock_driver_path is not None


def test_enabled_alone_runs_agents_only_where_the_label_is_and_mounts_no_driver(
    label_mode: list[Json],
) -> None:
    assert node_terms(label_mode) == [{"matchExpressions": [{"key": LABEL, "operator": "Exists"}]}]
    pod = pod_spec(label_mode)
    assert CONTROL_PLANE in pod["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert "driver-root" not in {volume["name"] for volume in pod["volumes"]}
    assert "vgpu" in {volume["name"] for volume in pod["volumes"]}  # the copy goes there
    assert not [c for c in of_kind(label_mode, "ConfigMap") if "mock-gpus" in c["metadata"]["name"]]


def test_the_webhook_and_the_device_class_are_as_for_any_install(
    helm: Helm, label_mode: list[Json]
) -> None:
    plain = helm.template()
    for kind in ("Deployment", "DeviceClass", "MutatingWebhookConfiguration"):
        assert of_kind(label_mode, kind) == of_kind(plain, kind)


def test_a_label_of_ones_own_and_no_stand_in_driver(helm: Helm) -> None:
    objects = helm.template(mock(nodeLabel="example.com/fake-gpus", cudaDriver=False))
    found = agent_env(objects)
    assert found["VGPU_BRIDGE_MOCK_GPUS_NODE_LABEL"] == "example.com/fake-gpus"
    assert "VGPU_BRIDGE_MOCK_DRIVER" not in found
    assert node_terms(objects)[0]["matchExpressions"][0]["key"] == "example.com/fake-gpus"


def test_enabled_with_mock_gpus_gives_that_list_on_the_labelled_nodes_with_the_driver(
    helm: Helm,
) -> None:
    values = mock()
    values["agent"]["mockGpus"] = LISTED
    objects = helm.template(values)
    found = agent_env(objects)
    assert found["VGPU_BRIDGE_MOCK_GPUS"] == "/etc/vgpu-bridge/mock-gpus.yaml"
    assert found["VGPU_BRIDGE_MOCK_DRIVER"] == MOCK_DRIVER
    assert "VGPU_BRIDGE_MOCK_GPUS_NODE_LABEL" not in found  # the label only places the agents
    assert node_terms(objects) == [{"matchExpressions": [{"key": LABEL, "operator": "Exists"}]}]
    assert CONTROL_PLANE in pod_spec(objects)["tolerations"]


def test_mock_gpus_alone_keep_their_meaning(helm: Helm) -> None:
    objects = helm.template({"agent": {"mockGpus": LISTED}})
    names = set(agent_env(objects))
    assert "VGPU_BRIDGE_MOCK_GPUS" in names
    assert not {"VGPU_BRIDGE_MOCK_DRIVER", "VGPU_BRIDGE_MOCK_GPUS_NODE_LABEL"} & names
    assert node_terms(objects) == node_terms(helm.template())  # placed as for real GPUs
    assert CONTROL_PLANE not in pod_spec(objects)["tolerations"]


def test_an_affinity_of_ones_own_replaces_the_labels(helm: Helm) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "ci", "operator": "Exists"}]}]
            }
        }
    }
    values = mock()
    values["agent"]["affinity"] = affinity
    assert pod_spec(helm.template(values))["affinity"] == affinity  # fmt: skip


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (mock(nodeLabel=""), "agent.mock.enabled needs agent.mock.nodeLabel"),
        ({**mock(), "nvidiaDriver": {"enabled": True}},
         "agent.mock.enabled is refused under nvidiaDriver.enabled"),
        ({"agent": {"mock": {"enabled": True}, "gpuOperator": {"enabled": True}}},
         "agent.mock.enabled and agent.gpuOperator.enabled"),
        ({"agent": {"mock": {"enabled": True},
                    "mockGpus": [{"uuid": "GPU-0", "productName": "p", "memory": "1Gi"}]}},
         'agent.mockGpus uuid "GPU-0": with agent.mock.cudaDriver the stand-in driver presents'),
        (mock(nodeLabel="not a label"), "nodeLabel"),
        (mock(cards=8), "cards"),
    ],
    ids=["no-label", "nvidia-driver", "gpu-operator", "uuid-shape", "bad-label", "unknown-key"],
)  # fmt: skip
def test_values_that_cannot_work_are_refused_with_the_reason(
    helm: Helm, values: dict[str, Any], message: str
) -> None:
    assert message in helm.template_error(values)


def test_mock_gpus_of_any_uuid_pass_without_the_stand_in_driver(helm: Helm) -> None:
    listed = [{"uuid": "GPU-0", "productName": "p", "memory": "1Gi"}]
    values = {"agent": {"mock": {"enabled": True, "cudaDriver": False}, "mockGpus": listed}}
    assert agent_env(helm.template(values))["VGPU_BRIDGE_MOCK_GPUS"]
