"""`deviceClass.extendedResourceName`: the driver's own DeviceClass also serves an extended
resource (KEP-5004, GA in Kubernetes 1.37), so whole-GPU pods the webhook never saw still get
cards of our driver. Off by default; refused before 1.37 and for names that are no extended
resource; nothing but the DeviceClass changes."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.chart.rendering import Helm, Json, of_kind, one
from e2e.dra_objects import device_class

pytestmark = pytest.mark.e2e

KUBE_1_37 = "v1.37.2"
EXTENDED = {"deviceClass": {"extendedResourceName": "nvidia.com/gpu"}}


def _classes(objects: list[Json]) -> dict[str, Json]:
    return {c["metadata"]["name"]: c["spec"] for c in of_kind(objects, "DeviceClass")}


def test_no_class_serves_an_extended_resource_by_default(helm: Helm) -> None:
    objects = helm.template(kube_version=KUBE_1_37)
    assert "extendedResourceName" not in one(objects, "DeviceClass")["spec"]


def test_the_drivers_class_serves_the_name_as_the_e2e_scenario_installs_it(helm: Helm) -> None:
    """The class e2e/test_extended_resource.py proves on the 1.37 control plane is the chart's."""
    objects = helm.template(EXTENDED, kube_version=KUBE_1_37)
    rendered = one(objects, "DeviceClass")
    expected = device_class(
        "gpu.vgpu-bridge.io", driver="gpu.vgpu-bridge.io", extended_resource_name="nvidia.com/gpu"
    )
    assert rendered["apiVersion"] == expected["apiVersion"]
    assert rendered["spec"] == expected["spec"]


def test_only_the_drivers_own_class_carries_it_under_any_driver_name(helm: Helm) -> None:
    values = {
        **EXTENDED,
        "driverName": "gpu.example.com",
        "deviceClasses": [
            {"name": "gpu.example.com", "selectors": ["device.attributes['x'].y"]},
            {"name": "h100.gpu.example.com"},
        ],
    }
    classes = _classes(helm.template(values, kube_version=KUBE_1_37))
    assert classes["gpu.example.com"]["extendedResourceName"] == "nvidia.com/gpu"
    assert len(classes["gpu.example.com"]["selectors"]) == 2  # its extra selector is kept
    assert "extendedResourceName" not in classes["h100.gpu.example.com"]


def test_nothing_but_the_device_class_and_the_webhooks_quota_setting_changes(helm: Helm) -> None:
    """The webhook's registration and the agents are the same: the webhook still translates every
    `nvidia.com/gpu` pod it is sent. It is told the name, so that an untranslated pod's whole
    cards of it count against the namespace GPU quota (issue 35, item 4)."""

    def others(values: dict[str, Any]) -> list[Json]:
        objects = helm.template(values, kube_version=KUBE_1_37)
        for deployment in of_kind(objects, "Deployment"):
            for container in deployment["spec"]["template"]["spec"]["containers"]:
                env = container.get("env") or []
                told = [e for e in env if e["name"] == "VGPU_BRIDGE_EXTENDED_RESOURCE_NAME"]
                assert [e["value"] for e in told] in ([], [""], ["nvidia.com/gpu"])
                container["env"] = [e for e in env if e not in told]
        return [o for o in objects if o["kind"] != "DeviceClass"]

    assert others(EXTENDED) == others({})
    webhook = next(d for d in of_kind(helm.template(EXTENDED, kube_version=KUBE_1_37), "Deployment")
                   if "webhook" in d["metadata"]["name"])  # fmt: skip
    env = {
        e["name"]: e.get("value")
        for e in webhook["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["VGPU_BRIDGE_EXTENDED_RESOURCE_NAME"] == "nvidia.com/gpu"


def test_the_webhook_is_sent_pods_asking_whole_cards_of_our_class_by_any_name(helm: Helm) -> None:
    """With webhook.gpuObjectsOnly the API server sends only pods naming a GPU key: the
    DeviceClass's implicit `deviceclass.resource.kubernetes.io/<class>` and an extended name
    outside `nvidia.com/` are among them, so the quota gate sees their whole cards."""
    values = {"deviceClass": {"extendedResourceName": "example.com/vgpu"},
              "webhook": {"gpuObjectsOnly": True}}  # fmt: skip
    config = one(helm.template(values, kube_version=KUBE_1_37), "MutatingWebhookConfiguration")
    [condition] = config["webhooks"][0]["matchConditions"]
    assert "'example.com/vgpu'" in condition["expression"]
    assert "'deviceclass.resource.kubernetes.io/gpu.vgpu-bridge.io'" in condition["expression"]


@pytest.mark.parametrize("version", ["v1.36.3", "v1.36.0-gke.100", "v1.35.4"])
def test_kubernetes_before_1_37_is_refused_naming_the_value_and_the_release(
    helm: Helm, version: str
) -> None:
    values = {**EXTENDED, "kubernetes": {"allowGatedConsumableCapacity": True}}
    message = helm.template_error(values, kube_version=version)
    assert 'deviceClass.extendedResourceName "nvidia.com/gpu" needs Kubernetes 1.37' in message
    assert f"Kubernetes {version} has it behind a feature gate" in message


@pytest.mark.parametrize("version", ["v1.37.0", "v1.38.0-alpha.1"])
def test_kubernetes_1_37_and_later_render_it(helm: Helm, version: str) -> None:
    objects = helm.template(EXTENDED, kube_version=version)
    assert one(objects, "DeviceClass")["spec"]["extendedResourceName"] == "nvidia.com/gpu"


@pytest.mark.parametrize(
    "name",
    [
        "gpu",  # no domain: a native resource name
        "kubernetes.io/gpu",  # the kubernetes.io domain is Kubernetes' own
        "deviceclass.resource.kubernetes.io/gpu.vgpu-bridge.io",  # every class has this one
        "requests.nvidia.com/gpu",  # a quota name
        "NVIDIA.com/gpu",  # the domain is a DNS subdomain: lower case
        "nvidia.com/" + "g" * 64,  # the name part is at most 63 characters
        "nvidia.com/gpu ",
    ],
)
def test_a_name_that_is_no_extended_resource_is_refused_by_the_schema(
    helm: Helm, name: str
) -> None:
    values = {"deviceClass": {"extendedResourceName": name}}
    message = helm.template_error(values, kube_version=KUBE_1_37)
    assert "values don't meet the specifications of the schema" in message
    assert "extendedResourceName" in message


def test_a_misspelt_key_is_refused_by_the_schema(helm: Helm) -> None:
    values = {"deviceClass": {"extendedResource": "nvidia.com/gpu"}}
    message = helm.template_error(values, kube_version=KUBE_1_37)
    assert "extendedResource" in message


@pytest.mark.parametrize(
    ("name", "settings"),
    [
        ("nvidia.com/gpumem", {}),
        ("nvidia.com/gpucores", {}),
        ("nvidia.com/gpumem-percentage", {}),
        ("volcano.sh/vgpu-memory", {}),
        ("example.com/vmem", {"resourceMemoryName": "example.com/vmem"}),
    ],
)
def test_a_share_size_name_is_refused_as_no_count_of_cards(
    helm: Helm, name: str, settings: dict[str, str]
) -> None:
    values = {"deviceClass": {"extendedResourceName": name}, "webhook": {"settings": settings}}
    message = helm.template_error(values, kube_version=KUBE_1_37)
    assert f'deviceClass.extendedResourceName "{name}" names a share size' in message
    assert "webhook.settings.resourceCountName (nvidia.com/gpu)" in message


def test_a_renamed_card_count_is_served(helm: Helm) -> None:
    values = {
        "deviceClass": {"extendedResourceName": "example.com/vgpu"},
        "webhook": {"settings": {"resourceCountName": "example.com/vgpu"}},
    }
    objects = helm.template(values, kube_version=KUBE_1_37)
    assert one(objects, "DeviceClass")["spec"]["extendedResourceName"] == "example.com/vgpu"
