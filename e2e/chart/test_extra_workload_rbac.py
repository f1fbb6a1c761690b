"""Issue 25 item 6: the custom workload kinds the sweeper lists come from one chart value, which
feeds both the webhook's setting and its ClusterRole (an operator who adds a kind gets RBAC)."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.chart.rendering import Helm, Json, containers, of_kind, one
from vgpu_bridge.webhook.extra_workloads import DEFAULT_EXTRA_WORKLOAD_RESOURCES
from vgpu_bridge.webhook.settings import Settings as WebhookSettings

pytestmark = pytest.mark.e2e


def webhook_role(objects: list[Json]) -> Json:
    [role] = [
        r for r in of_kind(objects, "ClusterRole") if r["metadata"]["name"].endswith("webhook")
    ]
    return role


def listed(role: Json) -> set[tuple[str, str]]:
    """(group, resource) of each rule that grants `list`."""
    return {
        (group, resource)
        for rule in role["rules"]
        if "list" in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def webhook_settings(objects: list[Json]) -> WebhookSettings:
    (webhook,) = containers(one(objects, "Deployment"))
    return WebhookSettings.from_env({var["name"]: var["value"] for var in webhook["env"]})


def test_by_default_the_webhook_lists_and_may_list_the_common_custom_workloads(
    helm: Helm,
) -> None:
    objects = helm.template()
    settings = webhook_settings(objects)
    assert settings.extra_workload_resources == DEFAULT_EXTRA_WORKLOAD_RESOURCES
    wanted = {(r.group, r.resource) for r in settings.extra_workloads()}
    assert ("jobset.x-k8s.io", "jobsets") in wanted
    assert wanted <= listed(webhook_role(objects))


def test_a_kind_an_operator_adds_gets_its_list_rule_and_reaches_the_webhook(helm: Helm) -> None:
    values: dict[str, Any] = {
        "webhook": {"settings": {"extraWorkloadResources": ["widgets.example.com/v1beta1"]}}
    }
    objects = helm.template(values)
    assert webhook_settings(objects).extra_workload_resources == "widgets.example.com/v1beta1"
    role = webhook_role(objects)
    assert ("example.com", "widgets") in listed(role)
    assert ("jobset.x-k8s.io", "jobsets") not in listed(role)  # the list replaces the default
    [rule] = [r for r in role["rules"] if r["apiGroups"] == ["example.com"]]
    assert rule == {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["list"]}


def test_an_empty_list_lists_no_custom_workloads(helm: Helm) -> None:
    objects = helm.template({"webhook": {"settings": {"extraWorkloadResources": []}}})
    assert webhook_settings(objects).extra_workloads() == ()
    assert ("jobset.x-k8s.io", "jobsets") not in listed(webhook_role(objects))


def test_the_schema_refuses_a_resource_without_group_and_version(helm: Helm) -> None:
    message = helm.template_error(
        {"webhook": {"settings": {"extraWorkloadResources": ["jobsets"]}}}
    )
    assert "extraWorkloadResources" in message
