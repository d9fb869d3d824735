#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_cluster_readiness
short_description: Check from the Kubernetes API that every GPU node can run GPU pods
version_added: "0.1.0"
description:
  - Reads the GPU nodes, the pods of the GPU components and the device plugin's config from
    the API and returns, per node, a list of checks of the same shape as
    M(kubegpu.gpu.gpu_node_readiness) (name, layer, status V(pass), V(fail), V(warn) or V(skip),
    observed, expected, remedy) and a verdict.
  - "kubelet: C(node_ready) - the node reports Ready (a cordoned node warns)."
  - "cluster: C(device_plugin_config) - the config the node selects (label
    O(config_label), else O(default_config)) exists in O(device_plugin_configmap);
    C(gpu_allocatable) - allocatable C(nvidia.com/gpu) (or the shared resource names such as
    C(nvidia.com/gpu.shared), or O(expected_resources)) equals the expected count, multiplied by
    the replicas of time-slicing or MPS; C(device_plugin_pod), C(gpu_feature_discovery_pod) -
    Running and ready on the node, otherwise the container's waiting reason (for example
    CrashLoopBackOff); C(gfd_labels) - the labels GPU Feature Discovery publishes through
    node-feature-discovery, and C(nvidia.com/mig.strategy) naming the node config's MIG strategy
    where it uses MIG;
    C(dcgm_exporter_pod) (warns only); C(runtime_class) - the RuntimeClass exists with the
    right handler and may schedule on the node; C(smoke_test) - optional, below."
  - With O(smoke_test=true), one pod per node requests one GPU through the scheduler, runs
    O(smoke_test_image) with O(runtime_class), and must finish within O(smoke_test_timeout)
    seconds printing O(smoke_test_pass_line). The pods run in parallel and are always deleted.
options:
  namespace:
    description:
      - Namespace of the device plugin, GFD and DCGM exporter pods and of the device plugin
        ConfigMap (C(gpu_cluster_namespace)).
    type: str
    default: kube-system
  nodes:
    description:
      - Node names to check. When unset, every node matching O(node_selector).
    type: list
    elements: str
  node_selector:
    description:
      - Label selector for GPU nodes, used when O(nodes) is unset.
    type: str
    default: nvidia.com/gpu.present=true
  expected_gpus:
    description:
      - Devices the device plugin sees as C(nvidia.com/gpu) before sharing (physical GPUs, or
        MIG devices under MIG strategy single), as one number for every node or a mapping of
        node name to number. For nodes without one, GFD's C(nvidia.com/gpu.count) label is used.
    type: raw
  expected_resources:
    description:
      - "Exact allocatable counts per node, C({node: {resource: count}}), for layouts the
        module cannot derive (MIG strategy mixed, sharing a subset of devices). Wins over
        O(expected_gpus) for those nodes."
    type: dict
    default: {}
  device_plugin_configmap:
    description:
      - The ConfigMap holding the device plugin's config files, one key per named config.
    type: str
    default: nvidia-device-plugin-configs
  config_label:
    description:
      - Node label that selects a named device plugin config.
    type: str
    default: nvidia.com/device-plugin.config
  default_config:
    description:
      - The config a node without the label uses.
    type: str
    default: default
  device_plugin:
    description:
      - Check the device plugin pods and config.
    type: bool
    default: true
  gfd:
    description:
      - Check the GPU Feature Discovery pods and labels.
    type: bool
    default: true
  dcgm_exporter:
    description:
      - Check the DCGM exporter pods (a problem only warns).
    type: bool
    default: true
  selectors:
    description:
      - Pod label selectors of the components, keys C(device_plugin), C(gfd),
        C(dcgm_exporter). Defaults match the objects role C(kubegpu.gpu.gpu_cluster) creates.
    type: dict
    default: {}
  gfd_labels:
    description:
      - Node labels GFD must have published (C(nvidia.com/mig.strategy) is added where the
        node's device plugin config uses MIG).
    type: list
    elements: str
    default: [nvidia.com/gpu.product, nvidia.com/gpu.count, nvidia.com/gpu.memory]
  runtime_class:
    description:
      - The RuntimeClass GPU pods use; V("") skips the check and runs the smoke test without one.
    type: str
    default: nvidia
  runtime_class_handler:
    description:
      - The handler that RuntimeClass must have.
    type: str
    default: nvidia
  gpu_node_label:
    description:
      - The node label key the GPU DaemonSets select (for remedies).
    type: str
    default: nvidia.com/gpu.present
  dra_node_label:
    description:
      - The node label (value V(true)) of the nodes whose GPUs NVIDIA's DRA driver allocates
        (role C(kubegpu.gpu.gpu_cluster)'s C(gpu_cluster_dra_node_label)). On those nodes the
        device plugin checks skip, and the DRA kubelet plugin's pod and the node's
        ResourceSlices (driver C(gpu.nvidia.com), as many GPUs as the node has) are checked.
        V("") turns the DRA checks off.
    type: str
    default: nvidia.com/gpu.deploy.dra-driver
  smoke_test:
    description:
      - Run the CUDA sample pod on every node checked (skipped in check mode).
    type: bool
    default: false
  smoke_test_image:
    description:
      - The CUDA sample image. Pin it; point it at a mirror where the registry is not reachable.
    type: str
    default: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0
  smoke_test_namespace:
    description:
      - Namespace for the smoke test pods.
    type: str
    default: default
  smoke_test_timeout:
    description:
      - Seconds the pods have to finish (image pull included).
    type: int
    default: 300
  smoke_test_pass_line:
    description:
      - Text the sample prints on success.
    type: str
    default: Test PASSED
  smoke_test_resource:
    description:
      - The extended resource the pod requests one of. When unset, the first resource the node
        is expected to advertise (C(nvidia.com/gpu), or C(nvidia.com/gpu.shared) with
        renameByDefault).
    type: str
  fail_on:
    description:
      - The task fails when any check has one of these statuses. V([]) never fails the task.
    type: list
    elements: str
    choices: [fail, warn, skip]
    default: [fail]
extends_documentation_fragment:
  - kubegpu.gpu.cluster_api
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
    details: Every check only reads; the smoke test, which creates a pod, is skipped.
  diff_mode:
    support: N/A
    details: Nothing is changed.
  facts:
    support: full
  platform:
    platforms: posix
requirements:
  - kubernetes (Python library) on the controller
seealso:
  - module: kubegpu.gpu.gpu_node_readiness
  - module: kubegpu.gpu.gpu_manifests
author:
  - kubegpu maintainers
"""

EXAMPLES = r"""
- name: Check every GPU node through the API, with a CUDA smoke test
  kubegpu.gpu.gpu_cluster_readiness:
    kubeconfig: "{{ kubegpu_kubeconfig }}"
    expected_gpus: 8
    smoke_test: true
  register: cluster_ready

- name: Publish it for the report
  ansible.builtin.set_stats:
    data:
      kubegpu_cluster_readiness: "{{ cluster_ready.nodes }}"
"""

RETURN = r"""
nodes:
  description: Per node, its verdict, summary and checks.
  returned: always
  type: dict
  sample:
    gpu-1:
      verdict: ready
      summary: {"pass": 8, "fail": 0, "warn": 0, "skip": 1}
      checks:
        - name: gpu_allocatable
          layer: cluster
          status: pass
          observed: nvidia.com/gpu=16
          expected: "nvidia.com/gpu=16 (4 GPU(s) x 4 time-slicing replicas as nvidia.com/gpu; count from expected_gpus)"
          remedy: null
verdict:
  description: The worst node verdict (not_ready, ready_with_warnings, ready); not_ready when no node matched.
  returned: always
  type: str
  sample: ready
server_version:
  description: gitVersion of the API server.
  returned: always
  type: str
ansible_facts:
  description: The nodes and verdict as C(kubegpu_cluster_readiness).
  returned: success
  type: dict
"""

import binascii
import hashlib
import os
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_api import (
    API_ARGUMENT_SPEC,
    HAS_KUBERNETES,
    KUBERNETES_IMPORT_ERROR,
    ClusterApi,
    ClusterApiError,
    object_path,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_readiness import (
    DEFAULT_GFD_LABELS,
    DRA_PLUGIN_SELECTOR,
    LAYER_CLUSTER,
    evaluate_node,
    expected_resources,
    judge_smoke,
    node_report,
    overall_verdict,
    select_config,
    smoke_finished,
    smoke_pod,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.node_readiness import make_check

DEFAULT_SELECTORS = {
    "device_plugin": "app.kubernetes.io/name=nvidia-device-plugin",
    "gfd": "app.kubernetes.io/name=gpu-feature-discovery",
    "dcgm_exporter": "app.kubernetes.io/name=dcgm-exporter",
}
POLL_SECONDS = 2


def expected_gpus_for(value, node_name):
    if value is None:
        return None
    if isinstance(value, dict):
        return value.get(node_name)
    return value


def validate(module):
    params = module.params
    value = params["expected_gpus"]
    bad = []
    if isinstance(value, dict):
        bad = [k for k, v in value.items() if not _count(v)]
        if not bad:
            params["expected_gpus"] = dict((k, int(v)) for k, v in value.items())
    elif value is not None:
        if not _count(value):
            bad = ["(all nodes)"]
        else:
            params["expected_gpus"] = int(value)
    if bad:
        module.fail_json(
            msg="expected_gpus must be a whole number of 0 or more, or a mapping of "
            "node names to such numbers; got %r" % (value,)
        )
    for node, resources in (params["expected_resources"] or {}).items():
        if not isinstance(resources, dict) or not all(_count(v) for v in resources.values()):
            module.fail_json(
                msg="expected_resources.%s must map resource names to whole numbers, "
                "got %r" % (node, resources)
            )
        params["expected_resources"][node] = dict((k, int(v)) for k, v in resources.items())
    unknown = sorted(set(params["selectors"]) - set(DEFAULT_SELECTORS))
    if unknown:
        module.fail_json(
            msg="selectors: unknown key(s) %s; allowed: %s"
            % (", ".join(unknown), ", ".join(sorted(DEFAULT_SELECTORS)))
        )
    for key in ("timeout", "smoke_test_timeout"):
        if params[key] < 1:
            module.fail_json(msg="%s must be 1 second or more, got %d" % (key, params[key]))


def _count(value):
    if isinstance(value, bool):
        return False
    try:
        return int(str(value)) >= 0
    except ValueError:
        return False


def group_by_node(pods):
    grouped = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            grouped.setdefault(node, []).append(pod)
    return grouped


def run_smoke_tests(module, api, nodes, resources):
    """{node name: smoke_test check}, running one pod per node in parallel, always deleting."""
    params = module.params
    namespace = params["smoke_test_namespace"]
    timeout = params["smoke_test_timeout"]
    image = params["smoke_test_image"]
    created, results = {}, {}
    try:
        for node in nodes:
            name = node["metadata"]["name"]
            pod_name = "kubegpu-smoke-%s-%s" % (
                hashlib.sha256(name.encode("utf-8")).hexdigest()[:8],
                binascii.hexlify(os.urandom(3)).decode("ascii"),
            )
            manifest = smoke_pod(
                pod_name, namespace, node, image, resources[name], params["runtime_class"], timeout
            )
            try:
                api.create(object_path("v1", "Pod", namespace=namespace), manifest)
                created[name] = pod_name
            except ClusterApiError as exc:
                results[name] = make_check(
                    "smoke_test",
                    LAYER_CLUSTER,
                    "fail",
                    "could not create the pod: %s" % exc,
                    "a pod with 1 GPU runs the CUDA sample",
                    "Check the namespace %r exists and "
                    "that the kubeconfig may create pods there." % namespace,
                )
        deadline = time.time() + timeout
        last = {}
        pending = set(created)
        while pending:
            for name in sorted(pending):
                pod = api.get(
                    object_path("v1", "Pod", created[name], namespace), missing_ok=True
                ) or {"metadata": {"name": created[name]}, "status": {"phase": "Unknown"}}
                last[name] = pod
                if smoke_finished(pod):
                    pending.discard(name)
            if not pending or time.time() >= deadline:
                break
            time.sleep(POLL_SECONDS)
        for name, pod_name in sorted(created.items()):
            pod = last.get(name) or {"metadata": {"name": pod_name}, "status": {}}
            log, log_error = None, None
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                try:
                    log = api.log(object_path("v1", "Pod", pod_name, namespace))
                except ClusterApiError as exc:
                    log_error = str(exc)
            deleted = _delete_pod(api, namespace, pod_name)
            created.pop(name)
            results[name] = judge_smoke(
                pod,
                log,
                log_error,
                params["smoke_test_pass_line"],
                name in pending,
                timeout,
                image,
                deleted,
            )
    finally:
        for pod_name in created.values():  # an error above: still leave nothing behind
            _delete_pod(api, namespace, pod_name)
    return results


def _delete_pod(api, namespace, pod_name):
    try:
        api.delete(object_path("v1", "Pod", pod_name, namespace), grace_period_seconds=0)
        return True
    except ClusterApiError:
        return False


def main():
    module = AnsibleModule(
        argument_spec=dict(
            **API_ARGUMENT_SPEC,
            namespace=dict(type="str", default="kube-system"),
            nodes=dict(type="list", elements="str"),
            node_selector=dict(type="str", default="nvidia.com/gpu.present=true"),
            expected_gpus=dict(type="raw"),
            expected_resources=dict(type="dict", default={}),
            device_plugin_configmap=dict(type="str", default="nvidia-device-plugin-configs"),
            config_label=dict(type="str", default="nvidia.com/device-plugin.config"),
            default_config=dict(type="str", default="default"),
            device_plugin=dict(type="bool", default=True),
            gfd=dict(type="bool", default=True),
            dcgm_exporter=dict(type="bool", default=True),
            selectors=dict(type="dict", default={}),
            gfd_labels=dict(type="list", elements="str", default=list(DEFAULT_GFD_LABELS)),
            runtime_class=dict(type="str", default="nvidia"),
            runtime_class_handler=dict(type="str", default="nvidia"),
            gpu_node_label=dict(type="str", default="nvidia.com/gpu.present"),
            dra_node_label=dict(type="str", default="nvidia.com/gpu.deploy.dra-driver"),
            smoke_test=dict(type="bool", default=False),
            smoke_test_image=dict(
                type="str", default="nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
            ),
            smoke_test_namespace=dict(type="str", default="default"),
            smoke_test_timeout=dict(type="int", default=300),
            smoke_test_pass_line=dict(type="str", default="Test PASSED"),
            smoke_test_resource=dict(type="str"),
            fail_on=dict(
                type="list", elements="str", default=["fail"], choices=["fail", "warn", "skip"]
            ),
        ),
        supports_check_mode=True,
    )
    if not HAS_KUBERNETES:
        module.fail_json(
            msg=missing_required_lib("kubernetes"), exception=str(KUBERNETES_IMPORT_ERROR)
        )
    validate(module)
    params = module.params
    selectors = dict(DEFAULT_SELECTORS)
    selectors.update(params["selectors"])
    namespace = params["namespace"]
    api = None
    try:
        api = ClusterApi(params["kubeconfig"], params["context"], params["timeout"])
        version = api.version().get("gitVersion")
        if params["nodes"]:
            nodes, absent = [], []
            for name in params["nodes"]:
                node = api.get(object_path("v1", "Node", name), missing_ok=True)
                if node is None:
                    absent.append(name)
                else:
                    nodes.append(node)
        else:
            nodes = api.list(object_path("v1", "Node"), params["node_selector"])
            absent = []
        configmap = None
        if params["device_plugin"]:
            configmap = api.get(
                object_path("v1", "ConfigMap", params["device_plugin_configmap"], namespace),
                missing_ok=True,
            )
        pods = {}
        for component, enabled in (
            ("device_plugin", params["device_plugin"]),
            ("gfd", params["gfd"]),
            ("dcgm_exporter", params["dcgm_exporter"]),
        ):
            pods[component] = (
                group_by_node(
                    api.list(object_path("v1", "Pod", namespace=namespace), selectors[component])
                )
                if enabled
                else {}
            )
        runtime_class = None
        if params["runtime_class"]:
            runtime_class = api.get(
                object_path("node.k8s.io/v1", "RuntimeClass", params["runtime_class"]),
                missing_ok=True,
            )

        # DRA nodes: the kubelet plugin's pods and the ResourceSlices, where any node is one.
        dra_label = params["dra_node_label"]
        dra = {"pods": {}, "slices": []}
        if dra_label and any(
            ((n.get("metadata") or {}).get("labels") or {}).get(dra_label) == "true" for n in nodes
        ):
            dra["pods"] = group_by_node(
                api.list(object_path("v1", "Pod", namespace=namespace), DRA_PLUGIN_SELECTOR)
            )
            if api.has_resource("resource.k8s.io/v1", "resourceslices"):
                dra["slices"] = api.list(object_path("resource.k8s.io/v1", "ResourceSlice"))
        views, options = {}, {}
        for node in nodes:
            name = node["metadata"]["name"]
            selected = select_config(
                node, configmap, params["config_label"], params["default_config"]
            )
            gpus = expected_gpus_for(params["expected_gpus"], name)
            options[name] = {
                "expected_gpus": gpus,
                "expected_resources": params["expected_resources"].get(name),
                "device_plugin": params["device_plugin"],
                "gfd": params["gfd"],
                "dcgm_exporter": params["dcgm_exporter"],
                "gfd_labels": params["gfd_labels"],
                "runtime_class": params["runtime_class"],
                "runtime_class_handler": params["runtime_class_handler"],
                "namespace": namespace,
                "selectors": {
                    "device plugin": selectors["device_plugin"],
                    "GPU Feature Discovery": selectors["gfd"],
                    "DCGM exporter": selectors["dcgm_exporter"],
                },
                "gpu_node_label": params["gpu_node_label"],
                "dra_node_label": dra_label,
            }
            views[name] = {
                "dra": {"pods": dra["pods"].get(name, []), "slices": dra["slices"]},
                "config": selected,
                "pods": dict((c, pods[c].get(name, [])) for c in pods),
                "runtime_class": runtime_class,
                "smoke": None,
            }

        if params["smoke_test"]:
            if module.check_mode:
                for name in views:
                    views[name]["smoke"] = make_check(
                        "smoke_test",
                        LAYER_CLUSTER,
                        "skip",
                        "not run in check mode (it creates a pod)",
                        "a pod with 1 GPU runs the CUDA sample",
                    )
            else:
                resources = {}
                for node in nodes:
                    name = node["metadata"]["name"]
                    resource = params["smoke_test_resource"]
                    if not resource:
                        gpus = options[name]["expected_gpus"]
                        counts = (
                            options[name]["expected_resources"]
                            or expected_resources(views[name]["config"][1], gpus or 1)[0]
                            or {}
                        )
                        resource = sorted(counts)[0] if counts else "nvidia.com/gpu"
                    resources[name] = resource
                for name, check in run_smoke_tests(module, api, nodes, resources).items():
                    views[name]["smoke"] = check
    except ClusterApiError as exc:
        module.fail_json(msg=str(exc), status=exc.status, nodes={}, verdict="not_ready")
    finally:
        if api is not None:
            api.close()

    reports = {}
    for node in nodes:
        name = node["metadata"]["name"]
        reports[name] = node_report(evaluate_node(node, views[name], options[name]))
    for name in absent:
        reports[name] = node_report(
            [
                make_check(
                    "node_registered",
                    "kubelet",
                    "fail",
                    "no Node object named %s" % name,
                    "the node has joined the cluster",
                    "Join the node (kubeadm join, or the k3s/RKE2 "
                    "agent) or correct its name in nodes.",
                )
            ]
        )
    result = {"nodes": reports, "verdict": overall_verdict(reports), "server_version": version}
    if not reports:
        result["msg"] = "no node matches %s" % (params["node_selector"])
    bad = [
        (n, c)
        for n, r in sorted(reports.items())
        for c in r["checks"]
        if c["status"] in params["fail_on"]
    ]
    if bad or (not reports and "fail" in params["fail_on"]):
        module.fail_json(
            msg=result.get("msg")
            or "GPU cluster readiness: %d check(s) with status in %s: %s"
            % (
                len(bad),
                params["fail_on"],
                "; ".join(
                    "%s %s (%s): %s" % (n, c["name"], c["status"], c["observed"]) for n, c in bad
                ),
            ),
            changed=False,
            **result,
        )
    module.exit_json(
        changed=False,
        ansible_facts={
            "kubegpu_cluster_readiness": {"nodes": reports, "verdict": result["verdict"]}
        },
        **result,
    )


if __name__ == "__main__":
    main()
