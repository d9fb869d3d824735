# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""GPU tenancy, training workloads and GPU monitoring as data.

Pure functions of their arguments (no API calls, no files), shared by the gpu_tenancy role (through
the kubegpu.gpu tenancy filters), the `kubegpu smoke` command, the example renderer and the tests:

- validate_settings(config) -> (settings, errors): the gpu_tenancy_* variables (keys without the
  prefix), completed with DEFAULTS and checked; every error names the variable, the tenant and
  the field (``gpu_tenancy_tenants[1] (vision).gpus.nvidia.com/gpu: ...``).
- render_tenants(settings) -> [manifest, ...]: Namespace, ResourceQuota, LimitRange, Role,
  RoleBinding and NetworkPolicies of every tenant, in apply order.
- plan(settings, namespaces, owned) -> {manifests, delete, release, adopted, errors}: what to
  apply and, when pruning, what to delete, from what the cluster holds now.
- render_workloads(settings, namespace) / render_smoke(...): training Jobs (single GPU, PyTorch
  DDP, TensorFlow multi-worker, time-sliced, MIG) and the smoke Job with its script.
- render_dashboard(settings) / render_dashboard_configmap(settings) / render_alert_rules(settings):
  the Grafana dashboard for the DCGM exporter, its ConfigMap for Grafana's sidecar, and the
  PrometheusRule with the GPU health alerts.

Facts used here, and where they come from:
- GPU Feature Discovery writes nvidia.com/gpu.product as the NVML device name with every space
  replaced by '-', joined by '-' with "MIG" and the MIG profile for MIG devices and with "SHARED"
  when a time-sliced resource is not renamed (NVIDIA/k8s-device-plugin internal/lm/resource.go,
  productLabel); nvidia.com/gpu.memory is the total memory in MiB. With the mixed MIG strategy
  the labels of a MIG resource are keyed by its resource name (nvidia.com/mig-1g.10gb.product).
- DCGM exporter metric names and labels (gpu, UUID, Hostname, device, modelName, and namespace,
  pod, container when Kubernetes mapping is on): NVIDIA/dcgm-exporter etc/default-counters.csv,
  etc/dcp-metrics-included.csv and grafana/dcgm-exporter-dashboard.json. XID 79 is "GPU has
  fallen off the bus". DCGM_FI_DEV_ECC_DBE_VOL_TOTAL and the clock event reasons
  (DCGM_FI_DEV_CLOCKS_EVENT_REASONS, DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before DCGM 3.3) are not
  in the exporter's default counters: the rules that use them stay silent until they are enabled.
  Clock event reason bits (NVML): 0x20 software thermal slowdown, 0x40 hardware thermal slowdown,
  0x8 hardware slowdown.
- Extended resources cannot be overcommitted: a container's request must equal its limit, and
  a ResourceQuota limits them only as requests.<name>. ResourceQuota on cpu or memory makes every
  container state them, hence the LimitRange defaults. A LimitRange `max` without a default makes
  every container ask for that resource, hence GPU defaults of 0.

Runs on the controller's Python (3.8+ syntax), standard library only.
"""

from __future__ import absolute_import, division, print_function

import copy
import difflib
import json
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_manifests import (
    as_quantity,
    coerce_bool,
    coerce_int,
    extended_resource_error,
    is_dns_label,
    is_int,
    label_value_error,
    parse_quantity,
    qualified_name_error,
    whole_quantity_error,
)

__metaclass__ = type

PREFIX = "gpu_tenancy_"
VAR_TENANTS = PREFIX + "tenants"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kubegpu"
TENANT_LABEL = "kubegpu.io/tenant"
# Tenant objects carry managed-by and the tenant label, and deliberately NOT
# app.kubernetes.io/part-of=kubegpu: the gpu_cluster role prunes and resets everything that has
# both managed-by and part-of, and must never take tenants' namespaces with it.
OWNED_SELECTOR = "%s=%s,%s" % (MANAGED_BY_LABEL, MANAGED_BY, TENANT_LABEL)
DESCRIPTION_ANNOTATION = "kubegpu.io/description"
PRODUCTS_ANNOTATION = "kubegpu.io/gpu-products"
PSA_REASON_ANNOTATION = "kubegpu.io/pod-security-reason"
PSA_PREFIX = "pod-security.kubernetes.io/"
PSA_LEVELS = ("restricted", "baseline", "privileged")
MEMBER_KINDS = ("User", "Group")
RESERVED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"

QUOTA_NAME = "kubegpu-tenant-quota"
LIMITS_NAME = "kubegpu-tenant-limits"
ROLE_NAME = "kubegpu-tenant-member"
BINDING_NAME = "kubegpu-tenant-members"
DENY_ALL_NAME = "kubegpu-default-deny"
SAME_NAMESPACE_NAME = "kubegpu-allow-same-namespace"
DNS_NAME = "kubegpu-allow-dns"

PASS_MARKER = "KUBEGPU-TRAIN PASS"
FAIL_MARKER = "KUBEGPU-TRAIN FAIL"
SCRIPT_KEY = "train.py"
SCRIPT_MOUNT = "/workload"

# Every gpu_tenancy_* variable and its default (roles/gpu_tenancy/defaults/main.yml holds the
# same values; a unit test keeps the two in step).
DEFAULTS = {
    "tenants": [],
    "kube_context": "",
    "field_manager": "kubegpu",
    "force_conflicts": True,
    "prune": False,
    "prune_namespaces": False,
    "pod_security_version": "latest",
    "default_cpu_request": "250m",
    "default_cpu_limit": "1",
    "default_memory_request": "512Mi",
    "default_memory_limit": "2Gi",
    "dns_egress": True,
    "dns_namespace": "kube-system",
    "dns_pod_labels": {"k8s-app": "kube-dns"},
    "extra_gpu_products": [],
    "workload_image_registry": "",
    "workload_pytorch_image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
    "workload_tensorflow_image": "tensorflow/tensorflow:2.17.0-gpu",
    "workload_image_pull_policy": "IfNotPresent",
    "workload_gpu_products": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"],
    "workload_gpu_memory_min_mib": 80000,
    "workload_runtime_class": "nvidia",
    "workload_gpu_taint_key": "nvidia.com/gpu",
    "workload_gpu_taint_effect": "NoSchedule",
    "workload_nodes": 2,
    "workload_gpus_per_node": 1,
    "workload_shared_resource": "nvidia.com/gpu",
    "workload_mig_resource": "nvidia.com/mig-1g.10gb",
    "workload_cpu": "4",
    "workload_memory": "16Gi",
    "workload_shm_size": "2Gi",
    "workload_steps": 50,
    "workload_deadline_seconds": 1800,
    "workload_ttl_seconds": 3600,
    "workload_run_as_user": 1000,
    "monitoring_enabled": False,
    "monitoring_namespace": "monitoring",
    "monitoring_dashboard_labels": {"grafana_dashboard": "1"},
    "monitoring_dashboard_annotations": {},
    "monitoring_rule_labels": {},
    "monitoring_namespace_label": "exported_namespace",
    "monitoring_temperature_threshold": 85,
}

BOOL_KEYS = ("force_conflicts", "prune", "prune_namespaces", "dns_egress", "monitoring_enabled")
INT_KEYS = (
    "workload_gpu_memory_min_mib",
    "workload_nodes",
    "workload_gpus_per_node",
    "workload_steps",
    "workload_deadline_seconds",
    "workload_ttl_seconds",
    "workload_run_as_user",
    "monitoring_temperature_threshold",
)
# Lower bounds of the integer settings.
INT_MINIMUMS = {
    "workload_gpu_memory_min_mib": 0,
    "workload_nodes": 1,
    "workload_gpus_per_node": 1,
    "workload_steps": 1,
    "workload_deadline_seconds": 1,
    "workload_ttl_seconds": 0,
    "workload_run_as_user": 1,
    "monitoring_temperature_threshold": 1,
}
QUANTITY_KEYS = (
    "default_cpu_request",
    "default_cpu_limit",
    "default_memory_request",
    "default_memory_limit",
    "workload_cpu",
    "workload_memory",
    "workload_shm_size",
)
TENANT_KEYS = (
    "name",
    "description",
    "gpus",
    "max_gpus_per_container",
    "cpu",
    "memory",
    "pods",
    "gpu_products",
    "members",
    "pod_security",
    "container_defaults",
    "adopt_namespace",
)
CONTAINER_DEFAULT_KEYS = ("cpu_request", "cpu_limit", "memory_request", "memory_limit")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# NVML device names of GPUs seen in real captures and in GFD labels of real clusters, as GFD
# writes them (spaces replaced by '-'). Older drivers named some GPUs without "NVIDIA ". A GPU not
# listed here is accepted once it is added to gpu_tenancy_extra_gpu_products.
KNOWN_GPU_PRODUCTS = (
    "A100-SXM4-40GB",
    "NVIDIA-A10",
    "NVIDIA-A10G",
    "NVIDIA-A100-80GB-PCIe",
    "NVIDIA-A100-PCIE-40GB",
    "NVIDIA-A100-SXM4-40GB",
    "NVIDIA-A100-SXM4-80GB",
    "NVIDIA-A30",
    "NVIDIA-A40",
    "NVIDIA-B200",
    "NVIDIA-B300-SXM6-AC",
    "NVIDIA-GB200",
    "NVIDIA-GB300",
    "NVIDIA-GH200-480GB",
    "NVIDIA-GeForce-RTX-3090",
    "NVIDIA-GeForce-RTX-4090",
    "NVIDIA-GeForce-RTX-5090",
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-H100-NVL",
    "NVIDIA-H100-PCIe",
    "NVIDIA-H20",
    "NVIDIA-H200",
    "NVIDIA-H200-NVL",
    "NVIDIA-L4",
    "NVIDIA-L40",
    "NVIDIA-L40S",
    "NVIDIA-RTX-6000-Ada-Generation",
    "NVIDIA-RTX-A6000",
    "Quadro-RTX-4000",
    "Tesla-P100-PCIE-16GB",
    "Tesla-T4",
    "Tesla-V100-PCIE-16GB",
    "Tesla-V100-PCIE-32GB",
    "Tesla-V100-SXM2-16GB",
    "Tesla-V100-SXM2-32GB",
)
_MIG_PROFILE = re.compile(r"^[0-9]+(c\.[0-9]+)?g\.[0-9]+gb([.-][a-z0-9]+)*$")
_SHARED_SUFFIX = "-SHARED"
_MIG_INFIX = "-MIG-"
_MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(?P<profile>.+)$")


# --- validation ----------------------------------------------------------------------------------


class _Errors:
    def __init__(self):
        self.items = []

    def add(self, var, message):
        item = "%s%s: %s" % (PREFIX, var, message)
        if item not in self.items:
            self.items.append(item)


def _quantity_error(value):
    try:
        parse_quantity(value)
    except ValueError as exc:
        return str(exc)
    return None


def gpu_product_error(value, known=KNOWN_GPU_PRODUCTS):
    """None when value is a nvidia.com/gpu.product value GFD can write for a known GPU, else why.

    The value is a GPU's name as GFD writes it (spaces -> '-'), optionally followed by
    -MIG-<profile> (MIG devices) and/or -SHARED (time-sliced, not renamed).
    """
    if not isinstance(value, str) or not value:
        return "%r is not a non-empty string" % (value,)
    if " " in value:
        return "%r has spaces; GFD replaces each space with '-': write %r" % (
            value,
            value.strip().replace(" ", "-"),
        )
    error = label_value_error(value)
    if error:
        return "not a label value: %s" % error
    base = value
    if base.endswith(_SHARED_SUFFIX):
        base = base[: -len(_SHARED_SUFFIX)]
    if _MIG_INFIX in base:
        base, _, profile = base.partition(_MIG_INFIX)
        if not _MIG_PROFILE.match(profile):
            return "%r: %r is not a MIG profile (like 1g.10gb, 3g.40gb, 1c.3g.40gb)" % (
                value,
                profile,
            )
    if base in known:
        return None
    lowered = dict((k.lower(), k) for k in known)
    hint = ""
    if base.lower() in lowered:
        hint = "; GFD keeps NVML's capitals: %r" % lowered[base.lower()]
    else:
        close = difflib.get_close_matches(base, list(known), n=3, cutoff=0.6)
        if close:
            hint = "; did you mean %s?" % " or ".join(repr(c) for c in close)
    return (
        "%r is not a GPU product GFD reports for a known GPU%s (add the exact value of the "
        "nodes' %s label to gpu_tenancy_extra_gpu_products if it is right)"
        % (value, hint, GPU_PRODUCT_LABEL)
    )


def _check_str(errors, var, value, allow_empty=False):
    if not isinstance(value, str) or (not value and not allow_empty):
        errors.add(var, "%r is not a %sstring" % (value, "" if allow_empty else "non-empty "))
        return False
    return True


def _check_labels(errors, var, value):
    if not isinstance(value, dict):
        errors.add(var, "%r is not a mapping of label keys to values" % (value,))
        return {}
    for key, item in sorted(value.items(), key=lambda kv: str(kv[0])):
        error = qualified_name_error(key)
        if error:
            errors.add("%s.%s" % (var, key), "bad key: %s" % error)
        error = label_value_error(item)
        if error:
            errors.add("%s.%s" % (var, key), error)
    return value


def _check_annotations(errors, var, value):
    if not isinstance(value, dict):
        errors.add(var, "%r is not a mapping of annotation keys to strings" % (value,))
        return {}
    for key, item in sorted(value.items(), key=lambda kv: str(kv[0])):
        error = qualified_name_error(key)
        if error:
            errors.add("%s.%s" % (var, key), "bad key: %s" % error)
        if not isinstance(item, str):
            errors.add("%s.%s" % (var, key), "%r is not a string" % (item,))
    return value


def _check_image(errors, var, value):
    if not _check_str(errors, var, value):
        return
    if any(c.isspace() for c in value) or "://" in value:
        errors.add(var, "%r is not an image reference (registry/path:tag, no scheme)" % value)
    elif ":" not in value.rsplit("/", 1)[-1] and "@sha256:" not in value:
        errors.add(var, "%r has no tag: pin one (path:tag or path@sha256:digest)" % value)


def _check_products(errors, var, value, known):
    if not isinstance(value, list):
        errors.add(var, "%r is not a list of %s values" % (value, GPU_PRODUCT_LABEL))
        return []
    seen = []
    for index, item in enumerate(value):
        error = gpu_product_error(item, known)
        if error:
            errors.add("%s[%d]" % (var, index), error)
        elif item in seen:
            errors.add("%s[%d]" % (var, index), "%r is listed twice" % item)
        else:
            seen.append(item)
    return seen


def _normalize_pair(errors, var, value):
    """A quantity, or {requests, limits}; returns {requests, limits} (either may be None)."""
    if value is None:
        return {"requests": None, "limits": None}
    value = as_quantity(value)
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(("requests", "limits")))
        if unknown:
            errors.add(var, "unknown key(s) %s; allowed: requests, limits" % ", ".join(unknown))
        out = {}
        for key in ("requests", "limits"):
            item = as_quantity(value.get(key))
            if item is not None:
                error = _quantity_error(item)
                if error:
                    errors.add("%s.%s" % (var, key), error)
                    item = None
            out[key] = item
        if out["requests"] is not None and out["limits"] is not None:
            _compare(errors, var, out["requests"], out["limits"], ("requests", "limits %s"))
        if out["requests"] is None and out["limits"] is None:
            errors.add(var, "sets neither requests nor limits")
        return out
    error = _quantity_error(value)
    if error:
        errors.add(var, error + "; or give a mapping {requests, limits}")
        return {"requests": None, "limits": None}
    return {"requests": value, "limits": value}


def _normalize_members(errors, var, value):
    if value is None:
        return []
    if not isinstance(value, list):
        errors.add(var, "%r is not a list of {kind: User|Group, name}" % (value,))
        return []
    out, seen = [], set()
    for index, item in enumerate(value):
        mvar = "%s[%d]" % (var, index)
        if not isinstance(item, dict):
            errors.add(mvar, "%r is not a mapping {kind: User|Group, name}" % (item,))
            continue
        unknown = sorted(set(item) - set(("kind", "name")))
        if unknown:
            errors.add(mvar, "unknown key(s) %s; allowed: kind, name" % ", ".join(unknown))
        kind = item.get("kind")
        if kind is None:
            errors.add(
                mvar + ".kind", "missing; say whether %r is a User or a Group" % (item.get("name"),)
            )
        elif kind not in MEMBER_KINDS:
            errors.add(
                mvar + ".kind",
                "%r is not allowed; allowed: %s"
                % (
                    kind,
                    ", ".join(MEMBER_KINDS),
                ),
            )
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            errors.add(mvar + ".name", "%r is not a non-empty string" % (name,))
            continue
        if (kind, name) in seen:
            errors.add(mvar, "%s %r is listed twice" % (kind, name))
            continue
        seen.add((kind, name))
        if kind in MEMBER_KINDS:
            out.append({"kind": kind, "name": name})
    return out


def _normalize_pod_security(errors, var, value):
    if value is None:
        return {"level": "restricted", "reason": ""}
    if isinstance(value, str):
        value = {"level": value}
    if not isinstance(value, dict):
        errors.add(var, "%r is not a mapping {level, reason}" % (value,))
        return {"level": "restricted", "reason": ""}
    unknown = sorted(set(value) - set(("level", "reason")))
    if unknown:
        errors.add(var, "unknown key(s) %s; allowed: level, reason" % ", ".join(unknown))
    level = value.get("level", "restricted")
    reason = value.get("reason") or ""
    if level not in PSA_LEVELS:
        errors.add(
            var + ".level", "%r is not allowed; allowed: %s" % (level, ", ".join(PSA_LEVELS))
        )
        level = "restricted"
    if not isinstance(reason, str):
        errors.add(var + ".reason", "%r is not a string" % (reason,))
        reason = ""
    if level != "restricted" and not reason.strip():
        errors.add(
            var + ".reason",
            "required when level is %r: say why this tenant may run pods the restricted "
            "profile refuses (it is recorded on the namespace)" % level,
        )
    return {"level": level, "reason": reason.strip()}


def _normalize_container_defaults(errors, var, value, settings):
    base = {
        "cpu_request": settings["default_cpu_request"],
        "cpu_limit": settings["default_cpu_limit"],
        "memory_request": settings["default_memory_request"],
        "memory_limit": settings["default_memory_limit"],
    }
    if value is None:
        value = {}
    if not isinstance(value, dict):
        errors.add(var, "%r is not a mapping {%s}" % (value, ", ".join(CONTAINER_DEFAULT_KEYS)))
        return base
    unknown = sorted(set(value) - set(CONTAINER_DEFAULT_KEYS))
    if unknown:
        errors.add(
            var,
            "unknown key(s) %s; allowed: %s"
            % (", ".join(unknown), ", ".join(CONTAINER_DEFAULT_KEYS)),
        )
    for key in CONTAINER_DEFAULT_KEYS:
        if key in value:
            item = as_quantity(value[key])
            error = _quantity_error(item)
            if error:
                errors.add("%s.%s" % (var, key), error)
            else:
                base[key] = item
    return base


def _compare(errors, var, small, big, what):
    try:
        if parse_quantity(small) > parse_quantity(big):
            errors.add(var, "%s %s is more than %s" % (what[0], small, what[1] % big))
    except ValueError:
        pass  # reported where the bad quantity is


def _normalize_tenant(errors, index, item, settings, known, seen_names):
    var = "tenants[%d]" % index
    if not isinstance(item, dict):
        errors.add(var, "%r is not a mapping {name, gpus, cpu, memory, members, ...}" % (item,))
        return None
    name = item.get("name")
    if isinstance(name, str) and name:
        var = "tenants[%d] (%s)" % (index, name)
    unknown = sorted(set(item) - set(TENANT_KEYS))
    if unknown:
        errors.add(
            var, "unknown key(s) %s; allowed: %s" % (", ".join(unknown), ", ".join(TENANT_KEYS))
        )
    if not is_dns_label(name):
        errors.add(
            var + ".name",
            "%r is not a DNS-1123 label (1-63 characters: lower case letters, digits and '-', "
            "starting and ending with a letter or digit); it names the tenant's namespace"
            % (name,),
        )
    elif name in RESERVED_NAMESPACES or name.startswith("kube-"):
        errors.add(var + ".name", "%r is a namespace Kubernetes reserves" % name)
    elif name in seen_names:
        errors.add(var + ".name", "%r is defined twice" % name)
    seen_names.add(name)

    description = item.get("description", "")
    if not isinstance(description, str):
        errors.add(var + ".description", "%r is not a string" % (description,))
        description = ""

    gpus = item.get("gpus")
    if gpus is None:
        gpus = {}
    if not isinstance(gpus, dict):
        errors.add(
            var + ".gpus",
            '%r is not a mapping of GPU resource names to counts (nvidia.com/gpu: "4")' % (gpus,),
        )
        gpus = {}
    quota_gpus = {}
    for resource in sorted(gpus, key=str):
        rvar = "%s.gpus.%s" % (var, resource)
        error = extended_resource_error(resource)
        if error:
            errors.add(rvar, "bad resource name: %s" % error)
            continue
        value = as_quantity(gpus[resource])
        error = whole_quantity_error(value, "GPUs")
        if error:
            errors.add(rvar, error)
            continue
        quota_gpus[resource] = value
    # Whole GPUs are always capped: a tenant given only MIG slices may not take whole GPUs.
    quota_gpus.setdefault(GPU_RESOURCE, "0")

    max_per = item.get("max_gpus_per_container")
    if max_per is not None:
        max_per = as_quantity(max_per)
        error = whole_quantity_error(max_per, "GPUs")
        if error:
            errors.add(var + ".max_gpus_per_container", error)
            max_per = None

    cpu = _normalize_pair(errors, var + ".cpu", item.get("cpu"))
    memory = _normalize_pair(errors, var + ".memory", item.get("memory"))
    pods = item.get("pods")
    if pods is not None:
        pods = as_quantity(pods)
        error = whole_quantity_error(pods, "pods")
        if error:
            errors.add(var + ".pods", error)
            pods = None

    products = _check_products(errors, var + ".gpu_products", item.get("gpu_products") or [], known)
    members = _normalize_members(errors, var + ".members", item.get("members"))
    pod_security = _normalize_pod_security(errors, var + ".pod_security", item.get("pod_security"))
    defaults = _normalize_container_defaults(
        errors, var + ".container_defaults", item.get("container_defaults"), settings
    )
    _compare(
        errors,
        var + ".container_defaults",
        defaults["cpu_request"],
        defaults["cpu_limit"],
        ("cpu_request", "cpu_limit %s"),
    )
    _compare(
        errors,
        var + ".container_defaults",
        defaults["memory_request"],
        defaults["memory_limit"],
        ("memory_request", "memory_limit %s"),
    )
    adopt = coerce_bool(item.get("adopt_namespace", False))
    if not isinstance(adopt, bool):
        errors.add(var + ".adopt_namespace", "%r is not a boolean" % (adopt,))
        adopt = False
    return {
        "name": name,
        "description": description,
        "gpus": quota_gpus,
        "max_gpus_per_container": max_per,
        "cpu": cpu,
        "memory": memory,
        "pods": pods,
        "gpu_products": products,
        "members": members,
        "pod_security": pod_security,
        "container_defaults": defaults,
        "adopt_namespace": adopt,
    }


def validate_settings(config):
    """(settings, errors): the gpu_tenancy_* variables (without the prefix) checked and completed.

    Unknown variables are errors (a misspelt variable would otherwise be silently ignored).
    Every error names the variable and, for tenants, the tenant and the field.
    """
    errors = _Errors()
    config = dict(config or {})
    unknown = sorted(set(config) - set(DEFAULTS))
    for key in unknown:
        close = difflib.get_close_matches(str(key), list(DEFAULTS), n=1)
        hint = "did you mean %s%s?" % (PREFIX, close[0]) if close else "see the role's defaults"
        errors.add(key, "unknown variable; %s" % hint)
    settings = copy.deepcopy(DEFAULTS)
    for key in DEFAULTS:
        if key in config and config[key] is not None:
            settings[key] = copy.deepcopy(config[key])

    for key in BOOL_KEYS:
        settings[key] = coerce_bool(settings[key])
        if not isinstance(settings[key], bool):
            errors.add(key, "%r is not a boolean (true or false)" % (settings[key],))
    for key in INT_KEYS:
        settings[key] = coerce_int(settings[key])
        if not is_int(settings[key]):
            errors.add(key, "%r is not an integer" % (settings[key],))
        elif settings[key] < INT_MINIMUMS[key]:
            errors.add(key, "%d is below the minimum %d" % (settings[key], INT_MINIMUMS[key]))
    for key in QUANTITY_KEYS:
        settings[key] = as_quantity(settings[key])
        error = _quantity_error(settings[key])
        if error:
            errors.add(key, error)
    _compare(
        errors,
        "default_cpu_request",
        settings["default_cpu_request"],
        settings["default_cpu_limit"],
        ("cpu request", "gpu_tenancy_default_cpu_limit %s"),
    )
    _compare(
        errors,
        "default_memory_request",
        settings["default_memory_request"],
        settings["default_memory_limit"],
        ("memory request", "gpu_tenancy_default_memory_limit %s"),
    )

    _check_str(errors, "kube_context", settings["kube_context"], allow_empty=True)
    _check_str(errors, "field_manager", settings["field_manager"])
    if not isinstance(settings["pod_security_version"], str) or not re.match(
        r"^(latest|v1\.[0-9]+)$", settings["pod_security_version"]
    ):
        errors.add(
            "pod_security_version",
            "%r is not a Pod Security Standards version (latest or v1.<minor>, e.g. v1.31)"
            % (settings["pod_security_version"],),
        )
    if _check_str(errors, "dns_namespace", settings["dns_namespace"]) and not is_dns_label(
        settings["dns_namespace"]
    ):
        errors.add("dns_namespace", "%r is not a namespace name" % settings["dns_namespace"])
    settings["dns_pod_labels"] = _check_labels(errors, "dns_pod_labels", settings["dns_pod_labels"])
    if settings["dns_egress"] is True and not settings["dns_pod_labels"]:
        errors.add(
            "dns_pod_labels",
            "is empty: it would allow DNS to every pod of %s" % settings["dns_namespace"],
        )

    extra = settings["extra_gpu_products"]
    if not isinstance(extra, list):
        errors.add(
            "extra_gpu_products", "%r is not a list of %s values" % (extra, GPU_PRODUCT_LABEL)
        )
        extra = []
    for index, item in enumerate(extra):
        if not isinstance(item, str) or " " in item or label_value_error(item) or not item:
            errors.add(
                "extra_gpu_products[%d]" % index,
                "%r is not a GFD product value (the label's exact value: no spaces, 1-63 "
                "characters, alphanumeric at both ends)" % (item,),
            )
    known = tuple(KNOWN_GPU_PRODUCTS) + tuple(i for i in extra if isinstance(i, str))
    settings["extra_gpu_products"] = extra

    # Workloads
    registry = settings["workload_image_registry"]
    if _check_str(errors, "workload_image_registry", registry, allow_empty=True) and (
        "://" in registry or any(c.isspace() for c in registry)
    ):
        errors.add("workload_image_registry", "%r is not host[:port][/path]" % registry)
    _check_image(errors, "workload_pytorch_image", settings["workload_pytorch_image"])
    _check_image(errors, "workload_tensorflow_image", settings["workload_tensorflow_image"])
    if settings["workload_image_pull_policy"] not in PULL_POLICIES:
        errors.add(
            "workload_image_pull_policy",
            "%r is not allowed; allowed: %s"
            % (settings["workload_image_pull_policy"], ", ".join(PULL_POLICIES)),
        )
    settings["workload_gpu_products"] = _check_products(
        errors, "workload_gpu_products", settings["workload_gpu_products"], known
    )
    if (
        _check_str(
            errors, "workload_runtime_class", settings["workload_runtime_class"], allow_empty=True
        )
        and settings["workload_runtime_class"]
    ) and not is_dns_label(settings["workload_runtime_class"]):
        errors.add(
            "workload_runtime_class",
            "%r is not a RuntimeClass name" % settings["workload_runtime_class"],
        )
    if (
        _check_str(
            errors, "workload_gpu_taint_key", settings["workload_gpu_taint_key"], allow_empty=True
        )
        and settings["workload_gpu_taint_key"]
    ):
        error = qualified_name_error(settings["workload_gpu_taint_key"])
        if error:
            errors.add("workload_gpu_taint_key", error)
    if settings["workload_gpu_taint_effect"] not in (*TAINT_EFFECTS, ""):
        errors.add(
            "workload_gpu_taint_effect",
            "%r is not allowed; allowed: %s, or empty"
            % (settings["workload_gpu_taint_effect"], ", ".join(TAINT_EFFECTS)),
        )
    for key in ("workload_shared_resource", "workload_mig_resource"):
        error = extended_resource_error(settings[key])
        if error:
            errors.add(key, error)
    if not _MIG_RESOURCE.match(str(settings["workload_mig_resource"])):
        errors.add(
            "workload_mig_resource",
            "%r is not a MIG resource (nvidia.com/mig-<profile>, "
            "advertised with the mixed MIG strategy)" % (settings["workload_mig_resource"],),
        )
    elif not _MIG_PROFILE.match(
        _MIG_RESOURCE.match(settings["workload_mig_resource"]).group("profile")
    ):
        errors.add(
            "workload_mig_resource",
            "%r does not end in a MIG profile (like 1g.10gb)" % settings["workload_mig_resource"],
        )
    if settings["workload_shared_resource"] not in (GPU_RESOURCE, GPU_RESOURCE + ".shared"):
        errors.add(
            "workload_shared_resource",
            "%r is not allowed; allowed: nvidia.com/gpu "
            "(time-slicing without rename) or nvidia.com/gpu.shared (renameByDefault)"
            % (settings["workload_shared_resource"],),
        )

    # Monitoring
    if _check_str(
        errors, "monitoring_namespace", settings["monitoring_namespace"]
    ) and not is_dns_label(settings["monitoring_namespace"]):
        errors.add(
            "monitoring_namespace", "%r is not a namespace name" % settings["monitoring_namespace"]
        )
    settings["monitoring_dashboard_labels"] = _check_labels(
        errors, "monitoring_dashboard_labels", settings["monitoring_dashboard_labels"]
    )
    settings["monitoring_rule_labels"] = _check_labels(
        errors, "monitoring_rule_labels", settings["monitoring_rule_labels"]
    )
    settings["monitoring_dashboard_annotations"] = _check_annotations(
        errors, "monitoring_dashboard_annotations", settings["monitoring_dashboard_annotations"]
    )
    if not isinstance(settings["monitoring_namespace_label"], str) or not re.match(
        r"^[a-zA-Z_][a-zA-Z0-9_]*$", settings["monitoring_namespace_label"]
    ):
        errors.add(
            "monitoring_namespace_label",
            "%r is not a Prometheus label name" % (settings["monitoring_namespace_label"],),
        )

    # Tenants
    tenants = settings["tenants"]
    if not isinstance(tenants, list):
        errors.add(
            "tenants",
            "%r is not a list of tenants ({name, gpus, cpu, memory, members})" % (tenants,),
        )
        tenants = []
    out, seen = [], set()
    for index, item in enumerate(tenants):
        tenant = _normalize_tenant(errors, index, item, settings, known, seen)
        if tenant is not None:
            out.append(tenant)
    settings["tenants"] = out
    return settings, errors.items


# --- tenant objects ------------------------------------------------------------------------------


def tenant_labels(name):
    return {MANAGED_BY_LABEL: MANAGED_BY, TENANT_LABEL: name}


def _meta(name, tenant, namespace=None, extra_labels=None, annotations=None):
    labels = tenant_labels(tenant)
    labels.update(extra_labels or {})
    meta = {"name": name, "labels": labels}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations:
        meta["annotations"] = annotations
    return meta


def namespace_manifest(settings, tenant, adopted=False):
    """The tenant's Namespace. An adopted namespace (one kubegpu did not create) gets the tenant
    and Pod Security labels but not managed-by, so that kubegpu never deletes it."""
    level = tenant["pod_security"]["level"]
    version = settings["pod_security_version"]
    psa = {}
    for mode in ("enforce", "audit", "warn"):
        psa[PSA_PREFIX + mode] = level
        psa[PSA_PREFIX + mode + "-version"] = version
    annotations = {}
    if tenant["description"]:
        annotations[DESCRIPTION_ANNOTATION] = tenant["description"]
    if tenant["gpu_products"]:
        annotations[PRODUCTS_ANNOTATION] = ",".join(tenant["gpu_products"])
    if tenant["pod_security"]["reason"]:
        annotations[PSA_REASON_ANNOTATION] = tenant["pod_security"]["reason"]
    meta = _meta(tenant["name"], tenant["name"], extra_labels=psa, annotations=annotations)
    if adopted:
        del meta["labels"][MANAGED_BY_LABEL]
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def quota_hard(tenant):
    """The ResourceQuota's spec.hard for a tenant (quantities as strings)."""
    hard = {}
    for resource, count in sorted(tenant["gpus"].items()):
        hard["requests." + resource] = count
    for key, pair in (("cpu", tenant["cpu"]), ("memory", tenant["memory"])):
        if pair["requests"] is not None:
            hard["requests." + key] = pair["requests"]
        if pair["limits"] is not None:
            hard["limits." + key] = pair["limits"]
    if tenant["pods"] is not None:
        hard["pods"] = tenant["pods"]
    return hard


def _min_quantity(a, b):
    if b is None:
        return a
    return a if parse_quantity(a) <= parse_quantity(b) else b


def limit_range_limits(tenant):
    """The LimitRange's spec.limits: CPU and memory defaults (every container must state them
    where a quota counts them), and for each GPU resource a default and default request of 0
    (requests equal limits, so non-GPU containers stay without GPUs) and a per-container max."""
    defaults = tenant["container_defaults"]
    default = {"cpu": defaults["cpu_limit"], "memory": defaults["memory_limit"]}
    default_request = {"cpu": defaults["cpu_request"], "memory": defaults["memory_request"]}
    maximum = {}
    for resource, count in sorted(tenant["gpus"].items()):
        default[resource] = "0"
        default_request[resource] = "0"
        maximum[resource] = _min_quantity(count, tenant["max_gpus_per_container"])
    return [
        {"type": "Container", "default": default, "defaultRequest": default_request, "max": maximum}
    ]


ROLE_RULES = [
    # Run training: Jobs and bare Pods, and see why they fail.
    {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ],
    },
    {"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]},
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ],
    },
    {"apiGroups": [""], "resources": ["pods/log", "pods/status"], "verbs": ["get"]},
    # Scripts and configuration for the Jobs; the headless Service multi-node Jobs need.
    {
        "apiGroups": [""],
        "resources": ["configmaps", "services"],
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    },
    # See the tenant's limits and what happened.
    {
        "apiGroups": [""],
        "resources": ["events", "limitranges", "resourcequotas"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["get", "list", "watch"]},
]


def role_manifest(tenant):
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(ROLE_NAME, tenant["name"], tenant["name"]),
        "rules": copy.deepcopy(ROLE_RULES),
    }


def role_binding_manifest(tenant):
    subjects = [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": m["kind"], "name": m["name"]}
        for m in sorted(tenant["members"], key=lambda m: (m["kind"], m["name"]))
    ]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(BINDING_NAME, tenant["name"], tenant["name"]),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ROLE_NAME},
        "subjects": subjects,
    }


def network_policies(settings, tenant):
    ns = tenant["name"]
    out = [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(DENY_ALL_NAME, ns, ns),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(SAME_NAMESPACE_NAME, ns, ns),
            "spec": {
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": {}}]}],
                "egress": [{"to": [{"podSelector": {}}]}],
            },
        },
    ]
    if settings["dns_egress"]:
        out.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": _meta(DNS_NAME, ns, ns),
                "spec": {
                    "podSelector": {},
                    "policyTypes": ["Egress"],
                    "egress": [
                        {
                            "to": [
                                {
                                    "namespaceSelector": {
                                        "matchLabels": {
                                            "kubernetes.io/metadata.name": settings["dns_namespace"]
                                        }
                                    },
                                    "podSelector": {
                                        "matchLabels": dict(settings["dns_pod_labels"])
                                    },
                                }
                            ],
                            "ports": [
                                {"protocol": "UDP", "port": 53},
                                {"protocol": "TCP", "port": 53},
                            ],
                        }
                    ],
                },
            }
        )
    return out


def render_tenant(settings, tenant, adopted=False):
    """Every object of one tenant, namespace first."""
    ns = tenant["name"]
    out = [namespace_manifest(settings, tenant, adopted)]
    out.append(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": _meta(QUOTA_NAME, ns, ns),
            "spec": {"hard": quota_hard(tenant)},
        }
    )
    out.append(
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": _meta(LIMITS_NAME, ns, ns),
            "spec": {"limits": limit_range_limits(tenant)},
        }
    )
    out.append(role_manifest(tenant))
    out.append(role_binding_manifest(tenant))
    out.extend(network_policies(settings, tenant))
    return out


def render_tenants(settings, adopted=()):
    out = []
    for tenant in settings["tenants"]:
        out.extend(render_tenant(settings, tenant, tenant["name"] in adopted))
    return out


# Kinds the role reads back to prune, in the order they are deleted (namespace last).
OWNED_KINDS = (
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("v1", "LimitRange"),
    ("v1", "ResourceQuota"),
    ("v1", "Namespace"),
)


def object_ref(obj):
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "namespace": meta.get("namespace") or "",
        "name": meta.get("name"),
    }


def _ref_key(ref):
    return (ref["apiVersion"], ref["kind"], ref.get("namespace") or "", ref["name"])


def is_owned(obj):
    """kubegpu made this object for a tenant: managed-by=kubegpu and a tenant label."""
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY and bool(labels.get(TENANT_LABEL))


def plan(settings, namespaces, owned):
    """What to apply, and (when pruning) what to delete, given the cluster's current state.

    namespaces: the Namespace objects in the cluster (at least those named like tenants).
    owned: objects found with OWNED_SELECTOR, each with apiVersion, kind and metadata (the
      role reads OWNED_KINDS with that selector).

    A tenant whose namespace exists without managed-by=kubegpu is an error unless the tenant says
    adopt_namespace: true; an adopted namespace is never deleted, and when its tenant goes, the
    labels kubegpu put on it are released (re-applied empty with kubegpu's field manager).
    Returns {manifests, namespaces, namespaced, new_namespaces, delete, release, adopted, errors};
    manifests is namespaces + namespaced in apply order; delete and release hold minimal
    manifests ({apiVersion, kind, metadata: {name[, namespace]}}), deletion in a safe order.
    """
    existing = {}
    for ns in namespaces or []:
        meta = ns.get("metadata") or {}
        existing[meta.get("name")] = ns
    errors = []
    adopted = []
    for index, tenant in enumerate(settings["tenants"]):
        ns = existing.get(tenant["name"])
        if (
            ns is None
            or (ns.get("metadata") or {}).get("labels", {}).get(MANAGED_BY_LABEL) == MANAGED_BY
        ):
            continue
        if tenant["adopt_namespace"]:
            adopted.append(tenant["name"])
        else:
            errors.append(
                "%stenants[%d] (%s): namespace %r exists and kubegpu did not create it (no "
                "%s=%s label); set adopt_namespace: true on the tenant to manage its quota, "
                "limits, RBAC and network policies there (kubegpu will never delete it), or "
                "choose another name"
                % (PREFIX, index, tenant["name"], tenant["name"], MANAGED_BY_LABEL, MANAGED_BY)
            )
    manifests = render_tenants(settings, adopted)
    wanted = set(_ref_key(object_ref(m)) for m in manifests)
    tenant_names = set(t["name"] for t in settings["tenants"])
    delete, release = [], []
    order = dict((kind, i) for i, (_, kind) in enumerate(OWNED_KINDS))
    for obj in owned or []:
        if not is_owned(obj):
            continue  # a selector the server ignored, or a hand-made object: never ours
        ref = object_ref(obj)
        if ref["kind"] not in order:
            continue
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            continue  # already being deleted (a namespace stays Terminating a while)
        if _ref_key(ref) in wanted:
            continue
        if ref["kind"] == "Namespace":
            if ref["name"] in tenant_names:
                continue  # adopted now, or still wanted: never delete a tenant's namespace
            if not settings["prune_namespaces"]:
                continue
        delete.append(ref)
    delete.sort(key=lambda r: (order[r["kind"]], r["namespace"], r["name"]))
    delete = [_deletable(r) for r in delete]
    # Adopted namespaces of tenants that are gone: hand their labels back.
    for name, ns in sorted(existing.items()):
        labels = (ns.get("metadata") or {}).get("labels") or {}
        if name in tenant_names or not labels.get(TENANT_LABEL):
            continue
        if labels.get(MANAGED_BY_LABEL) == MANAGED_BY:
            continue
        if _was_applied_by(ns, settings["field_manager"]):
            release.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    if errors:
        manifests, delete, release = [], [], []
    return {
        "manifests": manifests,
        # The same objects in two steps: namespaces, then what lives in them. In check mode the
        # objects of namespaces that do not exist yet cannot be dry-run (the server answers
        # NotFound), so the role only reports them.
        "namespaces": [m for m in manifests if m["kind"] == "Namespace"],
        "namespaced": [m for m in manifests if m["kind"] != "Namespace"],
        "new_namespaces": sorted(
            t["name"] for t in settings["tenants"] if t["name"] not in existing
        ),
        "delete": delete,
        "release": release,
        "adopted": adopted,
        "errors": errors,
    }


def _deletable(ref):
    """A reference as the minimal manifest kubernetes.core.k8s deletes by."""
    meta = {"name": ref["name"]}
    if ref["namespace"]:
        meta["namespace"] = ref["namespace"]
    return {"apiVersion": ref["apiVersion"], "kind": ref["kind"], "metadata": meta}


def _was_applied_by(obj, manager):
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            return True
    return False


# --- workloads -----------------------------------------------------------------------------------

PYTORCH_SCRIPT = '''\
"""kubegpu training check: a few optimiser steps of a small MLP on fixed random data.

Runs on one GPU, or under torchrun on several GPUs and nodes (DistributedDataParallel over NCCL).
Prints one line per rank that starts with KUBEGPU-TRAIN PASS or KUBEGPU-TRAIN FAIL, and exits
non-zero on failure. The loss on a fixed batch must fall: that proves the forward pass, the
backward pass and (with several ranks) the gradient all-reduce ran on the GPUs.
"""

import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn

steps = int(os.environ.get("KUBEGPU_STEPS", "50"))
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
local_rank = int(os.environ.get("LOCAL_RANK", "0"))


def report(ok, text):
    verdict = "PASS" if ok else "FAIL"
    print("KUBEGPU-TRAIN %s rank=%d/%d %s" % (verdict, rank, world, text), flush=True)
    return 0 if ok else 1


if not torch.cuda.is_available():
    sys.exit(report(False, "no CUDA device visible (torch %s, CUDA_VISIBLE_DEVICES=%r)" % (
        torch.__version__, os.environ.get("CUDA_VISIBLE_DEVICES"))))
torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank)
if world > 1:
    dist.init_process_group("nccl")
torch.manual_seed(1234)
model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(device)
if world > 1:
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
optimiser = torch.optim.SGD(model.parameters(), lr=0.05)
generator = torch.Generator(device=device).manual_seed(4321 + rank)
inputs = torch.randn(512, 1024, device=device, generator=generator)
targets = torch.randint(0, 10, (512,), device=device, generator=generator)
loss_fn = nn.CrossEntropyLoss()
started = time.monotonic()
first = last = None
for _ in range(steps):
    optimiser.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimiser.step()
    value = loss.item()
    first = value if first is None else first
    last = value
torch.cuda.synchronize()
elapsed = time.monotonic() - started
name = torch.cuda.get_device_name(device)
if world > 1:
    dist.destroy_process_group()
sys.exit(report(last < first, "gpu=%r steps=%d loss %.4f -> %.4f in %.2fs torch=%s" % (
    name, steps, first, last, elapsed, torch.__version__)))
'''

TENSORFLOW_SCRIPT = '''\
"""kubegpu training check: MultiWorkerMirroredStrategy on fixed random data.

Each worker reads its place in the cluster from TF_CONFIG. Prints one line that starts with
KUBEGPU-TRAIN PASS or KUBEGPU-TRAIN FAIL and exits non-zero on failure.
"""

import json
import os
import sys

import tensorflow as tf

steps = int(os.environ.get("KUBEGPU_STEPS", "50"))
config = json.loads(os.environ.get("TF_CONFIG", "{}"))
task = config.get("task", {})
workers = len(config.get("cluster", {}).get("worker", [])) or 1


def report(ok, text):
    verdict = "PASS" if ok else "FAIL"
    print("KUBEGPU-TRAIN %s worker=%s/%d %s" % (verdict, task.get("index", 0), workers, text),
          flush=True)
    return 0 if ok else 1


# The strategy comes first: it must exist before TensorFlow's runtime starts.
strategy = tf.distribute.MultiWorkerMirroredStrategy()
gpus = tf.config.list_physical_devices("GPU")
if not gpus:
    sys.exit(report(False, "no GPU visible to TensorFlow %s" % tf.__version__))
with strategy.scope():
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(256,)),
        tf.keras.layers.Dense(512, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(
        optimizer=tf.keras.optimizers.SGD(0.05),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
features = tf.random.stateless_normal((4096, 256), seed=(1, 2))
labels = tf.random.stateless_uniform((4096,), seed=(3, 4), maxval=10, dtype=tf.int32)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = (tf.data.Dataset.from_tensor_slices((features, labels)).repeat()
           .batch(64 * strategy.num_replicas_in_sync).with_options(options))
history = model.fit(dataset, epochs=max(2, steps // 10), steps_per_epoch=10, verbose=2)
losses = history.history["loss"]
sys.exit(report(losses[-1] < losses[0], "gpus=%d replicas=%d loss %.4f -> %.4f tf=%s" % (
    len(gpus), strategy.num_replicas_in_sync, losses[0], losses[-1], tf.__version__)))
'''


def image_ref(settings, image):
    registry = (settings.get("workload_image_registry") or "").rstrip("/")
    return "%s/%s" % (registry, image) if registry else image


def _workload_labels(name, workload):
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/component": workload,
    }


def gpu_affinity(products, memory_min_mib, product_label=GPU_PRODUCT_LABEL, extra=None):
    """Required node affinity on GFD labels: product In [...] and memory Gt N (MiB)."""
    expressions = []
    if products:
        expressions.append({"key": product_label, "operator": "In", "values": list(products)})
    if memory_min_mib:
        expressions.append(
            {"key": GPU_MEMORY_LABEL, "operator": "Gt", "values": [str(memory_min_mib)]}
        )
    expressions.extend(extra or [])
    if not expressions:
        return None
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


def _tolerations(settings):
    key = settings["workload_gpu_taint_key"]
    if not key:
        return []
    toleration = {"key": key, "operator": "Exists"}
    if settings["workload_gpu_taint_effect"]:
        toleration["effect"] = settings["workload_gpu_taint_effect"]
    return [toleration]


def _pod_security_context(settings):
    uid = settings["workload_run_as_user"]
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


CONTAINER_SECURITY_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}


def _container(settings, image, command, resources, env=None, ports=None):
    container = {
        "name": "train",
        "image": image_ref(settings, image),
        "imagePullPolicy": settings["workload_image_pull_policy"],
        "command": command,
        "env": [
            # The image's user may have no writable home: caches go to the scratch volume.
            {"name": "HOME", "value": "/tmp"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "KUBEGPU_STEPS", "value": str(settings["workload_steps"])},
            *(env or []),
        ],
        "resources": resources,
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
        "volumeMounts": [
            {"name": "script", "mountPath": SCRIPT_MOUNT, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "scratch", "mountPath": "/tmp"},
        ],
    }
    if ports:
        container["ports"] = ports
    return container


def gpu_resources(settings, resource, count):
    """Requests equal limits: extended resources cannot be overcommitted."""
    amounts = {
        "cpu": settings["workload_cpu"],
        "memory": settings["workload_memory"],
        resource: str(count),
    }
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _pod_spec(settings, script_configmap, container, affinity, subdomain=None):
    spec = {
        "restartPolicy": "Never",
        "securityContext": _pod_security_context(settings),
        "tolerations": _tolerations(settings),
        "containers": [container],
        "volumes": [
            {"name": "script", "configMap": {"name": script_configmap}},
            {
                "name": "dshm",
                "emptyDir": {"medium": "Memory", "sizeLimit": settings["workload_shm_size"]},
            },
            {"name": "scratch", "emptyDir": {}},
        ],
    }
    if settings["workload_runtime_class"]:
        spec["runtimeClassName"] = settings["workload_runtime_class"]
    if affinity:
        spec["affinity"] = affinity
    if subdomain:
        spec["subdomain"] = subdomain
    if not spec["tolerations"]:
        del spec["tolerations"]
    return spec


def _script_configmap(name, namespace, workload, script):
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": _workload_labels(name, workload),
        },
        "data": {SCRIPT_KEY: script},
    }


def _job(
    settings,
    name,
    namespace,
    workload,
    pod_spec,
    completions=1,
    indexed=False,
    extra_pod_labels=None,
):
    labels = _workload_labels(name, workload)
    pod_labels = dict(labels)
    pod_labels.update(extra_pod_labels or {})
    spec = {
        "backoffLimit": 0,
        "activeDeadlineSeconds": settings["workload_deadline_seconds"],
        "ttlSecondsAfterFinished": settings["workload_ttl_seconds"],
        "completions": completions,
        "parallelism": completions,
        "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def _headless_service(name, namespace, workload, job_name, port, port_name):
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": _workload_labels(name, workload),
        },
        "spec": {
            "clusterIP": "None",
            # Workers look each other up before any of them is ready.
            "publishNotReadyAddresses": True,
            "selector": {"batch.kubernetes.io/job-name": job_name},
            "ports": [{"name": port_name, "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def _index_env():
    return {
        "name": "NODE_RANK",
        "valueFrom": {
            "fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            }
        },
    }


def pytorch_single(settings, namespace, name="pytorch-single-gpu", products=None):
    products = settings["workload_gpu_products"] if products is None else products
    container = _container(
        settings,
        settings["workload_pytorch_image"],
        ["python", SCRIPT_MOUNT + "/" + SCRIPT_KEY],
        gpu_resources(settings, GPU_RESOURCE, 1),
    )
    affinity = gpu_affinity(products, settings["workload_gpu_memory_min_mib"])
    return [
        _script_configmap(name + "-script", namespace, "pytorch-single-gpu", PYTORCH_SCRIPT),
        _job(
            settings,
            name,
            namespace,
            "pytorch-single-gpu",
            _pod_spec(settings, name + "-script", container, affinity),
        ),
    ]


def _multiworker(settings, namespace, name, workload, image, command, env, port, script):
    """An indexed Job of one pod per node with a headless Service for the workers to find each
    other: the shape shared by the PyTorch DDP and TensorFlow multi-worker examples."""
    nodes = settings["workload_nodes"]
    service = name + "-workers"
    port_number, port_name = port
    container = _container(
        settings,
        image,
        command,
        gpu_resources(settings, GPU_RESOURCE, settings["workload_gpus_per_node"]),
        env=[_index_env(), *env],
        ports=[{"name": port_name, "containerPort": port_number, "protocol": "TCP"}],
    )
    affinity = gpu_affinity(
        settings["workload_gpu_products"], settings["workload_gpu_memory_min_mib"]
    )
    return [
        _script_configmap(name + "-script", namespace, workload, script),
        _headless_service(service, namespace, workload, name, port_number, port_name),
        _job(
            settings,
            name,
            namespace,
            workload,
            _pod_spec(settings, name + "-script", container, affinity, subdomain=service),
            completions=nodes,
            indexed=True,
        ),
    ]


def pytorch_ddp(settings, namespace, name="pytorch-ddp"):
    command = [
        "torchrun",
        "--nnodes=%d" % settings["workload_nodes"],
        "--nproc-per-node=%d" % settings["workload_gpus_per_node"],
        "--node-rank=$(NODE_RANK)",
        "--master-addr=%s-0.%s-workers" % (name, name),
        "--master-port=29500",
        SCRIPT_MOUNT + "/" + SCRIPT_KEY,
    ]
    image = settings["workload_pytorch_image"]
    return _multiworker(
        settings,
        namespace,
        name,
        "pytorch-ddp",
        image,
        command,
        [],
        (29500, "rendezvous"),
        PYTORCH_SCRIPT,
    )


def tensorflow_multiworker(settings, namespace, name="tensorflow-multiworker"):
    service = name + "-workers"
    workers = ["%s-%d.%s:2222" % (name, i, service) for i in range(settings["workload_nodes"])]
    # TF_CONFIG per worker: the kubelet expands $(NODE_RANK), defined just before it.
    tf_config = '{"cluster": {"worker": %s}, "task": {"type": "worker", "index": $(NODE_RANK)}}' % (
        json.dumps(workers),
    )
    command = ["python", SCRIPT_MOUNT + "/" + SCRIPT_KEY]
    env = [{"name": "TF_CONFIG", "value": tf_config}]
    return _multiworker(
        settings,
        namespace,
        name,
        "tensorflow-multiworker",
        settings["workload_tensorflow_image"],
        command,
        env,
        (2222, "grpc"),
        TENSORFLOW_SCRIPT,
    )


def pytorch_time_sliced(settings, namespace, name="pytorch-time-sliced"):
    """Two pods sharing one time-sliced GPU. Without renaming, GFD adds -SHARED to the product
    label of time-sliced GPUs; with renameByDefault the resource is nvidia.com/gpu.shared and
    the product label stays as it is. Both pods must land on one node (pod affinity)."""
    resource = settings["workload_shared_resource"]
    renamed = resource != GPU_RESOURCE
    products = [p if renamed else p + _SHARED_SUFFIX for p in settings["workload_gpu_products"]]
    container = _container(
        settings,
        settings["workload_pytorch_image"],
        ["python", SCRIPT_MOUNT + "/" + SCRIPT_KEY],
        gpu_resources(settings, resource, 1),
    )
    affinity = gpu_affinity(
        products,
        settings["workload_gpu_memory_min_mib"],
        extra=[{"key": GPU_REPLICAS_LABEL, "operator": "Gt", "values": ["1"]}],
    )
    affinity["podAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {"batch.kubernetes.io/job-name": name}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
    return [
        _script_configmap(name + "-script", namespace, "pytorch-time-sliced", PYTORCH_SCRIPT),
        _job(
            settings,
            name,
            namespace,
            "pytorch-time-sliced",
            _pod_spec(settings, name + "-script", container, affinity),
            completions=2,
        ),
    ]


def pytorch_mig(settings, namespace, name="pytorch-mig"):
    """One MIG slice (mixed strategy: nvidia.com/mig-<profile>; GFD keys the slice's labels by
    that resource name, so the product affinity is on nvidia.com/mig-<profile>.product)."""
    resource = settings["workload_mig_resource"]
    profile = _MIG_RESOURCE.match(resource).group("profile")
    products = ["%s-MIG-%s" % (p, profile) for p in settings["workload_gpu_products"]]
    container = _container(
        settings,
        settings["workload_pytorch_image"],
        ["python", SCRIPT_MOUNT + "/" + SCRIPT_KEY],
        gpu_resources(settings, resource, 1),
    )
    affinity = gpu_affinity(
        products,
        0,
        product_label=resource + ".product",
        extra=[{"key": MIG_STRATEGY_LABEL, "operator": "In", "values": ["mixed"]}],
    )
    return [
        _script_configmap(name + "-script", namespace, "pytorch-mig", PYTORCH_SCRIPT),
        _job(
            settings,
            name,
            namespace,
            "pytorch-mig",
            _pod_spec(settings, name + "-script", container, affinity),
        ),
    ]


WORKLOADS = (
    ("pytorch-single-gpu", pytorch_single),
    ("pytorch-ddp", pytorch_ddp),
    ("tensorflow-multiworker", tensorflow_multiworker),
    ("pytorch-time-sliced", pytorch_time_sliced),
    ("pytorch-mig", pytorch_mig),
)


def render_workloads(settings, namespace):
    """{workload name: [manifest, ...]} for every example workload, in one namespace."""
    return dict((name, func(settings, namespace)) for name, func in WORKLOADS)


def render_smoke(settings, namespace, run_id, image=None, products=None, gpus=1, timeout_s=None):
    """The smoke check: the training script in a ConfigMap and a Job on `gpus` GPUs that runs it.

    products: GFD product values the GPU must be (None or empty: any GPU). The Job gives up after
    timeout_s (activeDeadlineSeconds) and deletes itself (ttlSecondsAfterFinished, at most 10
    minutes) even if the caller dies before cleaning up.
    """
    local = copy.deepcopy(settings)
    if image:
        local["workload_pytorch_image"] = image
        local["workload_image_registry"] = ""
    if timeout_s:
        local["workload_deadline_seconds"] = max(1, int(timeout_s))
    local["workload_ttl_seconds"] = min(local["workload_ttl_seconds"], 600)
    local["workload_gpu_memory_min_mib"] = 0
    name = "kubegpu-smoke-%s" % run_id
    manifests = pytorch_single(local, namespace, name=name, products=list(products or []))
    resources = manifests[1]["spec"]["template"]["spec"]["containers"][0]["resources"]
    for part in ("requests", "limits"):
        resources[part][GPU_RESOURCE] = str(gpus)
    for manifest in manifests:
        manifest["metadata"]["labels"]["app.kubernetes.io/component"] = "smoke"
    manifests[1]["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] = "smoke"
    return manifests


# --- monitoring ----------------------------------------------------------------------------------

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
