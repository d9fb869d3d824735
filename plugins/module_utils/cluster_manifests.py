# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The gpu_cluster layer's objects, rendered from a normalized config (cluster_settings.py).

The objects themselves are data: one YAML file each in data/cluster/ (the DaemonSets of the
device plugin, GPU Feature Discovery, the MPS control daemon and the DCGM exporter, their
ServiceAccounts, RBAC, Service and ServiceMonitor, the RuntimeClass, the ConfigMap, quotas),
with @@name@@ tokens for what varies (data_files.fill). This file decides only what logic
decides: which objects a config gets, their labels and images, tolerations and node affinity
from the settings, the device plugin's config files and their checksum, and the variations
that MIG, CDI, MPS, time-slicing and named per-node configs (the config-manager) make.

Everything here is a pure function of its arguments (no API calls, no file reads), so it runs
inside the gpu_manifests module, where AnsiballZ ships no data files: the module gets the
templates as data from its action plugin, and the tests and other controller code read them
with data_files.read_templates(TEMPLATE_FOLDER). All of them render the same objects:

- render_manifests(config, templates, capabilities) -> [manifest, ...] in apply order.
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

from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_settings import (
    expected_resource_names,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import fill

__metaclass__ = type

# The folder of data/ that holds the objects' templates.
TEMPLATE_FOLDER = "cluster"

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

# The names of the objects, as their data files write them.

DEVICE_PLUGIN_NAME = "nvidia-device-plugin"
GFD_NAME = "gpu-feature-discovery"
MPS_NAME = "nvidia-mps-control-daemon"
DCGM_NAME = "dcgm-exporter"
CONFIGMAP_NAME = "nvidia-device-plugin-configs"
CLUSTER_ROLE_NAME = "kubegpu-nvidia-device-plugin"
QUOTA_NAME = "kubegpu-gpu-quota"
LIMIT_RANGE_NAME = "kubegpu-gpu-limits"
GFD_CLUSTER_ROLE_NAME = "kubegpu-gpu-feature-discovery"
NFD_MASTER_NAME = "nfd-master"
NFD_WORKER_NAME = "nfd-worker"
NFD_GC_NAME = "nfd-gc"
NFD_WORKER_CONFIG_NAME = "nfd-worker-conf"
NFD_MASTER_CLUSTER_ROLE_NAME = "kubegpu-nfd-master"
NFD_GC_CLUSTER_ROLE_NAME = "kubegpu-nfd-gc"

# node-feature-discovery's API group, and its CRDs by kind (as the data files name them).
NFD_GROUP = "nfd.k8s-sigs.io"
NFD_API_VERSION = NFD_GROUP + "/v1alpha1"
NFD_CRDS = {
    "NodeFeature": "nodefeatures." + NFD_GROUP,
    "NodeFeatureRule": "nodefeaturerules." + NFD_GROUP,
    "NodeFeatureGroup": "nodefeaturegroups." + NFD_GROUP,
}
# The CRD whose presence means an NFD serves the NodeFeature API GFD writes to.
NFD_NODEFEATURE_CRD = NFD_CRDS["NodeFeature"]

# What GFD may do, as NVIDIA's k8s-device-plugin chart grants it (templates/role.yml with
# gfd.enabled and nfd.enableNodeFeatureApi): keep its node's NodeFeature object
# (nvidia-features-for-<node>, in its own namespace: get, then create or update, in
# internal/lm/output.go). It reads no pod: the pods get of NFD's chart is nfd-worker's (its
# owner references), granted by nfd-worker's Role.
GFD_RULES = [
    {
        "apiGroups": [NFD_GROUP],
        "resources": ["nodefeatures"],
        "verbs": ["get", "list", "watch", "create", "update"],
    },
]
# nfd-master and nfd-gc, as node-feature-discovery's chart (v0.19) grants them.
NFD_MASTER_RULES = [
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["watch", "list"]},
    {
        "apiGroups": [""],
        "resources": ["nodes", "nodes/status"],
        "verbs": ["get", "patch", "update", "list"],
    },
    {
        "apiGroups": [NFD_GROUP],
        "resources": ["nodefeatures", "nodefeaturerules", "nodefeaturegroups"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": [NFD_GROUP],
        "resources": ["nodefeaturegroups/status"],
        "verbs": ["patch", "update"],
    },
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": ["nfd-master.nfd.kubernetes.io"],
        "verbs": ["get", "update"],
    },
]
NFD_GC_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
    {"apiGroups": [NFD_GROUP], "resources": ["nodefeatures"], "verbs": ["delete", "list"]},
]
# nfd-worker.conf: the PCI classes labelled by vendor, as NVIDIA's GPU Operator sets them
# (network 02/0200/0207, display 0300/0302): an NVIDIA GPU gives pci-10de.present.
NFD_WORKER_CONFIG = {
    "sources": {
        "pci": {
            "deviceClassWhitelist": ["02", "0200", "0207", "0300", "0302"],
            "deviceLabelFields": ["vendor"],
        },
    },
}
# The NFD containers: as node-feature-discovery's chart runs them.
NFD_SECURITY_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
}
# NVIDIA's DRA driver for GPUs (driver name gpu.nvidia.com), as NVIDIA's deployment names its
# objects. Its DeviceClasses select the driver's devices by their type attribute; tenant quotas
# (tenancy_settings.DRA_GPU_CLASSES) cap claims by the same class names.
DRA_DRIVER = "gpu.nvidia.com"
DRA_KUBELET_PLUGIN_NAME = "nvidia-dra-driver-kubelet-plugin"
DRA_SERVICE_ACCOUNT = "nvidia-dra-driver-kubeletplugin"
DRA_CLUSTER_ROLE_NAME = "kubegpu-nvidia-dra-driver-kubeletplugin"
DRA_NODE_LABEL_VALUE = "true"
DRA_DEVICE_CLASSES = {
    "gpu.nvidia.com": "device.driver == '%s' && device.attributes['%s'].type == 'gpu'"
    % (DRA_DRIVER, DRA_DRIVER),
    "mig.nvidia.com": "device.driver == '%s' && device.attributes['%s'].type == 'mig'"
    % (DRA_DRIVER, DRA_DRIVER),
}
# The kubelet plugin: its node's ResourceSlices, the claims it prepares, the pods holding them.
DRA_KUBELET_PLUGIN_RULES = [
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceslices"],
        "verbs": ["get", "list", "watch", "create", "update", "delete"],
    },
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
]
CONTROL_PLANE_TOLERATION = {
    "key": "node-role.kubernetes.io/control-plane",
    "operator": "Exists",
    "effect": "NoSchedule",
}


# --- the device plugin's config file -------------------------------------------------------------


# Where the device plugin's pod mounts the host's driver root (device-plugin-daemonset.yaml).
CONTAINER_DRIVER_ROOT = "/driver-root"


def device_plugin_config_file(settings, cdi=None):
    """The device plugin / GFD config file (version v1) for one normalized settings dict.

    cdi: the cluster-wide CDI settings {nvidia_ctk_path, cdi_annotation_prefix}, written where
    the settings list devices through CDI (the plugin then generates the node's CDI spec with
    hooks that run nvidia-ctk from that host path, reading the driver under /driver-root)."""
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
    if cdi and any(x.startswith("cdi-") for x in settings["device_list_strategy"]):
        config["flags"]["plugin"].update(
            cdiAnnotationPrefix=cdi["cdi_annotation_prefix"],
            nvidiaCTKPath=cdi["nvidia_ctk_path"],
            containerDriverRoot=CONTAINER_DRIVER_ROOT,
        )
    sharing = settings["sharing"]
    if sharing["strategy"] != "none":
        resources = []
        for item in sharing["resources"]:
            resources.append({"name": item["name"], "replicas": item["replicas"]})
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
        config.get(component + "_image_registry") or config["image_registry"],
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


def _tolerations(config):
    toleration = {"key": config["gpu_taint_key"], "operator": "Exists"}
    if config["gpu_taint_effect"]:
        toleration["effect"] = config["gpu_taint_effect"]
    return [toleration] + [dict(t) for t in config["extra_tolerations"]]


# node-feature-discovery labels a node with an NVIDIA PCI device (vendor 10de) so: a GPU node
# is one that either it or kubegpu's kubelet role (gpu_node_label) marks, as NVIDIA's chart
# selects nodes by NFD's label or nvidia.com/gpu.present.
NFD_NVIDIA_PCI_LABEL = "feature.node.kubernetes.io/pci-10de.present"


def _gpu_node_affinity(config, dra=None):
    """GPU nodes: NFD's label or gpu_node_label, ORed. dra (with gpu_cluster_allocation dra):
    True adds to every term that the node carries dra_node_label=true (the DRA kubelet plugin),
    False that it does not (the device plugin and the MPS daemon), so no node matches both."""
    terms = [(config["gpu_node_label"], config["gpu_node_label_value"])]
    if config["gpu_node_label"] != NFD_NVIDIA_PCI_LABEL:
        terms.insert(0, (NFD_NVIDIA_PCI_LABEL, "true"))
    extra = []
    if dra is not None and config["allocation"] == "dra":
        extra.append(
            {
                "key": config["dra_node_label"],
                "operator": "In" if dra else "NotIn",
                "values": [DRA_NODE_LABEL_VALUE],
            }
        )
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [{"key": key, "operator": "In", "values": [value]}]
                        + [dict(e) for e in extra]
                    }
                    for key, value in terms
                ],
            },
        },
    }


def _container_resources(block):
    out = {}
    for part in ("requests", "limits"):
        if block.get(part):
            out[part] = dict((k, v) for k, v in sorted(block[part].items()))
    return out


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


def configmap_data(config):
    cdi = {
        "nvidia_ctk_path": config["nvidia_ctk_path"],
        "cdi_annotation_prefix": config["cdi_annotation_prefix"],
    }
    return dict(
        (name, to_yaml(device_plugin_config_file(settings, cdi)))
        for name, settings in sorted(config["__configs"].items())
    )


def _checksum(data):
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode("utf-8")).hexdigest()


def _template(templates, name):
    try:
        return templates[name]
    except (KeyError, TypeError):
        raise ValueError(
            "kubegpu object template %r is missing: the templates are the YAML files of "
            "plugins/module_utils/data/%s/, read on the controller by "
            "data_files.read_templates (the action kubegpu.gpu.gpu_manifests passes them to "
            "its module)" % (name, TEMPLATE_FOLDER)
        ) from None


def _render(templates, name, values):
    return fill(_template(templates, name), values)


def _daemonset_values(config, name, component, version, image, dra=None):
    """The values every DaemonSet template takes: its labels, where it runs, its image
    (dra: on DRA nodes only, never on them, or either, as _gpu_node_affinity)."""
    runtime_class = config["components_use_runtime_class"] and config["runtime_class_enabled"]
    return {
        "labels": _labels(name, component, version),
        "namespace": config["namespace"],
        "tolerations": _tolerations(config),
        "affinity": _gpu_node_affinity(config, dra),
        "runtime_class_name": config["runtime_class_name"] if runtime_class else None,
        "image_pull_secrets": [{"name": s} for s in config["image_pull_secrets"]],
        "image": image_ref(config, image),
        "image_pull_policy": config["image_pull_policy"],
    }


# The DaemonSets that read the device plugin config, by name: their component label, the
# name prefix of their config-manager containers and the process the sidecar signals.
_CONFIG_READERS = {
    DEVICE_PLUGIN_NAME: ("device-plugin", "nvidia-device-plugin", "nvidia-device-plugin"),
    GFD_NAME: ("gpu-feature-discovery", "gpu-feature-discovery", "gpu-feature-discovery"),
    MPS_NAME: ("mps-control-daemon", "mps-control-daemon", "/usr/bin/mps-control-daemon"),
}


def _config_reader_values(config, templates, name):
    """The values of a DaemonSet that reads the device plugin config: the config's checksum
    (a new config rolls its pods), how the config reaches it (the default one mounted from the
    ConfigMap, or the config-manager's init container and sidecar where named configs exist)
    and whether a config uses MIG."""
    component, prefix, process = _CONFIG_READERS[name]
    # The device plugin and the MPS daemon allocate GPUs: never on DRA nodes. GFD only labels.
    values = _daemonset_values(
        config,
        name,
        component,
        config["device_plugin_version"],
        "device_plugin",
        dra=False if name in (DEVICE_PLUGIN_NAME, MPS_NAME) else None,
    )
    config_manager = uses_config_manager(config)
    values.update(
        config_checksum=_checksum(configmap_data(config)),
        config_manager=config_manager,
        one_config=not config_manager,
        default_config=config["device_plugin_default_config"],
        mig=_any(config, lambda s: s["mig_strategy"] != "none"),
        mps_root=config["mps_root"],
        security_context=_security_context(config),
    )
    if config_manager:
        for oneshot in (True, False):
            part = {
                "name": prefix + ("-init" if oneshot else "-sidecar"),
                "image": values["image"],
                "image_pull_policy": values["image_pull_policy"],
                "node_label": config["device_plugin_config_label"],
                "default_config": values["default_config"],
                "oneshot": "true" if oneshot else "false",
                "send_signal": "false" if oneshot else "true",
                "sidecar": not oneshot,
                "process": process,
                "security_context": None if oneshot else _security_context(config),
            }
            container = _render(templates, "config-manager-container", part)
            values["config_manager_init" if oneshot else "config_manager_sidecar"] = container
    return values


def _disable_health_checks(config):
    """DP_DISABLE_HEALTHCHECKS: "all" (off), the Xids to skip as a comma list, or "" (unset)."""
    if not config["device_plugin_health_checks"]:
        return "all"
    return ",".join(str(x) for x in config["device_plugin_health_check_skip_xids"])


def _device_plugin_daemonset(config, templates):
    values = _config_reader_values(config, templates, DEVICE_PLUGIN_NAME)
    values.update(
        disable_health_checks=_disable_health_checks(config),
        cdi=_any(config, lambda s: any(x.startswith("cdi-") for x in s["device_list_strategy"])),
        driver_root=config["driver_root"],
        security_context=_security_context(config, _any(config, lambda s: s["pass_device_specs"])),
        resources=_container_resources(config["device_plugin_resources"]),
    )
    return _render(templates, "device-plugin-daemonset", values)


def uses_node_feature_api(config):
    """GFD publishes through NFD's NodeFeature API unless gpu_cluster_nfd is none."""
    return config["nfd"] != "none"


def _gfd_daemonset(config, templates):
    values = _config_reader_values(config, templates, GFD_NAME)
    node_feature_api = uses_node_feature_api(config)
    values.update(
        node_feature_api="true" if node_feature_api else "false",
        api_client=node_feature_api or values["config_manager"],
        # Privileged, as NVIDIA's chart runs it (gfd.securityContext.privileged): GFD reads the
        # GPUs' PCI config space, and without it the vGPU labels are missing.
        security_context=_security_context(config, privileged=True),
        sleep_interval=config["gfd_sleep_interval"],
        resources=_container_resources(config["gfd_resources"]),
    )
    return _render(templates, "gpu-feature-discovery-daemonset", values)


def _mps_daemonset(config, templates):
    """The MPS control daemon, on nodes GFD labels nvidia.com/mps.capable=true."""
    values = _config_reader_values(config, templates, MPS_NAME)
    return _render(templates, "mps-control-daemon-daemonset", values)


def _dcgm_daemonset(config, templates):
    values = _daemonset_values(
        config, DCGM_NAME, "dcgm-exporter", config["dcgm_exporter_version"], "dcgm_exporter"
    )
    # Shared GPUs (time-slicing, MPS): the exporter maps each replica to its pod only with
    # KUBERNETES_VIRTUAL_GPUS, and finds renamed resources (nvidia.com/gpu.shared) only when
    # NVIDIA_RESOURCE_NAMES names them (dcgm-exporter's --kubernetes-virtual-gpus and
    # --nvidia-resource-names).
    shared = sorted(
        set(
            name
            for settings in config["__configs"].values()
            if settings["sharing"]["strategy"] != "none"
            for name in expected_resource_names(settings)
        )
    )
    values.update(
        port=config["dcgm_exporter_port"],
        resources=_container_resources(config["dcgm_exporter_resources"]),
        virtual_gpus=bool(shared),
        resource_names=",".join(shared),
    )
    return _render(templates, "dcgm-exporter-daemonset", values)


def _cluster_role(config, templates, name, rules, service_account, component, version):
    """A ClusterRole and its binding to one ServiceAccount of the namespace."""
    values = {
        "name": name,
        "labels": _labels(name, component, version),
        "namespace": config["namespace"],
        "rules": [dict(rule) for rule in rules],
        "service_account": service_account,
    }
    return [
        _render(templates, "cluster-role", values),
        _render(templates, "cluster-role-binding", values),
    ]


def nfd_manifests(config, templates):
    """node-feature-discovery, as kubegpu deploys it: its CRDs, nfd-master, nfd-worker (on
    every node, the GPU nodes' taint tolerated), nfd-gc, their ServiceAccounts and RBAC."""
    version = config["nfd_version"]
    ns = config["namespace"]
    out = []
    for template in ("nfd-crd-nodefeature", "nfd-crd-nodefeaturerule", "nfd-crd-nodefeaturegroup"):
        out.append(
            _render(templates, template, {"labels": _labels("node-feature-discovery", "nfd")})
        )
    for name in (NFD_MASTER_NAME, NFD_WORKER_NAME, NFD_GC_NAME):
        out.append(_service_account(config, templates, name, name, version))
    out.extend(
        _cluster_role(
            config,
            templates,
            NFD_MASTER_CLUSTER_ROLE_NAME,
            NFD_MASTER_RULES,
            NFD_MASTER_NAME,
            NFD_MASTER_NAME,
            version,
        )
    )
    out.extend(
        _cluster_role(
            config,
            templates,
            NFD_GC_CLUSTER_ROLE_NAME,
            NFD_GC_RULES,
            NFD_GC_NAME,
            NFD_GC_NAME,
            version,
        )
    )
    worker_labels = _labels(NFD_WORKER_NAME, NFD_WORKER_NAME, version)
    values = {"labels": worker_labels, "namespace": ns}
    out.append(_render(templates, "nfd-worker-role", values))
    out.append(_render(templates, "nfd-worker-rolebinding", values))
    worker_conf = to_yaml(NFD_WORKER_CONFIG)
    out.append(_render(templates, "nfd-worker-configmap", dict(values, config=worker_conf)))
    common = {
        "namespace": ns,
        "image": image_ref(config, "nfd"),
        "image_pull_policy": config["image_pull_policy"],
        "image_pull_secrets": [{"name": s} for s in config["image_pull_secrets"]],
        "security_context": dict(NFD_SECURITY_CONTEXT),
    }
    control_plane = [dict(CONTROL_PLANE_TOLERATION)]
    worker_checksum = _checksum({"nfd-worker.conf": worker_conf})
    for name, template, extra in (
        (NFD_MASTER_NAME, "nfd-master-deployment", {"tolerations": control_plane}),
        (
            NFD_WORKER_NAME,
            "nfd-worker-daemonset",
            {
                "tolerations": control_plane + _tolerations(config),
                "config_checksum": worker_checksum,
            },
        ),
        (NFD_GC_NAME, "nfd-gc-deployment", {"tolerations": control_plane}),
    ):
        values = dict(common, labels=_labels(name, name, version))
        values.update(extra)
        out.append(_render(templates, template, values))
    return out


def dra_manifests(config, templates):
    """NVIDIA's DRA driver for GPUs: the kubelet plugin's ServiceAccount, RBAC and DaemonSet
    (on DRA nodes only) and the DeviceClasses its claims name."""
    version = config["dra_driver_version"]
    out = [_service_account(config, templates, DRA_SERVICE_ACCOUNT, "dra-kubelet-plugin", version)]
    out.extend(
        _cluster_role(
            config,
            templates,
            DRA_CLUSTER_ROLE_NAME,
            DRA_KUBELET_PLUGIN_RULES,
            DRA_SERVICE_ACCOUNT,
            "dra-kubelet-plugin",
            version,
        )
    )
    for name, expression in sorted(DRA_DEVICE_CLASSES.items()):
        values = {
            "name": name,
            "labels": _labels(name, "dra-deviceclass"),
            "expression": expression,
        }
        out.append(_render(templates, "dra-deviceclass", values))
    values = _daemonset_values(
        config, DRA_KUBELET_PLUGIN_NAME, "dra-kubelet-plugin", version, "dra_driver", dra=True
    )
    values.update(
        driver_root=config["driver_root"],
        resources=_container_resources(config["dra_driver_resources"]),
    )
    out.append(_render(templates, "dra-kubelet-plugin-daemonset", values))
    return out


def _service_account(config, templates, name, component, version):
    values = {
        "name": name,
        "labels": _labels(name, component, version),
        "namespace": config["namespace"],
    }
    return _render(templates, "service-account", values)


def render_manifests(config, templates, capabilities=None):
    """Every object of the cluster layer, in apply order, for a normalized config.

    templates: the YAML files of data/cluster/ by name (data_files.read_templates(
    TEMPLATE_FOLDER) on the controller; the module gets them from its action plugin).

    capabilities (discovered from the cluster by the gpu_manifests module):
      service_monitor: the monitoring.coreos.com/v1 ServiceMonitor API exists;
      create_namespace: the namespace is absent (or ours) and so is rendered here;
      manage_runtime_class: no foreign RuntimeClass of that name exists;
      deploy_nfd: gpu_cluster_nfd is deploy and no NFD that kubegpu did not create serves
        the NodeFeature API (one that does is used instead of deploying a second).
    """
    caps = {
        "service_monitor": False,
        "create_namespace": False,
        "manage_runtime_class": True,
        "deploy_nfd": config["nfd"] == "deploy",
    }
    caps.update(capabilities or {})
    # NFD is deployed for GFD: without GFD nothing of kubegpu's needs it.
    caps["deploy_nfd"] = caps["deploy_nfd"] and config["gfd_enabled"]
    ns = config["namespace"]
    dp_version = config["device_plugin_version"]
    out = []
    if caps["create_namespace"]:
        values = {"namespace": ns, "labels": dict(NAMESPACE_LABELS)}
        out.append(_render(templates, "namespace", values))
    if config["runtime_class_enabled"] and caps["manage_runtime_class"]:
        scheduling = {}
        if config["runtime_class_node_selector"]:
            scheduling["nodeSelector"] = dict(config["runtime_class_node_selector"])
        if config["runtime_class_tolerations"]:
            scheduling["tolerations"] = [dict(t) for t in config["runtime_class_tolerations"]]
        values = {
            "name": config["runtime_class_name"],
            "labels": _labels("nvidia-runtime-class", "runtime-class"),
            "handler": config["runtime_class_handler"],
            "scheduling": scheduling,
        }
        out.append(_render(templates, "runtime-class", values))
    if caps["deploy_nfd"]:
        out.extend(nfd_manifests(config, templates))
    plugin_or_gfd = config["device_plugin_enabled"] or config["gfd_enabled"]
    if plugin_or_gfd:
        values = {
            "labels": _labels(DEVICE_PLUGIN_NAME, "device-plugin", dp_version),
            "namespace": ns,
            "data": configmap_data(config),
        }
        out.append(_render(templates, "device-plugin-configmap", values))
    if config["device_plugin_enabled"]:
        out.append(
            _service_account(config, templates, DEVICE_PLUGIN_NAME, "device-plugin", dp_version)
        )
    if config["gfd_enabled"]:
        out.append(
            _service_account(config, templates, GFD_NAME, "gpu-feature-discovery", dp_version)
        )
        if uses_node_feature_api(config):
            out.extend(
                _cluster_role(
                    config,
                    templates,
                    GFD_CLUSTER_ROLE_NAME,
                    GFD_RULES,
                    GFD_NAME,
                    "gpu-feature-discovery",
                    dp_version,
                )
            )
    if plugin_or_gfd and uses_config_manager(config):
        # The config-manager sidecars read their node's labels.
        values = {
            "labels": _labels(DEVICE_PLUGIN_NAME, "device-plugin", dp_version),
            "namespace": ns,
            "device_plugin": config["device_plugin_enabled"],
            "gfd": config["gfd_enabled"],
        }
        out.append(_render(templates, "config-manager-clusterrole", values))
        out.append(_render(templates, "config-manager-clusterrolebinding", values))
    if config["device_plugin_enabled"]:
        out.append(_device_plugin_daemonset(config, templates))
        if _any(config, lambda s: s["sharing"]["strategy"] == "mps"):
            out.append(_mps_daemonset(config, templates))
    if config["gfd_enabled"]:
        out.append(_gfd_daemonset(config, templates))
    if config["allocation"] == "dra":
        out.extend(dra_manifests(config, templates))
    if config["dcgm_exporter_enabled"]:
        dcgm_version = config["dcgm_exporter_version"]
        labels = _labels(DCGM_NAME, "dcgm-exporter", dcgm_version)
        out.append(_service_account(config, templates, DCGM_NAME, "dcgm-exporter", dcgm_version))
        out.append(_dcgm_daemonset(config, templates))
        values = {"labels": labels, "namespace": ns, "port": config["dcgm_exporter_port"]}
        out.append(_render(templates, "dcgm-exporter-service", values))
        if config["dcgm_exporter_service_monitor"] and caps["service_monitor"]:
            sm_labels = dict(labels)
            sm_labels.update(config["dcgm_exporter_service_monitor_labels"])
            values = {
                "labels": sm_labels,
                "namespace": ns,
                "interval": config["dcgm_exporter_service_monitor_interval"],
            }
            out.append(_render(templates, "dcgm-exporter-servicemonitor", values))
    for quota in config["quotas"]:
        values = {
            "labels": _labels("gpu-quota", "quota"),
            "namespace": quota["namespace"],
            "resource": quota["resource"],
            "hard": dict(quota["hard"]),
            "max": quota["max_per_container"],
        }
        if quota["gpus"] is not None:
            values["hard"]["requests." + quota["resource"]] = quota["gpus"]
        if values["hard"]:
            out.append(_render(templates, "gpu-resourcequota", values))
        if quota["max_per_container"] is not None:
            out.append(_render(templates, "gpu-limitrange", values))
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
