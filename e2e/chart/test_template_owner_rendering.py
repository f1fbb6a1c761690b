"""In every TLS mode the webhook is told which MutatingWebhookConfiguration owns what it makes
(`VGPU_BRIDGE_WEBHOOK_CONFIGURATION`, the chart's own) and may read that one configuration, and no
other, to learn its uid (webhook/ownership.py)."""

from __future__ import annotations

import pytest

from e2e.chart.rendering import Helm, Json, containers, of_kind, one

pytestmark = pytest.mark.e2e


def webhook_role(objects: list[Json]) -> Json:
    [role] = [
        r for r in of_kind(objects, "ClusterRole") if r["metadata"]["name"].endswith("webhook")
    ]
    return role


def configuration_rules(role: Json) -> list[Json]:
    return [rule for rule in role["rules"] if "mutatingwebhookconfigurations" in rule["resources"]]


@pytest.mark.parametrize("mode", ["self-managed", "generate", "cert-manager"])
def test_the_webhook_knows_and_may_read_only_its_own_configuration(helm: Helm, mode: str) -> None:
    objects = helm.template({"tls": {"mode": mode}})
    [configuration] = of_kind(objects, "MutatingWebhookConfiguration")
    name = configuration["metadata"]["name"]
    (webhook,) = containers(one(objects, "Deployment"))
    env = {var["name"]: var.get("value") for var in webhook["env"]}
    assert env["VGPU_BRIDGE_WEBHOOK_CONFIGURATION"] == name
    assert configuration_rules(webhook_role(objects)) == [
        {"apiGroups": ["admissionregistration.k8s.io"],
         "resources": ["mutatingwebhookconfigurations"], "resourceNames": [name], "verbs": ["get"]}
    ]  # fmt: skip
