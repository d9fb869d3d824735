"""playbooks/mig.yml against the test API server and a testbed node with the SIMULATED MIG GPU:
the node is cordoned and recorded, its GPU pod evicted, the layout applied, its device plugin and
GPU feature discovery pods restarted, and the node uncordoned; a run with nothing to change
touches neither the node nor the API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration import ansible_json
from tests.integration.test_gpu_mig import SMI, layout_on, mig_node, run_mig
from tests.integration.test_upgrade_driver import KubeletPlayer, _pod

try:
    from tests.apiserver.fixture import kube_apiserver  # noqa: F401 - the session fixture
except ImportError:  # pragma: no cover - the server is built by another part
    pytest.skip("tests/apiserver/fixture.py is not available", allow_module_level=True)

pytestmark = [pytest.mark.integration, pytest.mark.apiserver]

ANNOTATION = "kubegpu.io/mig-layout"


@pytest.fixture(scope="module")
def testbed(mig_testbed: Any) -> Any:
    """This module's nodes: the SIMULATED MIG GPU's own testbed (tests/integration/conftest.py)."""
    return mig_testbed


def _plugin_pod(name: str, node_name: str, app: str) -> dict[str, Any]:
    pod = _pod(name, node_name, gpu=False, daemonset=True)
    pod["metadata"]["namespace"] = "kube-system"
    pod["metadata"]["labels"] = {"app.kubernetes.io/name": app}
    return pod


def _run(testbed: Any, kubeconfig: Path, tmp: Path, node_name: str, config: str) -> Any:
    return ansible_json.playbook(
        "playbooks/mig.yml",
        "-i",
        str(testbed.inventory),
        "--limit",
        node_name,
        extra_vars={
            "kubegpu_kubeconfig": str(kubeconfig),
            "gpu_mig_config": config,
            "gpu_mig_nvidia_smi": SMI,
        },
        vars_dir=tmp,
        json_report=True,
        timeout=900,
    )


def test_a_layout_change_drains_gpu_pods_restarts_the_plugin_and_uncordons(
    testbed: Any, kube_apiserver: Any, tmp_path: Path
) -> None:
    from kubernetes import client

    node = mig_node(testbed)
    core = client.CoreV1Api(kube_apiserver.client())
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    assert run_mig(testbed, node, tmp_path, "all-1g.10gb")[0] == 0
    pods = [
        ("default", _pod("trainer", node, gpu=True)),
        ("default", _pod("web", node, gpu=False)),
        ("kube-system", _plugin_pod("nvidia-device-plugin-x", node, "nvidia-device-plugin")),
        ("kube-system", _plugin_pod("gpu-feature-discovery-x", node, "gpu-feature-discovery")),
    ]
    for namespace, pod in pods:
        core.create_namespaced_pod(namespace, pod)
        core.patch_namespaced_pod_status(
            pod["metadata"]["name"], namespace, {"status": {"phase": "Running"}}
        )
    with KubeletPlayer(kube_apiserver) as kubelet:
        proc = _run(testbed, kube_apiserver.kubeconfig, tmp_path, node, "all-balanced")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert str(kube_apiserver.kubeconfig) not in output
    assert layout_on(testbed, node) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert sorted(kubelet.removed) == [
        "default/trainer",
        "kube-system/gpu-feature-discovery-x",
        "kube-system/nvidia-device-plugin-x",
    ]
    assert {p.metadata.name for p in core.list_namespaced_pod("default").items} == {"web"}
    after = core.read_node(node)
    assert not after.spec.unschedulable
    record = json.loads(after.metadata.annotations[ANNOTATION])
    assert record["state"] == "done" and record["target"] == "all-balanced", record

    # Nothing to change: no cordon, no API write, nothing changed on the node.
    version = after.metadata.resource_version
    again = _run(testbed, kube_apiserver.kubeconfig, tmp_path, node, "all-balanced")
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    stats = ansible_json.report(again)["stats"][node]
    assert stats["changed"] == 0 and stats["failures"] == 0
    assert core.read_node(node).metadata.resource_version == version
