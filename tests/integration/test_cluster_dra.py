"""DRA on the test cluster's real control plane (tests/cluster, Kubernetes built from its module):
role gpu_cluster with gpu_cluster_allocation dra applies NVIDIA's DRA driver objects (the API
server compiles the DeviceClasses' CEL), a second run changes nothing; then the real
resource-claim controller makes a ResourceClaim from kubegpu's example template and the real
scheduler allocates it a device whose attributes match the template's CEL, while a claim for a
product no node has stays unallocated.

Written by the test, because no GPU can be had here: the ResourceSlice that NVIDIA's DRA kubelet
plugin publishes for a node (a test double, named so below, with the attributes the driver
publishes: type, productName as NVML names the GPU, uuid), and that node's registration (the Node
object a kubelet creates). No kubelet runs on this control plane, so the pods are scheduled and
bound but never started.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_manifests as cm
from ansible_collections.kubegpu.gpu.plugins.module_utils import dra_workloads as dw

from kubegpu.workloads import settings as tenancy_settings
from tests.cluster.controlplane import KubeCluster, register_node
from tests.processes import wait_for

pytestmark = pytest.mark.cluster

NS = "kubegpu-dra"
WORK_NS = "dra-work"
NODE = "dra-node-1"
DRA_LABEL = "nvidia.com/gpu.deploy.dra-driver"
SETTINGS = {
    "gpu_cluster_namespace": NS,
    "gpu_cluster_allocation": "dra",
    "gpu_cluster_nfd": "none",
    "gpu_cluster_runtime_class_enabled": False,
    "gpu_cluster_dcgm_exporter_enabled": False,
    "gpu_cluster_prune": False,
    "gpu_cluster_api_timeout": 10,
}
GROUP, VERSION = "resource.k8s.io", "v1"
# NVML's names of the two GPUs of the double's node (nvidia-smi -q's Product Name).
H100_NVML = "NVIDIA H100 80GB HBM3"
A100_NVML = "NVIDIA A100-SXM4-80GB"


def _register_node(core: Any, name: str) -> None:
    """What a kubelet's registration writes, for a GPU node of a DRA node group."""
    labels = {"nvidia.com/gpu.present": "true", DRA_LABEL: "true"}
    register_node(core, name, labels, {"cpu": "16", "memory": "64Gi", "pods": "110"}, "192.0.2.20")


def _gpu(minor: int, product: str, uuid: str) -> dict[str, Any]:
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": product},
            "uuid": {"string": uuid},
            "index": {"int": minor},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def resource_slice_double(node: str) -> dict[str, Any]:
    """TEST DOUBLE of the ResourceSlice NVIDIA's DRA kubelet plugin publishes for a node with an
    A100 (gpu-0) and an H100 (gpu-1): driver gpu.nvidia.com, one pool named after the node."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com-double"},
        "spec": {
            "driver": dw.DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                _gpu(0, A100_NVML, "GPU-00000000-0000-0000-0000-0000000000a1"),
                _gpu(1, H100_NVML, "GPU-00000000-0000-0000-0000-0000000000b1"),
            ],
        },
    }


@pytest.fixture(scope="module")
def apis(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Any, Any, Any]]:
    """The API clients; afterwards, what this file made on the session's shared cluster is
    removed (the cluster layer's test counts every object with kubegpu's labels): kubegpu's
    objects by its reset playbook, the workloads' namespace, the ResourceSlice and the Node."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    from tests.integration.test_gpu_cluster import run_playbook

    api = kube_cluster.client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    yield core, custom, client.BatchV1Api(api)
    reset = run_playbook(
        "gpu_cluster_reset.yml",
        str(kube_cluster.kubeconfig),
        tmp_path_factory.mktemp("dra-reset"),
        SETTINGS,
    )
    assert reset["rc"] == 0, reset["failures"] or reset["raw"][-3000:]
    try:
        custom.delete_cluster_custom_object(
            GROUP, VERSION, "resourceslices", resource_slice_double(NODE)["metadata"]["name"]
        )
    except ApiException as exc:
        if exc.status != 404:
            raise
    kube_cluster.remove((NS, WORK_NS), (NODE,))


def test_gpu_cluster_applies_the_dra_driver_and_the_scheduler_allocates_by_cel(
    kube_cluster: KubeCluster, apis: tuple[Any, Any, Any], tmp_path: Path
) -> None:
    from tests.integration.test_gpu_cluster import run_playbook

    core, custom, batch = apis
    kubeconfig = str(kube_cluster.kubeconfig)
    first = run_playbook("gpu_cluster.yml", kubeconfig, tmp_path, SETTINGS)
    assert first["rc"] == 0, first["failures"] or first["raw"][-3000:]
    assert first["stats"]["changed"] > 0
    second = run_playbook("gpu_cluster.yml", kubeconfig, tmp_path, SETTINGS)
    assert second["rc"] == 0, second["failures"] or second["raw"][-3000:]
    assert second["stats"]["changed"] == 0, second["raw"][-5000:]
    checked = run_playbook("gpu_cluster.yml", kubeconfig, tmp_path, SETTINGS, check=True)
    assert checked["rc"] == 0 and checked["stats"]["changed"] == 0, checked["raw"][-5000:]

    # The DeviceClasses as the API server stored them, CEL and all (it compiles CEL on create).
    for name, expression in cm.DRA_DEVICE_CLASSES.items():
        stored = custom.get_cluster_custom_object(GROUP, VERSION, "deviceclasses", name)
        assert stored["spec"]["selectors"] == [{"cel": {"expression": expression}}]
        assert cm.is_owned(stored)
    plugin = kube_cluster.kubectl(
        "-n", NS, "get", "daemonset", cm.DRA_KUBELET_PLUGIN_NAME, "-o", "name"
    )
    assert plugin.returncode == 0, plugin.stderr

    # The API server refuses CEL that does not compile: the check is real.
    bad = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": "kubegpu-test-bad-cel"},
        "spec": {"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].("}}]},
    }
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as refused:
        custom.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", bad)
    assert refused.value.status == 422

    # A node of the DRA node group and its GPUs, as the driver's kubelet plugin would publish them.
    _register_node(core, NODE)
    custom.create_cluster_custom_object(
        GROUP, VERSION, "resourceslices", resource_slice_double(NODE)
    )
    wait_for(
        "the not-ready taint lifted",
        lambda: (
            not any(
                t.key == "node.kubernetes.io/not-ready"
                for t in (core.read_node(NODE).spec.taints or [])
            )
        ),
    )
    core.create_namespace({"metadata": {"name": WORK_NS}})
    wait_for(
        "the default service account", lambda: core.list_namespaced_service_account(WORK_NS).items
    )

    # kubegpu's example: one whole GPU of the products the workloads ask for (H100, H200).
    settings = tenancy_settings({})
    template, configmap, job = dw.dra_single_gpu(settings, WORK_NS, name="one-h100")
    custom.create_namespaced_custom_object(
        GROUP, VERSION, WORK_NS, "resourceclaimtemplates", template
    )
    core.create_namespaced_config_map(WORK_NS, configmap)
    batch.create_namespaced_job(WORK_NS, job)
    # A product no node has: its claim stays unallocated and its pod unscheduled.
    absent = dw.claim_template(
        "one-b200",
        WORK_NS,
        "one-b200",
        dw.GPU_CLASS,
        [dw.product_expression(["NVIDIA-B200"])],
    )
    custom.create_namespaced_custom_object(
        GROUP, VERSION, WORK_NS, "resourceclaimtemplates", absent
    )
    core.create_namespaced_pod(
        WORK_NS,
        {
            "metadata": {"name": "wants-b200"},
            "spec": {
                "restartPolicy": "Never",
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-b200"}],
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.invalid/never-pulled:1",
                        "resources": {"claims": [{"name": "gpu"}]},
                    }
                ],
            },
        },
    )

    def claims() -> dict[str, dict[str, Any]]:
        items = custom.list_namespaced_custom_object(GROUP, VERSION, WORK_NS, "resourceclaims")
        out = {}
        for claim in items["items"]:
            owner = (
                claim["metadata"]
                .get("annotations", {})
                .get("resource.kubernetes.io/pod-claim-name")
            )
            pod = (claim["metadata"].get("ownerReferences") or [{}])[0].get("name", "")
            out[pod or owner or claim["metadata"]["name"]] = claim
        return out

    def allocated_h100() -> dict[str, Any] | None:
        for pod, claim in claims().items():
            if pod.startswith("one-h100") and (claim.get("status") or {}).get("allocation"):
                return claim
        return None

    claim = wait_for("the one-h100 claim allocated by the scheduler", allocated_h100)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == dw.DRIVER and result["pool"] == NODE
    assert result["device"] == "gpu-1", result  # the H100, not the A100 beside it
    pods = core.list_namespaced_pod(WORK_NS, label_selector="batch.kubernetes.io/job-name=one-h100")
    (pod,) = pods.items
    bound = wait_for(
        "the one-h100 pod bound",
        lambda: core.read_namespaced_pod(pod.metadata.name, WORK_NS).spec.node_name,
    )
    assert bound == NODE
    assert claim["status"]["reservedFor"][0]["name"] == pod.metadata.name

    def b200_refused() -> str:
        events = core.list_namespaced_event(
            WORK_NS, field_selector="involvedObject.name=wants-b200,reason=FailedScheduling"
        ).items
        return events[0].message if events else ""

    message = wait_for("wants-b200 refused by the scheduler", b200_refused)
    assert "cannot allocate all claims" in message or "resourceclaim" in message.lower(), message
    assert core.read_namespaced_pod("wants-b200", WORK_NS).spec.node_name is None
    b200 = [c for p, c in claims().items() if p == "wants-b200"]
    assert b200 and not (b200[0].get("status") or {}).get("allocation"), b200
