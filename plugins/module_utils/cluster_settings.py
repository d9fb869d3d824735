# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The gpu_cluster settings: DEFAULTS, and validate_config(config) -> (normalized, errors).

The role's variables (keys without the ``gpu_cluster_`` prefix), checked and completed with
DEFAULTS; every error names the variable (``gpu_cluster_sharing.replicas: ...``), says what was
found and what is allowed. The normalized config carries ``__configs``: every named device plugin
config (the default one included) as complete settings, which cluster_manifests.py renders.

- expected_resource_names(settings): the extended resources a node with these settings
  advertises.

Facts about the NVIDIA device plugin's config file (field names, allowed values, defaults) were
read from NVIDIA/k8s-device-plugin api/config/v1/{flags,consts,replicas,resources,sharing}.go and
docs/customizing.md.

Runs on the controller's Python (3.8+ syntax), standard library only.
"""

from __future__ import absolute_import, division, print_function

import copy
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils.files import PLAIN_ABSOLUTE_PATH
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

PREFIX = "gpu_cluster_"

MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
SHARING_STRATEGIES = ("none", "time-slicing", "mps")
# node-feature-discovery: deployed by kubegpu, one already in the cluster, or none (GFD then
# writes its labels as a file for an NFD worker to read, as before NodeFeature objects).
NFD_MODES = ("deploy", "existing", "none")
# How the GPUs of a node are allocated: NVIDIA's device plugin (extended resources) or NVIDIA's
# DRA driver for GPUs (ResourceClaims), per node group: with "dra" the nodes labelled
# dra_node_label=true get the DRA kubelet plugin and never the device plugin, the others the
# device plugin as before.
ALLOCATIONS = ("device-plugin", "dra")
# resource.k8s.io/v1 (DeviceClass, ResourceClaim, ResourceSlice) is served from this release on.
DRA_KUBERNETES = "1.34"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
GPU_RESOURCE = "nvidia.com/gpu"
# The device plugin release whose behaviour the checks below follow.
DEVICE_PLUGIN_RELEASE = "v0.20.0"
SHARED_SUFFIX = ".shared"
# node-feature-discovery's label of a node with an NVIDIA PCI device.
NFD_NVIDIA_PCI_LABEL_NAME = "feature.node.kubernetes.io/pci-10de.present"

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
    "device_plugin_digest": "sha256:a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312",
    "device_plugin_resources": {},
    "mig_strategy": "none",
    "fail_on_init_error": True,
    "device_list_strategy": ["cdi-cri"],
    "device_id_strategy": "uuid",
    "pass_device_specs": False,
    "sharing": {"strategy": "none"},
    "device_plugin_configs": {},
    "device_plugin_default_config": "default",
    "device_plugin_config_label": "nvidia.com/device-plugin.config",
    "mps_root": "/run/nvidia/mps",
    "driver_root": "/",
    "nvidia_ctk_path": "/usr/bin/nvidia-ctk",
    "cdi_annotation_prefix": "cdi.k8s.io/",
    "device_plugin_health_checks": True,
    "device_plugin_health_check_skip_xids": [],
    "gfd_enabled": True,
    "nfd": "deploy",
    "nfd_image_registry": "registry.k8s.io",
    "nfd_image": "nfd/node-feature-discovery",
    "nfd_version": "v0.19.0",
    "nfd_digest": "",
    "gfd_sleep_interval": "60s",
    "gfd_resources": {},
    "runtime_class_enabled": True,
    "runtime_class_name": "nvidia",
    "runtime_class_handler": "nvidia",
    "runtime_class_node_selector": {},
    "runtime_class_tolerations": [],
    "dcgm_exporter_enabled": True,
    "dcgm_exporter_image": "nvidia/k8s/dcgm-exporter",
    "dcgm_exporter_version": "4.6.0-4.8.3-distroless",
    "dcgm_exporter_digest": "sha256:613ab03c11d442fd960ff515f547e9921537454a712d08160bc8f677f89f1c35",
    "dcgm_exporter_port": 9400,
    "dcgm_exporter_resources": {},
    "dcgm_exporter_service_monitor": True,
    "dcgm_exporter_service_monitor_interval": "15s",
    "dcgm_exporter_service_monitor_labels": {},
    "allocation": "device-plugin",
    "dra_node_label": "nvidia.com/gpu.deploy.dra-driver",
    "dra_driver_image": "nvidia/dra-driver-nvidia-gpu",
    "dra_driver_version": "v0.5.0",
    "dra_driver_digest": "sha256:9b46984c0eb18def60e2b9817b874275f4b5b08d12d491de4f1a7b91b51d706c",
    "dra_driver_resources": {},
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


# Each matched against the whole text (fullmatch), never with "$", which lets "v0.20.0\n" through.
_CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")
_IMAGE_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_IMAGE_PATH = re.compile(r"[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*")
_REGISTRY = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[a-z0-9._/-]+)?")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_DURATION = re.compile(r"([0-9]+(\.[0-9]+)?(ns|us|\u00b5s|ms|s|m|h))+")
# An image's name (registry/path) is at most 255 characters (NameTotalLengthMax of
# distribution/reference, which containerd and the kubelet parse image references with).
_IMAGE_NAME_MAX = 255


class _Errors:
    def __init__(self):
        self.items = []

    def add(self, var, message):
        self.items.append("%s%s: %s" % (PREFIX, var, message))


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
    "device_plugin_health_checks",
)
INT_KEYS = ("api_timeout", "dcgm_exporter_port")


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
    # The device plugin refuses its whole config below 2 ("number of replicas must be >= 2",
    # api/config/v1/replicas.go), and then the plugin, GFD and the MPS daemon all exit.
    if not is_int(value) or value < 2:
        errors.add(
            var,
            "%r is not allowed; allowed: an integer of 2 or more (how many "
            "containers may share each device; the device plugin refuses fewer)" % (value,),
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
                "missing; %s needs replicas (an integer of 2 or more) "
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
            for key in ("rename", "devices"):
                if item.get(key) is not None:
                    # v0.20.0 drops both at load with a warning
                    # (DisableResourceNamingInConfig in api/config/v1/config.go): every GPU
                    # is shared under nvidia.com/gpu (or .shared), whatever they say.
                    errors.add(
                        "%s.%s" % (rvar, key),
                        "%r is not supported: the device plugin %s ignores per-resource "
                        "%s and shares every GPU under %s (or %s%s with rename_by_default); "
                        "remove it, and split GPUs between configs with "
                        "gpu_cluster_device_plugin_configs and the node label instead"
                        % (
                            item[key],
                            DEVICE_PLUGIN_RELEASE,
                            key,
                            name,
                            name,
                            SHARED_SUFFIX,
                        ),
                    )
            out["resources"].append(entry)
    if strategy == "mps":
        bad = [r["name"] for r in out["resources"] if r["name"] != GPU_RESOURCE]
        if bad:
            errors.add(
                var + ".resources", "MPS shares only %s, not %s" % (GPU_RESOURCE, ", ".join(bad))
            )
        if mig_strategy != "none":
            # The device plugin refuses MPS on MIG devices at start (MIG strategy single), and
            # MIG strategy mixed exposes no nvidia.com/gpu to share.
            errors.add(
                var + ".strategy",
                "mps cannot share MIG devices (MIG strategy is %r: the device plugin refuses "
                "MPS with 'single', and 'mixed' exposes no %s); use time-slicing, or MIG "
                "strategy none" % (mig_strategy, GPU_RESOURCE),
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
        "device_plugin_health_checks",
    ):
        _check_bool(errors, flag, cfg[flag])
    _check_choice(errors, "nfd", cfg["nfd"], NFD_MODES)
    cfg["device_plugin_health_check_skip_xids"] = _normalize_xids(
        errors, "device_plugin_health_check_skip_xids", cfg["device_plugin_health_check_skip_xids"]
    )
    if cfg["device_plugin_health_checks"] is False and cfg["device_plugin_health_check_skip_xids"]:
        errors.add(
            "device_plugin_health_check_skip_xids",
            "%r is set while gpu_cluster_device_plugin_health_checks is false (no Xid is "
            "checked at all); set one or the other"
            % (cfg["device_plugin_health_check_skip_xids"],),
        )

    registry = _normalize_registry(errors, cfg, "image_registry")
    _check_choice(errors, "image_pull_policy", cfg["image_pull_policy"], PULL_POLICIES)
    secrets = cfg["image_pull_secrets"]
    if not isinstance(secrets, list) or not all(is_dns_subdomain(s) for s in secrets):
        errors.add("image_pull_secrets", "%r is not a list of Secret names" % (secrets,))
    nfd_registry = _normalize_registry(errors, cfg, "nfd_image_registry")
    for component in ("device_plugin", "dcgm_exporter", "nfd", "dra_driver"):
        registry_of = nfd_registry if component == "nfd" else registry
        image, version, digest = (
            cfg[component + "_image"],
            cfg[component + "_version"],
            cfg[component + "_digest"],
        )
        if not isinstance(image, str) or not _IMAGE_PATH.fullmatch(image):
            errors.add(
                component + "_image",
                "%r is not an image path within the registry, "
                "e.g. nvidia/k8s-device-plugin" % (image,),
            )
        elif len(registry_of) + 1 + len(image) > _IMAGE_NAME_MAX:
            errors.add(
                component + "_image",
                "%r is too long: the image name (registry/path) has %d characters, at most "
                "%d are allowed" % (image, len(registry_of) + 1 + len(image), _IMAGE_NAME_MAX),
            )
        if not isinstance(version, str) or not _IMAGE_TAG.fullmatch(version):
            errors.add(
                component + "_version",
                "%r is not an image tag (pin one, e.g. v0.20.0)" % (version,),
            )
        elif version == "latest":
            errors.add(component + "_version", "'latest' is not a pin; give a released tag")
        if digest and (not isinstance(digest, str) or not _DIGEST.fullmatch(digest)):
            errors.add(
                component + "_digest", "%r is not empty or sha256:<64 hex digits>" % (digest,)
            )
    for component in ("device_plugin", "gfd", "dcgm_exporter", "dra_driver"):
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
        or not _CONFIGMAP_KEY.fullmatch(default_name)
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
            or not _CONFIGMAP_KEY.fullmatch(cname)
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
    # Host paths of the pods (hostPath volumes, an environment variable): whole plain paths.
    mps_root = cfg["mps_root"]
    if not isinstance(mps_root, str) or not PLAIN_ABSOLUTE_PATH.fullmatch(mps_root):
        errors.add(
            "mps_root",
            "%r is not an absolute directory path of letters, digits, '.', '_', '-' and '/' "
            "(not / itself)" % (mps_root,),
        )
    driver_root = cfg["driver_root"]
    if not isinstance(driver_root, str) or not (
        driver_root == "/" or PLAIN_ABSOLUTE_PATH.fullmatch(driver_root)
    ):
        errors.add(
            "driver_root",
            "%r is not an absolute path (/ for a driver installed on the "
            "host, /run/nvidia/driver for a containerized driver)" % (driver_root,),
        )

    for var in ("nvidia_ctk_path",):
        if not isinstance(cfg[var], str) or not PLAIN_ABSOLUTE_PATH.fullmatch(cfg[var]):
            errors.add(
                var,
                "%r is not an absolute file path of letters, digits, '.', '_', '-' and '/' "
                "(where nvidia-ctk is on the GPU nodes, e.g. /usr/bin/nvidia-ctk)" % (cfg[var],),
            )
    prefix = cfg["cdi_annotation_prefix"]
    if (
        not isinstance(prefix, str)
        or not prefix.endswith("/")
        or qualified_name_error(prefix + "x")
    ):
        errors.add(
            "cdi_annotation_prefix",
            "%r is not an annotation key prefix ending in '/' (e.g. cdi.k8s.io/)" % (prefix,),
        )
    for var in ("gfd_sleep_interval", "dcgm_exporter_service_monitor_interval"):
        if not isinstance(cfg[var], str) or not _DURATION.fullmatch(cfg[var]):
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

    _check_allocation(errors, cfg)
    cfg["quotas"] = _normalize_quotas(errors, cfg["quotas"], configs.get(default_name))
    _check_node_labels(errors, cfg["node_labels"])
    cfg["node_taints"] = _normalize_node_taints(errors, cfg["node_taints"])
    unique = []
    for item in errors.items:
        if item not in unique:
            unique.append(item)
    return cfg, unique


def _check_allocation(errors, cfg):
    """gpu_cluster_allocation and what it makes meaningless: with dra and no device plugin, the
    device plugin's MIG strategy and sharing settings configure nothing (the DRA driver serves
    MIG devices through DeviceClass mig.nvidia.com and shares GPUs per claim)."""
    allocation = cfg["allocation"]
    if allocation not in ALLOCATIONS:
        errors.add(
            "allocation", "%r is not allowed; allowed: %s" % (allocation, ", ".join(ALLOCATIONS))
        )
        return
    error = qualified_name_error(cfg["dra_node_label"])
    if error:
        errors.add("dra_node_label", error)
    elif cfg["dra_node_label"] in (cfg["gpu_node_label"], NFD_NVIDIA_PCI_LABEL_NAME):
        errors.add(
            "dra_node_label",
            "%r is the label every GPU node carries; name a label only the DRA nodes carry "
            "(e.g. nvidia.com/gpu.deploy.dra-driver)" % (cfg["dra_node_label"],),
        )
    if allocation != "dra" or cfg["device_plugin_enabled"] is not False:
        return
    for key in NODE_CONFIG_KEYS:
        if key in ("mig_strategy", "sharing") and cfg[key] != DEFAULTS[key]:
            errors.add(
                key,
                "%r configures NVIDIA's device plugin, which gpu_cluster_allocation dra with "
                "gpu_cluster_device_plugin_enabled false does not run; DRA nodes get MIG devices "
                "through DeviceClass mig.nvidia.com and share GPUs per ResourceClaim: remove it"
                % (cfg[key],),
            )
    if cfg["device_plugin_configs"]:
        errors.add(
            "device_plugin_configs",
            "named device plugin configs are set while the device plugin does not run "
            "(gpu_cluster_allocation dra, gpu_cluster_device_plugin_enabled false): remove them",
        )


def _normalize_registry(errors, cfg, var):
    """cfg[var] without a trailing '/', or "" after adding an error."""
    registry = cfg[var]
    if isinstance(registry, str):
        registry = registry.rstrip("/")
        cfg[var] = registry
    if (
        not isinstance(registry, str)
        or not _REGISTRY.fullmatch(registry)
        or "://" in registry
        or len(registry) >= _IMAGE_NAME_MAX
    ):
        errors.add(
            var,
            "%r is not a registry host[:port][/path] (no scheme, shorter than %d characters), "
            "e.g. registry.example.internal:5000/mirror" % (registry, _IMAGE_NAME_MAX),
        )
        return ""
    return registry


def _normalize_xids(errors, var, value):
    """The Xids the device plugin's health check skips (on top of the application errors it
    always skips): a list of whole numbers, which DP_DISABLE_HEALTHCHECKS takes as a comma
    list (internal/rm/health.go; malformed values are silently dropped there, refused here)."""
    if not isinstance(value, list):
        errors.add(var, "%r is not a list of Xid numbers, e.g. [79, 109]" % (value,))
        return []
    out = []
    for index, item in enumerate(value):
        number = coerce_int(item)
        if not is_int(number) or number < 1:
            errors.add(
                "%s[%d]" % (var, index),
                "%r is not an Xid (a whole number of 1 or more, e.g. 79)" % (item,),
            )
            continue
        if number not in out:
            out.append(number)
    return sorted(out)


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


# --- what the settings advertise -----------------------------------------------------------------


def expected_resource_names(settings):
    """The extended resources a node with these settings advertises (for nvidia.com/gpu-like
    resources; MIG 'mixed' profiles depend on the GPU and are not listed)."""
    sharing = settings["sharing"]
    if sharing["strategy"] == "none" or not sharing["resources"]:
        return [] if settings["mig_strategy"] == "mixed" else [GPU_RESOURCE]
    names = []
    for item in sharing["resources"]:
        if sharing["rename_by_default"]:
            names.append(item["name"] + SHARED_SUFFIX)
        else:
            names.append(item["name"])
    return names
