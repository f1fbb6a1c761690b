"""The chart's alert rules under promtool (`check rules`, then the cases of rules_test.yaml), and
the shape the e2e evaluation relies on: every alert has a case where it fires and one threshold,
but the `absent(...)` alerts, one for each job the chart's monitors make; every alert's
runbook_url names a section of docs/monitoring.md."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.prometheus.install import PrometheusTools
from e2e.prometheus.promql import PromqlShapeError, top_level_comparisons, with_bool_threshold
from e2e.prometheus.rules import ALERTS_FILE, RULES_TEST_FILE, alert_rules, is_absence_alert
from e2e.prometheus.server import AGENT_JOB, WEBHOOK_JOB

ALERTS = [rule["alert"] for rule in alert_rules()]
THRESHOLD_RULES = [rule for rule in alert_rules() if not is_absence_alert(rule)]
MONITORING_DOC = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"
RUNBOOK_BASE = "https://vgpu-bridge.invalid/docs/monitoring.md#"


def _promtool(tools: PrometheusTools, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools.promtool), *args],
        cwd=RULES_TEST_FILE.parent,
        capture_output=True,
        text=True,
        check=False,
    )


def test_promtool_accepts_the_rules_file(prometheus_tools: PrometheusTools) -> None:
    done = _promtool(prometheus_tools, "check", "rules", str(ALERTS_FILE))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in done.stdout


def test_every_promtool_case_passes(prometheus_tools: PrometheusTools) -> None:
    done = _promtool(prometheus_tools, "test", "rules", RULES_TEST_FILE.name)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("alert", ALERTS)
def test_every_alert_has_a_promtool_case_where_it_fires(alert: str) -> None:
    cases = yaml.safe_load(RULES_TEST_FILE.read_text())["tests"]
    firing = [
        check
        for case in cases
        for check in case.get("alert_rule_test", [])
        if check["alertname"] == alert and check["exp_alerts"]
    ]
    assert firing, f"{alert}: no case in {RULES_TEST_FILE.name} expects it to fire"


@pytest.mark.parametrize("rule", THRESHOLD_RULES, ids=[r["alert"] for r in THRESHOLD_RULES])
def test_every_threshold_alert_compares_once_outside_parentheses(rule: dict[str, str]) -> None:
    assert " bool " in with_bool_threshold(rule["expr"])


def test_each_job_the_monitors_make_has_an_absence_alert_held_a_while() -> None:
    absent = {rule["expr"]: rule for rule in alert_rules() if is_absence_alert(rule)}
    assert set(absent) == {f'absent(up{{job="{job}"}} == 1)' for job in (AGENT_JOB, WEBHOOK_JOB)}
    assert all(rule.get("for") for rule in absent.values())


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings: lower case, punctuation dropped, spaces as dashes."""
    headings = re.findall(r"^#+ (.+)$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("rule", alert_rules(), ids=ALERTS)
def test_every_alert_has_a_runbook_section_in_the_monitoring_doc(rule: dict[str, Any]) -> None:
    url = rule["annotations"]["runbook_url"]
    assert url.startswith(RUNBOOK_BASE), url
    assert url.removeprefix(RUNBOOK_BASE) in _anchors(MONITORING_DOC.read_text()), url


@pytest.mark.parametrize(
    ("expr", "operators"),
    [
        ('up{job="a"} == 0', ["=="]),
        ('x{a=~"b|c", d!="e"} > on (f) 0.9 * (y > 0 < 100)', [">"]),
        ('label_replace(x, "d", ">=$1", "s", "(.*)") <= 3', ["<="]),
        ("(a > 1) and b", []),
        ("a > 1 < 2", [">", "<"]),
    ],
)
def test_comparisons_are_found_only_outside_brackets_and_quotes(
    expr: str, operators: list[str]
) -> None:
    assert [m.group() for m in top_level_comparisons(expr)] == operators


def test_an_expression_without_one_threshold_is_refused_naming_it() -> None:
    with pytest.raises(PromqlShapeError, match=r"'a > 1 < 2': 2 top-level comparisons"):
        with_bool_threshold("a > 1 < 2")
