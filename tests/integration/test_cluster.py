"""The test cluster's control plane (tests/cluster): Kubernetes built from its official module.

Real: etcd, kube-apiserver (its whole admission chain, RBAC), kube-controller-manager (node
lifecycle, service accounts, quota) and kube-scheduler, as tests/cluster/build.py builds them.
Played by the test, because no kubelet runs on this control plane: a node's registration (the
Node object a kubelet creates, with the labels GPU Feature Discovery would set and the GPUs the
device plugin would advertise).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_manifests as cm
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_settings as cs
from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import read_templates

from tests.cluster.controlplane import KubeCluster, register_node
from tests.processes import wait_for

pytestmark = pytest.mark.cluster

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"


def _register_node(core: Any, name: str, product: str, gpus: str) -> None:
    """What a kubelet's registration writes, with GFD's product label and the plugin's GPUs."""
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": gpus}
    register_node(core, name, {"nvidia.com/gpu.product": product}, resources, "192.0.2.10")


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


@pytest.fixture
def removed_after(kube_cluster: KubeCluster) -> Iterator[dict[str, tuple[str, ...]]]:
    """What the test names here (``namespaces``, ``nodes``) is removed after it, pass or fail:
    the session's cluster is shared, and a Node left Ready would get the next file's DaemonSet
    pods, which no kubelet ever finishes deleting."""
    made: dict[str, tuple[str, ...]] = {"namespaces": (), "nodes": ()}
    yield made
    kube_cluster.remove(made["namespaces"], made["nodes"])


def test_the_scheduler_binds_by_gpu_product_and_refuses_what_no_node_fits(
    core: Any, removed_after: dict[str, tuple[str, ...]]
) -> None:
    removed_after.update(namespaces=("sched",), nodes=("gpu-h100", "gpu-a100"))
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


# --- node-feature-discovery and GFD's NodeFeature API, as role gpu_cluster applies them --------

NFD_NS = "kubegpu-nfd"
NFD_SETTINGS = {
    "gpu_cluster_namespace": NFD_NS,
    "gpu_cluster_runtime_class_enabled": False,
    "gpu_cluster_dcgm_exporter_enabled": False,
    "gpu_cluster_api_timeout": 10,
}
PCI_ONLY_NODE = "gpu-pci-only"
PLAIN_NODE = "cpu-plain"


def _crd_established(api: Any, name: str) -> bool:
    crd = api.read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])


def _daemonset_nodes(core: Any, name: str) -> set[str]:
    """The nodes the DaemonSet controller made a pod of `name` for (its pods' node affinity
    names the node by metadata.name; no kubelet runs them here, and no image could be pulled)."""
    nodes = set()
    for pod in core.list_namespaced_pod(
        NFD_NS, label_selector=f"app.kubernetes.io/name={name}"
    ).items:
        terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
        for term in terms.node_selector_terms:
            for field in term.match_fields or []:
                if field.key == "metadata.name":
                    nodes.update(field.values)
    return nodes


def _can_i(kube_cluster: KubeCluster, verb: str, resource: str, account: str) -> str:
    proc = kube_cluster.kubectl(
        "auth", "can-i", verb, resource, "-n", NFD_NS,
        f"--as=system:serviceaccount:{NFD_NS}:{account}",
    )  # fmt: skip
    return proc.stdout.strip()


def test_gpu_cluster_deploys_nfd_and_gfd_may_publish_through_it(
    kube_cluster: KubeCluster,
    core: Any,
    tmp_path: Path,
    removed_after: dict[str, tuple[str, ...]],
) -> None:
    """The role's objects on the real control plane: NFD's CRDs Established, GFD's and
    nfd-worker's ServiceAccounts allowed (by RBAC, asked through impersonation) to keep
    NodeFeature objects, the DaemonSet controller placing GFD and the device plugin on a node
    that only node-feature-discovery's PCI label marks as a GPU node, a second run changing
    nothing; then an NFD that kubegpu did not create is used, not duplicated."""
    from kubernetes import client

    from tests.integration.test_gpu_cluster import run_playbook

    removed_after.update(namespaces=(NFD_NS,), nodes=(PCI_ONLY_NODE, PLAIN_NODE))
    kubeconfig = str(kube_cluster.kubeconfig)
    ext = client.ApiextensionsV1Api(kube_cluster.client())
    custom = client.CustomObjectsApi(kube_cluster.client())
    apps = client.AppsV1Api(kube_cluster.client())
    first = run_playbook("gpu_cluster.yml", kubeconfig, tmp_path, NFD_SETTINGS)
    assert first["rc"] == 0, first["failures"] or first["raw"][-3000:]
    second = run_playbook("gpu_cluster.yml", kubeconfig, tmp_path, NFD_SETTINGS)
    assert second["rc"] == 0, second["failures"] or second["raw"][-3000:]
    assert second["stats"]["changed"] == 0, second["raw"][-5000:]
    checked = run_playbook("gpu_cluster.yml", kubeconfig, tmp_path, NFD_SETTINGS, check=True)
    assert checked["rc"] == 0 and checked["stats"]["changed"] == 0, checked["raw"][-5000:]

    for name in cm.NFD_CRDS.values():
        wait_for(f"CRD {name} Established", lambda n=name: _crd_established(ext, n))
        assert cm.is_owned(ext.read_custom_resource_definition(name).to_dict())

    # RBAC as NVIDIA's and NFD's charts grant it; the device plugin gets nothing of NFD's.
    for verb in ("get", "list", "watch", "create", "update"):
        assert _can_i(kube_cluster, verb, "nodefeatures.nfd.k8s-sigs.io", cm.GFD_NAME) == "yes"
    assert _can_i(kube_cluster, "delete", "nodefeatures.nfd.k8s-sigs.io", cm.GFD_NAME) == "no"
    assert _can_i(kube_cluster, "create", "nodefeatures.nfd.k8s-sigs.io", "nfd-worker") == "yes"
    assert _can_i(kube_cluster, "get", "pods", "nfd-worker") == "yes"
    assert (
        _can_i(kube_cluster, "create", "nodefeatures.nfd.k8s-sigs.io", cm.DEVICE_PLUGIN_NAME)
        == "no"
    )
    # GFD's own object, written as GFD (impersonating its ServiceAccount) writes it: the API
    # server takes it through the CRD's schema and RBAC.
    feature = tmp_path / "nodefeature.yaml"
    feature.write_text(
        json.dumps(
            {
                "apiVersion": cm.NFD_API_VERSION,
                "kind": "NodeFeature",
                "metadata": {
                    "name": f"nvidia-features-for-{PCI_ONLY_NODE}",
                    "namespace": NFD_NS,
                    "labels": {"nfd.node.kubernetes.io/node-name": PCI_ONLY_NODE},
                },
                "spec": {
                    "features": {},
                    "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
                },
            }
        )
    )
    created = kube_cluster.kubectl(
        "create", "-f", str(feature), f"--as=system:serviceaccount:{NFD_NS}:{cm.GFD_NAME}"
    )
    assert created.returncode == 0, created.stderr
    stored = custom.get_namespaced_custom_object(
        cm.NFD_GROUP, "v1alpha1", NFD_NS, "nodefeatures", f"nvidia-features-for-{PCI_ONLY_NODE}"
    )
    assert stored["spec"]["labels"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}

    for name, labels in (
        (PCI_ONLY_NODE, {"feature.node.kubernetes.io/pci-10de.present": "true"}),
        (PLAIN_NODE, {}),
    ):
        # Registered Ready, as a kubelet registers, just before the DaemonSet controller is
        # watched: no kubelet renews the node's heartbeat, and the node lifecycle controller
        # taints it unreachable (no new DaemonSet pod) after its grace period.
        register_node(core, name, labels, {"cpu": "8", "memory": "32Gi", "pods": "110"})

    # The DaemonSet controller: GFD and the device plugin on the node NFD's label marks,
    # nfd-worker on every node (it is what finds the GPU nodes).
    try:
        wait_for(
            "GFD's pod for the PCI-labelled node",
            lambda: PCI_ONLY_NODE in _daemonset_nodes(core, cm.GFD_NAME),
        )
    except AssertionError as exc:
        events = [
            f"{e.involved_object.kind}/{e.involved_object.name}: {e.reason} {e.message}"
            for e in core.list_namespaced_event(NFD_NS).items
            if e.involved_object.kind == "DaemonSet"
        ]
        taints = core.read_node(PCI_ONLY_NODE).spec.taints
        raise AssertionError(f"{exc}; taints {taints}; events {events[-15:]}") from None
    wait_for(
        "nfd-worker's pods for both nodes",
        lambda: {PCI_ONLY_NODE, PLAIN_NODE} <= _daemonset_nodes(core, cm.NFD_WORKER_NAME),
    )
    for name in (cm.GFD_NAME, cm.DEVICE_PLUGIN_NAME):
        wait_for(
            f"{name} placed",
            lambda n=name: PCI_ONLY_NODE in _daemonset_nodes(core, n),
        )
        assert PLAIN_NODE not in _daemonset_nodes(core, name)
    master = apps.read_namespaced_deployment(cm.NFD_MASTER_NAME, NFD_NS)
    assert master.spec.template.spec.service_account_name == cm.NFD_MASTER_NAME

    # NFD switched off: kubegpu's NFD objects pruned. A NodeFeatureRule that someone else
    # made keeps its CRD (deleting the CRD would delete that rule); GFD's NodeFeature is
    # kubegpu's own, so the NodeFeature CRD goes.
    custom.create_cluster_custom_object(
        cm.NFD_GROUP,
        "v1alpha1",
        "nodefeaturerules",
        {
            "apiVersion": cm.NFD_API_VERSION,
            "kind": "NodeFeatureRule",
            "metadata": {"name": "someone-elses-rule"},
            "spec": {"rules": [{"name": "gpu", "labels": {"example.com/gpu": "true"}}]},
        },
    )
    off = run_playbook(
        "gpu_cluster.yml", kubeconfig, tmp_path, dict(NFD_SETTINGS, gpu_cluster_nfd="none")
    )
    assert off["rc"] == 0, off["failures"] or off["raw"][-3000:]
    assert "kept: 1 NodeFeatureRule object(s)" in off["raw"], off["raw"][-3000:]
    names = {c.metadata.name for c in ext.list_custom_resource_definition().items}
    assert cm.NFD_CRDS["NodeFeatureRule"] in names
    wait_for(
        "kubegpu's other NFD CRDs deleted",
        lambda: (
            not {cm.NFD_CRDS["NodeFeature"], cm.NFD_CRDS["NodeFeatureGroup"]}
            & {c.metadata.name for c in ext.list_custom_resource_definition().items}
        ),
    )
    assert not apps.list_namespaced_deployment(NFD_NS).items
    custom.delete_cluster_custom_object(
        cm.NFD_GROUP, "v1alpha1", "nodefeaturerules", "someone-elses-rule"
    )
    ext.delete_custom_resource_definition(cm.NFD_CRDS["NodeFeatureRule"])
    wait_for(
        "the NodeFeatureRule CRD deleted",
        lambda: (
            cm.NFD_CRDS["NodeFeatureRule"]
            not in {c.metadata.name for c in ext.list_custom_resource_definition().items}
        ),
    )

    # An NFD that kubegpu did not create (its NodeFeature CRD, without kubegpu's labels):
    # used, not deployed a second time nor taken over; GFD still gets its RBAC.
    foreign = cm.nfd_manifests(cs.validate_config({})[0], read_templates(cm.TEMPLATE_FOLDER))[0]
    foreign["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "Helm"}
    ext.create_custom_resource_definition(foreign)
    wait_for(
        "the other NFD's CRD Established",
        lambda: _crd_established(ext, cm.NFD_NODEFEATURE_CRD),
    )
    used = run_playbook("gpu_cluster.yml", kubeconfig, tmp_path, NFD_SETTINGS)
    assert used["rc"] == 0, used["failures"] or used["raw"][-3000:]
    assert "used instead of deploying a second one" in used["raw"]
    crd = ext.read_custom_resource_definition(cm.NFD_NODEFEATURE_CRD)
    assert crd.metadata.labels == {"app.kubernetes.io/managed-by": "Helm"}
    assert not apps.list_namespaced_deployment(NFD_NS).items
    assert _can_i(kube_cluster, "create", "nodefeatures.nfd.k8s-sigs.io", cm.GFD_NAME) == "yes"
    again = run_playbook("gpu_cluster.yml", kubeconfig, tmp_path, NFD_SETTINGS)
    assert again["rc"] == 0 and again["stats"]["changed"] == 0, again["raw"][-3000:]

    # Reset: kubegpu's objects go, the other NFD's CRD (and the objects in it) stays.
    reset = run_playbook("gpu_cluster_reset.yml", kubeconfig, tmp_path, NFD_SETTINGS)
    assert reset["rc"] == 0, reset["failures"] or reset["raw"][-3000:]
    assert ext.read_custom_resource_definition(cm.NFD_NODEFEATURE_CRD)
    ext.delete_custom_resource_definition(cm.NFD_NODEFEATURE_CRD)
