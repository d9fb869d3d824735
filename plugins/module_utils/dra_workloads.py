# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Example workloads that get their GPUs through Dynamic Resource Allocation (resource.k8s.io/v1)
from NVIDIA's DRA driver for GPUs, on the node groups gpu_cluster_allocation dra serves.

The same training Jobs as training.py, with each container's nvidia.com/* resource replaced by a
ResourceClaim: one whole GPU (a ResourceClaimTemplate of DeviceClass gpu.nvidia.com), one MIG
device (DeviceClass mig.nvidia.com, the MIG profile by CEL) and one GPU shared by two pods (one
ResourceClaim both pods name, time-sliced by the driver's GpuConfig). The GPU model is chosen by
CEL on the driver's device attribute productName, not by GFD's node labels: the scheduler
allocates a device whose attributes match.

Facts about the driver (driver name, DeviceClasses, device attributes type, productName, profile,
the GpuConfig sharing parameters) were read from NVIDIA/k8s-dra-driver-gpu
(cmd/gpu-kubelet-plugin/deviceinfo.go and mig.go, api/nvidia.com/resource/v1beta1).

- render_dra_workloads(settings, namespace) -> {name: [manifest, ...]}
- product_expression(products) -> the CEL that admits GPUs of GFD-style product names.

Runs on the controller's Python (3.8+ syntax), standard library only.
"""

from __future__ import absolute_import, division, print_function

import copy
import json

from ansible_collections.kubegpu.gpu.plugins.module_utils import training
from ansible_collections.kubegpu.gpu.plugins.module_utils.tenancy_settings import (
    DRA_GPU_CLASSES,
    MIG_RESOURCE,
)

__metaclass__ = type

# The driver's name, the domain of its device attributes, and its DeviceClasses (the classes
# tenant quotas cap and gpu_cluster deploys).
DRIVER = "gpu.nvidia.com"
GPU_CLASS, MIG_CLASS = DRA_GPU_CLASSES
RESOURCE_API = "resource.k8s.io/v1"
DRIVER_CONFIG_API = "resource.nvidia.com/v1beta1"
# The claim's name inside a pod and its request's name inside the claim.
CLAIM = "gpu"
REQUEST = "gpu"


def _attribute(name):
    return "device.attributes['%s'].%s" % (DRIVER, name)


def product_expression(products):
    """CEL that admits a device whose productName is one of `products`, written as GFD writes its
    product label (NVML's name with spaces as '-'): the driver publishes NVML's name as is."""
    names = ", ".join(json.dumps(p) for p in products)
    return "%s.replace(' ', '-') in [%s]" % (_attribute("productName"), names)


def _selectors(expressions):
    return [{"cel": {"expression": e}} for e in expressions if e]


def _claim_spec(device_class, expressions, sharing=None):
    spec = {
        "devices": {
            "requests": [
                {
                    "name": REQUEST,
                    "exactly": {
                        "deviceClassName": device_class,
                        "selectors": _selectors(expressions),
                    },
                }
            ]
        }
    }
    if not spec["devices"]["requests"][0]["exactly"]["selectors"]:
        del spec["devices"]["requests"][0]["exactly"]["selectors"]
    if sharing:
        spec["devices"]["config"] = [
            {
                "requests": [REQUEST],
                "opaque": {
                    "driver": DRIVER,
                    "parameters": {
                        "apiVersion": DRIVER_CONFIG_API,
                        "kind": "GpuConfig",
                        "sharing": sharing,
                    },
                },
            }
        ]
    return spec


def _meta(name, namespace, component):
    return {
        "name": name,
        "namespace": namespace,
        "labels": {
            "app.kubernetes.io/managed-by": "kubegpu",
            "app.kubernetes.io/name": name,
            "app.kubernetes.io/component": component,
        },
    }


def claim_template(name, namespace, component, device_class, expressions):
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": _meta(name, namespace, component),
        "spec": {"spec": _claim_spec(device_class, expressions)},
    }


def claim(name, namespace, component, device_class, expressions, sharing=None):
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": _meta(name, namespace, component),
        "spec": _claim_spec(device_class, expressions, sharing),
    }


def _with_claim(manifests, source):
    """The Job of training.py's manifests with its GPUs from a claim: the container's
    nvidia.com/* resources out, resources.claims and the pod's resourceClaims in; the node
    affinity on GFD's labels out (the claim's CEL chooses the GPU; a shared claim keeps its
    pods on the node of its device); the nvidia RuntimeClass out (the driver injects the
    devices through CDI)."""
    out = copy.deepcopy(manifests)
    for manifest in out:
        if manifest["kind"] != "Job":
            continue
        pod = manifest["spec"]["template"]["spec"]
        pod.pop("affinity", None)
        pod.pop("runtimeClassName", None)
        pod["resourceClaims"] = [dict(source, name=CLAIM)]
        for container in pod["containers"]:
            resources = container.setdefault("resources", {})
            for part in ("requests", "limits"):
                kept = dict(
                    (k, v)
                    for k, v in resources.get(part, {}).items()
                    if not k.startswith("nvidia.com/")
                )
                if kept:
                    resources[part] = kept
                else:
                    resources.pop(part, None)
            resources["claims"] = [{"name": CLAIM}]
    return out


def dra_single_gpu(settings, namespace, name="dra-single-gpu"):
    """One whole GPU of the products the workloads ask for, from a ResourceClaimTemplate."""
    expression = product_expression(settings["workload_gpu_products"])
    template = claim_template(name, namespace, name, GPU_CLASS, [expression])
    job = training.pytorch_single(settings, namespace, name=name)
    return [template, *_with_claim(job, {"resourceClaimTemplateName": name})]


def dra_mig(settings, namespace, name="dra-mig"):
    """One MIG device of the profile gpu_tenancy_workload_mig_resource names, on a GPU of the
    products the workloads ask for (the driver gives MIG devices their parent's productName)."""
    profile = MIG_RESOURCE.fullmatch(settings["workload_mig_resource"]).group("profile")
    expressions = [
        "%s == %s" % (_attribute("profile"), json.dumps(profile)),
        product_expression(settings["workload_gpu_products"]),
    ]
    template = claim_template(name, namespace, name, MIG_CLASS, expressions)
    job = training.pytorch_mig(settings, namespace, name=name)
    return [template, *_with_claim(job, {"resourceClaimTemplateName": name})]


def dra_shared_gpu(settings, namespace, name="dra-shared-gpu"):
    """One GPU shared by the Job's two pods: both name one ResourceClaim (so both run on its
    device's node), time-sliced by the driver as the claim's GpuConfig asks."""
    expression = product_expression(settings["workload_gpu_products"])
    sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}
    shared = claim(name, namespace, name, GPU_CLASS, [expression], sharing)
    job = training.pytorch_time_sliced(settings, namespace, name=name)
    return [shared, *_with_claim(job, {"resourceClaimName": name})]


DRA_WORKLOADS = (
    ("dra-single-gpu", dra_single_gpu),
    ("dra-mig", dra_mig),
    ("dra-shared-gpu", dra_shared_gpu),
)


def render_dra_workloads(settings, namespace):
    """{workload name: [manifest, ...]} of every DRA example workload, in one namespace."""
    return dict((name, func(settings, namespace)) for name, func in DRA_WORKLOADS)
