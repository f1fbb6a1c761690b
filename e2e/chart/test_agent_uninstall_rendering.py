"""What the agent needs from the chart to tell an uninstall from a restart at SIGTERM
(vgpu_bridge/node/uninstall.py): its own DaemonSet's name and namespace, leave to read and watch
that DaemonSet alone, and a grace period the uninstall's drain and removal fit in."""

from __future__ import annotations

import pytest

from e2e.chart.rendering import Helm, Json, of_kind
from vgpu_bridge.node.settings import Settings
from vgpu_bridge.node.uninstall import REMOVAL_S

pytestmark = pytest.mark.e2e


def _agent(objects: list[Json]) -> Json:
    [daemonset] = of_kind(objects, "DaemonSet")
    return daemonset


def _env(daemonset: Json) -> dict[str, str]:
    [agent] = [
        c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "agent"
    ]
    return {e["name"]: e.get("value", "") for e in agent["env"]}


def test_the_agent_is_told_its_own_daemonset(helm: Helm) -> None:
    daemonset = _agent(helm.template())
    env = _env(daemonset)
    assert env["VGPU_BRIDGE_DAEMONSET"] == daemonset["metadata"]["name"]
    assert env["VGPU_BRIDGE_DAEMONSET_NAMESPACE"] == daemonset["metadata"]["namespace"]


def test_the_agent_may_read_and_watch_its_own_daemonset_and_no_other(helm: Helm) -> None:
    objects = helm.template()
    daemonset = _agent(objects)
    rules = [
        rule
        for role in of_kind(objects, "Role")
        for rule in role["rules"]
        if "daemonsets" in rule["resources"]
    ]
    assert rules == [
        {
            "apiGroups": ["apps"],
            "resources": ["daemonsets"],
            "resourceNames": [daemonset["metadata"]["name"]],
            "verbs": ["get", "list", "watch"],
        }
    ]
    [role] = [r for r in of_kind(objects, "Role") if r["rules"] == rules]
    assert role["metadata"]["namespace"] == daemonset["metadata"]["namespace"]


def test_the_grace_period_holds_the_drain_and_the_removal(helm: Helm) -> None:
    grace = _agent(helm.template())["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    drain = Settings(node_name="n").uninstall_drain_seconds
    assert grace > drain + REMOVAL_S
