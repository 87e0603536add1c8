"""docs/operations/: the Grafana dashboard loads and has panels, the alert rules have
Prometheus's rule-group shape, and every PromQL expression in either names only metrics a
real desk exports at /metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import Harness

OPERATIONS = Path(__file__).resolve().parent.parent / "docs" / "operations"
DASHBOARD = OPERATIONS / "grafana-dashboard.json"
ALERTS = OPERATIONS / "alerts.yml"

# The words of PromQL that read like a name: operators and modifiers.
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right"}
# The samples a metric family of each type exposes, by the suffix added to its name.
SAMPLE_SUFFIXES = {"counter": ("", "_total"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}


def metric_names(expression: str) -> set[str]:
    """The metric names an expression selects: identifiers left once strings, label
    matchers, range and offset durations, grouping clauses and function calls are removed."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expression)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\$\w+", " ", text)  # Grafana's variables ($__range, …)
    names = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b(?!\s*\()", text))
    return {name for name in names if name not in PROMQL_WORDS}


def exported_samples(exposition: str) -> set[str]:
    """Every sample name the families of an exposition can have, from its `# TYPE` lines (a
    family with labels and nothing observed yet has no samples, but has its TYPE line)."""
    samples = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition, flags=re.MULTILINE):
        base = name.removesuffix("_total") if kind == "counter" else name
        samples.update(base + suffix for suffix in SAMPLE_SUFFIXES.get(kind, ("",)))
    return samples


def dashboard_expressions(dashboard: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def rule_expressions(rules: dict[str, Any]) -> list[str]:
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def test_the_metric_names_of_an_expression_leave_out_functions_labels_and_durations() -> None:
    expression = (
        'histogram_quantile(0.9, sum by (le, route) (rate(handoff_time_to_human_seconds_bucket{route!="",x=~"a|b"}[5m])))'
        ' > 60 and on() (sum(increase(handoff_unclaimed_total[30m] offset 15m)) or vector(0)) == 0'
    )
    assert metric_names(expression) == {"handoff_time_to_human_seconds_bucket", "handoff_unclaimed_total"}


def test_the_dashboard_loads_and_has_panels_with_queries() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["panels"]
    for panel in dashboard["panels"]:
        assert panel["title"] and panel["targets"], panel.get("id")
        assert all(target["expr"].strip() for target in panel["targets"]), panel["title"]
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


def test_the_alert_rules_have_the_shape_of_prometheus_rule_groups() -> None:
    rules = yaml.safe_load(ALERTS.read_text())
    assert set(rules) == {"groups"} and rules["groups"]
    for group in rules["groups"]:
        assert isinstance(group["name"], str) and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}, rule
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"]), rule["alert"]
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert "for" not in rule or re.fullmatch(r"(\d+[smhdwy])+", rule["for"]), rule["for"]
            assert rule["annotations"]["summary"]
    names = [rule["alert"] for group in rules["groups"] for rule in group["rules"]]
    assert len(set(names)) == len(names)


async def test_every_query_names_a_metric_the_desk_exports(harness: Harness) -> None:
    exported = exported_samples((await harness.client.get("/metrics")).text)
    assert {"handoff_time_to_human_seconds_bucket", "handoff_duration_seconds_count", "handoff_satisfaction_total"} <= exported
    expressions = dashboard_expressions(json.loads(DASHBOARD.read_text())) + rule_expressions(yaml.safe_load(ALERTS.read_text()))
    for expression in expressions:
        named = metric_names(expression)
        assert named, expression
        assert named <= exported, (expression, named - exported)
    used = set().union(*(metric_names(e) for e in expressions))
    for wanted in ("handoff_time_to_human_seconds_bucket", "handoff_channel_available", "handoff_satisfaction_total"):
        assert wanted in used
