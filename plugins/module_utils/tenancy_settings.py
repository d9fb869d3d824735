# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The gpu_tenancy settings: DEFAULTS, and validate_settings(config) -> (settings, errors).

The gpu_tenancy_* variables (keys without the prefix) completed with DEFAULTS and checked; every
error names the variable, the tenant and the field
(``gpu_tenancy_tenants[1] (vision).gpus.nvidia.com/gpu: ...``). What the settings render lives
beside this file: tenants' objects and the apply plan in tenancy.py, training workloads in
training.py, the dashboard and alert rules in gpu_monitoring.py.

- GPU Feature Discovery writes nvidia.com/gpu.product as the NVML device name with every space
  replaced by '-', joined by '-' with "MIG" and the MIG profile for MIG devices and with "SHARED"
  when a time-sliced resource is not renamed (NVIDIA/k8s-device-plugin internal/lm/resource.go,
  productLabel); gpu_product_error checks a value against that.
- Extended resources cannot be overcommitted: a container's request must equal its limit, and
  a ResourceQuota limits them only as requests.<name>.

Runs on the controller's Python (3.8+ syntax), standard library only.
"""

from __future__ import absolute_import, division, print_function

import copy
import difflib
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils.k8s_values import (
    as_quantity,
    coerce_bool,
    coerce_int,
    extended_resource_error,
    is_dns_label,
    is_dns_subdomain,
    is_int,
    label_value_error,
    parse_quantity,
    qualified_name_error,
    whole_quantity_error,
)

__metaclass__ = type

PREFIX = "gpu_tenancy_"
VAR_TENANTS = PREFIX + "tenants"
# Every object kubegpu renders for tenants, workloads and monitoring carries this label.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "kubegpu"
PSA_LEVELS = ("restricted", "baseline", "privileged")
MEMBER_KINDS = ("User", "Group")
RESERVED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# GFD's product label: "<product>-SHARED" for time-sliced GPUs not renamed, "<product>-MIG-<profile>"
# for MIG devices; a MIG resource is nvidia.com/mig-<profile>.
SHARED_SUFFIX = "-SHARED"
MIG_INFIX = "-MIG-"
# Matched against the whole text (fullmatch): "$" would let a trailing line break through.
MIG_RESOURCE = re.compile(r"nvidia\.com/mig-(?P<profile>.+)")

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
    "workload_pytorch_image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime@sha256:c16f4c749e2d9e96878875cdf6cc45cddda1d1a36fddd371dd6f2360f1b6e2a2",
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
    "services",
    "devices",
)
# NVIDIA's DRA driver's DeviceClasses of GPUs and MIG devices: capped for every tenant ("0"
# unless its `devices` gives some), so that claims cannot take what the device plugin's
# resources are capped for. ResourceQuota counts a class's devices as
# <class>.deviceclass.resource.k8s.io/devices (Kubernetes 1.33 and later).
DRA_GPU_CLASSES = ("gpu.nvidia.com", "mig.nvidia.com")
# Services that expose a tenant's pods outside the cluster, capped by the quota ("0" unless the
# tenant's `services` allows some): a NodePort opens a port on every node.
SERVICE_KEYS = ("nodeports", "loadbalancers")
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
# Matched with fullmatch, as MIG_RESOURCE is.
_MIG_PROFILE = re.compile(r"[0-9]+(c\.[0-9]+)?g\.[0-9]+gb([.-][a-z0-9]+)*")
_POD_SECURITY_VERSION = re.compile(r"latest|v1\.[0-9]+")
_PROMETHEUS_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


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
    if base.endswith(SHARED_SUFFIX):
        base = base[: -len(SHARED_SUFFIX)]
    if MIG_INFIX in base:
        base, _, profile = base.partition(MIG_INFIX)
        if not _MIG_PROFILE.fullmatch(profile):
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


def _plain_ascii(value):
    """Printable ASCII without spaces: what image references and registry hosts are made of."""
    return all("!" <= c <= "~" for c in value)


def _check_image(errors, var, value):
    if not _check_str(errors, var, value):
        return
    if not _plain_ascii(value) or "://" in value:
        errors.add(
            var,
            "%r is not an image reference (registry/path:tag in ASCII, no spaces, control "
            "characters or scheme)" % value,
        )
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
    services = {key: "0" for key in SERVICE_KEYS}
    given = item.get("services")
    if given is not None and not isinstance(given, dict):
        errors.add(var + ".services", "must be a mapping with %s" % " and ".join(SERVICE_KEYS))
    elif given:
        for key, value in given.items():
            if key not in SERVICE_KEYS:
                errors.add(
                    var + ".services." + str(key),
                    "unknown key; allowed: %s" % ", ".join(SERVICE_KEYS),
                )
                continue
            value = as_quantity(value)
            error = whole_quantity_error(value, "Services")
            if error:
                errors.add(var + ".services." + key, error)
            else:
                services[key] = value
    devices = dict.fromkeys(DRA_GPU_CLASSES, "0")
    given = item.get("devices")
    if given is not None and not isinstance(given, dict):
        errors.add(
            var + ".devices",
            '%r is not a mapping of DRA DeviceClass names to device counts (gpu.nvidia.com: "2")'
            % (given,),
        )
    elif given:
        for class_name, value in sorted(given.items(), key=lambda kv: str(kv[0])):
            dvar = "%s.devices.%s" % (var, class_name)
            if not isinstance(class_name, str) or not is_dns_subdomain(class_name):
                errors.add(dvar, "%r is not a DeviceClass name (a DNS subdomain)" % (class_name,))
                continue
            value = as_quantity(value)
            error = whole_quantity_error(value, "devices")
            if error:
                errors.add(dvar, error)
            else:
                devices[class_name] = value
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
        "services": services,
        "devices": dict(sorted(devices.items())),
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
    # A namespace label's value (pod-security.kubernetes.io/enforce-version), so at most 63
    # characters.
    if (
        not isinstance(settings["pod_security_version"], str)
        or not _POD_SECURITY_VERSION.fullmatch(settings["pod_security_version"])
        or label_value_error(settings["pod_security_version"])
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
        "://" in registry or not _plain_ascii(registry)
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
    if not MIG_RESOURCE.fullmatch(str(settings["workload_mig_resource"])):
        errors.add(
            "workload_mig_resource",
            "%r is not a MIG resource (nvidia.com/mig-<profile>, "
            "advertised with the mixed MIG strategy)" % (settings["workload_mig_resource"],),
        )
    elif not _MIG_PROFILE.fullmatch(
        MIG_RESOURCE.fullmatch(settings["workload_mig_resource"]).group("profile")
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
    if not isinstance(
        settings["monitoring_namespace_label"], str
    ) or not _PROMETHEUS_LABEL.fullmatch(settings["monitoring_namespace_label"]):
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
