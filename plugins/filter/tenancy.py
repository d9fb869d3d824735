# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Filters that expose GPU tenancy rendering to the gpu_tenancy role.

The logic lives in plugins/module_utils/ (tenancy_settings.py, tenancy.py, gpu_monitoring.py:
pure functions, tested without a cluster);
these filters only pass data in and out. They run on the controller and touch nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: tenancy_validate
short_description: Check and complete the gpu_tenancy_* settings
description:
  - Takes every gpu_tenancy_* variable as one mapping (keys without the prefix) and returns
    C({settings, errors}); each error names the variable, the tenant and the field.
  - Companion filters C(tenancy_plan) (what to apply and prune, from the cluster's state, which
    is its namespaces, the objects kubegpu made for tenants, and its nodes, whose GPU resources
    every tenant's quota caps) and C(tenancy_monitoring) (the Grafana dashboard ConfigMap and
    the PrometheusRule).
options:
  _input:
    description: The gpu_tenancy_* variables without the prefix.
    type: dict
    required: true
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kubegpu.gpu.plugins.module_utils import (
    gpu_monitoring,
    tenancy,
    tenancy_settings,
)
from ansible_collections.kubegpu.gpu.plugins.plugin_utils.plain import plain as _plain


def tenancy_validate(config):
    if not isinstance(config, dict):
        raise AnsibleFilterError("tenancy_validate expects the gpu_tenancy_* settings as a mapping")
    settings, errors = tenancy_settings.validate_settings(_plain(config))
    return {"settings": settings, "errors": errors}


def tenancy_plan(settings, namespaces=None, owned=None, nodes=None):
    """settings from tenancy_validate; namespaces, owned and nodes (whose GPU resources every
    tenant's quota caps) as k8s_info returns them."""
    if not isinstance(settings, dict) or "tenants" not in settings:
        raise AnsibleFilterError("tenancy_plan expects the settings that tenancy_validate returns")
    return tenancy.plan(
        _plain(settings), _plain(namespaces or []), _plain(owned or []), _plain(nodes or [])
    )


def tenancy_monitoring(settings, prometheus_rules_api=False):
    if not isinstance(settings, dict) or "monitoring_namespace" not in settings:
        raise AnsibleFilterError(
            "tenancy_monitoring expects the settings that tenancy_validate returns"
        )
    return gpu_monitoring.render_monitoring(_plain(settings), bool(prometheus_rules_api))


class FilterModule(object):
    def filters(self):
        return {
            "tenancy_validate": tenancy_validate,
            "tenancy_plan": tenancy_plan,
            "tenancy_monitoring": tenancy_monitoring,
        }
