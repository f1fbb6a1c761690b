"""The agent's ClusterRole grants what the agent asks the API for, and no more than that: its
node's slices, the claims it prepares, its own Node (the slices' owner, and whether NVIDIA's
device plugin is registered there), and the Events it posts about cards it does not publish."""

from __future__ import annotations

import pytest

from e2e.chart.rendering import Helm, Json, of_kind

pytestmark = pytest.mark.e2e


def agent_grants(objects: list[Json]) -> set[tuple[str, str, str]]:
    """(group, resource, verb) of every rule of the agent's ClusterRole."""
    [role] = [r for r in of_kind(objects, "ClusterRole") if r["metadata"]["name"].endswith("agent")]
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_agent_may_read_its_node_and_post_events_about_skipped_cards(helm: Helm) -> None:
    grants = agent_grants(helm.template())
    assert ("", "nodes", "get") in grants
    assert ("events.k8s.io", "events", "create") in grants


def test_the_agent_may_not_read_or_change_other_events_or_nodes(helm: Helm) -> None:
    grants = agent_grants(helm.template())
    assert {(g, r, v) for g, r, v in grants if r in ("events", "nodes")} == {
        ("", "nodes", "get"),
        ("events.k8s.io", "events", "create"),
    }
