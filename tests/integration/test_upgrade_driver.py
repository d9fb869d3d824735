"""playbooks/upgrade_driver.yml on testbed nodes against the test cluster (tests/cluster), and
gpu_node_maintenance's drain blocked by a budget on a node joined by a real kubelet, the
budget's status computed by the real disruption controller.

The nodes are real (systemd-nspawn, over SSH) and so is the control plane: the playbook's
Kubernetes tasks run on the controller (this host), which reaches the API server on loopback;
the Eviction API decides, the DaemonSet controller and the scheduler place a DaemonSet's pod,
garbage collection and the node lifecycle controller act. What cannot exist here is stood in
for and said so: every node's GPU is SIMULATED (a replayed real nvidia-smi capture, driver
515), and the nodes run no kubelet, so its part is stood in for (tests/cluster/standin.py): the
Node as its registration writes it and its heartbeat, its pods' status, and the end of the
deletion of evicted pods.

The driver and container-toolkit steps are skipped (--skip-tags driver,toolkit): installing
the driver packages on three nodes costs minutes on this machine and is covered by the
nvidia_driver role's own tests; the point here is the orchestration around them (cordon
order with serial, drain through evictions, readiness gate, records, failure and resume).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.controlplane import KubeCluster, register_node
from tests.cluster.standin import KubeletStandIn, finish_deletions, write_pod_status
from tests.integration import ansible_json
from tests.integration.test_nvml_standin import (  # noqa: F401 - built and joined are fixtures
    SHELL_IMAGE,
    allocatable_gpus,
    built,
    joined,
    start_plugin,
)
from tests.processes import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ANNOTATION = "kubegpu.io/driver-upgrade"
REPO = Path(__file__).resolve().parents[2]
# The workload pods of these tests, in a namespace of their own on the session's cluster.
WORKLOAD_NS = "kubegpu-upgrade"
# Each node's one SIMULATED GPU, as the device plugin advertises it time-shared by 2.
NODE_RESOURCES = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "2"}


def _record(node: Any) -> dict[str, Any]:
    raw = (node.metadata.annotations or {}).get(ANNOTATION)
    return json.loads(raw) if raw else {}


class NodeWatch:
    """Records, through a real watch, every change of the nodes' unschedulable flag."""

    def __init__(self, api_client: Any, ignore: set[str]) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.ignore = ignore
        self.state: dict[str, bool] = {}
        self.cordon_order: list[str] = []
        self.max_cordoned = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        from kubernetes import watch

        while not self.stop.is_set():
            for event in watch.Watch().stream(self.core.list_node, timeout_seconds=2):
                node = event["object"]
                name = node.metadata.name
                now = bool(node.spec.unschedulable)
                if now and not self.state.get(name) and name not in self.ignore:
                    self.cordon_order.append(name)
                self.state[name] = now
                cordoned = sum(1 for n, u in self.state.items() if u and n not in self.ignore)
                self.max_cordoned = max(self.max_cordoned, cordoned)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def _pod(name: str, node: str, gpu: bool, namespace: str = WORKLOAD_NS) -> dict[str, Any]:
    """A pod bound to ``node`` (spec.nodeName, as a pod the scheduler placed)."""
    container: dict[str, Any] = {"name": "main", "image": "registry.invalid/test:1"}
    if gpu:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"nodeName": node, "containers": [container]},
    }


def run_pods(core: Any, pods: list[dict[str, Any]]) -> None:
    """Create the pods; their kubelet's stand-in reports them Running."""
    for pod in pods:
        meta = pod["metadata"]
        core.create_namespaced_pod(meta["namespace"], pod)
        write_pod_status(core, meta["name"], meta["namespace"])


def pinned_daemonset(
    api_client: Any,
    namespace: str,
    name: str,
    node: str,
    labels: dict[str, str],
    limits: dict[str, str] | None = None,
) -> str:
    """A DaemonSet whose node selector picks ``node`` only; returns the name of the pod the
    DaemonSet controller made for it, once the scheduler bound it and its kubelet's stand-in
    reported it Running."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    client.AppsV1Api(api_client).create_namespaced_daemon_set(
        namespace,
        {
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "containers": [
                            {
                                "name": "main",
                                "image": "registry.invalid/agent:1",
                                "resources": {"limits": limits or {}},
                            }
                        ],
                    },
                },
            },
        },
    )
    pod = wait_for(
        f"DaemonSet {name}'s pod bound to {node}",
        lambda: daemonset_pod(core, namespace, name, node),
        timeout_s=120,
    )
    write_pod_status(core, pod, namespace)
    return str(pod)


def daemonset_pod(core: Any, namespace: str, daemonset: str, node: str) -> str | None:
    """The name of DaemonSet ``daemonset``'s pod on ``node`` that is not being deleted."""
    for pod in core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items:
        owners = pod.metadata.owner_references or []
        if pod.metadata.deletion_timestamp is None and any(
            o.kind == "DaemonSet" and o.name == daemonset for o in owners
        ):
            return str(pod.metadata.name)
    return None


@contextlib.contextmanager
def kubelet_free_nodes(
    kube_cluster: KubeCluster, names: list[str], namespace: str
) -> Iterator[tuple[Any, KubeletStandIn]]:
    """The testbed nodes ``names`` on the cluster as their kubelets would register them (Ready,
    with the simulated GPU), schedulable and without an upgrade record, their heartbeat and the
    end of their pods' deletions stood in for; the namespace ``namespace`` for their pods.
    Afterwards the namespace is deleted and the nodes this made are removed."""
    from kubernetes import client

    core = client.CoreV1Api(kube_cluster.client())
    existing = {n.metadata.name for n in core.list_node().items}
    made = [name for name in names if name not in existing]
    for name in made:
        register_node(core, name, {}, NODE_RESOURCES)
    for name in names:
        core.patch_node(
            name, {"spec": {"unschedulable": None}, "metadata": {"annotations": {ANNOTATION: None}}}
        )
    core.create_namespace({"metadata": {"name": namespace}})
    try:
        with KubeletStandIn(kube_cluster.client(), names, heartbeat_nodes=names) as standin:
            yield core, standin
    finally:
        core.delete_namespace(namespace)

        def emptied() -> bool:
            finish_deletions(core, names)
            return namespace not in {n.metadata.name for n in core.list_namespace().items}

        wait_for(f"namespace {namespace} deleted", emptied, timeout_s=180)
        for name in made:
            core.delete_node(name)


def _run_playbook(
    testbed: Any, kubeconfig: Path, tmp: Path, extra: dict[str, Any], *args: str
) -> subprocess.CompletedProcess[str]:
    return ansible_json.playbook(
        "playbooks/upgrade_driver.yml",
        "-i",
        str(testbed.inventory),
        "-i",
        str(REPO / "inventories" / "testbed"),
        "-i",
        str(tmp / "hosts.yml"),
        "--skip-tags",
        "driver,toolkit",
        *args,
        extra_vars={"kubegpu_kubeconfig": str(kubeconfig), **extra},
        vars_dir=tmp,
        timeout=3600,
    )


# Readiness as it can be met here: the simulated GPU's driver (515), no kubelet binary and
# no containerd on these nodes.
SETTINGS = {
    "kubegpu_upgrade_expected_driver": "515",
    "kubegpu_container_runtime": "none",
    "kubegpu_check_kubelet": False,
    "kubegpu_upgrade_drain_timeout": 60,
}


def test_rolling_upgrade_cordons_one_at_a_time_skips_foreign_cordons_and_keeps_failures(
    testbed: Any, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    if not all(n.simulated_gpu for n in testbed.nodes) or len(testbed.nodes) < 3:
        pytest.skip(
            "needs 3 testbed nodes, each with a simulated GPU "
            "(KUBEGPU_TESTBED_SIMULATE_GPU=node1=...,node2=...,node3=...)"
        )
    foreign, upgraded, failing = testbed.node_names[:3]
    with kubelet_free_nodes(kube_cluster, [foreign, upgraded, failing], WORKLOAD_NS) as (
        core,
        kubelet,
    ):
        # On the node that upgrades: a GPU pod (evicted), a plain pod and a DaemonSet's GPU pod
        # (kept), the last made by the DaemonSet controller and bound by the scheduler.
        agent = pinned_daemonset(
            kube_cluster.client(),
            WORKLOAD_NS,
            "gpu-agent",
            upgraded,
            {"app": "gpu-agent"},
            {"nvidia.com/gpu": "1"},
        )
        run_pods(core, [_pod("trainer", upgraded, gpu=True), _pod("web", upgraded, gpu=False)])
        # Someone else's cordon: no kubegpu record. It must be left as it is.
        core.patch_node(foreign, {"spec": {"unschedulable": True}})
        _rolling_upgrade(testbed, kube_cluster, tmp_path, core, kubelet, agent)


def _rolling_upgrade(
    testbed: Any,
    kube_cluster: KubeCluster,
    tmp_path: Path,
    core: Any,
    kubelet: KubeletStandIn,
    agent: str,
) -> None:
    foreign, upgraded, failing = testbed.node_names[:3]
    # The failing node is asked for 2 GPUs; its simulated capture has 1.
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
        f"        {failing}:\n          kubegpu_expected_gpu_count: 2\n"
    )

    watcher = NodeWatch(kube_cluster.client(), ignore={foreign})
    watcher.start()
    time.sleep(1)
    try:
        proc = _run_playbook(testbed, kube_cluster.kubeconfig, tmp_path, SETTINGS)
        time.sleep(3)
    finally:
        watcher.finish()
    output = proc.stdout + proc.stderr
    assert str(kube_cluster.kubeconfig) not in output

    # The failing node fails the run (max_fail_percentage 0), after the others.
    assert proc.returncode != 0, output[-3000:]
    assert watcher.cordon_order == [upgraded, failing], output[-3000:]
    assert watcher.max_cordoned == 1

    nodes = {n.metadata.name: n for n in core.list_node().items}
    # Foreign cordon: untouched, still cordoned, no record written.
    assert nodes[foreign].spec.unschedulable is True
    assert _record(nodes[foreign]) == {}
    assert f"{foreign} skipped: cordoned before this run and not by kubegpu" in output
    # Upgraded: schedulable again, record done, only the GPU pod evicted (the Eviction API
    # marked it, its kubelet's stand-in finished it).
    assert not nodes[upgraded].spec.unschedulable
    done = _record(nodes[upgraded])
    assert done["state"] == "done" and done["target"] == "535", done
    assert kubelet.removed == [f"{WORKLOAD_NS}/trainer"], kubelet.removed
    left = {p.metadata.name for p in core.list_namespaced_pod(WORKLOAD_NS).items}
    assert left == {"web", agent}
    # Failed: still cordoned, record says why and when.
    assert nodes[failing].spec.unschedulable is True
    failed = _record(nodes[failing])
    assert failed["state"] == "failed", failed
    assert "gpu_count" in failed["reason"], failed
    assert failed["time"] >= failed["started"]

    # Fixed, run again on the failed node: it is resumed (not skipped), proved and uncordoned.
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    watcher2 = NodeWatch(kube_cluster.client(), ignore={foreign})
    watcher2.start()
    time.sleep(1)
    try:
        again = _run_playbook(
            testbed,
            kube_cluster.kubeconfig,
            tmp_path,
            SETTINGS,
            "--limit",
            f"{foreign},{failing}",
        )
        time.sleep(3)
    finally:
        watcher2.finish()
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    resumed = core.read_node(failing)
    assert not resumed.spec.unschedulable
    record = _record(resumed)
    assert record["state"] == "done" and record["started"] == failed["started"], record
    assert core.read_node(foreign).spec.unschedulable is True
    assert watcher2.max_cordoned <= 1


def _module(
    kubeconfig: Path, ansible_bin: Path, check: bool = False, **args: Any
) -> dict[str, Any]:
    """Run gpu_node_maintenance once on the controller; its result as a dict."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
    )
    proc = subprocess.run(
        [
            str(ansible_bin / "ansible"),
            "localhost",
            "-m",
            "kubegpu.gpu.gpu_node_maintenance",
            "-a",
            json.dumps({"kubeconfig": str(kubeconfig), **args}),
            "-e",
            "ansible_python_interpreter=" + str(ansible_bin / "python"),
            *(["--check", "--diff"] if check else []),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        check=False,
    )
    assert str(kubeconfig) not in proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    return data["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.mark.cluster
def test_module_check_mode_and_a_drain_blocked_by_a_budget(
    joined: dict[str, Any],  # noqa: F811 - the fixture
    ansible_bin: Path,
) -> None:
    """On a node joined by a real kubelet (NVIDIA's device plugin on the NVML double making its
    GPU allocatable): a GPU pod runs there, its budget's status is the real disruption
    controller's, and the drain's eviction is refused by the API server's eviction rules."""
    from kubernetes import client

    cluster, core, node = joined["cluster"], joined["core"], joined["node"]
    name = node.name
    start_plugin(node)
    wait_for("allocatable nvidia.com/gpu", lambda: allocatable_gpus(core, name) or None)
    container = {
        "name": "main",
        "image": SHELL_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sleep", "600"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    pod = {"metadata": {"name": "guarded", "labels": {"app": "guarded"}}}
    core.create_namespaced_pod("default", {**pod, "spec": {"containers": [container]}})
    policy = client.PolicyV1Api(cluster.client())
    try:
        wait_for(
            "the guarded pod running on the node",
            lambda: (
                (p := core.read_namespaced_pod("guarded", "default")).status.phase == "Running"
                and p.spec.node_name == name
            ),
            timeout_s=120,
        )
        policy.create_namespaced_pod_disruption_budget(
            "default",
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "guarded-pdb"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
            },
        )

        def computed() -> Any:
            budget = policy.read_namespaced_pod_disruption_budget("guarded-pdb", "default")
            status = budget.status
            if status is None or status.observed_generation != budget.metadata.generation:
                return None
            return status if status.expected_pods == 1 and status.current_healthy == 1 else None

        status = wait_for("the disruption controller's status of the budget", computed)
        assert (status.desired_healthy, status.disruptions_allowed) == (1, 0), status
        _module_drain_blocked(cluster.kubeconfig, ansible_bin, core, name)
    finally:
        core.patch_node(name, {"spec": {"unschedulable": None}})
        with contextlib.suppress(Exception):
            policy.delete_namespaced_pod_disruption_budget("guarded-pdb", "default")
        core.delete_namespaced_pod("guarded", "default", grace_period_seconds=0)
        wait_for(
            "the guarded pod gone",
            lambda: (
                "guarded"
                not in {p.metadata.name for p in core.list_namespaced_pod("default").items}
            ),
        )


def _module_drain_blocked(kubeconfig: Path, ansible_bin: Path, core: Any, name: str) -> None:
    record = {"state": "in_progress", "phase": "cordoned", "target_version": "580.95.05"}

    # Check mode: says what would change, changes nothing.
    dry = _module(kubeconfig, ansible_bin, check=True, name=name, state="cordon", record=record)
    assert dry["changed"] is True and dry["diff"]["after"]["unschedulable"] is True
    assert not core.read_node(name).spec.unschedulable

    # A drain before the cordon is refused.
    early = _module(kubeconfig, ansible_bin, name=name, state="drain", drain_timeout=5)
    assert early["failed"] and "cordon it before draining" in early["msg"]

    cordoned = _module(kubeconfig, ansible_bin, name=name, state="cordon", record=record)
    assert cordoned["changed"] and core.read_node(name).spec.unschedulable
    would = _module(kubeconfig, ansible_bin, check=True, name=name, state="drain")
    assert would["evicted"] == ["default/guarded"]

    blocked = _module(
        kubeconfig, ansible_bin, name=name, state="drain", drain_timeout=4, poll_interval=1
    )
    assert blocked["failed"]
    assert "timed out after 4s" in blocked["msg"]
    assert "budget default/guarded-pdb" in blocked["msg"]
    left = core.read_namespaced_pod("guarded", "default")
    assert left.metadata.deletion_timestamp is None
    assert left.status.phase == "Running"


def test_serial_two_upgrades_two_nodes_at_a_time(
    testbed: Any, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    if not all(n.simulated_gpu for n in testbed.nodes) or len(testbed.nodes) < 3:
        pytest.skip("needs 3 testbed nodes, each with a simulated GPU")
    names = testbed.node_names[:3]
    with kubelet_free_nodes(kube_cluster, names, WORKLOAD_NS) as (core, _):
        (tmp_path / "hosts.yml").write_text("all: {}\n")
        # Nodes other tests registered are not this run's.
        others = {n.metadata.name for n in core.list_node().items} - set(names)
        watcher = NodeWatch(kube_cluster.client(), ignore=others)
        watcher.start()
        time.sleep(1)
        try:
            proc = _run_playbook(
                testbed,
                kube_cluster.kubeconfig,
                tmp_path,
                {**SETTINGS, "kubegpu_upgrade_serial": 2},
            )
            time.sleep(3)
        finally:
            watcher.finish()
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        # Batches of two in inventory order: both of the first batch before the third node.
        assert sorted(watcher.cordon_order[:2]) == sorted(names[:2])
        assert watcher.cordon_order[2:] == [names[2]]
        assert watcher.max_cordoned == 2
        for node in core.list_node().items:
            if node.metadata.name in names:
                assert not node.spec.unschedulable
                assert _record(node)["state"] == "done"
