# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""GPU monitoring: the Grafana dashboard for the DCGM exporter, its ConfigMap for Grafana's
sidecar, and the PrometheusRule with the GPU health alerts, from checked gpu_tenancy settings.

- render_dashboard(settings) / dashboard_json(settings): the dashboard's JSON model.
- render_monitoring(settings, prometheus_rules_api) -> [ConfigMap, PrometheusRule].

The dashboard and the rules are data files (data/gpu-dashboard.json, data/gpu-alert-rules.yaml,
read through data_files.py); this file fills in the settings and wraps them in their objects.
DCGM exporter metric names and labels (gpu, UUID, Hostname, device, modelName, and namespace,
pod, container when Kubernetes mapping is on): NVIDIA/dcgm-exporter etc/default-counters.csv,
etc/dcp-metrics-included.csv and grafana/dcgm-exporter-dashboard.json.

Runs on the controller's Python (3.8+ syntax), from the collection on disk.
"""

from __future__ import absolute_import, division, print_function

import json

from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import (
    fill,
    read_json,
    read_yaml,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.tenancy_settings import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
)

__metaclass__ = type

DASHBOARD_FILE = "kubegpu-gpus.json"
DASHBOARD_CONFIGMAP = "kubegpu-gpu-dashboard"
RULES_NAME = "kubegpu-gpu-alerts"
# Sample values for Grafana's template variables, used to parse the expressions as PromQL.
TEMPLATE_SAMPLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}


def _values(settings):
    """What the data files' @@name@@ tokens stand for."""
    return {
        "namespace_label": settings["monitoring_namespace_label"],
        "temperature_threshold": settings["monitoring_temperature_threshold"],
    }


def render_dashboard(settings):
    """The Grafana dashboard (JSON model) for the DCGM exporter: per node and per GPU
    (data/gpu-dashboard.json, edited in Grafana and exported as it is)."""
    return fill(read_json("gpu-dashboard.json"), _values(settings))


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
    """The alerting rules: [{alert, expr, for, labels, annotations}] (data/gpu-alert-rules.yaml)."""
    return fill(read_yaml("gpu-alert-rules.yaml"), _values(settings))


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
