# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Readiness of GPU nodes as seen from the Kubernetes API, as data.

evaluate_node(node, view, options) turns a Node object, the pods of the GPU components on it and
the device plugin config the node uses into checks of the same shape as gpu_node_readiness
(name, layer, status pass|fail|warn|skip, observed, expected, remedy) and verdict() sums them
up. Everything takes plain dicts as the API returns them (camelCase), so the tests feed it
real captured node labels and status.

- expected_resources(config_file, gpus): which extended resources, how many, a node advertises
  under a device plugin config file (time-slicing and MPS multiply by replicas; renameByDefault
  adds ".shared"; explicit renames win).
- pod_health(pods): whether a component's pod on a node runs, and if not, why (the container's
  waiting reason, e.g. CrashLoopBackOff, or the scheduler's message).
- smoke_pod(...) / judge_smoke(...): the CUDA sample pod and the verdict on how it ended.

Runs on the controller's Python (3.8+ syntax), standard library (PyYAML when present).
"""

from __future__ import absolute_import, division, print_function

import json

from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_manifests import OWNED_LABELS
from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_settings import (
    GPU_RESOURCE,
    SHARED_SUFFIX,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.k8s_values import parse_quantity
from ansible_collections.kubegpu.gpu.plugins.module_utils.node_readiness import (
    make_check,
    summarize,
    verdict,
)

__metaclass__ = type

try:
    import yaml

    HAS_YAML = True
except ImportError:  # the config is also read as JSON, which kubegpu's YAML is not
    HAS_YAML = False

LAYER_KUBELET = "kubelet"
LAYER_CLUSTER = "cluster"
DEFAULT_GFD_LABELS = ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory")
GFD_COUNT_LABEL = "nvidia.com/gpu.count"
GFD_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
# Waiting reasons that will not resolve by waiting.
HOPELESS_REASONS = (
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
)

VERDICT_ORDER = ("not_ready", "ready_with_warnings", "ready")


# --- the device plugin config a node uses ---------------------------------------------------------


def parse_config_text(text):
    """A device plugin config file (YAML or JSON text) as a dict; ValueError when unreadable."""
    if HAS_YAML:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError("not valid YAML: %s" % " ".join(str(exc).split())) from exc
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a mapping")
    return data


def select_config(node, configmap, label, default_name):
    """(config name, parsed config or None, problem or None) for one node.

    configmap is the device plugin's ConfigMap (or None when absent); the node's `label` picks a
    named config, as the config-manager sidecar does; otherwise default_name, or the only one.
    """
    labels = (node.get("metadata") or {}).get("labels") or {}
    data = (configmap or {}).get("data") or {}
    wanted = labels.get(label)
    if configmap is None:
        return wanted or default_name, None, "the device plugin ConfigMap does not exist"
    if wanted:
        name = wanted
        if name not in data:
            return (
                name,
                None,
                (
                    "node label %s=%s names a config the ConfigMap does not have "
                    "(it has: %s)" % (label, name, ", ".join(sorted(data)) or "none")
                ),
            )
    elif default_name in data:
        name = default_name
    elif len(data) == 1:
        name = next(iter(data))
    else:
        return default_name, None, "the ConfigMap has no config %r" % default_name
    try:
        return name, parse_config_text(data[name]), None
    except ValueError as exc:
        return name, None, "config %r cannot be read: %s" % (name, exc)


def describe_config(config):
    flags = config.get("flags") or {}
    parts = ["MIG strategy %s" % flags.get("migStrategy", "none")]
    sharing = config.get("sharing") or {}
    for key, label in (("timeSlicing", "time-slicing"), ("mps", "MPS")):
        block = sharing.get(key) or {}
        if block.get("resources"):
            parts.append(
                "%s %s"
                % (
                    label,
                    ", ".join(
                        "%s x%s" % (r.get("name"), r.get("replicas")) for r in block["resources"]
                    ),
                )
            )
    return "; ".join(parts)


def expected_resources(config, gpus):
    """({resource: count}, why) the node should advertise, or (None, why) when unknowable.

    gpus counts what the plugin sees as nvidia.com/gpu before sharing: physical GPUs, or MIG
    devices under MIG strategy single. config is the device plugin config file as a dict (None:
    no config, i.e. the plugin's defaults).
    """
    if gpus is None:
        return None, "the expected GPU count is unknown"
    config = config or {}
    flags = config.get("flags") or {}
    sharing = config.get("sharing") or {}
    block, how = None, None
    for key, label in (("mps", "MPS"), ("timeSlicing", "time-slicing")):
        if (sharing.get(key) or {}).get("resources"):
            block, how = sharing[key], label
            break
    if block is None:
        if flags.get("migStrategy") == "mixed":
            return None, (
                "MIG strategy mixed advertises one resource per MIG profile; give "
                "expected_resources for this node"
            )
        return {GPU_RESOURCE: gpus}, "%d GPU(s)" % gpus
    counts, notes = {}, []
    for item in block.get("resources") or []:
        name = item.get("name")
        if name != GPU_RESOURCE:
            return None, (
                "%s of %s depends on the MIG layout; give expected_resources for this "
                "node" % (how, name)
            )
        # Per-resource rename and devices: device plugin v0.20.0 ignores both (with a
        # warning in its log), so every GPU is shared under the resource's own name.
        replicas = item.get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
            return None, "the config's replicas %r is not a count" % (replicas,)
        target = name + SHARED_SUFFIX if block.get("renameByDefault") else name
        counts[target] = counts.get(target, 0) + gpus * replicas
        notes.append("%d GPU(s) x %d %s replicas as %s" % (gpus, replicas, how, target))
    return counts, "; ".join(notes)


def quantity_count(value):
    """An allocatable/capacity quantity as an int (None when absent or not a whole number)."""
    if value is None:
        return None
    try:
        amount = parse_quantity(str(value))
    except ValueError:
        return None
    return int(amount) if amount.denominator == 1 else None


def nvidia_resources(status, field):
    return dict(
        (k, quantity_count(v))
        for k, v in ((status or {}).get(field) or {}).items()
        if k.startswith("nvidia.com/")
    )


# --- pods ---------------------------------------------------------------------------------------


def _ready(pod):
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _pod_problem(pod):
    """(short summary, reason) of what keeps a pod from running."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or "Unknown"
    name = meta.get("name")
    if meta.get("deletionTimestamp"):
        return "pod %s is terminating" % name, "Terminating"
    statuses = (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])
    for cstatus in statuses:
        state = cstatus.get("state") or {}
        waiting = state.get("waiting")
        terminated = state.get("terminated")
        last = (cstatus.get("lastState") or {}).get("terminated") or {}
        if waiting and waiting.get("reason") not in (None, "PodInitializing", "ContainerCreating"):
            text = "container %s waiting: %s" % (cstatus.get("name"), waiting.get("reason"))
            if cstatus.get("restartCount"):
                text += " (%d restarts" % cstatus["restartCount"]
                if last:
                    text += ", last exit %s %s" % (last.get("exitCode"), last.get("reason") or "")
                    text = text.rstrip()
                text += ")"
            if waiting.get("message"):
                text += ": " + " ".join(waiting["message"].split())[:200]
            return "pod %s %s; %s" % (name, phase, text), waiting.get("reason")
        if terminated and terminated.get("exitCode") not in (0, None) and phase != "Running":
            return (
                "pod %s %s; container %s exited %s %s"
                % (
                    name,
                    phase,
                    cstatus.get("name"),
                    terminated.get("exitCode"),
                    terminated.get("reason") or "",
                )
            ).rstrip(), terminated.get("reason") or "Error"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return (
                "pod %s %s: %s"
                % (
                    name,
                    phase,
                    " ".join((cond.get("message") or cond.get("reason") or "").split())[:240],
                ),
                cond.get("reason") or "Unschedulable",
            )
    if phase == "Running":
        not_ready = [
            c.get("name") for c in status.get("containerStatuses") or [] if not c.get("ready")
        ]
        return (
            "pod %s Running; container(s) not ready: %s"
            % (name, ", ".join(not_ready) or "(readiness unknown)")
        ), "NotReady"
    return "pod %s %s" % (name, phase), phase


def pod_health(pods):
    """(ok, observed, reason) for the pods of one component on one node."""
    if not pods:
        return False, "no pod on this node", "NoPod"
    ordered = sorted(
        pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", reverse=True
    )
    for pod in ordered:
        if (
            (pod.get("status") or {}).get("phase") == "Running"
            and _ready(pod)
            and not (pod.get("metadata") or {}).get("deletionTimestamp")
        ):
            restarts = sum(
                c.get("restartCount") or 0
                for c in (pod.get("status") or {}).get("containerStatuses") or []
            )
            text = "pod %s Running and ready" % pod["metadata"].get("name")
            if restarts:
                text += " (%d restarts)" % restarts
            return True, text, None
    summary, reason = _pod_problem(ordered[0])
    return False, summary, reason


def _pod_remedy(component, reason, options):
    ns = options.get("namespace") or "<namespace>"
    selector = options.get("selectors", {}).get(component, "")
    logs = "kubectl -n %s logs -l %s --all-containers --prefix" % (ns, selector)
    if reason == "NoPod":
        return (
            "No %s pod was scheduled here. The DaemonSet runs on nodes labelled %s=%s "
            "(gpu_cluster_gpu_node_label) and tolerates the %s taint: check the node's labels "
            "and taints, and `kubectl -n %s describe daemonset` for errors; apply role "
            "kubegpu.gpu.gpu_cluster if the DaemonSet is missing."
            % (
                component,
                options.get("gpu_node_label", "nvidia.com/gpu.present"),
                options.get("gpu_node_label_value", "true"),
                options.get("gpu_taint_key", "nvidia.com/gpu"),
                ns,
            )
        )
    if reason == "CrashLoopBackOff":
        hint = ""
        if component in ("device plugin", "GPU Feature Discovery"):
            hint = (
                " A failure to initialise NVML means the pod does not run with the nvidia "
                "runtime (RuntimeClass nvidia, or nvidia as containerd's default runtime) or "
                "the driver is not loaded on the node (see kubegpu.gpu.gpu_node_readiness)."
            )
        return "The container keeps exiting: read `%s --previous`.%s" % (logs, hint)
    if reason in ("ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull", "InvalidImageName"):
        return (
            "The node cannot pull the image: check the registry is reachable from the node "
            "(gpu_cluster_image_registry can point at a mirror), the tag exists, and "
            "gpu_cluster_image_pull_secrets for private registries."
        )
    if reason in ("Unschedulable", "Pending"):
        return (
            "The scheduler cannot place the pod: read the message above (`kubectl -n %s "
            "describe pod`); system-node-critical pods preempt others, so look for taints "
            "and node selectors." % ns
        )
    return "Inspect it: `kubectl -n %s describe pod` and `%s`." % (ns, logs)


# --- checks -------------------------------------------------------------------------------------


def check_node_ready(node):
    status = node.get("status") or {}
    ready = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = cond
    expected = "condition Ready=True"
    if ready is None:
        return make_check(
            "node_ready",
            LAYER_KUBELET,
            "fail",
            "no Ready condition reported",
            expected,
            "The kubelet has not reported status: start the kubelet on "
            "the node and check `journalctl -u kubelet`.",
        )
    observed = "Ready=%s" % ready.get("status")
    if ready.get("reason"):
        observed += " (%s)" % ready["reason"]
    if ready.get("status") != "True":
        message = " ".join((ready.get("message") or "").split())[:200]
        if message:
            observed += ": " + message
        return make_check(
            "node_ready",
            LAYER_KUBELET,
            "fail",
            observed,
            expected,
            "Check the kubelet and the container runtime on the node "
            "(`journalctl -u kubelet`, kubegpu.gpu.gpu_node_readiness); a "
            "NotReady node gets no pods.",
        )
    if (node.get("spec") or {}).get("unschedulable"):
        return make_check(
            "node_ready",
            LAYER_KUBELET,
            "warn",
            observed + "; cordoned",
            expected,
            "The node is cordoned (unschedulable): `kubectl uncordon` it when maintenance is over.",
        )
    return make_check("node_ready", LAYER_KUBELET, "pass", observed, expected)


def check_device_plugin_config(selected, enabled):
    name, config, problem = selected
    expected = "the device plugin config the node selects exists and parses"
    if not enabled:
        return make_check(
            "device_plugin_config", LAYER_CLUSTER, "skip", "device plugin checks disabled", expected
        )
    if problem and "ConfigMap does not exist" in problem:
        return make_check(
            "device_plugin_config",
            LAYER_CLUSTER,
            "warn",
            problem + "; assuming the plugin's defaults (no sharing)",
            expected,
            "Apply role kubegpu.gpu.gpu_cluster, or point device_plugin_configmap "
            "at the ConfigMap your device plugin uses.",
        )
    if problem:
        return make_check(
            "device_plugin_config",
            LAYER_CLUSTER,
            "fail",
            problem,
            expected,
            "Label the node with an existing config name (or remove the label "
            "for the default), or add that config to "
            "gpu_cluster_device_plugin_configs and apply role gpu_cluster.",
        )
    return make_check(
        "device_plugin_config",
        LAYER_CLUSTER,
        "pass",
        "config %r: %s" % (name, describe_config(config)),
        expected,
    )


def check_allocatable(node, expected, why, source):
    """Allocatable GPU resources against the expected counts (expected None: unknown)."""
    status = node.get("status") or {}
    allocatable = nvidia_resources(status, "allocatable")
    capacity = nvidia_resources(status, "capacity")
    shown = dict((k, v) for k, v in allocatable.items() if v)
    observed = (
        ", ".join("%s=%s" % kv for kv in sorted(shown.items()))
        or "no nvidia.com/* resources allocatable"
    )
    remedy_none = (
        "The device plugin has not registered GPUs with the kubelet: check its pod on "
        "this node (device_plugin_pod), that the driver works on the node "
        "(kubegpu.gpu.gpu_node_readiness), and the container runtime's nvidia runtime."
    )
    if expected is None:
        if not shown:
            return make_check(
                "gpu_allocatable",
                LAYER_CLUSTER,
                "fail",
                observed,
                "at least one nvidia.com/* resource allocatable",
                remedy_none,
            )
        return make_check(
            "gpu_allocatable",
            LAYER_CLUSTER,
            "warn",
            observed,
            "a known count (%s)" % why,
            "Pass expected_gpus (or expected_resources) so the count is checked, "
            "not only that GPUs exist.",
        )
    expected_text = ", ".join("%s=%d" % kv for kv in sorted(expected.items()))
    expected_text += " (%s; count from %s)" % (why, source)
    short = dict((k, n) for k, n in expected.items() if (allocatable.get(k) or 0) < n)
    if not shown or all((allocatable.get(k) or 0) == 0 for k in expected):
        return make_check(
            "gpu_allocatable", LAYER_CLUSTER, "fail", observed, expected_text, remedy_none
        )
    if short:
        unhealthy = [k for k in short if (capacity.get(k) or 0) > (allocatable.get(k) or 0)]
        if unhealthy:
            remedy = (
                "The device plugin marked devices unhealthy (capacity %s > allocatable): "
                "look for XID errors (`dmesg`, nvidia-smi -q) and the plugin's log; a GPU "
                "reset or reboot may be needed."
                % ", ".join("%s=%s" % (k, capacity.get(k)) for k in unhealthy)
            )
        else:
            remedy = (
                "Fewer devices than expected: check that every GPU is visible on the node "
                "(kubegpu.gpu.gpu_node_readiness), that the node uses the intended device "
                "plugin config (device_plugin_config), and restart the plugin pod after "
                "a config change."
            )
        return make_check("gpu_allocatable", LAYER_CLUSTER, "fail", observed, expected_text, remedy)
    extra = dict((k, v) for k, v in shown.items() if k in expected and v > expected[k])
    if extra:
        return make_check(
            "gpu_allocatable",
            LAYER_CLUSTER,
            "warn",
            observed,
            expected_text,
            "More devices than expected: the expected count or the sharing "
            "config is not what this node runs; correct expected_gpus or the "
            "node's config label.",
        )
    return make_check("gpu_allocatable", LAYER_CLUSTER, "pass", observed, expected_text)


def check_component_pod(name, component, pods, enabled, options, severity="fail"):
    expected = "a %s pod Running and ready on this node" % component
    if not enabled:
        return make_check(name, LAYER_CLUSTER, "skip", "%s checks disabled" % component, expected)
    ok, observed, reason = pod_health(pods)
    if ok:
        return make_check(name, LAYER_CLUSTER, "pass", observed, expected)
    return make_check(
        name, LAYER_CLUSTER, severity, observed, expected, _pod_remedy(component, reason, options)
    )


GFD_MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
GFD_LABELS_REMEDY = (
    "GPU Feature Discovery publishes these labels through node-feature-discovery's (NFD) "
    "NodeFeature API: check the gpu-feature-discovery pod on this node and its log, that "
    "nfd-master runs (kubegpu deploys it with gpu_cluster_nfd: deploy) and has published "
    "the node's NodeFeature objects, and that GFD's ServiceAccount may get, create and "
    "update nodefeatures.nfd.k8s-sigs.io in its namespace (ClusterRole "
    "kubegpu-gpu-feature-discovery)."
)


def check_gfd_labels(node, required, enabled, expected_gpus, mig_strategy="none"):
    """GFD's labels on a GPU node: `required` (product, count, memory), and where the node's
    device plugin config uses MIG, nvidia.com/mig.strategy naming that strategy."""
    required = list(required)
    if mig_strategy not in (None, "none") and GFD_MIG_STRATEGY_LABEL not in required:
        required.append(GFD_MIG_STRATEGY_LABEL)
    expected = "labels %s" % ", ".join(required)
    if mig_strategy not in (None, "none"):
        expected += " (%s=%s)" % (GFD_MIG_STRATEGY_LABEL, mig_strategy)
    if not enabled:
        return make_check(
            "gfd_labels", LAYER_CLUSTER, "skip", "GPU Feature Discovery checks disabled", expected
        )
    labels = (node.get("metadata") or {}).get("labels") or {}
    missing = [key for key in required if key not in labels]
    present = ", ".join("%s=%s" % (k, labels[k]) for k in required if k in labels)
    if missing:
        return make_check(
            "gfd_labels",
            LAYER_CLUSTER,
            "fail",
            "missing %s%s" % (", ".join(missing), ("; present " + present) if present else ""),
            expected,
            GFD_LABELS_REMEDY,
        )
    found_mig = labels.get(GFD_MIG_STRATEGY_LABEL)
    if mig_strategy not in (None, "none") and found_mig != mig_strategy:
        return make_check(
            "gfd_labels",
            LAYER_CLUSTER,
            "fail",
            present,
            expected,
            "GFD labels the node with MIG strategy %r but the node's device plugin config "
            "uses %r: GFD has not read the current config yet (its config-manager sidecar "
            "follows the node's config label; restart the gpu-feature-discovery pod on this "
            "node) or the node's config label names another config." % (found_mig, mig_strategy),
        )
    count = quantity_count(labels.get(GFD_COUNT_LABEL))
    if expected_gpus is not None and count is not None and count != expected_gpus:
        return make_check(
            "gfd_labels",
            LAYER_CLUSTER,
            "warn",
            present,
            expected + "; %s=%d" % (GFD_COUNT_LABEL, expected_gpus),
            "GFD counts %d device(s) but %d are expected: a GPU is missing or the expectation "
            "is wrong (under MIG strategy single GFD counts MIG devices)." % (count, expected_gpus),
        )
    return make_check("gfd_labels", LAYER_CLUSTER, "pass", present, expected)


def _selector_matches(selector, labels):
    return all(labels.get(k) == v for k, v in (selector or {}).items())


def check_runtime_class(node, runtime_class, name, handler):
    expected = "RuntimeClass %s (handler %s) usable on this node" % (name, handler or "any")
    if not name:
        return make_check(
            "runtime_class", LAYER_CLUSTER, "skip", "no RuntimeClass asked for", expected
        )
    if runtime_class is None:
        return make_check(
            "runtime_class",
            LAYER_CLUSTER,
            "fail",
            "RuntimeClass %s does not exist" % name,
            expected,
            "Apply role kubegpu.gpu.gpu_cluster (gpu_cluster_runtime_class_enabled);"
            " pods with runtimeClassName %s are rejected until it exists." % name,
        )
    observed = "handler %s" % runtime_class.get("handler")
    if handler and runtime_class.get("handler") != handler:
        return make_check(
            "runtime_class",
            LAYER_CLUSTER,
            "fail",
            observed,
            expected,
            "The RuntimeClass points at another runtime handler; pods would not "
            "get the nvidia runtime. Fix its handler (it is immutable: delete and "
            "re-create it).",
        )
    selector = (runtime_class.get("scheduling") or {}).get("nodeSelector") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    if selector and not _selector_matches(selector, labels):
        return make_check(
            "runtime_class",
            LAYER_CLUSTER,
            "fail",
            observed
            + "; scheduling.nodeSelector %s does not match this node"
            % (", ".join("%s=%s" % kv for kv in sorted(selector.items()))),
            expected,
            "Label the node to match gpu_cluster_runtime_class_node_selector, or "
            "change the selector; pods using the RuntimeClass are never scheduled "
            "here.",
        )
    return make_check("runtime_class", LAYER_CLUSTER, "pass", observed, expected)


# NVIDIA's DRA driver for GPUs: its driver name in ResourceSlices, its kubelet plugin's pods.
DRA_DRIVER = "gpu.nvidia.com"
DRA_PLUGIN_COMPONENT = "DRA kubelet plugin"
DRA_PLUGIN_SELECTOR = "app.kubernetes.io/name=nvidia-dra-driver-kubelet-plugin"


def _device_type(device):
    """A ResourceSlice device's type attribute (the driver's own, unqualified or qualified)."""
    attributes = device.get("attributes") or {}
    value = attributes.get("type") or attributes.get(DRA_DRIVER + "/type") or {}
    return value.get("string")


def dra_gpu_devices(slices, node_name):
    """The names of the whole GPUs that ResourceSlices of driver gpu.nvidia.com publish for
    node_name, from each pool's newest generation only (older ones are being replaced)."""
    newest = {}
    for item in slices or []:
        spec = item.get("spec") or {}
        if spec.get("driver") != DRA_DRIVER or spec.get("nodeName") != node_name:
            continue
        pool = spec.get("pool") or {}
        generation = pool.get("generation") or 0
        name = pool.get("name")
        if generation > newest.get(name, -1):
            newest[name] = generation
    names = []
    for item in slices or []:
        spec = item.get("spec") or {}
        pool = spec.get("pool") or {}
        if (
            spec.get("driver") != DRA_DRIVER
            or spec.get("nodeName") != node_name
            or (pool.get("generation") or 0) != newest.get(pool.get("name"))
        ):
            continue
        names.extend(d.get("name") for d in spec.get("devices") or [] if _device_type(d) == "gpu")
    return sorted(names)


def check_dra_resource_slices(node, slices, expected_gpus, options):
    """A DRA node's ResourceSlices (driver gpu.nvidia.com) list as many GPUs as the node has."""
    name = node["metadata"]["name"]
    gpus = dra_gpu_devices(slices, name)
    expected = "ResourceSlices of driver %s list %s GPU(s) for this node" % (
        DRA_DRIVER,
        "the node's" if expected_gpus is None else expected_gpus,
    )
    observed = "%d GPU(s)%s" % (len(gpus), (": " + ", ".join(gpus)) if gpus else "")
    if gpus and (expected_gpus is None or len(gpus) == expected_gpus):
        return make_check("dra_resource_slices", LAYER_CLUSTER, "pass", observed, expected)
    namespace = options.get("namespace", "kube-system")
    return make_check(
        "dra_resource_slices",
        LAYER_CLUSTER,
        "fail",
        observed,
        expected,
        "The %s pod on this node publishes its GPUs (kubectl -n %s get pods -l %s "
        "--field-selector spec.nodeName=%s; its logs: kubectl -n %s logs <pod> -c gpus): "
        "a GPU it does not list cannot be allocated by any ResourceClaim. Check the node's "
        "driver (nvidia-smi) and restart that pod."
        % (DRA_PLUGIN_COMPONENT, namespace, DRA_PLUGIN_SELECTOR, name, namespace),
    )


def _skip_on_dra(check):
    return make_check(
        check["name"],
        check["layer"],
        "skip",
        "a DRA node: NVIDIA's DRA driver allocates its GPUs, the device plugin does not run",
        check["expected"],
    )


def evaluate_node(node, view, options):
    """Every check for one node. view: {config: (name, dict, problem), pods: {component: [..]},
    runtime_class: dict or None, smoke: check or None}; options: see the module."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    _name, config, _problem = view["config"]
    expected_gpus, source = options.get("expected_gpus"), "expected_gpus"
    if expected_gpus is None:
        expected_gpus = quantity_count(labels.get(GFD_COUNT_LABEL))
        source = "GFD label %s" % GFD_COUNT_LABEL
    override = options.get("expected_resources")
    if override:
        expected, why, source = dict(override), "given", "expected_resources"
    else:
        expected, why = expected_resources(config, expected_gpus)
    checks = [
        check_node_ready(node),
        check_device_plugin_config(view["config"], options.get("device_plugin", True)),
        check_allocatable(node, expected, why, source),
        check_component_pod(
            "device_plugin_pod",
            "device plugin",
            view["pods"].get("device_plugin"),
            options.get("device_plugin", True),
            options,
        ),
        check_component_pod(
            "gpu_feature_discovery_pod",
            "GPU Feature Discovery",
            view["pods"].get("gfd"),
            options.get("gfd", True),
            options,
        ),
        check_gfd_labels(
            node,
            options.get("gfd_labels") or list(DEFAULT_GFD_LABELS),
            options.get("gfd", True),
            options.get("expected_gpus"),
            ((config or {}).get("flags") or {}).get("migStrategy") or "none",
        ),
        check_component_pod(
            "dcgm_exporter_pod",
            "DCGM exporter",
            view["pods"].get("dcgm_exporter"),
            options.get("dcgm_exporter", True),
            options,
            severity="warn",
        ),
        check_runtime_class(
            node,
            view.get("runtime_class"),
            options.get("runtime_class"),
            options.get("runtime_class_handler"),
        ),
    ]
    dra_label = options.get("dra_node_label")
    if dra_label and labels.get(dra_label) == "true":
        # gpu_cluster_allocation dra: the device plugin never runs here; the DRA kubelet
        # plugin does, and the node's GPUs are in ResourceSlices instead of allocatable.
        dra = view.get("dra") or {}
        skipped = ("device_plugin_config", "gpu_allocatable", "device_plugin_pod")
        checks = [_skip_on_dra(c) if c["name"] in skipped else c for c in checks]
        checks.append(
            check_component_pod(
                "dra_kubelet_plugin_pod",
                DRA_PLUGIN_COMPONENT,
                dra.get("pods"),
                True,
                options,
            )
        )
        checks.append(check_dra_resource_slices(node, dra.get("slices"), expected_gpus, options))
    checks.append(
        view.get("smoke")
        or make_check(
            "smoke_test",
            LAYER_CLUSTER,
            "skip",
            "not asked for (smoke_test: false)",
            "a pod requesting one GPU runs the CUDA sample to success",
        )
    )
    return checks


def node_report(checks):
    """verdict, summary and checks of one node, as gpu_node_readiness reports them."""
    return {"verdict": verdict(checks), "summary": summarize(checks), "checks": checks}


def overall_verdict(reports):
    """The worst verdict over the nodes; not_ready when there is no node at all."""
    if not reports:
        return "not_ready"
    return min((r["verdict"] for r in reports.values()), key=VERDICT_ORDER.index)


# --- the smoke test -----------------------------------------------------------------------------


def smoke_pod(name, namespace, node, image, resource, runtime_class, timeout):
    """The CUDA sample pod pinned to one node through the scheduler (not spec.nodeName)."""
    tolerations = []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not (
            taint.get("key") or ""
        ).startswith("node.kubernetes.io/"):
            toleration = {
                "key": taint.get("key"),
                "operator": "Exists",
                "effect": taint.get("effect"),
            }
            if toleration not in tolerations:
                tolerations.append(toleration)
    labels = {
        "app.kubernetes.io/name": "kubegpu-smoke-test",
        "app.kubernetes.io/component": "smoke-test",
    }
    labels.update(OWNED_LABELS)
    spec = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": max(int(timeout), 30),
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {
                                    "key": "metadata.name",
                                    "operator": "In",
                                    "values": [node["metadata"]["name"]],
                                }
                            ]
                        }
                    ]
                }
            }
        },
        "containers": [
            {
                "name": "cuda-sample",
                "image": image,
                "resources": {"limits": {resource: "1"}, "requests": {resource: "1"}},
            }
        ],
    }
    if tolerations:
        spec["tolerations"] = tolerations
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def smoke_finished(pod):
    """Whether the smoke pod reached an end: Succeeded, Failed, or stuck for good."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    for cstatus in status.get("containerStatuses") or []:
        reason = ((cstatus.get("state") or {}).get("waiting") or {}).get("reason")
        if reason in HOPELESS_REASONS:
            return True
    return False


def judge_smoke(pod, log, log_error, pass_line, timed_out, timeout, image, deleted):
    """The smoke_test check from how the pod ended and what it printed."""
    name = "smoke_test"
    expected = "pod with 1 GPU on this node runs %s and prints %r within %ds" % (
        image,
        pass_line,
        timeout,
    )
    pod_name = (pod.get("metadata") or {}).get("name")
    phase = (pod.get("status") or {}).get("phase") or "Unknown"
    cleanup = "" if deleted else "; the pod could not be deleted: delete %s by hand" % pod_name
    tail = " | ".join(line.strip() for line in (log or "").strip().splitlines()[-3:])
    if phase == "Succeeded":
        if log is not None and pass_line in log:
            return make_check(
                name,
                LAYER_CLUSTER,
                "pass",
                "pod %s Succeeded: %s%s" % (pod_name, tail, cleanup),
                expected,
            )
        if log is None:
            return make_check(
                name,
                LAYER_CLUSTER,
                "warn",
                "pod %s Succeeded but its log could "
                "not be read (%s)%s" % (pod_name, log_error, cleanup),
                expected,
                "The sample exited 0; check that the API server can reach the "
                "kubelet for logs (`kubectl logs`).",
            )
        return make_check(
            name,
            LAYER_CLUSTER,
            "fail",
            "pod %s Succeeded without %r in its log: "
            "%s%s" % (pod_name, pass_line, tail or "(empty log)", cleanup),
            expected,
            "The image is not the CUDA vectorAdd sample, or it changed "
            "its output: set smoke_test_pass_line to what it prints on success.",
        )
    summary, reason = _pod_problem(pod)
    if timed_out:
        summary = "still %s after %ds: %s" % (phase, timeout, summary)
    if tail:
        summary += "; log: " + tail
    if reason == "Unschedulable":
        remedy = (
            "No GPU was free for the pod on this node, or the node does not advertise the "
            "resource: see gpu_allocatable, and `kubectl describe pod` for the scheduler's "
            "reason."
        )
    elif reason in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"):
        remedy = (
            "The node cannot pull %s: set smoke_test_image to an image in a registry the "
            "node can reach (a mirror)." % image
        )
    elif phase == "Failed" or reason in ("Error", "RunContainerError", "CreateContainerError"):
        remedy = (
            "The CUDA sample failed on the GPU: a 'CUDA driver version is insufficient' or "
            "'no CUDA-capable device' in its log means the container did not get the GPU "
            "through the nvidia runtime (RuntimeClass nvidia, CDI) or the driver is older "
            "than the image's CUDA; check kubegpu.gpu.gpu_node_readiness on the node."
        )
    else:
        remedy = (
            "The pod did not finish in time: `kubectl describe pod` shows why (image pull, "
            "runtime errors); raise smoke_test_timeout for slow image pulls."
        )
    return make_check(name, LAYER_CLUSTER, "fail", summary + cleanup, expected, remedy)
