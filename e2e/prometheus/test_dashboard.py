"""The Grafana dashboard the chart ships (charts/vgpu-bridge/files/dashboard.json), checked for
what Grafana needs to load it and for what the platform team asked to see. Its queries are
evaluated on a real Prometheus in test_real_prometheus.py."""

from __future__ import annotations

import re
from typing import Any

import pytest

from e2e.prometheus.rules import dashboard, dashboard_queries

BOARD = dashboard()
PANELS: list[dict[str, Any]] = BOARD["panels"]
VARIABLES = {v["name"] for v in BOARD["templating"]["list"]}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range"}
PANEL_TYPES = {"timeseries", "stat", "table", "gauge", "bargauge"}
#: What issue 18 asks the dashboard to show, as the series that carry it.
TOPICS = {
    "booked memory per claim": "vgpu_bridge_claim_memory_limit_bytes",
    "used memory per claim": "vgpu_bridge_claim_memory_used_bytes",
    "used memory per pod": "vgpu_bridge_container_memory_used_bytes",
    "SM utilization": "vgpu_bridge_claim_sm_utilization_ratio",
    "SM limit": "vgpu_bridge_claim_cores_limit_ratio",
    "refusals": "vgpu_bridge_claim_allocations_refused_total",
    "admission latency": "vgpu_bridge_admission_duration_seconds_bucket",
    "card memory booked": "vgpu_bridge_gpu_memory_allocated_bytes",
}


def test_the_board_has_a_stable_uid_title_and_schema() -> None:
    assert BOARD["uid"] == "vgpu-bridge-shares"
    assert BOARD["title"]
    assert isinstance(BOARD["schemaVersion"], int)
    assert BOARD["schemaVersion"] >= 36


def test_the_datasource_is_a_variable_so_any_prometheus_can_be_picked() -> None:
    [source] = [v for v in BOARD["templating"]["list"] if v["name"] == "datasource"]
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    for panel in PANELS:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])


def test_panels_have_unique_ids_and_titles_known_types_and_fit_the_grid() -> None:
    assert len({p["id"] for p in PANELS}) == len(PANELS)
    assert len({p["title"] for p in PANELS}) == len(PANELS)
    for panel in PANELS:
        assert panel["type"] in PANEL_TYPES, panel["title"]
        grid = panel["gridPos"]
        assert 0 <= grid["x"] < grid["x"] + grid["w"] <= 24, panel["title"]
        assert grid["h"] > 0, panel["title"]


def test_no_two_panels_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in PANELS:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


@pytest.mark.parametrize(("title", "expr"), dashboard_queries(BOARD))
def test_every_query_uses_only_defined_variables_and_names_its_job(title: str, expr: str) -> None:
    used = set(re.findall(r"\$\{?(\w+)", expr))
    assert used <= VARIABLES | GRAFANA_BUILTINS, f"{title}: {used - VARIABLES}"
    assert re.search(r'job="vgpu-bridge-(agent|webhook)"', expr), title


def test_every_panel_has_a_query_with_a_unique_ref_id() -> None:
    for panel in PANELS:
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert ref_ids, panel["title"]
        assert len(set(ref_ids)) == len(ref_ids), panel["title"]


@pytest.mark.parametrize(("topic", "series"), TOPICS.items(), ids=list(TOPICS))
def test_the_board_shows_what_the_platform_team_asked_for(topic: str, series: str) -> None:
    assert any(series in expr for _, expr in dashboard_queries(BOARD)), topic
