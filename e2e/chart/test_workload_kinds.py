"""The chart's webhook rules and the webhook's RBAC name exactly the workload kinds of core's
table (`vgpu_bridge/core/workloads.py`): a kind added there and forgotten here fails this test."""

from __future__ import annotations

import pytest

from e2e.chart.rendering import Helm, Json, of_kind, one
from vgpu_bridge.core.workloads import WORKLOAD_KINDS
from vgpu_bridge.webhook.templates import REFERRERS

pytestmark = pytest.mark.e2e

#: every optional webhook entry on, so every rule the chart can make is rendered
EVERY_RULE = {"webhook": {"workloads": True}, "volcano": {"enabled": True}}


@pytest.fixture(scope="module")
def rendered(helm: Helm) -> list[Json]:
    return helm.template(EVERY_RULE)


def _triples(rules: list[Json]) -> set[tuple[str, str, str]]:
    """(group, version, resource) of every rule."""
    return {
        (group, version, resource)
        for rule in rules
        for group in rule["apiGroups"]
        for version in rule.get("apiVersions", ["*"])
        for resource in rule["resources"]
    }


def test_the_webhook_is_sent_every_kind_the_table_sends_and_no_other(
    rendered: list[Json],
) -> None:
    config = one(rendered, "MutatingWebhookConfiguration")
    rules = [rule for hook in config["webhooks"] for rule in hook["rules"]]
    expected = {(k.group, k.version, k.resource) for k in WORKLOAD_KINDS if k.sent_to_webhook}
    assert _triples(rules) == expected


def test_the_webhook_may_list_every_kind_that_can_reference_a_template(
    rendered: list[Json],
) -> None:
    (role,) = [
        r for r in of_kind(rendered, "ClusterRole") if r["metadata"]["name"].endswith("-webhook")
    ]
    listable = {
        (group, resource)
        for rule in role["rules"]
        if "list" in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    workloads = {(k.group, k.resource) for k in WORKLOAD_KINDS}
    assert listable & workloads == {(k.group, k.resource) for k in REFERRERS}
