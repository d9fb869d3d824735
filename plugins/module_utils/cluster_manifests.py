# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The cluster layer as data: validate the gpu_cluster variables, render the manifests.

Everything here is a pure function of its arguments (no API calls, no files), so it is tested
without a cluster and the role, its module and the tests all render the same objects:

- validate_config(config) -> (normalized, errors): the role's variables (keys without the
  ``gpu_cluster_`` prefix), checked and completed with DEFAULTS; every error names the variable
  (``gpu_cluster_sharing.replicas: ...``), says what was found and what is allowed.
- render_manifests(config, capabilities) -> [manifest, ...] in apply order.
- device_plugin_config_file(settings) -> the device plugin's own config file (version v1).
- node_patch(node, labels, taints) / node_reset_patch(node): JSON patches for node labels and
  taints, recording what kubegpu added so that a reset removes exactly that.
- parse_quantity(text): a Kubernetes resource quantity as an exact Fraction.

Facts about the NVIDIA device plugin's config file (field names, allowed values, defaults) and
its deployment (config-manager sidecar, volumes, env) were read from NVIDIA/k8s-device-plugin:
api/config/v1/{flags,consts,replicas,resources,sharing}.go, docs/customizing.md and the Helm
templates under deployments/helm/nvidia-device-plugin/templates/. DCGM exporter facts come from
NVIDIA/dcgm-exporter deployment/values.yaml and deployment/examples/dcgm-exporter.yaml.

Runs on the controller's Python (3.8+ syntax), standard library only.
"""

from __future__ import absolute_import, division, print_function

import copy
import hashlib
import json
import re
from fractions import Fraction

__metaclass__ = type

PREFIX = "gpu_cluster_"
MANAGED_BY = "kubegpu"
PART_OF = "kubegpu"
INSTANCE = "kubegpu"
# Every object kubegpu creates carries these two labels; reset deletes by them.
OWNED_LABELS = {
    "app.kubernetes.io/managed-by": MANAGED_BY,
    "app.kubernetes.io/part-of": PART_OF,
}
# The components mount host paths and run privileged: a namespace kubegpu creates allows that
# under Pod Security admission (kube-system is exempt on most clusters).
NAMESPACE_LABELS = dict(OWNED_LABELS, **{"pod-security.kubernetes.io/enforce": "privileged"})
OWNED_SELECTOR = ",".join("%s=%s" % kv for kv in sorted(OWNED_LABELS.items()))
# Annotations on nodes that record which labels and taints kubegpu added (reset removes them).
APPLIED_LABELS_ANNOTATION = "kubegpu.io/applied-labels"
APPLIED_TAINTS_ANNOTATION = "kubegpu.io/applied-taints"
CONFIG_CHECKSUM_ANNOTATION = "kubegpu.io/config-checksum"

MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
SHARING_STRATEGIES = ("none", "time-slicing", "mps")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
GPU_RESOURCE = "nvidia.com/gpu"
SHARED_SUFFIX = ".shared"

DEVICE_PLUGIN_NAME = "nvidia-device-plugin"
GFD_NAME = "gpu-feature-discovery"
MPS_NAME = "nvidia-mps-control-daemon"
DCGM_NAME = "dcgm-exporter"
CONFIGMAP_NAME = "nvidia-device-plugin-configs"
CLUSTER_ROLE_NAME = "kubegpu-nvidia-device-plugin"
QUOTA_NAME = "kubegpu-gpu-quota"
LIMIT_RANGE_NAME = "kubegpu-gpu-limits"
CONFIG_DIR = "/config"
CONFIG_FILE = CONFIG_DIR + "/config.yaml"
AVAILABLE_CONFIGS_DIR = "/available-configs"

# The public interface of role gpu_cluster, without the prefix. defaults/main.yml holds the same
# values (a unit test keeps the two in step).
DEFAULTS = {
    "namespace": "kube-system",
    "kube_context": "",
    "api_timeout": 10,
    "field_manager": "kubegpu",
    "force_conflicts": True,
    "adopt_existing": False,
    "prune": True,
    "image_registry": "nvcr.io",
    "image_pull_policy": "IfNotPresent",
    "image_pull_secrets": [],
    "gpu_node_label": "nvidia.com/gpu.present",
    "gpu_node_label_value": "true",
    "gpu_taint_key": "nvidia.com/gpu",
    "gpu_taint_effect": "NoSchedule",
    "extra_tolerations": [],
    "components_use_runtime_class": True,
    "device_plugin_enabled": True,
    "device_plugin_image": "nvidia/k8s-device-plugin",
    "device_plugin_version": "v0.20.0",
    "device_plugin_digest": "",
    "device_plugin_resources": {},
    "mig_strategy": "none",
    "fail_on_init_error": True,
    "device_list_strategy": ["envvar"],
    "device_id_strategy": "uuid",
    "pass_device_specs": False,
    "sharing": {"strategy": "none"},
    "device_plugin_configs": {},
    "device_plugin_default_config": "default",
    "device_plugin_config_label": "nvidia.com/device-plugin.config",
    "mps_root": "/run/nvidia/mps",
    "driver_root": "/",
    "gfd_enabled": True,
    "gfd_sleep_interval": "60s",
    "gfd_resources": {},
    "runtime_class_enabled": True,
    "runtime_class_name": "nvidia",
    "runtime_class_handler": "nvidia",
    "runtime_class_node_selector": {},
    "runtime_class_tolerations": [],
    "dcgm_exporter_enabled": True,
    "dcgm_exporter_image": "nvidia/k8s/dcgm-exporter",
    "dcgm_exporter_version": "4.2.3-4.1.3-ubuntu22.04",
    "dcgm_exporter_digest": "",
    "dcgm_exporter_port": 9400,
    "dcgm_exporter_resources": {},
    "dcgm_exporter_service_monitor": True,
    "dcgm_exporter_service_monitor_interval": "15s",
    "dcgm_exporter_service_monitor_labels": {},
    "quotas": [],
    "node_labels": {},
    "node_taints": {},
}

# Keys a per-node device plugin config (gpu_cluster_device_plugin_configs.<name>) may override.
NODE_CONFIG_KEYS = (
    "mig_strategy",
    "fail_on_init_error",
    "device_list_strategy",
    "device_id_strategy",
    "pass_device_specs",
    "sharing",
)
SHARING_KEYS = (
    "strategy",
    "replicas",
    "rename_by_default",
    "fail_requests_greater_than_one",
    "resources",
)
SHARING_RESOURCE_KEYS = ("name", "replicas", "rename", "devices")
QUOTA_KEYS = ("namespace", "gpus", "max_per_container", "resource", "hard")


# --- quantities ----------------------------------------------------------------------------------

_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>[eE][+-]?[0-9]+|[KMGTPE]i|[mkMGTPE]|)$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "m": Fraction(1, 1000),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def parse_quantity(text):
    """A Kubernetes resource quantity ("8", "500m", "1.5Gi", "1e3") as an exact Fraction.

    Follows the grammar of k8s.io/apimachinery's resource.Quantity: a signed decimal number
    followed by a binary SI suffix (Ki..Ei), a decimal SI suffix (m, k, M..E) or a decimal
    exponent (e3, E-2). Raises ValueError with the reason for anything else, including integers
    and floats given as YAML numbers (the Kubernetes Python client 37 rejects those).
    """
    if isinstance(text, bool) or not isinstance(text, str):
        raise ValueError(
            '%r is a %s, not a string: write quantities quoted, e.g. "%s"'
            % (text, type(text).__name__, text)
        )
    match = _QUANTITY.match(text)
    if not match:
        raise ValueError(
            "%r is not a Kubernetes quantity (a number with an optional suffix: m, k, M, G, T, "
            "P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent like e3)" % text
        )
    number = Fraction(match.group("number"))
    if match.group("sign") == "-":
        number = -number
    suffix = match.group("suffix")
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return number * Fraction(10) ** int(suffix[1:])
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    return number * _DECIMAL[suffix]


def as_quantity(value):
    """An integer written without quotes becomes its string; anything else is left as it is
    (parse_quantity rejects floats and booleans, whose text form is ambiguous)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def whole_quantity_error(value, what):
    """None when value is a quantity that is a whole number of 0 or more, else the reason
    (`what` names the things counted: GPUs, pods)."""
    try:
        amount = parse_quantity(value)
    except ValueError as exc:
        return str(exc)
    if amount < 0 or amount.denominator != 1:
        return "%r is not a whole number of 0 or more (%s are counted in whole units)" % (
            value,
            what,
        )
    return None


# --- names ---------------------------------------------------------------------------------------

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_IMAGE_PATH = re.compile(r"^[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*$")
_REGISTRY = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[a-z0-9._/-]+)?$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|\u00b5s|ms|s|m|h))+$")


def is_dns_label(name):
    return isinstance(name, str) and len(name) <= 63 and bool(_DNS_LABEL.match(name))


def is_dns_subdomain(name):
    return isinstance(name, str) and len(name) <= 253 and bool(_DNS_SUBDOMAIN.match(name))


def qualified_name_error(key):
    """None for a valid label/taint/annotation key ([prefix/]name), else why not."""
    if not isinstance(key, str) or not key:
        return "%r is not a non-empty string" % (key,)
    prefix, _, name = key.rpartition("/")
    if "/" in key and not is_dns_subdomain(prefix):
        return "prefix %r of %r is not a DNS subdomain (lower case, digits, '-', '.')" % (
            prefix,
            key,
        )
    if len(name) > 63 or not _NAME_PART.match(name):
        return (
            "name part %r of %r must be 1-63 characters, alphanumeric at both ends, with "
            "'-', '_', '.' inside" % (name, key)
        )
    return None


def label_value_error(value):
    if not isinstance(value, str):
        text = str(value).lower() if isinstance(value, bool) else str(value)
        return '%r is a %s, not a string: quote it ("%s")' % (value, type(value).__name__, text)
    if value and (len(value) > 63 or not _NAME_PART.match(value)):
        return (
            "%r must be empty or 1-63 characters, alphanumeric at both ends, with '-', '_', "
            "'.' inside" % value
        )
    return None


def extended_resource_error(name):
    if not isinstance(name, str) or "/" not in name:
        return "%r is not an extended resource name (domain/name, e.g. nvidia.com/gpu)" % (name,)
    error = qualified_name_error(name)
    if error:
        return error
    if name.split("/", 1)[0] in ("kubernetes.io", "k8s.io") or name.split("/", 1)[0].endswith(
        (".kubernetes.io", ".k8s.io")
    ):
        return "%r is in a Kubernetes-reserved domain, not an extended resource" % name
    return None


def json_pointer_escape(key):
    return key.replace("~", "~0").replace("/", "~1")


# --- validation ----------------------------------------------------------------------------------


class _Errors:
    def __init__(self):
        self.items = []

    def add(self, var, message):
        self.items.append("%s%s: %s" % (PREFIX, var, message))


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
BOOL_KEYS = (
    "force_conflicts",
    "adopt_existing",
    "prune",
    "components_use_runtime_class",
    "device_plugin_enabled",
    "fail_on_init_error",
    "pass_device_specs",
    "gfd_enabled",
    "runtime_class_enabled",
    "dcgm_exporter_enabled",
    "dcgm_exporter_service_monitor",
)
INT_KEYS = ("api_timeout", "dcgm_exporter_port")


def coerce_int(value):
    """Digits given as text (extra vars on the command line are text) become an int."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return value


def coerce_bool(value):
    """true/false given as text become booleans, as Ansible reads them; others stay."""
    if isinstance(value, str):
        if value.strip().lower() in _TRUE:
            return True
        if value.strip().lower() in _FALSE:
            return False
    return value


def _check_bool(errors, var, value):
    if not isinstance(value, bool):
        errors.add(var, "%r is not a boolean (true or false)" % (value,))


def _check_choice(errors, var, value, choices):
    if value not in choices:
        errors.add(var, "%r is not allowed; allowed: %s" % (value, ", ".join(choices)))


def _check_str(errors, var, value, allow_empty=False):
    if not isinstance(value, str) or (not value and not allow_empty):
        errors.add(var, "%r is not a %sstring" % (value, "" if allow_empty else "non-empty "))
        return False
    return True


def _normalize_list_strategy(errors, var, value):
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        errors.add(
            var,
            "%r is neither a strategy nor a non-empty list of strategies; allowed: %s"
            % (value, ", ".join(DEVICE_LIST_STRATEGIES)),
        )
        return None
    bad = [i for i in items if i not in DEVICE_LIST_STRATEGIES]
    if bad:
        errors.add(
            var,
            "%s not allowed; allowed: %s"
            % (", ".join(repr(b) for b in bad), ", ".join(DEVICE_LIST_STRATEGIES)),
        )
        return None
    if len(set(items)) != len(items):
        errors.add(var, "%r lists a strategy twice" % (items,))
        return None
    return list(items)


def _check_replicas(errors, var, value):
    if not is_int(value) or value < 1:
        errors.add(
            var,
            "%r is not allowed; allowed: an integer of 1 or more (how many "
            "containers may share each device)" % (value,),
        )
        return False
    return True


def _normalize_sharing(errors, var, value, mig_strategy):
    """The sharing settings with every key present, or None after adding errors."""
    if not isinstance(value, dict):
        errors.add(var, "%r is not a mapping like {strategy: time-slicing, replicas: 4}" % (value,))
        return None
    unknown = sorted(set(value) - set(SHARING_KEYS))
    if unknown:
        errors.add(
            var, "unknown key(s) %s; allowed: %s" % (", ".join(unknown), ", ".join(SHARING_KEYS))
        )
    strategy = value.get("strategy") or "none"
    if strategy not in SHARING_STRATEGIES:
        errors.add(
            var + ".strategy",
            "%r is not allowed; allowed: %s" % (strategy, ", ".join(SHARING_STRATEGIES)),
        )
        return None
    out = {
        "strategy": strategy,
        "rename_by_default": coerce_bool(value.get("rename_by_default") or False),
        "fail_requests_greater_than_one": coerce_bool(
            value.get("fail_requests_greater_than_one") or False
        ),
        "resources": [],
    }
    for flag in ("rename_by_default", "fail_requests_greater_than_one"):
        _check_bool(errors, "%s.%s" % (var, flag), out[flag])
    if strategy == "none":
        return out
    resources = value.get("resources")
    replicas = coerce_int(value.get("replicas"))
    if resources is None:
        if replicas is None:
            errors.add(
                var + ".replicas",
                "missing; %s needs replicas (an integer of 1 or more) "
                "or a resources list" % strategy,
            )
            return None
        if not _check_replicas(errors, var + ".replicas", replicas):
            return None
        out["resources"] = [{"name": GPU_RESOURCE, "replicas": replicas}]
    else:
        if replicas is not None:
            errors.add(
                var, "give either replicas (for %s) or a resources list, not both" % GPU_RESOURCE
            )
        if not isinstance(resources, list) or not resources:
            errors.add(
                var + ".resources", "%r is not a non-empty list of {name, replicas}" % (resources,)
            )
            return None
        seen = set()
        for index, item in enumerate(resources):
            rvar = "%s.resources[%d]" % (var, index)
            if not isinstance(item, dict):
                errors.add(rvar, "%r is not a mapping {name, replicas}" % (item,))
                continue
            unknown = sorted(set(item) - set(SHARING_RESOURCE_KEYS))
            if unknown:
                errors.add(
                    rvar,
                    "unknown key(s) %s; allowed: %s"
                    % (", ".join(unknown), ", ".join(SHARING_RESOURCE_KEYS)),
                )
            name = item.get("name", GPU_RESOURCE)
            error = extended_resource_error(name)
            if error:
                errors.add(rvar + ".name", error)
            elif not (name == GPU_RESOURCE or name.startswith("nvidia.com/mig-")):
                errors.add(
                    rvar + ".name",
                    "%r is not a resource the device plugin advertises; "
                    "allowed: nvidia.com/gpu or nvidia.com/mig-<profile>" % name,
                )
            if name in seen:
                errors.add(rvar + ".name", "%r is listed twice" % name)
            seen.add(name)
            replicas_item = coerce_int(item.get("replicas"))
            _check_replicas(errors, rvar + ".replicas", replicas_item)
            entry = {"name": name, "replicas": replicas_item}
            if item.get("rename") is not None:
                error = extended_resource_error(item["rename"])
                if error:
                    errors.add(rvar + ".rename", error)
                entry["rename"] = item["rename"]
            if item.get("devices") is not None:
                devices = item["devices"]
                ok = (
                    devices == "all"
                    or (is_int(devices) and devices > 0)
                    or (
                        isinstance(devices, list)
                        and devices
                        and all(
                            isinstance(d, (str, int)) and not isinstance(d, bool) for d in devices
                        )
                    )
                )
                if not ok:
                    errors.add(
                        rvar + ".devices",
                        "%r is not allowed; allowed: 'all', a count of "
                        "1 or more, or a list of GPU indexes / UUIDs" % (devices,),
                    )
                entry["devices"] = devices
            out["resources"].append(entry)
    if strategy == "mps":
        bad = [r["name"] for r in out["resources"] if r["name"] != GPU_RESOURCE]
        if bad:
            errors.add(
                var + ".resources", "MPS shares only %s, not %s" % (GPU_RESOURCE, ", ".join(bad))
            )
        if mig_strategy == "mixed":
            errors.add(
                var + ".strategy",
                "mps cannot share MIG devices, and MIG strategy "
                "'mixed' exposes no %s; use time-slicing, or MIG strategy none" % GPU_RESOURCE,
            )
    return out


def _check_resources_block(errors, var, value):
    """Container resources {requests: {...}, limits: {...}} with quantities as strings."""
    if not isinstance(value, dict):
        errors.add(var, "%r is not a mapping {requests: {...}, limits: {...}}" % (value,))
        return
    unknown = sorted(set(value) - {"requests", "limits"})
    if unknown:
        errors.add(var, "unknown key(s) %s; allowed: requests, limits" % ", ".join(unknown))
    for part in ("requests", "limits"):
        block = value.get(part) or {}
        if not isinstance(block, dict):
            errors.add("%s.%s" % (var, part), "%r is not a mapping" % (block,))
            continue
        for name in sorted(block):
            block[name] = as_quantity(block[name])
            try:
                parse_quantity(block[name])
            except ValueError as exc:
                errors.add("%s.%s.%s" % (var, part, name), str(exc))


def _check_tolerations(errors, var, value):
    if not isinstance(value, list):
        errors.add(var, "%r is not a list of tolerations" % (value,))
        return
    for index, item in enumerate(value):
        tvar = "%s[%d]" % (var, index)
        if not isinstance(item, dict):
            errors.add(tvar, "%r is not a mapping {key, operator, value, effect}" % (item,))
            continue
        unknown = sorted(set(item) - {"key", "operator", "value", "effect", "tolerationSeconds"})
        if unknown:
            errors.add(tvar, "unknown key(s) %s" % ", ".join(unknown))
        if item.get("operator", "Equal") not in ("Equal", "Exists"):
            errors.add(
                tvar + ".operator",
                "%r is not allowed; allowed: Equal, Exists" % item.get("operator"),
            )
        if item.get("effect") not in (None, "", *TAINT_EFFECTS):
            errors.add(
                tvar + ".effect",
                "%r is not allowed; allowed: %s" % (item.get("effect"), ", ".join(TAINT_EFFECTS)),
            )
        if item.get("key"):
            error = qualified_name_error(item["key"])
            if error:
                errors.add(tvar + ".key", error)


def _check_labels(errors, var, value):
    if not isinstance(value, dict):
        errors.add(var, "%r is not a mapping of label keys to values" % (value,))
        return
    for key, val in sorted(value.items(), key=lambda kv: str(kv[0])):
        error = qualified_name_error(key)
        if error:
            errors.add(var, "label key " + error)
        error = label_value_error(val)
        if error:
            errors.add("%s.%s" % (var, key), error)


def _normalize_device_plugin_settings(errors, var_prefix, raw, base):
    """One device plugin config: base (the default config) overridden by raw.

    Only the keys raw sets are checked (base was checked as the default config), plus the
    sharing strategy again when raw changes the MIG strategy it depends on.
    """
    settings = dict(base)
    settings.update(raw)
    keys = set(raw)
    for flag in ("fail_on_init_error", "pass_device_specs"):
        settings[flag] = coerce_bool(settings[flag])

    def name(key):
        return var_prefix + key

    if "mig_strategy" in keys:
        _check_choice(errors, name("mig_strategy"), settings["mig_strategy"], MIG_STRATEGIES)
    for flag in ("fail_on_init_error", "pass_device_specs"):
        if flag in keys:
            _check_bool(errors, name(flag), settings[flag])
    if "device_id_strategy" in keys:
        _check_choice(
            errors, name("device_id_strategy"), settings["device_id_strategy"], DEVICE_ID_STRATEGIES
        )
    if "device_list_strategy" in keys:
        strategies = _normalize_list_strategy(
            errors, name("device_list_strategy"), settings["device_list_strategy"]
        )
        if strategies is not None:
            settings["device_list_strategy"] = strategies
    if "sharing" in keys or "mig_strategy" in keys:
        sharing = _normalize_sharing(
            errors, name("sharing"), settings["sharing"], settings["mig_strategy"]
        )
        if sharing is not None:
            settings["sharing"] = sharing
    return settings


def validate_config(config):
    """(normalized config, [error, ...]) for the role's variables (keys without the prefix).

    Unknown keys are reported (a misspelt variable would otherwise be silently ignored).
    """
    errors = _Errors()
    if not isinstance(config, dict):
        return None, ["%s*: the configuration is not a mapping" % PREFIX]
    unknown = sorted(set(config) - set(DEFAULTS))
    for key in unknown:
        errors.add(key, "not a variable of role gpu_cluster (misspelt?); see its defaults/main.yml")
    cfg = copy.deepcopy(DEFAULTS)
    cfg.update(dict((k, copy.deepcopy(v)) for k, v in config.items() if k in DEFAULTS))
    for key in BOOL_KEYS:
        cfg[key] = coerce_bool(cfg[key])
    for key in INT_KEYS:
        cfg[key] = coerce_int(cfg[key])

    if not is_dns_label(cfg["namespace"]):
        errors.add(
            "namespace",
            "%r is not a namespace name (DNS label: lower case, digits, "
            "'-', at most 63 characters)" % (cfg["namespace"],),
        )
    _check_str(errors, "kube_context", cfg["kube_context"], allow_empty=True)
    if not is_int(cfg["api_timeout"]) or not 1 <= cfg["api_timeout"] <= 300:
        errors.add(
            "api_timeout",
            "%r is not allowed; allowed: whole seconds from 1 to 300" % (cfg["api_timeout"],),
        )
    _check_str(errors, "field_manager", cfg["field_manager"])
    for flag in (
        "force_conflicts",
        "adopt_existing",
        "prune",
        "components_use_runtime_class",
        "device_plugin_enabled",
        "gfd_enabled",
        "runtime_class_enabled",
        "dcgm_exporter_enabled",
        "dcgm_exporter_service_monitor",
    ):
        _check_bool(errors, flag, cfg[flag])

    registry = cfg["image_registry"]
    if isinstance(registry, str):
        registry = registry.rstrip("/")
        cfg["image_registry"] = registry
    if not isinstance(registry, str) or not _REGISTRY.match(registry) or "://" in registry:
        errors.add(
            "image_registry",
            "%r is not a registry host[:port][/path] (no scheme), "
            "e.g. registry.example.internal:5000/mirror" % (registry,),
        )
    _check_choice(errors, "image_pull_policy", cfg["image_pull_policy"], PULL_POLICIES)
    secrets = cfg["image_pull_secrets"]
    if not isinstance(secrets, list) or not all(is_dns_subdomain(s) for s in secrets):
        errors.add("image_pull_secrets", "%r is not a list of Secret names" % (secrets,))
    for component in ("device_plugin", "dcgm_exporter"):
        image, version, digest = (
            cfg[component + "_image"],
            cfg[component + "_version"],
            cfg[component + "_digest"],
        )
        if not isinstance(image, str) or not _IMAGE_PATH.match(image):
            errors.add(
                component + "_image",
                "%r is not an image path within the registry, "
                "e.g. nvidia/k8s-device-plugin" % (image,),
            )
        if not isinstance(version, str) or not _IMAGE_TAG.match(version):
            errors.add(
                component + "_version",
                "%r is not an image tag (pin one, e.g. v0.20.0)" % (version,),
            )
        elif version == "latest":
            errors.add(component + "_version", "'latest' is not a pin; give a released tag")
        if digest and (not isinstance(digest, str) or not _DIGEST.match(digest)):
            errors.add(
                component + "_digest", "%r is not empty or sha256:<64 hex digits>" % (digest,)
            )
    for component in ("device_plugin", "gfd", "dcgm_exporter"):
        _check_resources_block(errors, component + "_resources", cfg[component + "_resources"])

    error = qualified_name_error(cfg["gpu_node_label"])
    if error:
        errors.add("gpu_node_label", error)
    error = label_value_error(cfg["gpu_node_label_value"])
    if error:
        errors.add("gpu_node_label_value", error)
    error = qualified_name_error(cfg["gpu_taint_key"])
    if error:
        errors.add("gpu_taint_key", error)
    if cfg["gpu_taint_effect"] not in ("", *TAINT_EFFECTS):
        errors.add(
            "gpu_taint_effect",
            "%r is not allowed; allowed: %s, or '' for any effect"
            % (cfg["gpu_taint_effect"], ", ".join(TAINT_EFFECTS)),
        )
    _check_tolerations(errors, "extra_tolerations", cfg["extra_tolerations"])

    # The device plugin: the default config, then the named per-node configs on top of it.
    base = dict((k, cfg[k]) for k in NODE_CONFIG_KEYS)
    default = _normalize_device_plugin_settings(errors, "", base, base)
    configs = {}
    default_name = cfg["device_plugin_default_config"]
    if (
        not isinstance(default_name, str)
        or not _CONFIGMAP_KEY.match(default_name)
        or label_value_error(default_name)
    ):
        errors.add(
            "device_plugin_default_config",
            "%r is not usable as a config name (a label "
            "value: letters, digits, '-', '_', '.')" % (default_name,),
        )
    else:
        configs[default_name] = default
    named = cfg["device_plugin_configs"]
    if not isinstance(named, dict):
        errors.add(
            "device_plugin_configs", "%r is not a mapping of config names to settings" % (named,)
        )
        named = {}
    for cname in sorted(named, key=str):
        cvar = "device_plugin_configs.%s." % cname
        if (
            not isinstance(cname, str)
            or not _CONFIGMAP_KEY.match(cname)
            or label_value_error(cname)
        ):
            errors.add(
                "device_plugin_configs",
                "config name %r is not usable as a node label "
                "value and ConfigMap key (letters, digits, '-', '_', '.')" % (cname,),
            )
            continue
        if cname == default_name:
            errors.add(
                "device_plugin_configs",
                "config name %r is the default config's name "
                "(gpu_cluster_device_plugin_default_config); set the default through "
                "the gpu_cluster_mig_strategy/sharing/... variables" % cname,
            )
            continue
        raw = named[cname]
        if not isinstance(raw, dict):
            errors.add(cvar.rstrip("."), "%r is not a mapping of settings" % (raw,))
            continue
        unknown = sorted(set(raw) - set(NODE_CONFIG_KEYS))
        if unknown:
            errors.add(
                cvar.rstrip("."),
                "unknown key(s) %s; allowed: %s"
                % (", ".join(unknown), ", ".join(NODE_CONFIG_KEYS)),
            )
            raw = dict((k, v) for k, v in raw.items() if k in NODE_CONFIG_KEYS)
        configs[cname] = _normalize_device_plugin_settings(errors, cvar, raw, default)
    cfg["__configs"] = configs
    error = qualified_name_error(cfg["device_plugin_config_label"])
    if error:
        errors.add("device_plugin_config_label", error)
    mps_root = cfg["mps_root"]
    if not isinstance(mps_root, str) or not mps_root.startswith("/") or mps_root == "/":
        errors.add("mps_root", "%r is not an absolute directory path" % (mps_root,))
    driver_root = cfg["driver_root"]
    if not isinstance(driver_root, str) or not driver_root.startswith("/"):
        errors.add(
            "driver_root",
            "%r is not an absolute path (/ for a driver installed on the "
            "host, /run/nvidia/driver for a containerized driver)" % (driver_root,),
        )

    for var in ("gfd_sleep_interval", "dcgm_exporter_service_monitor_interval"):
        if not isinstance(cfg[var], str) or not _DURATION.match(cfg[var]):
            errors.add(var, "%r is not a duration like 60s, 5m or 1h30m" % (cfg[var],))

    if not is_dns_subdomain(cfg["runtime_class_name"]):
        errors.add(
            "runtime_class_name", "%r is not a DNS subdomain name" % (cfg["runtime_class_name"],)
        )
    if not is_dns_label(cfg["runtime_class_handler"]):
        errors.add(
            "runtime_class_handler",
            "%r is not a DNS label (the containerd/CRI-O runtime "
            "name, e.g. nvidia)" % (cfg["runtime_class_handler"],),
        )
    _check_labels(errors, "runtime_class_node_selector", cfg["runtime_class_node_selector"])
    _check_tolerations(errors, "runtime_class_tolerations", cfg["runtime_class_tolerations"])
    port = cfg["dcgm_exporter_port"]
    if not is_int(port) or not 1 <= port <= 65535:
        errors.add("dcgm_exporter_port", "%r is not a port number (1-65535)" % (port,))
    _check_labels(
        errors, "dcgm_exporter_service_monitor_labels", cfg["dcgm_exporter_service_monitor_labels"]
    )

    cfg["quotas"] = _normalize_quotas(errors, cfg["quotas"], configs.get(default_name))
    _check_node_labels(errors, cfg["node_labels"])
    cfg["node_taints"] = _normalize_node_taints(errors, cfg["node_taints"])
    unique = []
    for item in errors.items:
        if item not in unique:
            unique.append(item)
    return cfg, unique


def _normalize_quotas(errors, quotas, default_settings):
    if not isinstance(quotas, list):
        errors.add("quotas", "%r is not a list of {namespace, gpus, ...}" % (quotas,))
        return []
    default_resource = GPU_RESOURCE
    try:
        names = expected_resource_names(default_settings)
    except (KeyError, TypeError):
        names = []  # the default config is invalid, which is reported already
    if len(names) == 1:
        default_resource = names[0]
    out, seen = [], set()
    for index, item in enumerate(quotas):
        qvar = "quotas[%d]" % index
        if not isinstance(item, dict):
            errors.add(qvar, "%r is not a mapping {namespace, gpus, max_per_container}" % (item,))
            continue
        unknown = sorted(set(item) - set(QUOTA_KEYS))
        if unknown:
            errors.add(
                qvar, "unknown key(s) %s; allowed: %s" % (", ".join(unknown), ", ".join(QUOTA_KEYS))
            )
        namespace = item.get("namespace")
        if not is_dns_label(namespace):
            errors.add(qvar + ".namespace", "%r is not a namespace name" % (namespace,))
        elif namespace in seen:
            errors.add(
                qvar + ".namespace", "%r has a quota already (one entry per namespace)" % namespace
            )
        seen.add(namespace)
        resource = item.get("resource", default_resource)
        error = extended_resource_error(resource)
        if error:
            errors.add(qvar + ".resource", error)
        entry = {
            "namespace": namespace,
            "resource": resource,
            "gpus": None,
            "max_per_container": None,
            "hard": {},
        }
        for key in ("gpus", "max_per_container"):
            if item.get(key) is None:
                continue
            value = as_quantity(item[key])
            error = whole_quantity_error(value, "GPUs")
            if error:
                errors.add("%s.%s" % (qvar, key), error)
            entry[key] = value
        hard = item.get("hard") or {}
        if not isinstance(hard, dict):
            errors.add(qvar + ".hard", "%r is not a mapping of quota names to quantities" % (hard,))
            hard = {}
        hard = dict((name, as_quantity(value)) for name, value in hard.items())
        for name, quantity in sorted(hard.items()):
            try:
                parse_quantity(quantity)
            except ValueError as exc:
                errors.add("%s.hard.%s" % (qvar, name), str(exc))
        entry["hard"] = hard
        if entry["gpus"] is None and entry["max_per_container"] is None and not hard:
            errors.add(qvar, "sets nothing; give gpus, max_per_container or hard")
        out.append(entry)
    return out


def _check_node_labels(errors, value):
    if not isinstance(value, dict):
        errors.add("node_labels", "%r is not a mapping {node name: {label: value}}" % (value,))
        return
    for node in sorted(value, key=str):
        if not is_dns_subdomain(node):
            errors.add("node_labels", "%r is not a node name" % (node,))
        _check_labels(errors, "node_labels.%s" % node, value[node])


def _normalize_node_taints(errors, value):
    if not isinstance(value, dict):
        errors.add(
            "node_taints", "%r is not a mapping {node name: [{key, value, effect}]}" % (value,)
        )
        return {}
    out = {}
    for node in sorted(value, key=str):
        var = "node_taints.%s" % node
        if not is_dns_subdomain(node):
            errors.add("node_taints", "%r is not a node name" % (node,))
        taints = value[node]
        if not isinstance(taints, list):
            errors.add(var, "%r is not a list of {key, value, effect}" % (taints,))
            continue
        seen, normalized = set(), []
        for index, taint in enumerate(taints):
            tvar = "%s[%d]" % (var, index)
            if not isinstance(taint, dict):
                errors.add(tvar, "%r is not a mapping {key, value, effect}" % (taint,))
                continue
            unknown = sorted(set(taint) - {"key", "value", "effect"})
            if unknown:
                errors.add(
                    tvar, "unknown key(s) %s; allowed: key, value, effect" % ", ".join(unknown)
                )
            error = qualified_name_error(taint.get("key"))
            if error:
                errors.add(tvar + ".key", error)
            if taint.get("value") not in (None, ""):
                error = label_value_error(taint.get("value"))
                if error:
                    errors.add(tvar + ".value", error)
            if taint.get("effect") not in TAINT_EFFECTS:
                errors.add(
                    tvar + ".effect",
                    "%r is not allowed; allowed: %s"
                    % (taint.get("effect"), ", ".join(TAINT_EFFECTS)),
                )
            ident = (taint.get("key"), taint.get("effect"))
            if ident in seen:
                errors.add(tvar, "taint %s:%s is listed twice" % ident)
            seen.add(ident)
            entry = {"key": taint.get("key"), "effect": taint.get("effect")}
            if taint.get("value") not in (None, ""):
                entry["value"] = taint["value"]
            normalized.append(entry)
        out[node] = normalized
    return out


# --- the device plugin's config file -------------------------------------------------------------


def device_plugin_config_file(settings):
    """The device plugin / GFD config file (version v1) for one normalized settings dict."""
    config = {
        "version": "v1",
        "flags": {
            "migStrategy": settings["mig_strategy"],
            "failOnInitError": settings["fail_on_init_error"],
            "plugin": {
                "passDeviceSpecs": settings["pass_device_specs"],
                "deviceListStrategy": list(settings["device_list_strategy"]),
                "deviceIDStrategy": settings["device_id_strategy"],
            },
        },
    }
    sharing = settings["sharing"]
    if sharing["strategy"] != "none":
        resources = []
        for item in sharing["resources"]:
            entry = {"name": item["name"], "replicas": item["replicas"]}
            if item.get("rename"):
                entry["rename"] = item["rename"]
            if item.get("devices") is not None:
                entry["devices"] = item["devices"]
            resources.append(entry)
        block = {"renameByDefault": sharing["rename_by_default"], "resources": resources}
        if sharing["strategy"] == "time-slicing":
            block["failRequestsGreaterThanOne"] = sharing["fail_requests_greater_than_one"]
            config["sharing"] = {"timeSlicing": block}
        else:
            config["sharing"] = {"mps": block}
    return config


def expected_resource_names(settings):
    """The extended resources a node with these settings advertises (for nvidia.com/gpu-like
    resources; MIG 'mixed' profiles depend on the GPU and are not listed)."""
    sharing = settings["sharing"]
    if sharing["strategy"] == "none" or not sharing["resources"]:
        return [] if settings["mig_strategy"] == "mixed" else [GPU_RESOURCE]
    names = []
    for item in sharing["resources"]:
        if item.get("rename"):
            names.append(item["rename"])
        elif sharing["rename_by_default"]:
            names.append(item["name"] + SHARED_SUFFIX)
        else:
            names.append(item["name"])
    return names


def to_yaml(data, indent=0):
    """Deterministic block YAML for dicts/lists/str/int/bool (strings always double-quoted, as
    JSON strings, which YAML reads the same). Keys sorted. Used for the ConfigMap's config files,
    so every controller renders byte-identical text and a second run changes nothing."""
    pad = "  " * indent
    if isinstance(data, dict):
        if not data:
            return pad + "{}\n"
        lines = []
        for key in sorted(data):
            value = data[key]
            if isinstance(value, (dict, list)) and value:
                lines.append("%s%s:\n%s" % (pad, key, to_yaml(value, indent + 1)))
            else:
                lines.append("%s%s: %s\n" % (pad, key, _scalar(value)))
        return "".join(lines)
    if isinstance(data, list):
        if not data:
            return pad + "[]\n"
        lines = []
        for value in data:
            if isinstance(value, dict) and value:
                inner = to_yaml(value, indent + 1)
                lines.append("%s- %s" % (pad, inner[len(pad) + 2 :]))
            elif isinstance(value, list) and value:
                lines.append("%s-\n%s" % (pad, to_yaml(value, indent + 1)))
            else:
                lines.append("%s- %s\n" % (pad, _scalar(value)))
        return "".join(lines)
    return pad + _scalar(data) + "\n"


def _scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    if value is None:
        return "null"
    return json.dumps(str(value))


# --- manifests -----------------------------------------------------------------------------------


def image_ref(config, component):
    ref = "%s/%s:%s" % (
        config["image_registry"],
        config[component + "_image"],
        config[component + "_version"],
    )
    if config[component + "_digest"]:
        ref += "@" + config[component + "_digest"]
    return ref


def _labels(name, component, version=None):
    labels = {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/instance": INSTANCE,
        "app.kubernetes.io/component": component,
    }
    if version:
        labels["app.kubernetes.io/version"] = version
    labels.update(OWNED_LABELS)
    return labels


def selector_labels(name):
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/instance": INSTANCE}


def _meta(name, labels, namespace=None):
    meta = {"name": name, "labels": labels}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _tolerations(config):
    toleration = {"key": config["gpu_taint_key"], "operator": "Exists"}
    if config["gpu_taint_effect"]:
        toleration["effect"] = config["gpu_taint_effect"]
    return [toleration] + [dict(t) for t in config["extra_tolerations"]]


def _gpu_node_affinity(config):
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": config["gpu_node_label"],
                                "operator": "In",
                                "values": [config["gpu_node_label_value"]],
                            }
                        ],
                    }
                ],
            },
        },
    }


def _pod_spec_common(config, service_account):
    spec = {
        "serviceAccountName": service_account,
        "priorityClassName": "system-node-critical",
        "tolerations": _tolerations(config),
        "affinity": _gpu_node_affinity(config),
    }
    if config["components_use_runtime_class"] and config["runtime_class_enabled"]:
        spec["runtimeClassName"] = config["runtime_class_name"]
    if config["image_pull_secrets"]:
        spec["imagePullSecrets"] = [{"name": s} for s in config["image_pull_secrets"]]
    return spec


def _container_resources(block):
    out = {}
    for part in ("requests", "limits"):
        if block.get(part):
            out[part] = dict((k, v) for k, v in sorted(block[part].items()))
    return out


def _env(name, value):
    return {"name": name, "value": value}


def _env_field(name, path):
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def uses_config_manager(config):
    """Named per-node configs need the config-manager (it follows the node's config label)."""
    return len(config["__configs"]) > 1


def _any(config, predicate):
    return any(predicate(s) for s in config["__configs"].values())


def _needs_sys_admin(config):
    # As the upstream chart decides: MIG monitoring and volume-mounts need CAP_SYS_ADMIN.
    return _any(
        config,
        lambda s: s["mig_strategy"] != "none" or "volume-mounts" in s["device_list_strategy"],
    )


def _security_context(config, privileged=False):
    if privileged:
        return {"privileged": True}
    if _needs_sys_admin(config):
        return {"capabilities": {"add": ["SYS_ADMIN"]}}
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _config_manager(config, name, oneshot, process):
    # No empty values (KUBECONFIG="" or SIGNAL="" as the upstream chart writes them): an unset
    # variable means the same to config-manager (in-cluster config, no signal), and an applied
    # empty string is dropped on storage, which makes server-side apply see a change every run.
    env = [
        _env("ONESHOT", "true" if oneshot else "false"),
        _env_field("NODE_NAME", "spec.nodeName"),
        _env("NODE_LABEL", config["device_plugin_config_label"]),
        _env("CONFIG_FILE_SRCDIR", AVAILABLE_CONFIGS_DIR),
        _env("CONFIG_FILE_DST", CONFIG_FILE),
        _env("DEFAULT_CONFIG", config["device_plugin_default_config"]),
        _env("FALLBACK_STRATEGIES", "named,single"),
        _env("SEND_SIGNAL", "false" if oneshot else "true"),
    ]
    if not oneshot:
        env += [_env("SIGNAL", "1"), _env("PROCESS_TO_SIGNAL", process)]  # 1: SIGHUP
    container = {
        "name": name,
        "image": image_ref(config, "device_plugin"),
        "imagePullPolicy": config["image_pull_policy"],
        "command": ["config-manager"],
        "env": env,
        "volumeMounts": [
            {"name": "available-configs", "mountPath": AVAILABLE_CONFIGS_DIR},
            {"name": "config", "mountPath": CONFIG_DIR},
        ],
    }
    if not oneshot:
        container["securityContext"] = _security_context(config)
    return container


def _config_volumes(config):
    """Volumes that carry the config file to /config/config.yaml."""
    if uses_config_manager(config):
        return [
            {"name": "available-configs", "configMap": {"name": CONFIGMAP_NAME}},
            {"name": "config", "emptyDir": {}},
        ]
    return [
        {
            "name": "config",
            "configMap": {
                "name": CONFIGMAP_NAME,
                "items": [{"key": config["device_plugin_default_config"], "path": "config.yaml"}],
            },
        }
    ]


def _wire_config_manager(config, spec, containers, prefix, process):
    """Add the config-manager init container and sidecar when named configs exist."""
    if uses_config_manager(config):
        spec["shareProcessNamespace"] = True
        spec["initContainers"] = [_config_manager(config, prefix + "-init", True, process)]
        containers.insert(0, _config_manager(config, prefix + "-sidecar", False, process))
        spec["automountServiceAccountToken"] = True
    else:
        spec["automountServiceAccountToken"] = False


def configmap_data(config):
    return dict(
        (name, to_yaml(device_plugin_config_file(settings)))
        for name, settings in sorted(config["__configs"].items())
    )


def _checksum(data):
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()


def _daemonset(config, name, component, version, spec):
    labels = _labels(name, component, version)
    template_meta = {"labels": labels}
    template_meta["annotations"] = {CONFIG_CHECKSUM_ANNOTATION: _checksum(configmap_data(config))}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, labels, config["namespace"]),
        "spec": {
            "selector": {"matchLabels": selector_labels(name)},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": template_meta, "spec": spec},
        },
    }


def _device_plugin_daemonset(config):
    version = config["device_plugin_version"]
    privileged = _any(config, lambda s: s["pass_device_specs"])
    env = [_env("MPS_ROOT", config["mps_root"]), _env("CONFIG_FILE", CONFIG_FILE)]
    if _any(config, lambda s: s["mig_strategy"] != "none"):
        env.append(_env("NVIDIA_MIG_MONITOR_DEVICES", "all"))
    cdi = _any(config, lambda s: any(x.startswith("cdi-") for x in s["device_list_strategy"]))
    if cdi:
        # CDI specs name the driver's files as the host has them: the plugin reads them under
        # /driver-root and writes specs with NVIDIA_DRIVER_ROOT as their host path.
        env.append(_env("NVIDIA_DRIVER_ROOT", config["driver_root"]))
    env += [
        _env("NVIDIA_VISIBLE_DEVICES", "all"),
        _env("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
    ]
    mounts = [
        {"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"},
        {"name": "mps-shm", "mountPath": "/dev/shm"},
        {"name": "mps-root", "mountPath": "/mps"},
        {"name": "cdi-root", "mountPath": "/var/run/cdi"},
        {"name": "config", "mountPath": CONFIG_DIR},
    ]
    if uses_config_manager(config):
        mounts.append({"name": "available-configs", "mountPath": AVAILABLE_CONFIGS_DIR})
    if cdi:
        mounts.append({"name": "driver-root", "mountPath": "/driver-root", "readOnly": True})
    container = {
        "name": "nvidia-device-plugin-ctr",
        "image": image_ref(config, "device_plugin"),
        "imagePullPolicy": config["image_pull_policy"],
        "command": ["nvidia-device-plugin"],
        "env": env,
        "securityContext": _security_context(config, privileged),
        "volumeMounts": mounts,
    }
    resources = _container_resources(config["device_plugin_resources"])
    if resources:
        container["resources"] = resources
    containers = [container]
    spec = _pod_spec_common(config, DEVICE_PLUGIN_NAME)
    _wire_config_manager(config, spec, containers, "nvidia-device-plugin", "nvidia-device-plugin")
    spec["containers"] = containers
    spec["volumes"] = [
        {
            "name": "device-plugin",
            "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"},
        },
        {"name": "mps-root", "hostPath": {"path": config["mps_root"], "type": "DirectoryOrCreate"}},
        {"name": "mps-shm", "hostPath": {"path": config["mps_root"] + "/shm"}},
        {"name": "cdi-root", "hostPath": {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}},
        *_config_volumes(config),
    ]
    if cdi:
        spec["volumes"].append(
            {
                "name": "driver-root",
                "hostPath": {"path": config["driver_root"], "type": "Directory"},
            }
        )
    return _daemonset(config, DEVICE_PLUGIN_NAME, "device-plugin", version, spec)


def _gfd_daemonset(config):
    version = config["device_plugin_version"]
    env = [
        _env_field("NODE_NAME", "spec.nodeName"),
        _env_field("NAMESPACE", "metadata.namespace"),
        _env_field("POD_NAME", "metadata.name"),
        _env("GFD_SLEEP_INTERVAL", config["gfd_sleep_interval"]),
        _env("CONFIG_FILE", CONFIG_FILE),
    ]
    if _any(config, lambda s: s["mig_strategy"] != "none"):
        env.append(_env("NVIDIA_MIG_MONITOR_DEVICES", "all"))
    mounts = [
        {"name": "output-dir", "mountPath": "/etc/kubernetes/node-feature-discovery/features.d"},
        {"name": "host-sys", "mountPath": "/sys"},
        {"name": "config", "mountPath": CONFIG_DIR},
    ]
    if uses_config_manager(config):
        mounts.append({"name": "available-configs", "mountPath": AVAILABLE_CONFIGS_DIR})
    container = {
        "name": "gpu-feature-discovery-ctr",
        "image": image_ref(config, "device_plugin"),
        "imagePullPolicy": config["image_pull_policy"],
        "command": ["gpu-feature-discovery"],
        "env": env,
        "securityContext": _security_context(config),
        "volumeMounts": mounts,
    }
    resources = _container_resources(config["gfd_resources"])
    if resources:
        container["resources"] = resources
    containers = [container]
    spec = _pod_spec_common(config, GFD_NAME)
    _wire_config_manager(config, spec, containers, "gpu-feature-discovery", "gpu-feature-discovery")
    spec["containers"] = containers
    spec["volumes"] = [
        {
            "name": "output-dir",
            "hostPath": {
                "path": "/etc/kubernetes/node-feature-discovery/features.d",
                "type": "DirectoryOrCreate",
            },
        },
        {"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}},
        *_config_volumes(config),
    ]
    return _daemonset(config, GFD_NAME, "gpu-feature-discovery", version, spec)


def _mps_daemonset(config):
    """The MPS control daemon, on nodes GFD labels nvidia.com/mps.capable=true."""
    version = config["device_plugin_version"]
    env = [_env_field("NODE_NAME", "spec.nodeName"), _env("CONFIG_FILE", CONFIG_FILE)]
    if _any(config, lambda s: s["mig_strategy"] != "none"):
        env.append(_env("NVIDIA_MIG_MONITOR_DEVICES", "all"))
    env += [
        _env("NVIDIA_VISIBLE_DEVICES", "all"),
        _env("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
    ]
    mounts = [
        {"name": "mps-shm", "mountPath": "/dev/shm"},
        {"name": "mps-root", "mountPath": "/mps"},
        {"name": "config", "mountPath": CONFIG_DIR},
    ]
    if uses_config_manager(config):
        mounts.append({"name": "available-configs", "mountPath": AVAILABLE_CONFIGS_DIR})
    containers = [
        {
            "name": "mps-control-daemon-ctr",
            "image": image_ref(config, "device_plugin"),
            "imagePullPolicy": config["image_pull_policy"],
            "command": ["mps-control-daemon"],
            "env": env,
            "securityContext": {"privileged": True},
            "volumeMounts": mounts,
        }
    ]
    spec = _pod_spec_common(config, DEVICE_PLUGIN_NAME)
    spec["nodeSelector"] = {"nvidia.com/mps.capable": "true"}
    _wire_config_manager(
        config, spec, containers, "mps-control-daemon", "/usr/bin/mps-control-daemon"
    )
    spec["initContainers"] = [
        {
            "name": "mps-control-daemon-mounts",
            "image": image_ref(config, "device_plugin"),
            "imagePullPolicy": config["image_pull_policy"],
            "command": ["mps-control-daemon", "mount-shm"],
            "securityContext": {"privileged": True},
            "volumeMounts": [
                {"name": "mps-root", "mountPath": "/mps", "mountPropagation": "Bidirectional"}
            ],
        },
        *spec.get("initContainers", []),
    ]
    spec["containers"] = containers
    spec["volumes"] = [
        {"name": "mps-root", "hostPath": {"path": config["mps_root"], "type": "DirectoryOrCreate"}},
        {"name": "mps-shm", "hostPath": {"path": config["mps_root"] + "/shm"}},
        *_config_volumes(config),
    ]
    return _daemonset(config, MPS_NAME, "mps-control-daemon", version, spec)


def _dcgm_daemonset(config):
    version = config["dcgm_exporter_version"]
    port = config["dcgm_exporter_port"]
    container = {
        "name": "dcgm-exporter",
        "image": image_ref(config, "dcgm_exporter"),
        "imagePullPolicy": config["image_pull_policy"],
        "env": [
            _env("DCGM_EXPORTER_LISTEN", ":%d" % port),
            _env("DCGM_EXPORTER_KUBERNETES", "true"),
            _env_field("NODE_NAME", "spec.nodeName"),
        ],
        "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"}],
        # Root with SYS_ADMIN: DCGM's profiling metrics (DCGM_FI_PROF_*) need it.
        "securityContext": {
            "runAsNonRoot": False,
            "runAsUser": 0,
            "capabilities": {"add": ["SYS_ADMIN"]},
        },
        "volumeMounts": [
            {
                "name": "pod-resources",
                "mountPath": "/var/lib/kubelet/pod-resources",
                "readOnly": True,
            }
        ],
    }
    resources = _container_resources(config["dcgm_exporter_resources"])
    if resources:
        container["resources"] = resources
    spec = _pod_spec_common(config, DCGM_NAME)
    spec["automountServiceAccountToken"] = False
    spec["containers"] = [container]
    spec["volumes"] = [
        {"name": "pod-resources", "hostPath": {"path": "/var/lib/kubelet/pod-resources"}}
    ]
    manifest = _daemonset(config, DCGM_NAME, "dcgm-exporter", version, spec)
    # The exporter does not read the device plugin config: no checksum annotation.
    del manifest["spec"]["template"]["metadata"]["annotations"]
    return manifest


def _service_account(config, name, component, version):
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(name, _labels(name, component, version), config["namespace"]),
    }


def render_manifests(config, capabilities=None):
    """Every object of the cluster layer, in apply order, for a normalized config.

    capabilities (discovered from the cluster by the gpu_manifests module):
      service_monitor: the monitoring.coreos.com/v1 ServiceMonitor API exists;
      create_namespace: the namespace is absent (or ours) and so is rendered here;
      manage_runtime_class: no foreign RuntimeClass of that name exists.
    """
    caps = {"service_monitor": False, "create_namespace": False, "manage_runtime_class": True}
    caps.update(capabilities or {})
    ns = config["namespace"]
    dp_version = config["device_plugin_version"]
    out = []
    if caps["create_namespace"]:
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": dict(NAMESPACE_LABELS)},
            }
        )
    if config["runtime_class_enabled"] and caps["manage_runtime_class"]:
        runtime_class = {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "metadata": {
                "name": config["runtime_class_name"],
                "labels": _labels("nvidia-runtime-class", "runtime-class"),
            },
            "handler": config["runtime_class_handler"],
        }
        scheduling = {}
        if config["runtime_class_node_selector"]:
            scheduling["nodeSelector"] = dict(config["runtime_class_node_selector"])
        if config["runtime_class_tolerations"]:
            scheduling["tolerations"] = [dict(t) for t in config["runtime_class_tolerations"]]
        if scheduling:
            runtime_class["scheduling"] = scheduling
        out.append(runtime_class)
    plugin_or_gfd = config["device_plugin_enabled"] or config["gfd_enabled"]
    if plugin_or_gfd:
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(
                    CONFIGMAP_NAME, _labels(DEVICE_PLUGIN_NAME, "device-plugin", dp_version), ns
                ),
                "data": configmap_data(config),
            }
        )
    if config["device_plugin_enabled"]:
        out.append(_service_account(config, DEVICE_PLUGIN_NAME, "device-plugin", dp_version))
    if config["gfd_enabled"]:
        out.append(_service_account(config, GFD_NAME, "gpu-feature-discovery", dp_version))
    if plugin_or_gfd and uses_config_manager(config):
        # The config-manager sidecars read their node's labels.
        rbac_labels = _labels(DEVICE_PLUGIN_NAME, "device-plugin", dp_version)
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": CLUSTER_ROLE_NAME, "labels": rbac_labels},
                "rules": [
                    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
                ],
            }
        )
        subjects = []
        if config["device_plugin_enabled"]:
            subjects.append({"kind": "ServiceAccount", "name": DEVICE_PLUGIN_NAME, "namespace": ns})
        if config["gfd_enabled"]:
            subjects.append({"kind": "ServiceAccount", "name": GFD_NAME, "namespace": ns})
        out.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": CLUSTER_ROLE_NAME, "labels": rbac_labels},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": CLUSTER_ROLE_NAME,
                },
                "subjects": subjects,
            }
        )
    if config["device_plugin_enabled"]:
        out.append(_device_plugin_daemonset(config))
        if _any(config, lambda s: s["sharing"]["strategy"] == "mps"):
            out.append(_mps_daemonset(config))
    if config["gfd_enabled"]:
        out.append(_gfd_daemonset(config))
    if config["dcgm_exporter_enabled"]:
        dcgm_version = config["dcgm_exporter_version"]
        labels = _labels(DCGM_NAME, "dcgm-exporter", dcgm_version)
        out.append(_service_account(config, DCGM_NAME, "dcgm-exporter", dcgm_version))
        out.append(_dcgm_daemonset(config))
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": _meta(DCGM_NAME, labels, ns),
                "spec": {
                    "type": "ClusterIP",
                    "selector": selector_labels(DCGM_NAME),
                    "ports": [
                        {
                            "name": "metrics",
                            "port": config["dcgm_exporter_port"],
                            "targetPort": "metrics",
                            "protocol": "TCP",
                        }
                    ],
                },
            }
        )
        if config["dcgm_exporter_service_monitor"] and caps["service_monitor"]:
            sm_labels = dict(labels)
            sm_labels.update(config["dcgm_exporter_service_monitor_labels"])
            out.append(
                {
                    "apiVersion": "monitoring.coreos.com/v1",
                    "kind": "ServiceMonitor",
                    "metadata": _meta(DCGM_NAME, sm_labels, ns),
                    "spec": {
                        "selector": {"matchLabels": selector_labels(DCGM_NAME)},
                        "namespaceSelector": {"matchNames": [ns]},
                        "endpoints": [
                            {
                                "port": "metrics",
                                "path": "/metrics",
                                "interval": config["dcgm_exporter_service_monitor_interval"],
                            }
                        ],
                    },
                }
            )
    for quota in config["quotas"]:
        labels = _labels("gpu-quota", "quota")
        hard = dict(quota["hard"])
        if quota["gpus"] is not None:
            hard["requests." + quota["resource"]] = quota["gpus"]
        if hard:
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "ResourceQuota",
                    "metadata": _meta(QUOTA_NAME, labels, quota["namespace"]),
                    "spec": {"hard": hard},
                }
            )
        if quota["max_per_container"] is not None:
            resource = quota["resource"]
            # A LimitRange with only `max` defaults every container's limit to that max: every
            # pod in the namespace would ask for GPUs. Defaults of 0 keep non-GPU pods as they are.
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "LimitRange",
                    "metadata": _meta(LIMIT_RANGE_NAME, labels, quota["namespace"]),
                    "spec": {
                        "limits": [
                            {
                                "type": "Container",
                                "max": {resource: quota["max_per_container"]},
                                "default": {resource: "0"},
                                "defaultRequest": {resource: "0"},
                            }
                        ]
                    },
                }
            )
    return out


def object_ref(manifest):
    meta = manifest["metadata"]
    return {
        "apiVersion": manifest["apiVersion"],
        "kind": manifest["kind"],
        "name": meta["name"],
        "namespace": meta.get("namespace"),
    }


def is_owned(obj):
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in OWNED_LABELS.items())


# --- node labels and taints ----------------------------------------------------------------------


def _applied(annotations, key):
    try:
        value = json.loads(annotations.get(key) or "[]")
    except ValueError:
        return []
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _taint_id(taint):
    return "%s:%s" % (taint.get("key"), taint.get("effect"))


def node_patch(node, labels, taints):
    """A JSON patch (list of ops) that gives the node these labels and taints; [] if it has them.

    Labels are added key by key. Taints are read-merged-written: a taint with the same key and
    effect is updated in place, a new one appended, others kept; the write is guarded by a `test`
    of the list read, so a concurrent change makes the patch fail instead of being lost. What
    kubegpu added or changed is recorded in two annotations, which node_reset_patch reads.
    """
    meta = node.get("metadata") or {}
    current_labels = meta.get("labels")
    annotations = meta.get("annotations")
    spec = node.get("spec")
    ops = []
    applied_labels = _applied(annotations or {}, APPLIED_LABELS_ANNOTATION)
    applied_taints = _applied(annotations or {}, APPLIED_TAINTS_ANNOTATION)
    new_labels = [k for k in sorted(labels) if (current_labels or {}).get(k) != labels[k]]
    if new_labels:
        if current_labels is None:
            ops.append(
                {
                    "op": "add",
                    "path": "/metadata/labels",
                    "value": dict((k, labels[k]) for k in new_labels),
                }
            )
        else:
            ops += [
                {
                    "op": "add",
                    "path": "/metadata/labels/" + json_pointer_escape(k),
                    "value": labels[k],
                }
                for k in new_labels
            ]
    current_taints = (spec or {}).get("taints")
    merged = [dict(t) for t in (current_taints or [])]
    changed_taints = []
    for want in taints:
        for index, have in enumerate(merged):
            if have.get("key") == want["key"] and have.get("effect") == want["effect"]:
                if (have.get("value") or None) != (want.get("value") or None):
                    merged[index] = dict(want)
                    changed_taints.append(_taint_id(want))
                break
        else:
            merged.append(dict(want))
            changed_taints.append(_taint_id(want))
    if changed_taints:
        if spec is None:
            ops.append({"op": "add", "path": "/spec", "value": {"taints": merged}})
        elif current_taints is None:
            ops.append({"op": "add", "path": "/spec/taints", "value": merged})
        else:
            ops.append({"op": "test", "path": "/spec/taints", "value": current_taints})
            ops.append({"op": "replace", "path": "/spec/taints", "value": merged})
    record = {}
    all_labels = sorted(set(applied_labels) | set(new_labels))
    if all_labels != sorted(applied_labels):
        record[APPLIED_LABELS_ANNOTATION] = json.dumps(all_labels)
    all_taints = sorted(set(applied_taints) | set(changed_taints))
    if all_taints != sorted(applied_taints):
        record[APPLIED_TAINTS_ANNOTATION] = json.dumps(all_taints)
    ops += _annotation_ops(annotations, record)
    return ops


def _annotation_ops(annotations, record):
    if not record:
        return []
    if annotations is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": record}]
    return [
        {"op": "add", "path": "/metadata/annotations/" + json_pointer_escape(k), "value": v}
        for k, v in sorted(record.items())
    ]


def node_reset_patch(node):
    """A JSON patch removing the labels and taints kubegpu recorded on the node, and the record."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    ops = []
    for key in _applied(annotations, APPLIED_LABELS_ANNOTATION):
        if key in labels:
            ops.append({"op": "remove", "path": "/metadata/labels/" + json_pointer_escape(key)})
    recorded = set(_applied(annotations, APPLIED_TAINTS_ANNOTATION))
    current = (node.get("spec") or {}).get("taints")
    if current and recorded:
        kept = [t for t in current if _taint_id(t) not in recorded]
        if len(kept) != len(current):
            ops.append({"op": "test", "path": "/spec/taints", "value": current})
            ops.append({"op": "replace", "path": "/spec/taints", "value": kept})
    for key in (APPLIED_LABELS_ANNOTATION, APPLIED_TAINTS_ANNOTATION):
        if key in annotations:
            ops.append(
                {"op": "remove", "path": "/metadata/annotations/" + json_pointer_escape(key)}
            )
    return ops
