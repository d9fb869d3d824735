"""The test cluster's control plane (tests/cluster): Kubernetes built from its official module.

Real: etcd, kube-apiserver (its whole admission chain, RBAC), kube-controller-manager (node
lifecycle, service accounts, quota) and kube-scheduler, as tests/cluster/build.py builds them.
Played by the test, because no kubelet runs on this control plane: a node's registration (the
Node object a kubelet creates, with the labels GPU Feature Discovery would set and the GPUs the
device plugin would advertise).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.controlplane import KubeCluster
from tests.processes import wait_for

pytestmark = pytest.mark.cluster

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"


def _register_node(core: Any, name: str, product: str, gpus: str) -> None:
    """What a kubelet's registration writes, with GFD's product label and the plugin's GPUs."""
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": gpus}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    core.create_node(
        {
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.product": product},
            },
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "addresses": [{"type": "InternalIP", "address": "192.0.2.10"}],
            },
        }
    )


def _gpu_pod(name: str, gpus: str, product: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "nvidia.com/gpu.product",
                                        "operator": "In",
                                        "values": [product],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "containers": [
                {
                    "name": "cuda",
                    "image": "registry.kubegpu.test/cuda-sample:1",
                    "resources": {"limits": {"nvidia.com/gpu": gpus}},
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def core(kube_cluster: KubeCluster) -> Iterator[Any]:
    from kubernetes import client

    yield client.CoreV1Api(kube_cluster.client())


def test_the_control_plane_is_the_release_built_from_the_module(kube_cluster: KubeCluster) -> None:
    from kubernetes import client

    version = client.VersionApi(kube_cluster.client()).get_code()
    assert version.git_version == kube_cluster.version
    assert kube_cluster.version.startswith("v1.37.")
    proc = kube_cluster.kubectl("version", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    versions = json.loads(proc.stdout)
    assert versions["clientVersion"]["gitVersion"] == kube_cluster.version
    assert versions["serverVersion"]["gitVersion"] == kube_cluster.version
    # Every process is still running.
    assert all(proc.poll() is None for proc in kube_cluster.procs.values())


def test_rbac_decides_for_a_user_without_a_binding(kube_cluster: KubeCluster) -> None:
    kubeconfig = kube_cluster.kubeconfig_for("mallory@example.com")
    denied = kube_cluster.kubectl("get", "nodes", kubeconfig=kubeconfig)
    assert denied.returncode != 0
    assert 'User "mallory@example.com" cannot list resource "nodes"' in denied.stderr


def test_the_scheduler_binds_by_gpu_product_and_refuses_what_no_node_fits(core: Any) -> None:
    _register_node(core, "gpu-h100", H100, "8")
    _register_node(core, "gpu-a100", A100, "4")
    # The node lifecycle controller lifts the not-ready taint admission put on each new node.
    wait_for(
        "the not-ready taints lifted",
        lambda: all(
            not any(
                t.key == "node.kubernetes.io/not-ready"
                for t in (core.read_node(n).spec.taints or [])
            )
            for n in ("gpu-h100", "gpu-a100")
        ),
    )
    core.create_namespace({"metadata": {"name": "sched"}})
    wait_for(
        "the default service account", lambda: core.list_namespaced_service_account("sched").items
    )
    core.create_namespaced_pod("sched", _gpu_pod("fits-h100", "2", H100))
    core.create_namespaced_pod("sched", _gpu_pod("too-many", "5", A100))
    node = wait_for(
        "fits-h100 bound", lambda: core.read_namespaced_pod("fits-h100", "sched").spec.node_name
    )
    assert node == "gpu-h100"

    def unschedulable() -> str:
        events = core.list_namespaced_event(
            "sched", field_selector="involvedObject.name=too-many,reason=FailedScheduling"
        ).items
        return events[0].message if events else ""

    message = wait_for("too-many refused by the scheduler", unschedulable)
    assert "Insufficient nvidia.com/gpu" in message, message
    assert core.read_namespaced_pod("too-many", "sched").spec.node_name is None
