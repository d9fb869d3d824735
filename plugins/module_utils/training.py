# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Training workloads: example Jobs (single GPU, PyTorch DDP, TensorFlow multi-worker,
time-sliced, MIG) and the smoke Job, from checked gpu_tenancy settings.

- render_workloads(settings, namespace) -> {name: [manifest, ...]}.
- render_smoke(settings, namespace, run_id, ...) -> [ConfigMap, Job]: the `kubegpu smoke` check.

Every Job runs a training script mounted from a ConfigMap; the script prints a line starting
with PASS_MARKER or FAIL_MARKER. GFD labels the node with nvidia.com/gpu.product and
nvidia.com/gpu.memory (total MiB); with the mixed MIG strategy the labels of a MIG resource are
keyed by its resource name (nvidia.com/mig-1g.10gb.product).

Runs on the controller's Python (3.8+ syntax), from the collection on disk.
"""

from __future__ import absolute_import, division, print_function

import copy
import json

from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import read_text
from ansible_collections.kubegpu.gpu.plugins.module_utils.tenancy_settings import (
    GPU_PRODUCT_LABEL,
    GPU_RESOURCE,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MIG_RESOURCE,
    SHARED_SUFFIX,
)

__metaclass__ = type

GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"

PASS_MARKER = "KUBEGPU-TRAIN PASS"
FAIL_MARKER = "KUBEGPU-TRAIN FAIL"
SCRIPT_KEY = "train.py"
SCRIPT_MOUNT = "/workload"


# The training scripts the Jobs run (data/: Python files, shipped to the pods as they are).
PYTORCH_SCRIPT = read_text("train_pytorch.py")
TENSORFLOW_SCRIPT = read_text("train_tensorflow.py")


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
        # The training needs no API access: no service-account token in the pod.
        "automountServiceAccountToken": False,
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
    products = [p if renamed else p + SHARED_SUFFIX for p in settings["workload_gpu_products"]]
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
    profile = MIG_RESOURCE.fullmatch(resource).group("profile")
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
