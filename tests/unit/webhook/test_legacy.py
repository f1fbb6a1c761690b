"""The legacy-HAMi warning every translated admission carries while HAMi runs in the cluster:
what it finds (through a real client against a recording server) and the recipe it names."""

from __future__ import annotations

from typing import Any

from tests.unit.recording_api import RecordingApi
from vgpu_bridge.kube import LIST_PAGE_SIZE
from vgpu_bridge.webhook.legacy import (
    HAMI_NODE_ANNOTATION,
    HAMI_SCHEDULER_SELECTOR,
    legacy_hami_warnings,
)

Json = dict[str, Any]


def node(name: str, *, registered: bool) -> Json:
    annotations = {HAMI_NODE_ANNOTATION: "[]"} if registered else {}
    return {"metadata": {"name": name, "annotations": annotations}}


def cluster(recorded: RecordingApi, nodes: list[Json], schedulers: int = 0) -> None:
    recorded.answer("GET", "/api/v1/nodes", 200, {"items": nodes})
    pods = [{"metadata": {"name": f"hami-scheduler-{i}"}} for i in range(schedulers)]
    recorded.answer("GET", "/api/v1/pods", 200, {"items": pods})


def test_a_cluster_without_hami_gets_no_warning(recorded: RecordingApi) -> None:
    cluster(recorded, [node("gpu-a", registered=False)])
    assert legacy_hami_warnings(recorded.api) == []
    (nodes,) = [c for c in recorded.made("GET") if c.path == "/api/v1/nodes"]
    assert nodes.query == {"limit": str(LIST_PAGE_SIZE)}  # paged: a fleet has thousands of nodes
    (pods,) = [c for c in recorded.made("GET") if c.path == "/api/v1/pods"]
    assert pods.query == {"labelSelector": HAMI_SCHEDULER_SELECTOR, "limit": str(LIST_PAGE_SIZE)}


def test_nodes_hamis_device_plugin_registered_are_named_with_the_migration_recipe(
    recorded: RecordingApi,
) -> None:
    cluster(recorded, [node("gpu-b", registered=True), node("dra-a", registered=False),
                       node("gpu-a", registered=True)])  # fmt: skip
    (warning,) = legacy_hami_warnings(recorded.api)
    assert "on nodes gpu-a, gpu-b:" in warning
    assert "dra-a" not in warning
    assert warning.endswith("move pool by pool as docs/migration.md says")


def test_past_three_nodes_the_warning_shows_the_first_three_and_an_ellipsis(
    recorded: RecordingApi,
) -> None:
    cluster(recorded, [node(f"gpu-{i}", registered=True) for i in range(5)])
    (warning,) = legacy_hami_warnings(recorded.api)
    assert "on nodes gpu-0, gpu-1, gpu-2…:" in warning


def test_a_running_hami_scheduler_is_warned_about_with_the_migration_recipe(
    recorded: RecordingApi,
) -> None:
    cluster(recorded, [node("gpu-a", registered=True)], schedulers=1)
    nodes, scheduler = legacy_hami_warnings(recorded.api)
    assert "gpu-a" in nodes
    assert scheduler.startswith("legacy hami-scheduler runs in this cluster")
    assert "docs/migration.md" in scheduler
