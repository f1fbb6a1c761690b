"""`status -n` shows the cards of the nodes its namespace's shares are on, and reads no more than
it shows: our driver's slices of those nodes (a field selector per node, up to SLICE_NODES_MAX
nodes), and the agents' metrics of those nodes only (at 10,000 GPUs a namespace's 100 shares sit
on a few of 1,250 nodes). `-A` reads every slice of our driver."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests.unit.status.recorded import NAMESPACE, NODE, recorded
from tests.unit.status.served_api import ServedApi
from tests.unit.status.test_command import AGENT, PROXY, RESOURCE, api, document  # noqa: F401
from vgpu_bridge.core import DEFAULT
from vgpu_bridge.status import command

OTHER_NODE = "gpu-node-elsewhere"
SLICES = f"{RESOURCE}/resourceslices"


def elsewhere(served: ServedApi) -> None:
    """A second node with a card of ours and a running agent, holding none of NAMESPACE's."""
    (mine,) = recorded("slices")
    other = copy.deepcopy(mine)
    other["metadata"]["name"] = f"{OTHER_NODE}-slice"
    other["spec"]["nodeName"] = other["spec"]["pool"]["name"] = OTHER_NODE
    served.list_of(SLICES, [mine, other])
    served.list_of(
        SLICES, [mine], fieldSelector=f"spec.driver={DEFAULT.driver},spec.nodeName={NODE}"
    )
    agent: dict[str, Any] = copy.deepcopy(AGENT)
    agent["metadata"]["name"] = "vgpu-bridge-agent-x2"
    agent["spec"]["nodeName"] = OTHER_NODE
    served.list_of("/api/v1/pods", [AGENT, agent], labelSelector=command.AGENT_SELECTOR)


def slice_queries(served: ServedApi) -> list[dict[str, str]]:
    return [query for path, query in served.asked if path == SLICES]


def nodes_shown(found: dict[str, Any]) -> set[str]:
    return {card["node"] for card in found["cards"]}


def test_a_namespace_reads_and_shows_only_the_nodes_its_shares_are_on(
    api: ServedApi,  # noqa: F811
    tmp_path: Path,
) -> None:
    elsewhere(api)
    found = document(api, tmp_path, "-n", NAMESPACE)
    assert nodes_shown(found) == {NODE}
    assert [q["fieldSelector"] for q in slice_queries(api)] == [
        f"spec.driver={DEFAULT.driver},spec.nodeName={NODE}"
    ]
    other_agent = "/api/v1/namespaces/vgpu-bridge/pods/vgpu-bridge-agent-x2:9400/proxy/metrics"
    assert all(path != other_agent for path, _ in api.asked)
    assert (PROXY, {}) in api.asked


def test_every_namespace_reads_every_slice_of_our_driver(
    api: ServedApi,  # noqa: F811
    tmp_path: Path,
) -> None:
    elsewhere(api)
    found = document(api, tmp_path, "-A")
    assert nodes_shown(found) == {NODE, OTHER_NODE}
    assert [q["fieldSelector"] for q in slice_queries(api)] == [f"spec.driver={DEFAULT.driver}"]


def test_shares_on_more_nodes_than_the_limit_read_every_slice_in_one_list(
    api: ServedApi,  # noqa: F811
    tmp_path: Path,
    monkeypatch: Any,
) -> None:
    monkeypatch.setattr(command, "SLICE_NODES_MAX", 0)
    elsewhere(api)
    found = document(api, tmp_path, "-n", NAMESPACE)
    assert nodes_shown(found) == {NODE}  # still only the namespace's nodes shown
    assert [q["fieldSelector"] for q in slice_queries(api)] == [f"spec.driver={DEFAULT.driver}"]


def test_a_namespace_without_placed_shares_reads_no_slice(
    api: ServedApi,  # noqa: F811
    tmp_path: Path,
) -> None:
    api.list_of(f"{RESOURCE}/namespaces/empty/resourceclaims", [])
    api.list_of("/api/v1/namespaces/empty/pods", [])
    found = document(api, tmp_path, "-n", "empty")
    assert found["cards"] == []
    assert slice_queries(api) == []
