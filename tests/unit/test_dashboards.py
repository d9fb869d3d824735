"""The Grafana dashboard for the DCGM exporter, its ConfigMap, and the GPU alerting rules.

Structure is checked the way Grafana reads a dashboard (panels with a datasource, targets with
an expression, unique ids, grid positions inside 24 columns that do not overlap), and every
PromQL expression (panels and rules) is parsed with promql-parser (a PromQL parser from PyPI,
the Rust one of GreptimeDB's, not a regex). Metric names are checked against the fields the
DCGM exporter knows (its counter CSVs, NVIDIA/dcgm-exporter etc/*.csv).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import promql_parser
import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import gpu_monitoring as mon
from ansible_collections.kubegpu.gpu.plugins.module_utils import tenancy_settings as ts

REPO = Path(__file__).resolve().parents[2]

# DCGM fields the exporter can export (default-counters.csv, dcp-metrics-included.csv and the
# fields those files list commented out), plus the pre-3.3 name of the clock event reasons.
DCGM_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
}
# Labels the exporter puts on every GPU metric (with Kubernetes mapping: namespace, pod, container).
DCGM_LABELS = {"gpu", "UUID", "Hostname", "device", "modelName", "pci_bus_id"}


def settings(**overrides: Any) -> dict[str, Any]:
    normalized, errors = ts.validate_settings(overrides)
    assert errors == []
    return normalized


def promql(expr: str) -> promql_parser.Expr:
    """Parse a panel expression: Grafana's $__ variables become sample durations first (selector
    values like "$Hostname" are strings to PromQL and stay as they are)."""
    for name, value in mon.TEMPLATE_SAMPLES.items():
        expr = expr.replace(name, value)
    assert "$__" not in expr, expr
    return promql_parser.parse(expr)


def selectors(expr: promql_parser.Expr) -> list[promql_parser.VectorSelector]:
    found: list[promql_parser.VectorSelector] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
            return
        if isinstance(node, promql_parser.MatrixSelector):
            visit(node.vector_selector)
        for attr in ("expr", "lhs", "rhs", "param"):
            child = getattr(node, attr, None)
            if isinstance(child, promql_parser.Expr):
                visit(child)
        for arg in getattr(node, "args", None) or []:
            visit(arg)

    visit(expr)
    return found


def label_names(expr: promql_parser.Expr) -> set[str]:
    """Label names an expression groups by (by/without), matches on (on/ignoring) or selects."""
    names: set[str] = set()

    def visit(node: Any) -> None:
        modifier = getattr(node, "modifier", None)
        if isinstance(node, promql_parser.AggregateExpr) and modifier is not None:
            names.update(modifier.labels)
        if isinstance(node, promql_parser.BinaryExpr) and modifier is not None:
            if modifier.matching is not None:
                names.update(modifier.matching.labels)
            names.update(modifier.group_labels or [])
        for attr in ("expr", "lhs", "rhs", "param"):
            child = getattr(node, attr, None)
            if isinstance(child, promql_parser.Expr):
                visit(child)
        for arg in getattr(node, "args", None) or []:
            visit(arg)

    visit(expr)
    for selector in selectors(expr):
        for matcher in selector.matchers.matchers:
            names.add(matcher.name)
    return names


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return mon.render_dashboard(settings())


def test_the_dashboard_has_what_grafana_needs(dashboard: dict[str, Any]) -> None:
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and len(dashboard["uid"]) <= 40
    assert dashboard["title"]
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        assert panel["type"] in ("stat", "timeseries", "gauge", "table")
        assert panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        grid = panel["gridPos"]
        assert set(grid) == {"h", "w", "x", "y"} and all(isinstance(v, int) for v in grid.values())
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= 24
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"panel {panel['id']} overlaps another at {(x, y)}"
                cells.add((x, y))
        assert panel["targets"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids))
        for target in panel["targets"]:
            assert target["expr"].strip()
            assert target["datasource"]["type"] == "prometheus"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"Hostname", "gpu"} <= set(variables)


def test_every_panel_expression_is_promql_over_dcgm_metrics(dashboard: dict[str, Any]) -> None:
    used: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = promql(target["expr"])
            for selector in selectors(expr):
                assert selector.name in DCGM_FIELDS, (panel["title"], selector.name)
                used.add(selector.name)
            labels = label_names(expr) - {"__name__"}
            assert labels <= DCGM_LABELS | {"exported_namespace"}, (panel["title"], labels)
    # What the dashboard must show, per node and per GPU.
    assert {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_XID_ERRORS",
    } <= used


def test_panels_filter_by_the_node_and_gpu_variables(dashboard: dict[str, Any]) -> None:
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for selector in selectors(promql(target["expr"])):
                matchers = {m.name: m.value for m in selector.matchers.matchers}
                assert matchers.get("Hostname") == "$Hostname", panel["title"]
                assert matchers.get("gpu") == "$gpu", panel["title"]
    per_node = [p for p in dashboard["panels"] if "per node" in p["title"]]
    per_gpu = [p for p in dashboard["panels"] if "per GPU" in p["title"]]
    assert per_node and per_gpu
    for panel in per_node:
        assert "Hostname" in label_names(promql(panel["targets"][0]["expr"]))


def test_the_variable_queries_select_real_labels(dashboard: dict[str, Any]) -> None:
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"])
        assert match, variable["query"]
        promql(match.group(1))
        assert match.group(2) in DCGM_LABELS


def test_the_tenant_panel_uses_the_configured_namespace_label() -> None:
    board = mon.render_dashboard(settings(monitoring_namespace_label="namespace"))
    (panel,) = [p for p in board["panels"] if "tenant" in p["title"]]
    assert "sum by (namespace)" in panel["targets"][0]["expr"]
    promql(panel["targets"][0]["expr"])


def test_the_configmap_carries_the_dashboard_for_grafanas_sidecar() -> None:
    s = settings(monitoring_dashboard_annotations={"grafana_folder": "GPUs"})
    configmap = mon.render_dashboard_configmap(s)
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
    (name,) = configmap["data"]
    assert name.endswith(".json")
    assert json.loads(configmap["data"][name]) == mon.render_dashboard(s)
    for version in ("1.29", "1.35"):
        assert kubernetes_validate.validate(configmap, version, strict=True) == version


@pytest.fixture(scope="module")
def rules() -> dict[str, Any]:
    return mon.render_alert_rules(
        settings(monitoring_rule_labels={"release": "kube-prometheus-stack"})
    )


def test_the_rules_are_a_prometheus_rule_object(rules: dict[str, Any]) -> None:
    assert rules["apiVersion"] == "monitoring.coreos.com/v1"
    assert rules["kind"] == "PrometheusRule"
    assert rules["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rules["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubegpu"
    # A custom resource: the upstream schemas have none, so it is checked here by structure.
    with pytest.raises(kubernetes_validate.utils.SchemaNotFoundError):
        kubernetes_validate.validate(rules, "1.35", strict=True)
    (group,) = rules["spec"]["groups"]
    assert group["name"] and group["rules"]


def test_every_rule_is_valid_promql_with_labels_and_annotations(rules: dict[str, Any]) -> None:
    names = []
    for rule in rules["spec"]["groups"][0]["rules"]:
        # "for" only where a condition must hold a while; the others fire at once.
        assert (
            {"alert", "expr", "labels", "annotations"}
            <= set(rule)
            <= {
                "alert",
                "expr",
                "for",
                "labels",
                "annotations",
            }
        )
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", rule["alert"])
        names.append(rule["alert"])
        expr = promql_parser.parse(rule["expr"])
        for selector in selectors(expr):
            assert selector.name in DCGM_FIELDS, (rule["alert"], selector.name)
        assert label_names(expr) - {"__name__"} <= DCGM_LABELS
        if "for" in rule:
            assert promql_parser.parse_duration(rule["for"]).total_seconds() >= 60
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("alert", "metric"),
    [
        ("GPUFellOffTheBus", "DCGM_FI_DEV_XID_ERRORS"),
        ("GPUMetricsMissing", "DCGM_FI_DEV_GPU_TEMP"),
        ("GPUXidError", "DCGM_FI_DEV_XID_ERRORS"),
        ("GPUDoubleBitEccErrors", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
        ("GPUThermalThrottling", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"),
    ],
)
def test_the_required_alerts_watch_the_right_metrics(
    rules: dict[str, Any], alert: str, metric: str
) -> None:
    rule = next(r for r in rules["spec"]["groups"][0]["rules"] if r["alert"] == alert)
    assert metric in {s.name for s in selectors(promql_parser.parse(rule["expr"]))}


def test_the_fell_off_the_bus_alert_matches_xid_79_only(rules: dict[str, Any]) -> None:
    rule = next(r for r in rules["spec"]["groups"][0]["rules"] if r["alert"] == "GPUFellOffTheBus")
    expr = promql_parser.parse(rule["expr"])
    assert isinstance(expr, promql_parser.BinaryExpr)
    assert isinstance(expr.rhs, promql_parser.NumberLiteral) and expr.rhs.val == 79.0
    # The generic XID alert leaves 79 to the one above.
    xid = next(r for r in rules["spec"]["groups"][0]["rules"] if r["alert"] == "GPUXidError")
    assert "!= 79" in xid["expr"]


def test_thermal_throttling_tests_the_thermal_bits_of_both_metric_names(
    rules: dict[str, Any],
) -> None:
    rule = next(
        r for r in rules["spec"]["groups"][0]["rules"] if r["alert"] == "GPUThermalThrottling"
    )
    names = [s.name for s in selectors(promql_parser.parse(rule["expr"]))]
    assert names.count("DCGM_FI_DEV_CLOCKS_EVENT_REASONS") == 2
    assert names.count("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS") == 2
    # Bits 0x20 (software thermal) and 0x40 (hardware thermal): floor(x / bit) % 2 == 1.
    assert set(re.findall(r"/ (\d+)\) % 2 == 1", rule["expr"])) == {"32", "64"}


def test_the_rule_for_absent_metrics_alerts_only_on_gpus_that_were_seen(
    rules: dict[str, Any],
) -> None:
    rule = next(r for r in rules["spec"]["groups"][0]["rules"] if r["alert"] == "GPUMetricsMissing")
    expr = promql_parser.parse(rule["expr"])
    assert isinstance(expr, promql_parser.BinaryExpr)
    assert " unless " in f" {rule['expr']} "


def test_the_committed_dashboard_json_is_the_rendered_one() -> None:
    committed = json.loads((REPO / "dashboards" / mon.DASHBOARD_FILE).read_text())
    assert committed == mon.render_dashboard(settings())
