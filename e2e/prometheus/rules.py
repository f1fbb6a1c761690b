"""The chart's monitoring files, as the e2e tier reads them: the alert rules
(`charts/vgpu-bridge/files/alerts.yaml`) and the Grafana dashboard
(`charts/vgpu-bridge/files/dashboard.json`), each the one copy the chart ships."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

CHART_FILES = Path(__file__).resolve().parents[2] / "charts" / "vgpu-bridge" / "files"
ALERTS_FILE = CHART_FILES / "alerts.yaml"
DASHBOARD_FILE = CHART_FILES / "dashboard.json"
RULES_TEST_FILE = Path(__file__).resolve().parent / "rules_test.yaml"

Json = dict[str, Any]


def alert_rules(path: Path = ALERTS_FILE) -> list[Json]:
    """Every alerting rule of the file, in order."""
    groups = yaml.safe_load(path.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def is_absence_alert(rule: Json) -> bool:
    """An alert on a vanished job (`absent(...)`): it has no threshold, and no series while the
    job is scraped."""
    return str(rule["expr"]).startswith("absent(")


def with_short_holds(path: Path, *, hold: str, source: Path = ALERTS_FILE) -> Path:
    """The rules of `source` written to `path` with every `for` set to `hold`, so that an e2e
    test sees an alert fire in seconds; expressions, labels and annotations are unchanged."""
    document = yaml.safe_load(source.read_text())
    for group in document["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = hold
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def dashboard(path: Path = DASHBOARD_FILE) -> Json:
    loaded: Json = json.loads(path.read_text())
    return loaded


def dashboard_queries(board: Json) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel, rows' nested panels included."""
    queries = []
    for panel in board["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                queries.append((inner["title"], target["expr"]))
    return queries
