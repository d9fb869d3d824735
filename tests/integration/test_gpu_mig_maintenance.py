"""playbooks/mig.yml on the test cluster (tests/cluster) and a testbed node with the SIMULATED
MIG GPU: the node is cordoned and recorded, its GPU pod evicted through the Eviction API, the
layout applied, its device plugin and GPU feature discovery pods restarted (their DaemonSets
make new ones), and the node uncordoned; a run with nothing to change touches neither the node
nor the API. The node runs no kubelet: its part is stood in for (tests/cluster/standin.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.controlplane import KubeCluster
from tests.integration import ansible_json
from tests.integration.test_gpu_mig import SMI, layout_on, mig_node, run_mig
from tests.integration.test_upgrade_driver import (
    _pod,
    daemonset_pod,
    kubelet_free_nodes,
    pinned_daemonset,
    run_pods,
)
from tests.processes import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

ANNOTATION = "kubegpu.io/mig-layout"
# The workloads' namespace and the GPU components' (gpu_cluster_namespace), on the shared cluster.
WORKLOAD_NS = "kubegpu-mig-work"
COMPONENTS_NS = "kubegpu-mig-gpu"
COMPONENTS = ("nvidia-device-plugin", "gpu-feature-discovery")


@pytest.fixture(scope="module")
def testbed(mig_testbed: Any) -> Any:
    """This module's nodes: the SIMULATED MIG GPU's own testbed (tests/integration/conftest.py)."""
    return mig_testbed


def _run(testbed: Any, kubeconfig: Path, tmp: Path, node_name: str, config: str) -> Any:
    return ansible_json.playbook(
        "playbooks/mig.yml",
        "-i",
        str(testbed.inventory),
        "--limit",
        node_name,
        extra_vars={
            "kubegpu_kubeconfig": str(kubeconfig),
            "gpu_cluster_namespace": COMPONENTS_NS,
            # No layout: none in the inventory, so the node's label decides.
            **({"gpu_mig_config": config} if config else {}),
            "gpu_mig_nvidia_smi": SMI,
        },
        vars_dir=tmp,
        json_report=True,
        timeout=900,
    )


def test_a_layout_change_drains_gpu_pods_restarts_the_plugin_and_uncordons(
    testbed: Any, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    node = mig_node(testbed)
    assert run_mig(testbed, node, tmp_path, "all-1g.10gb")[0] == 0
    with kubelet_free_nodes(kube_cluster, [node], WORKLOAD_NS) as (core, kubelet):
        core.create_namespace({"metadata": {"name": COMPONENTS_NS}})
        try:
            _layout_change(testbed, kube_cluster, tmp_path, node, core, kubelet)
        finally:
            core.delete_namespace(COMPONENTS_NS)
            wait_for(
                f"namespace {COMPONENTS_NS} deleted",
                lambda: COMPONENTS_NS not in {n.metadata.name for n in core.list_namespace().items},
                timeout_s=180,
            )


def _layout_change(
    testbed: Any, kube_cluster: KubeCluster, tmp_path: Path, node: str, core: Any, kubelet: Any
) -> None:
    plugins = {
        app: pinned_daemonset(
            kube_cluster.client(), COMPONENTS_NS, app, node, {"app.kubernetes.io/name": app}
        )
        for app in COMPONENTS
    }
    run_pods(
        core,
        [
            _pod("trainer", node, gpu=True, namespace=WORKLOAD_NS),
            _pod("web", node, gpu=False, namespace=WORKLOAD_NS),
        ],
    )
    proc = _run(testbed, kube_cluster.kubeconfig, tmp_path, node, "all-balanced")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert str(kube_cluster.kubeconfig) not in output
    assert layout_on(testbed, node) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    # Evicted (the GPU pod) and deleted (the components' pods): marked by the API server,
    # finished by the node's kubelet stand-in.
    wait_for("the restarted pods removed", lambda: len(kubelet.removed) >= 3)
    assert sorted(kubelet.removed) == sorted(
        [f"{WORKLOAD_NS}/trainer", *(f"{COMPONENTS_NS}/{pod}" for pod in plugins.values())]
    )
    assert {p.metadata.name for p in core.list_namespaced_pod(WORKLOAD_NS).items} == {"web"}
    # The DaemonSet controller made each component a new pod on the node.
    for app, old in plugins.items():
        new = wait_for(
            f"a new {app} pod on the node",
            lambda app=app: daemonset_pod(core, COMPONENTS_NS, app, node),
            timeout_s=120,
        )
        assert new != old
    after = core.read_node(node)
    assert not after.spec.unschedulable
    record = json.loads(after.metadata.annotations[ANNOTATION])
    assert record["state"] == "done" and record["target"] == "all-balanced", record

    # Nothing to change: no cordon, no write to the Node (its status is the kubelet's: the
    # stand-in's heartbeat), nothing changed on the node.
    before = (after.spec.to_dict(), after.metadata.labels, after.metadata.annotations)
    again = _run(testbed, kube_cluster.kubeconfig, tmp_path, node, "all-balanced")
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    stats = ansible_json.report(again)["stats"][node]
    assert stats["changed"] == 0 and stats["failures"] == 0
    now = core.read_node(node)
    assert (now.spec.to_dict(), now.metadata.labels, now.metadata.annotations) == before


MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"


def test_the_node_label_asks_for_the_layout_and_gets_its_state(
    testbed: Any, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    """NVIDIA's MIG manager protocol: with no gpu_mig_config in the inventory, the Node's label
    nvidia.com/mig.config names the layout; nvidia.com/mig.config.state says success once the
    GPUs hold it, and a second run writes nothing. A label naming a layout the GPU cannot take
    fails the node, naming the layout, before the GPUs change."""
    node = mig_node(testbed)
    assert run_mig(testbed, node, tmp_path, "all-disabled")[0] == 0
    with kubelet_free_nodes(kube_cluster, [node], WORKLOAD_NS) as (core, _kubelet):
        try:
            core.patch_node(node, {"metadata": {"labels": {MIG_CONFIG_LABEL: "all-1g.10gb"}}})
            proc = _run(testbed, kube_cluster.kubeconfig, tmp_path, node, "")
            assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
            assert layout_on(testbed, node) == {"1g.10gb": 7}
            after = core.read_node(node)
            assert after.metadata.labels[MIG_STATE_LABEL] == "success"
            assert not after.spec.unschedulable
            record = json.loads(after.metadata.annotations[ANNOTATION])
            assert record["state"] == "done" and record["target"] == "all-1g.10gb", record

            before = (after.spec.to_dict(), after.metadata.labels, after.metadata.annotations)
            again = _run(testbed, kube_cluster.kubeconfig, tmp_path, node, "")
            assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
            assert ansible_json.report(again)["stats"][node]["changed"] == 0
            now = core.read_node(node)
            assert (now.spec.to_dict(), now.metadata.labels, now.metadata.annotations) == before

            # A layout the GPU cannot take (MIG on: its profiles are known) fails the node
            # before anything changes; the inventory's layout wins over the label.
            core.patch_node(node, {"metadata": {"labels": {MIG_CONFIG_LABEL: "all-4g.99gb"}}})
            bad = _run(testbed, kube_cluster.kubeconfig, tmp_path, node, "")
            assert bad.returncode != 0
            assert "all-4g.99gb" in bad.stdout + bad.stderr
            assert layout_on(testbed, node) == {"1g.10gb": 7}
            assert not core.read_node(node).spec.unschedulable
            inventory = _run(testbed, kube_cluster.kubeconfig, tmp_path, node, "all-disabled")
            assert inventory.returncode == 0, (inventory.stdout + inventory.stderr)[-3000:]
            assert layout_on(testbed, node) is None
        finally:
            core.patch_node(
                node, {"metadata": {"labels": {MIG_CONFIG_LABEL: None, MIG_STATE_LABEL: None}}}
            )
