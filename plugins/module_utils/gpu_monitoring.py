# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""GPU monitoring: the Grafana dashboard for the DCGM exporter, its ConfigMap for Grafana's
sidecar, and the PrometheusRule with the GPU health alerts, from checked gpu_tenancy settings.

- render_dashboard(settings) / dashboard_json(settings): the dashboard's JSON model.
- render_monitoring(settings, prometheus_rules_api) -> [ConfigMap, PrometheusRule].

DCGM exporter metric names and labels (gpu, UUID, Hostname, device, modelName, and namespace,
pod, container when Kubernetes mapping is on): NVIDIA/dcgm-exporter etc/default-counters.csv,
etc/dcp-metrics-included.csv and grafana/dcgm-exporter-dashboard.json. XID 79 is "GPU has
fallen off the bus". DCGM_FI_DEV_ECC_DBE_VOL_TOTAL and the clock event reasons
(DCGM_FI_DEV_CLOCKS_EVENT_REASONS, DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before DCGM 3.3) are not
in the exporter's default counters: the rules that use them stay silent until they are enabled.
Clock event reason bits (NVML): 0x20 software thermal slowdown, 0x40 hardware thermal slowdown,
0x8 hardware slowdown.

Runs on the controller's Python (3.8+ syntax), standard library only.
"""

from __future__ import absolute_import, division, print_function

import json

from ansible_collections.kubegpu.gpu.plugins.module_utils.tenancy_settings import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
)

__metaclass__ = type

DASHBOARD_UID = "kubegpu-dcgm-gpus"
DASHBOARD_FILE = "kubegpu-gpus.json"
DASHBOARD_CONFIGMAP = "kubegpu-gpu-dashboard"
RULES_NAME = "kubegpu-gpu-alerts"
_SEL = 'Hostname=~"$Hostname", gpu=~"$gpu"'
# Sample values for Grafana's template variables, used to parse the expressions as PromQL.
TEMPLATE_SAMPLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}


def _panel(pid, title, kind, grid, targets, unit=None, description=None, extra=None):
    panel = {
        "id": pid,
        "type": kind,
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": grid[3], "w": grid[2], "x": grid[0], "y": grid[1]},
        "targets": [
            dict(
                {
                    "refId": chr(ord("A") + i),
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "expr": expr,
                    "legendFormat": legend,
                },
                **({"instant": True} if kind in ("stat", "table") else {}),
            )
            for i, (expr, legend) in enumerate(targets)
        ],
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {},
    }
    if unit:
        panel["fieldConfig"]["defaults"]["unit"] = unit
    if description:
        panel["description"] = description
    if kind == "timeseries":
        panel["options"] = {
            "legend": {"displayMode": "table", "placement": "right", "calcs": ["mean", "max"]},
            "tooltip": {"mode": "multi"},
        }
    for key, value in (extra or {}).items():
        panel[key] = value
    return panel


def render_dashboard(settings):
    """The Grafana dashboard (JSON model) for the DCGM exporter: per node and per GPU."""
    ns_label = settings["monitoring_namespace_label"]
    threshold = settings["monitoring_temperature_threshold"]
    per_gpu = "{{Hostname}} GPU {{gpu}}"
    panels = [
        _panel(
            1,
            "GPUs reporting",
            "stat",
            (0, 0, 4, 4),
            [("count(DCGM_FI_DEV_GPU_TEMP{%s})" % _SEL, "")],
            description="GPUs the DCGM exporter reports now; a drop means a GPU or exporter "
            "went away.",
        ),
        _panel(
            2,
            "Average GPU utilisation",
            "stat",
            (4, 0, 4, 4),
            [("avg(DCGM_FI_DEV_GPU_UTIL{%s})" % _SEL, "")],
            unit="percent",
        ),
        _panel(
            3,
            "Framebuffer used",
            "stat",
            (8, 0, 4, 4),
            [
                (
                    "sum(DCGM_FI_DEV_FB_USED{%s}) / (sum(DCGM_FI_DEV_FB_USED{%s}) + "
                    "sum(DCGM_FI_DEV_FB_FREE{%s}))" % (_SEL, _SEL, _SEL),
                    "",
                )
            ],
            unit="percentunit",
        ),
        _panel(
            4,
            "Power draw",
            "stat",
            (12, 0, 4, 4),
            [("sum(DCGM_FI_DEV_POWER_USAGE{%s})" % _SEL, "")],
            unit="watt",
        ),
        _panel(
            5,
            "Hottest GPU",
            "stat",
            (16, 0, 4, 4),
            [("max(DCGM_FI_DEV_GPU_TEMP{%s})" % _SEL, "")],
            unit="celsius",
            extra={
                "fieldConfig": {
                    "defaults": {
                        "unit": "celsius",
                        "thresholds": {
                            "mode": "absolute",
                            "steps": [
                                {"color": "green", "value": None},
                                {"color": "red", "value": threshold},
                            ],
                        },
                    },
                    "overrides": [],
                }
            },
        ),
        _panel(
            6,
            "GPUs with XID errors (1h)",
            "stat",
            (20, 0, 4, 4),
            [("count(max_over_time(DCGM_FI_DEV_XID_ERRORS{%s}[1h]) > 0) or vector(0)" % _SEL, "")],
        ),
        _panel(
            7,
            "GPU utilisation per GPU",
            "timeseries",
            (0, 4, 12, 8),
            [("DCGM_FI_DEV_GPU_UTIL{%s}" % _SEL, per_gpu)],
            unit="percent",
        ),
        _panel(
            8,
            "GPU utilisation per node",
            "timeseries",
            (12, 4, 12, 8),
            [("avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{%s})" % _SEL, "{{Hostname}}")],
            unit="percent",
        ),
        _panel(
            9,
            "Framebuffer used per GPU",
            "timeseries",
            (0, 12, 12, 8),
            [
                ("DCGM_FI_DEV_FB_USED{%s} * 1024 * 1024" % _SEL, per_gpu + " used"),
                ("DCGM_FI_DEV_FB_FREE{%s} * 1024 * 1024" % _SEL, per_gpu + " free"),
            ],
            unit="bytes",
            description="DCGM reports framebuffer memory in MiB.",
        ),
        _panel(
            10,
            "Framebuffer used per node",
            "timeseries",
            (12, 12, 12, 8),
            [
                (
                    "sum by (Hostname) (DCGM_FI_DEV_FB_USED{%s}) / (sum by (Hostname) "
                    "(DCGM_FI_DEV_FB_USED{%s}) + sum by (Hostname) (DCGM_FI_DEV_FB_FREE{%s}))"
                    % (_SEL, _SEL, _SEL),
                    "{{Hostname}}",
                )
            ],
            unit="percentunit",
        ),
        _panel(
            11,
            "GPU temperature",
            "timeseries",
            (0, 20, 12, 8),
            [("DCGM_FI_DEV_GPU_TEMP{%s}" % _SEL, per_gpu)],
            unit="celsius",
        ),
        _panel(
            12,
            "Power draw per GPU",
            "timeseries",
            (12, 20, 12, 8),
            [("DCGM_FI_DEV_POWER_USAGE{%s}" % _SEL, per_gpu)],
            unit="watt",
        ),
        _panel(
            13,
            "Last XID error per GPU",
            "timeseries",
            (0, 28, 12, 8),
            [
                (
                    "max by (Hostname, gpu, UUID) (DCGM_FI_DEV_XID_ERRORS{%s})" % _SEL,
                    per_gpu + " {{UUID}}",
                )
            ],
            description="The value is the XID code of the last error (79: fallen off the "
            "bus; 48: double-bit ECC; 13, 31, 43: application faults).",
        ),
        _panel(
            14,
            "GPU utilisation per tenant namespace",
            "timeseries",
            (12, 28, 12, 8),
            [
                (
                    'sum by (%s) (DCGM_FI_DEV_GPU_UTIL{%s, %s!=""}) / 100'
                    % (ns_label, _SEL, ns_label),
                    "{{%s}}" % ns_label,
                )
            ],
            unit="none",
            description="GPUs' worth of utilisation per namespace (needs the exporter's "
            "Kubernetes pod mapping; the label is %s)." % ns_label,
        ),
    ]
    return {
        "uid": DASHBOARD_UID,
        "title": "kubegpu / GPUs (DCGM exporter)",
        "description": "GPU utilisation, memory, temperature, power and XID errors per node "
        "and per GPU, from the NVIDIA DCGM exporter.",
        "tags": ["kubegpu", "gpu", "dcgm"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "annotations": {"list": []},
        "links": [],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "Hostname",
                    "label": "Node",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": {
                        "query": "label_values(DCGM_FI_DEV_GPU_TEMP, Hostname)",
                        "refId": "Hostname",
                    },
                    "definition": "label_values(DCGM_FI_DEV_GPU_TEMP, Hostname)",
                    "includeAll": True,
                    "multi": True,
                    "refresh": 2,
                    "sort": 1,
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "gpu",
                    "label": "GPU",
                    "type": "query",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "query": {
                        "query": 'label_values(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname"}, gpu)',
                        "refId": "gpu",
                    },
                    "definition": 'label_values(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname"}, gpu)',
                    "includeAll": True,
                    "multi": True,
                    "refresh": 2,
                    "sort": 3,
                    "current": {},
                    "hide": 0,
                },
            ]
        },
        "panels": panels,
    }


def dashboard_json(settings):
    """The dashboard as the text Grafana reads (stable: sorted keys, two-space indent)."""
    return json.dumps(render_dashboard(settings), indent=2, sort_keys=True) + "\n"


def render_dashboard_configmap(settings):
    labels = {MANAGED_BY_LABEL: MANAGED_BY, "app.kubernetes.io/name": DASHBOARD_CONFIGMAP}
    labels.update(settings["monitoring_dashboard_labels"])
    meta = {
        "name": DASHBOARD_CONFIGMAP,
        "namespace": settings["monitoring_namespace"],
        "labels": labels,
    }
    if settings["monitoring_dashboard_annotations"]:
        meta["annotations"] = dict(settings["monitoring_dashboard_annotations"])
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta,
        "data": {DASHBOARD_FILE: dashboard_json(settings)},
    }


def alert_rules(settings):
    """The alerting rules: [{alert, expr, for, labels, annotations}]."""
    gpu = "{{ $labels.Hostname }} GPU {{ $labels.gpu }} ({{ $labels.UUID }})"
    key = "Hostname, gpu, UUID"
    return [
        {
            "alert": "GPUFellOffTheBus",
            "expr": "max by (%s) (DCGM_FI_DEV_XID_ERRORS) == 79" % key,
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "GPU fell off the bus (XID 79)",
                "description": gpu + " reported XID 79: the driver lost the GPU. Drain the node; "
                "it needs a reset or a reboot, and the hardware a check.",
            },
        },
        {
            "alert": "GPUMetricsMissing",
            "expr": "max by (%s) (max_over_time(DCGM_FI_DEV_GPU_TEMP[1h])) unless on (%s) "
            "max by (%s) (DCGM_FI_DEV_GPU_TEMP)" % (key, key, key),
            "for": "5m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "A GPU stopped reporting metrics",
                "description": gpu + " reported within the last hour and reports nothing now: "
                "it may have fallen off the bus, or its exporter stopped.",
            },
        },
        {
            "alert": "GPUExporterDown",
            "expr": "absent(DCGM_FI_DEV_GPU_TEMP)",
            "for": "15m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "No GPU metrics at all",
                "description": "No DCGM exporter metrics for 15 minutes: the exporter or its "
                "scraping is down, or no GPU node is left.",
            },
        },
        {
            "alert": "GPUXidError",
            "expr": "max by (%s) (max_over_time(DCGM_FI_DEV_XID_ERRORS[10m])) > 0 and on (%s) "
            "max by (%s) (DCGM_FI_DEV_XID_ERRORS) != 79" % (key, key, key),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "GPU XID error",
                "description": gpu + " reported XID {{ $value }} in the last 10 minutes. Look it "
                "up in NVIDIA's XID catalogue; 48, 63, 64, 74, 92-95 point at "
                "memory or NVLink, 13, 31, 43 at the application.",
            },
        },
        {
            "alert": "GPUDoubleBitEccErrors",
            "expr": "max by (%s) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m])) > 0" % key,
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "Uncorrectable (double-bit) ECC errors",
                "description": gpu + " had {{ $value }} uncorrectable ECC errors in 10 minutes. "
                "Drain the node and reset the GPU. (Needs "
                "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL in the exporter's counters.)",
            },
        },
        {
            "alert": "GPURowRemapFailure",
            "expr": "max by (%s) (DCGM_FI_DEV_ROW_REMAP_FAILURE) > 0" % key,
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "GPU memory row remapping failed",
                "description": gpu + " could not remap a memory row after uncorrectable errors: "
                "the GPU needs replacing.",
            },
        },
        {
            "alert": "GPUThermalThrottling",
            "expr": "max by (%s) ((floor(DCGM_FI_DEV_CLOCKS_EVENT_REASONS / 32) %% 2 == 1) or "
            "(floor(DCGM_FI_DEV_CLOCKS_EVENT_REASONS / 64) %% 2 == 1) or "
            "(floor(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS / 32) %% 2 == 1) or "
            "(floor(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS / 64) %% 2 == 1))" % key,
            "for": "10m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "GPU clocks held down by temperature",
                "description": gpu + " has been thermally throttled (software or hardware "
                "thermal slowdown, clock event bits 0x20/0x40) for 10 "
                "minutes: check cooling and airflow. (Needs "
                "DCGM_FI_DEV_CLOCKS_EVENT_REASONS in the exporter's "
                "counters.)",
            },
        },
        {
            "alert": "GPUTemperatureHigh",
            "expr": "max by (%s) (DCGM_FI_DEV_GPU_TEMP) > %d"
            % (key, settings["monitoring_temperature_threshold"]),
            "for": "10m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "GPU temperature high",
                "description": gpu + " has been at {{ $value }} C for 10 minutes (threshold "
                "%d C)." % settings["monitoring_temperature_threshold"],
            },
        },
    ]


def render_alert_rules(settings):
    labels = {MANAGED_BY_LABEL: MANAGED_BY, "app.kubernetes.io/name": RULES_NAME}
    labels.update(settings["monitoring_rule_labels"])
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": RULES_NAME,
            "namespace": settings["monitoring_namespace"],
            "labels": labels,
        },
        "spec": {"groups": [{"name": "kubegpu.gpu", "rules": alert_rules(settings)}]},
    }


def render_monitoring(settings, prometheus_rules_api):
    """The dashboard ConfigMap, and the PrometheusRule when the cluster serves its API."""
    out = [render_dashboard_configmap(settings)]
    if prometheus_rules_api:
        out.append(render_alert_rules(settings))
    return out
