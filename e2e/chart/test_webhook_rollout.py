"""How the webhook's Deployment rolls and stops, as rendered (issue 38, scenario 1): a new replica
is ready before an old one stops (maxUnavailable 0, maxSurge 1); each stopping replica drains
for `webhook.drainSeconds` (its env) and the kubelet waits past that and a review's timeout
before it kills; the disruption budget never makes a one-replica install's node drain wait
forever, and one that no eviction could ever meet is refused."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.chart.rendering import Helm, Json, containers, of_kind, one

pytestmark = pytest.mark.e2e


def deployment(helm: Helm, **webhook: Any) -> Json:
    return one(helm.template({"webhook": webhook}), "Deployment")


def env_of(workload: Json) -> dict[str, str]:
    (container,) = containers(workload)
    return {var["name"]: var["value"] for var in container["env"]}


def test_a_roll_starts_a_new_replica_before_it_stops_an_old_one(helm: Helm) -> None:
    strategy = deployment(helm)["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate",
                        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}  # fmt: skip


@pytest.mark.parametrize(
    ("values", "drain", "grace"),
    [
        ({}, "10", 10 + 10 + 5),  # drain + review timeout (10) + 5
        ({"drainSeconds": 0}, "0", 0 + 10 + 5),
        ({"drainSeconds": 120, "timeoutSeconds": 30}, "120", 120 + 30 + 5),
        ({"timeoutSeconds": 3}, "10", 10 + 10 + 5),  # in flight: up to the request timeout, 10
    ],
    ids=["defaults", "no-drain", "long", "short-timeout"],
)
def test_the_grace_period_outlasts_the_drain_and_a_review_in_flight(
    helm: Helm, values: dict[str, Any], drain: str, grace: int
) -> None:
    rendered = deployment(helm, **values)
    assert env_of(rendered)["VGPU_BRIDGE_DRAIN_SECONDS"] == drain
    assert rendered["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace


def test_a_drain_up_to_five_minutes_renders_and_a_longer_one_is_refused(helm: Helm) -> None:
    assert env_of(deployment(helm, drainSeconds=300))["VGPU_BRIDGE_DRAIN_SECONDS"] == "300"
    message = helm.template_error({"webhook": {"drainSeconds": 301}})
    assert "drainSeconds" in message


def test_the_budget_lets_an_unready_replica_be_evicted(helm: Helm) -> None:
    budget = one(helm.template(), "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_one_replica_gets_no_budget_so_a_node_drain_can_evict_it(helm: Helm) -> None:
    assert of_kind(helm.template({"webhook": {"replicas": 1}}), "PodDisruptionBudget") == []


def test_a_budget_no_eviction_can_meet_is_refused_with_the_values_to_change(helm: Helm) -> None:
    budget = {"minAvailable": 2}
    message = helm.template_error({"webhook": {"replicas": 2, "podDisruptionBudget": budget}})
    assert "webhook.podDisruptionBudget.minAvailable (2)" in message
    assert "webhook.replicas (2)" in message
