"""The chart's alert rules under promtool (`check rules`, then the cases of rules_test.yaml), and
the shape the e2e evaluation relies on: every alert has a case where it fires and one threshold."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from e2e.prometheus.install import PrometheusTools
from e2e.prometheus.promql import PromqlShapeError, top_level_comparisons, with_bool_threshold
from e2e.prometheus.rules import ALERTS_FILE, RULES_TEST_FILE, alert_rules

ALERTS = [rule["alert"] for rule in alert_rules()]


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


@pytest.mark.parametrize("rule", alert_rules(), ids=ALERTS)
def test_every_alert_compares_once_outside_parentheses(rule: dict[str, str]) -> None:
    assert " bool " in with_bool_threshold(rule["expr"])


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
