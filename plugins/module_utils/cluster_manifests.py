# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The gpu_cluster layer's objects, rendered from a normalized config (cluster_settings.py).

Everything here is a pure function of its arguments (no API calls, no files), so it is tested
without a cluster and the role, its module and the tests all render the same objects:

- render_manifests(config, capabilities) -> [manifest, ...] in apply order.
- device_plugin_config_file(settings) -> the device plugin's own config file (version v1).

Facts about the NVIDIA device plugin's deployment (config-manager sidecar, volumes, env) were
read from NVIDIA/k8s-device-plugin docs/customizing.md and the Helm templates under
deployments/helm/nvidia-device-plugin/templates/. DCGM exporter facts come from
NVIDIA/dcgm-exporter deployment/values.yaml and deployment/examples/dcgm-exporter.yaml.

Runs on the controller's Python (3.8+ syntax), standard library only.
"""

from __future__ import absolute_import, division, print_function

import hashlib
import json

__metaclass__ = type

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
# On the pods of the DaemonSets that read the device plugin config: a new config rolls them.
CONFIG_CHECKSUM_ANNOTATION = "kubegpu.io/config-checksum"

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
