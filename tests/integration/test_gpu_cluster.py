"""Role gpu_cluster and module gpu_cluster_readiness on the test cluster (tests/cluster).

The control plane is real: the API server with its admission chain, server-side apply, the
DaemonSet controller making the components' pods, the scheduler binding them and the smoke
test's pod, garbage collection deleting what a deleted DaemonSet owned, the namespace
controller finishing a namespace's deletion. The GPU node is a registered Node with no
kubelet: its kubelet's part is stood in for (tests/cluster/standin.py) and only that: its
status and heartbeat, its pods' status, the end of their deletions and a container's log. GPU
Feature Discovery's labels on it are written by the test too (GFD would run on that node).
Everything kubegpu does goes through ansible-playbook with the real role and modules, as
playbooks/cluster.yml runs them.

The session's cluster is shared with other test files: the layer goes to a namespace of its
own, and the module's fixture removes every object it made (a reset of the layer, its
namespaces and its Node) whatever the outcome.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_manifests as cm
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_nodes as cn
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_settings as cs
from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_api import object_path, send
from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import read_templates

from tests.cluster.controlplane import KubeCluster
from tests.cluster.standin import KubeletStandIn, LogEndpoint, heartbeat, write_pod_status
from tests.integration import ansible_json
from tests.processes import kill_tree, wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
NODE = "gpu-node-1"
QUOTA_NS = "ml-team"
# The layer's namespace: this module's alone on the session's cluster (created by the role).
GPU_NS = "kubegpu-gpu-cluster"
FOREIGN_NS = "helm-gpu"
GFD_LABELS = "k8s-node/nvidia-docs-gfd-labels-a100-sxm4-mig-single-450.json"
NODE_STATUS = "k8s-node/podman-desktop-7778-node-status-fragment-nvidia-gpu-1.yaml"

# What the deployment under test asks for: time-slicing x4 by default, one named config, a
# quota, and a label and a taint for a node that has joined.
SETTINGS = {
    "gpu_cluster_namespace": GPU_NS,
    # node-feature-discovery is deployed and checked on this cluster by test_cluster.py.
    "gpu_cluster_nfd": "none",
    # The site's own taint on the node (FOREIGN_TAINT), tolerated by the components.
    "gpu_cluster_extra_tolerations": [
        {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
    ],
    "gpu_cluster_sharing": {"strategy": "time-slicing", "replicas": 4},
    "gpu_cluster_device_plugin_configs": {"whole": {"sharing": {"strategy": "none"}}},
    "gpu_cluster_quotas": [{"namespace": QUOTA_NS, "gpus": "8", "max_per_container": "4"}],
    "gpu_cluster_node_labels": {
        NODE: {"node-role.kubernetes.io/gpu": "", "example.com/pool": "training"}
    },
    "gpu_cluster_node_taints": {
        NODE: [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    },
    "gpu_cluster_api_timeout": 5,
}
FOREIGN_TAINT = {"key": "example.com/maintenance", "effect": "NoSchedule"}
# What the CUDA vectorAdd sample prints when it works.
SAMPLE_LOG = (
    "[Vector addition of 50000 elements]\nCopy input data from the host memory to the CUDA "
    "device\nCUDA kernel launch with 196 blocks of 256 threads\nCopy output data from the CUDA "
    "device to the host memory\nTest PASSED\nDone\n"
)


# --- helpers ------------------------------------------------------------------------------------


def run_playbook(
    playbook: str,
    kubeconfig: str,
    tmp_path: Path,
    extra: dict[str, Any] | None = None,
    check: bool = False,
) -> dict[str, Any]:
    """Run a playbook with the JSON callback; returns rc, stats, failure messages, custom stats."""
    extra_vars = dict(extra or {})
    extra_vars.setdefault("kubegpu_kubeconfig", kubeconfig)
    proc = ansible_json.playbook(
        PLAYBOOKS.relative_to(REPO) / playbook,
        "-i",
        "localhost,",
        *(["--check"] if check else []),
        extra_vars=extra_vars,
        vars_dir=tmp_path,
        json_report=True,
        env={"ANSIBLE_SHOW_CUSTOM_STATS": "true"},
    )
    out = ansible_json.report(proc)
    failures = []
    for play in out["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get("localhost", {})
            if result.get("failed") and not result.get("ignore_errors"):
                failures.append(str(result.get("msg", "")))
    return {
        "rc": proc.returncode,
        "stats": out["stats"]["localhost"],
        "failures": failures,
        "stats_custom": out.get("global_custom_stats", {}),
        "raw": proc.stdout,
        "stderr": proc.stderr,
    }


class Cluster:
    """Plain-JSON access to the API server (the tests' kubectl)."""

    def __init__(self, api_client: Any) -> None:
        self.api = api_client
        # Objects with kubegpu's labels that were on the shared cluster before this module began
        # (another test file's): owned() leaves them out, so this module counts only its own.
        self.baseline: set[tuple[str, str, str]] = set()

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str | None = None,
        query: dict[str, str] | None = None,
    ) -> Any:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        data = send(self.api, method, path, (query or {}).items(), headers, body).decode()
        return json.loads(data) if data else None

    def get(self, path: str) -> Any:
        from kubernetes.client.rest import ApiException

        try:
            return self.call("GET", path)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def items(self, path: str, selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": selector} if selector else None
        return list(self.call("GET", path, query=query)["items"])

    def ensure(self, path: str, body: dict[str, Any]) -> None:
        if self.get(f"{path}/{body['metadata']['name']}") is None:
            self.call("POST", path, body)

    def merge_status(self, path: str, status: dict[str, Any]) -> None:
        self.call("PATCH", path + "/status", {"status": status}, "application/merge-patch+json")

    def owned(self) -> list[tuple[str, str, str, str]]:
        """Every object with kubegpu's labels, with a digest of what a client may change: all
        but its status (the controllers' and the kubelet's) and other managers' entries in
        managedFields. A write by kubegpu changes the digest."""
        found = []
        for path in (
            "/api/v1/namespaces",
            "/api/v1/configmaps",
            "/api/v1/serviceaccounts",
            "/api/v1/services",
            "/api/v1/resourcequotas",
            "/api/v1/limitranges",
            "/api/v1/pods",
            "/apis/apps/v1/daemonsets",
            "/apis/apps/v1/deployments",
            "/apis/node.k8s.io/v1/runtimeclasses",
            "/apis/rbac.authorization.k8s.io/v1/roles",
            "/apis/rbac.authorization.k8s.io/v1/rolebindings",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        ):
            for obj in self.items(path, cm.OWNED_SELECTOR):
                meta = obj["metadata"]
                key = (path, meta.get("namespace", ""), meta["name"])
                if key not in self.baseline:
                    found.append((*key, _digest(obj)))
        return sorted(found)


def _digest(obj: dict[str, Any]) -> str:
    kept = {key: value for key, value in obj.items() if key != "status"}
    meta = dict(kept["metadata"])
    meta.pop("resourceVersion", None)
    meta["managedFields"] = [
        entry for entry in meta.get("managedFields") or [] if entry.get("manager") == "kubegpu"
    ]
    kept["metadata"] = meta
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def path_of(manifest: dict[str, Any]) -> str:
    meta = manifest["metadata"]
    return object_path(
        manifest["apiVersion"], manifest["kind"], meta["name"], meta.get("namespace")
    )


def expected_manifests() -> list[dict[str, Any]]:
    config, errors = cs.validate_config(
        {k.removeprefix("gpu_cluster_"): v for k, v in SETTINGS.items()}
    )
    assert errors == []
    # No monitoring.coreos.com API on this cluster; NFD is off (SETTINGS).
    caps = {"service_monitor": False, "create_namespace": True, "deploy_nfd": False}
    return cm.render_manifests(config, read_templates(cm.TEMPLATE_FOLDER), caps)


@pytest.fixture(scope="module")
def kubelet(kube_cluster: KubeCluster) -> Iterator[dict[str, Any]]:
    """The stand-in for NODE's kubelet (its container logs' endpoint, the end of its pods'
    deletions; its heartbeat once play_kubelet registered the node's status)."""
    with (
        LogEndpoint(kube_cluster.pki) as logs,
        KubeletStandIn(kube_cluster.client(), [NODE]) as standin,
    ):
        yield {"logs": logs, "standin": standin}


def node_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The node's taints but the node lifecycle controller's own (node.kubernetes.io/...: not
    ready until its kubelet reports, unreachable when the heartbeat stops)."""
    return [
        t
        for t in node["spec"].get("taints") or []
        if not t["key"].startswith("node.kubernetes.io/")
    ]


@pytest.fixture(scope="module")
def cluster(
    kube_cluster: KubeCluster, kubelet: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """The cluster with the quota's namespace and NODE, a GPU node that has joined; afterwards
    everything this module made is removed from the shared cluster: the layer (its reset),
    the namespaces and the Node."""
    cluster = Cluster(kube_cluster.client())
    cluster.baseline = {found[:3] for found in cluster.owned()}
    if cluster.baseline:
        print(
            f"\nkubegpu's objects left on the shared cluster by others: {sorted(cluster.baseline)}"
        )
    cluster.ensure("/api/v1/namespaces", {"metadata": {"name": QUOTA_NS}})
    cluster.ensure(
        "/api/v1/nodes",
        {
            "metadata": {
                "name": NODE,
                "labels": {"kubernetes.io/hostname": NODE, "nvidia.com/gpu.present": "true"},
            },
            "spec": {"taints": [FOREIGN_TAINT]},
        },
    )
    try:
        yield cluster
    finally:
        tmp = tmp_path_factory.mktemp("gpu-cluster-cleanup")
        reset = run_playbook("gpu_cluster_reset.yml", str(kube_cluster.kubeconfig), tmp)
        namespaces = (QUOTA_NS, FOREIGN_NS, FAULT_NS, GPU_NS)
        for name in namespaces:
            with contextlib.suppress(Exception):
                cluster.call("DELETE", f"/api/v1/namespaces/{name}")
        wait_for(
            "this module's namespaces deleted (the stand-in kubelet finishing their pods)",
            lambda: all(cluster.get(f"/api/v1/namespaces/{n}") is None for n in namespaces),
            timeout_s=180,
        )
        cluster.call("DELETE", f"/api/v1/nodes/{NODE}")
        assert reset["rc"] == 0, reset["failures"] or reset["raw"][-3000:]
        assert cluster.owned() == []


@pytest.fixture(scope="module")
def deployed(
    kube_cluster: KubeCluster, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """The role run twice, as playbooks/cluster.yml would run it."""
    tmp = tmp_path_factory.mktemp("gpu-cluster")
    first = run_playbook("gpu_cluster.yml", str(kube_cluster.kubeconfig), tmp, SETTINGS)
    assert first["rc"] == 0, first["failures"] or first["raw"]
    second = run_playbook("gpu_cluster.yml", str(kube_cluster.kubeconfig), tmp, SETTINGS)
    assert second["rc"] == 0, second["failures"] or second["raw"]
    return {"first": first, "second": second, "tmp": tmp}


# --- apply, idempotence, check mode -------------------------------------------------------------


def test_role_creates_every_object_with_our_labels(
    deployed: dict[str, Any], cluster: Cluster
) -> None:
    assert deployed["first"]["stats"]["changed"] > 0
    manifests = expected_manifests()
    kinds = {m["kind"] for m in manifests}
    assert {
        "ConfigMap",
        "DaemonSet",
        "RuntimeClass",
        "Service",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ResourceQuota",
        "LimitRange",
    } <= kinds
    assert "ServiceMonitor" not in kinds  # the cluster serves no monitoring.coreos.com API
    assert {(m["kind"], m["metadata"]["name"]) for m in manifests if m["kind"] == "Namespace"} == {
        ("Namespace", GPU_NS)
    }  # it did not exist: kubegpu creates it (and a reset deletes it)
    for manifest in manifests:
        live = cluster.get(path_of(manifest))
        assert live is not None, f"{manifest['kind']} {manifest['metadata']['name']} missing"
        assert cm.is_owned(live), manifest["metadata"]["name"]
        managers = {(f["manager"], f["operation"]) for f in live["metadata"]["managedFields"]}
        assert ("kubegpu", "Apply") in managers, managers
    configmap = cluster.get(f"/api/v1/namespaces/{GPU_NS}/configmaps/{cm.CONFIGMAP_NAME}")
    assert sorted(configmap["data"]) == ["default", "whole"]
    assert "replicas: 4" in configmap["data"]["default"]
    quota_path = f"/api/v1/namespaces/{QUOTA_NS}/resourcequotas/{cm.QUOTA_NAME}"
    quota = cluster.get(quota_path)
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}
    # The quota controller took it up: its usage in the namespace, counted.
    status = wait_for(
        "the quota's usage computed by the quota controller",
        lambda: (cluster.get(quota_path).get("status") or {}).get("used"),
    )
    assert status == {"requests.nvidia.com/gpu": "0"}
    assert not cm.is_owned(cluster.get(f"/api/v1/namespaces/{QUOTA_NS}"))  # not created


def test_node_labels_and_taints_are_merged_not_replaced(
    deployed: dict[str, Any], cluster: Cluster
) -> None:
    node = cluster.get(f"/api/v1/nodes/{NODE}")
    labels = node["metadata"]["labels"]
    assert labels["node-role.kubernetes.io/gpu"] == ""
    assert labels["example.com/pool"] == "training"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert node_taints(node) == [
        FOREIGN_TAINT,
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    ]
    recorded = json.loads(node["metadata"]["annotations"][cn.APPLIED_LABELS_ANNOTATION])
    assert recorded == ["example.com/pool", "node-role.kubernetes.io/gpu"]


def test_second_run_and_check_mode_change_nothing(
    deployed: dict[str, Any], cluster: Cluster, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    assert deployed["second"]["stats"]["changed"] == 0, deployed["second"]["raw"]
    before = cluster.owned()
    checked = run_playbook(
        "gpu_cluster.yml", str(kube_cluster.kubeconfig), tmp_path, SETTINGS, check=True
    )
    assert checked["rc"] == 0, checked["failures"]
    assert checked["stats"]["changed"] == 0
    # Changes in check mode are reported, and not made: a new sharing config, and a move to a
    # namespace that does not exist yet (everything in GPU_NS would be pruned).
    more = copy.deepcopy(SETTINGS)
    more["gpu_cluster_sharing"]["replicas"] = 8
    more["gpu_cluster_namespace"] = "gpu-fresh"
    changed = run_playbook(
        "gpu_cluster.yml", str(kube_cluster.kubeconfig), tmp_path, more, check=True
    )
    assert changed["rc"] == 0, changed["failures"]
    assert changed["stats"]["changed"] > 0
    assert cluster.owned() == before
    assert cluster.get("/api/v1/namespaces/gpu-fresh") is None


# --- readiness ----------------------------------------------------------------------------------


def component_pods(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The components' pods bound to NODE, by DaemonSet: made by the DaemonSet controller,
    bound by the scheduler."""
    found = {}
    for pod in cluster.items(f"/api/v1/namespaces/{GPU_NS}/pods"):
        owner = next(iter(pod["metadata"].get("ownerReferences") or []), {})
        if owner.get("kind") == "DaemonSet" and pod["spec"].get("nodeName") == NODE:
            found[owner["name"]] = pod
    return found


def play_kubelet(
    cluster: Cluster, kubelet: dict[str, Any], fixtures_real: Path, gpus: int, replicas: int
) -> None:
    """What NODE's kubelet (and GFD, and the device plugin through it) would report on a node
    with `gpus` GPUs: GFD's labels, the node's status with its GPUs and its heartbeat from now
    on, and the components' pods Running once the real controllers made and bound them."""
    from kubernetes import client

    labels = json.loads((fixtures_real / GFD_LABELS).read_text())
    # That capture (from NVIDIA's documentation) has gpu.machine "NVIDIA DGX" with a space,
    # which the API refuses as a label value; GFD writes such values with '-' for blanks.
    labels = {key: value.replace(" ", "-") for key, value in labels.items()}
    labels.update(
        {
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/mig.strategy": "none",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
            "nvidia.com/gpu.replicas": str(replicas),
        }
    )
    cluster.call(
        "PATCH",
        f"/api/v1/nodes/{NODE}",
        {"metadata": {"labels": labels}},
        "application/merge-patch+json",
    )
    # The real status capture of a GPU node, with the GPU count of this test; its kubelet
    # answers on loopback (the stand-in's log endpoint).
    status = yaml.safe_load((fixtures_real / NODE_STATUS).read_text())["status"]
    for field in ("capacity", "allocatable"):
        status[field]["nvidia.com/gpu"] = str(gpus * replicas)
    cluster.merge_status(
        f"/api/v1/nodes/{NODE}",
        {
            "capacity": status["capacity"],
            "allocatable": status["allocatable"],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": NODE},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet["logs"].port}},
        },
    )
    core = client.CoreV1Api(cluster.api)
    heartbeat(core, NODE)
    kubelet["standin"].heartbeat_nodes.append(NODE)
    wanted = {cm.DEVICE_PLUGIN_NAME, cm.GFD_NAME, cm.DCGM_NAME}
    pods = wait_for(
        "the components' pods made by the DaemonSet controller and bound to the node",
        lambda: found if wanted <= set(found := component_pods(cluster)) else None,
        timeout_s=180,
    )
    for name in sorted(wanted):
        write_pod_status(core, pods[name]["metadata"]["name"], GPU_NS)


# What the readiness playbook is told: the layer's namespace, 4 GPUs per node.
READINESS = {"gpu_cluster_namespace": GPU_NS, "kubegpu_expected_gpus": 4}


def test_readiness_passes_when_the_node_reports_four_gpus(
    deployed: dict[str, Any],
    cluster: Cluster,
    kube_cluster: KubeCluster,
    kubelet: dict[str, Any],
    tmp_path: Path,
    fixtures_real: Path,
) -> None:
    # Before its kubelet reports: the node is not ready (the node lifecycle controller's
    # taints keep the DaemonSet controller from placing the components there), with the reason.
    before = run_playbook(
        "gpu_cluster_readiness.yml", str(kube_cluster.kubeconfig), tmp_path, READINESS
    )
    assert before["rc"] == 0, before["failures"]
    node = before["stats_custom"]["kubegpu_cluster_readiness"][NODE]
    assert node["verdict"] == "not_ready"
    failed = {c["name"] for c in node["checks"] if c["status"] == "fail"}
    assert {"node_ready", "gpu_allocatable", "device_plugin_pod"} <= failed
    assert component_pods(cluster) == {}

    play_kubelet(cluster, kubelet, fixtures_real, gpus=4, replicas=4)
    after = run_playbook(
        "gpu_cluster_readiness.yml", str(kube_cluster.kubeconfig), tmp_path, READINESS
    )
    assert after["rc"] == 0, after["failures"]
    node = after["stats_custom"]["kubegpu_cluster_readiness"][NODE]
    assert node["verdict"] == "ready", node
    allocatable = next(c for c in node["checks"] if c["name"] == "gpu_allocatable")
    assert allocatable["observed"] == "nvidia.com/gpu=16"
    assert "4 GPU(s) x 4 time-slicing replicas" in allocatable["expected"]
    assert str(kube_cluster.kubeconfig) not in after["raw"] + after["stderr"]


def test_smoke_test_pod_runs_and_is_always_deleted(
    deployed: dict[str, Any],
    cluster: Cluster,
    kube_cluster: KubeCluster,
    kubelet: dict[str, Any],
    tmp_path: Path,
) -> None:
    """The scheduler binds the smoke pod to the node it asks for (the module's node affinity,
    its tolerations of the node's taints, one nvidia.com/gpu of the node's allocatable). No
    kubelet runs it at first: it stays Pending, the check fails, the pod is deleted. Then the
    stand-in kubelet reports it Succeeded and serves the sample's log to the API server: the
    module reads it through pods/log, passes, and deletes the pod."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api)
    smoke_path = "/api/v1/namespaces/default/pods"
    selector = "app.kubernetes.io/name=kubegpu-smoke-test"

    def smoke_run(timeout: int, on_bound: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The readiness playbook with the smoke test; on_bound is called once for each smoke
        pod the scheduler bound to NODE. Returns the playbook's result and those pods."""
        bound: list[dict[str, Any]] = []
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(0.3):
                for pod in cluster.items(smoke_path, selector):
                    name = pod["metadata"]["name"]
                    if pod["spec"].get("nodeName") == NODE and name not in {
                        b["metadata"]["name"] for b in bound
                    }:
                        bound.append(pod)
                        on_bound(pod)

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        try:
            result = run_playbook(
                "gpu_cluster_readiness.yml",
                str(kube_cluster.kubeconfig),
                tmp_path,
                dict(READINESS, kubegpu_smoke_test=True, kubegpu_smoke_test_timeout=timeout),
            )
        finally:
            stop.set()
            thread.join()
        return result, bound

    timed_out, bound = smoke_run(8, lambda pod: None)
    node = timed_out["stats_custom"]["kubegpu_cluster_readiness"][NODE]
    smoke = next(c for c in node["checks"] if c["name"] == "smoke_test")
    assert smoke["status"] == "fail" and "still Pending after 8s" in smoke["observed"], smoke
    assert len(bound) == 1, bound  # the scheduler bound it; nothing ran it
    assert cluster.items(smoke_path, selector) == []

    def kubelet_runs_the_sample(pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        kubelet["logs"].logs[f"default/{name}/cuda-sample"] = SAMPLE_LOG
        write_pod_status(core, name, "default", phase="Succeeded")

    ran, seen = smoke_run(60, kubelet_runs_the_sample)
    node = ran["stats_custom"]["kubegpu_cluster_readiness"][NODE]
    smoke = next(c for c in node["checks"] if c["name"] == "smoke_test")
    assert smoke["status"] == "pass", smoke
    assert "Succeeded" in smoke["observed"] and "Test PASSED" in smoke["observed"]
    assert node["verdict"] == "ready"
    # The log came from the node's kubelet endpoint, through the API server.
    assert any(
        path.startswith(f"/containerLogs/default/{seen[0]['metadata']['name']}/cuda-sample")
        for path in kubelet["logs"].asked
    ), kubelet["logs"].asked
    pod = seen[0]
    assert pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [NODE]
    assert pod["spec"]["runtimeClassName"] == "nvidia"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert (
        pod["spec"]["containers"][0]["image"]
        == "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
    )
    assert cluster.items(smoke_path, selector) == []


# --- bad input ----------------------------------------------------------------------------------


@pytest.fixture()
def unreachable_kubeconfig(tmp_path: Path) -> Iterator[str]:
    """A kubeconfig whose server accepts TCP connections and never answers."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    path = tmp_path / "unreachable.kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": f"https://127.0.0.1:{port}",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "never-printed-token"}}],
            }
        )
    )
    yield str(path)
    listener.close()


BAD = [
    ({"gpu_cluster_mig_strategy": "half"}, "gpu_cluster_mig_strategy"),
    (
        {"gpu_cluster_sharing": {"strategy": "time-slicing", "replicas": 0}},
        "gpu_cluster_sharing.replicas: 0",
    ),
    (
        {"gpu_cluster_quotas": [{"namespace": QUOTA_NS, "gpus": "eight"}]},
        "gpu_cluster_quotas[0].gpus: 'eight' is not a Kubernetes quantity",
    ),
    (
        {"gpu_cluster_quotas": [{"namespace": "no-such-namespace", "gpus": "1"}]},
        "gpu_cluster_quotas: namespace(s) no-such-namespace do not exist",
    ),
    (
        {"kubegpu_kubeconfig": "/nonexistent/kubeconfig"},
        "kubegpu_kubeconfig (option kubeconfig): the kubeconfig file does not exist",
    ),
    (
        {"kubegpu_kubeconfig": "UNREACHABLE", "gpu_cluster_api_timeout": 2},
        "kubegpu_kubeconfig (option kubeconfig): cannot reach the API server",
    ),
]


@pytest.mark.parametrize(("settings", "message"), BAD)
def test_bad_input_fails_before_anything_is_applied(
    settings: dict[str, Any],
    message: str,
    deployed: dict[str, Any],
    cluster: Cluster,
    kube_cluster: KubeCluster,
    tmp_path: Path,
    unreachable_kubeconfig: str,
) -> None:
    extra = dict(SETTINGS)
    extra["gpu_cluster_sharing"] = {"strategy": "time-slicing", "replicas": 2}  # would change
    extra.update(settings)
    if extra.get("kubegpu_kubeconfig") == "UNREACHABLE":
        extra["kubegpu_kubeconfig"] = unreachable_kubeconfig
    before = cluster.owned()
    result = run_playbook("gpu_cluster.yml", str(kube_cluster.kubeconfig), tmp_path, extra)
    assert result["rc"] != 0
    assert result["stats"]["changed"] == 0
    assert any(message in f for f in result["failures"]), result["failures"]
    assert cluster.owned() == before
    assert "never-printed-token" not in result["raw"] + result["stderr"]


def test_objects_kubegpu_did_not_create_are_not_taken_over(
    deployed: dict[str, Any], cluster: Cluster, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    cluster.ensure("/api/v1/namespaces", {"metadata": {"name": FOREIGN_NS}})
    foreign = copy.deepcopy(next(m for m in expected_manifests() if m["kind"] == "DaemonSet"))
    foreign["metadata"] = {
        "name": cm.DEVICE_PLUGIN_NAME,
        "namespace": FOREIGN_NS,
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
    }
    # On no node: the DaemonSet controller makes no pod of it (its pods would carry the
    # labels of kubegpu's template).
    foreign["spec"]["template"]["spec"]["nodeSelector"] = {"example.com/helm-gpu": "nowhere"}
    cluster.ensure(f"/apis/apps/v1/namespaces/{FOREIGN_NS}/daemonsets", foreign)
    before = cluster.owned()
    result = run_playbook(
        "gpu_cluster.yml",
        str(kube_cluster.kubeconfig),
        tmp_path,
        dict(SETTINGS, gpu_cluster_namespace=FOREIGN_NS),
    )
    assert result["rc"] != 0
    assert any(
        "DaemonSet helm-gpu/nvidia-device-plugin" in f and "were not created by kubegpu" in f
        for f in result["failures"]
    ), result["failures"]
    assert cluster.owned() == before


# --- reset (last: it removes what the tests above share) ----------------------------------------


def test_reset_deletes_exactly_what_kubegpu_created(
    deployed: dict[str, Any], cluster: Cluster, kube_cluster: KubeCluster, tmp_path: Path
) -> None:
    cluster.ensure(
        f"/api/v1/namespaces/{QUOTA_NS}/configmaps",
        {"metadata": {"name": "not-ours"}, "data": {"a": "b"}},
    )
    owned = cluster.owned()
    assert ("/api/v1/namespaces", "", GPU_NS) in {o[:3] for o in owned}
    assert any(path == "/api/v1/pods" for path, *_ in owned)  # the DaemonSets' pods
    result = run_playbook("gpu_cluster_reset.yml", str(kube_cluster.kubeconfig), tmp_path)
    assert result["rc"] == 0, result["failures"]
    assert result["stats"]["changed"] > 0
    # Garbage collection deletes the DaemonSets' pods (the stand-in kubelet finishes their
    # deletion on the node), the namespace controller empties and removes the namespace.
    wait_for("everything kubegpu created gone", lambda: cluster.owned() == [], timeout_s=180)
    assert cluster.get(f"/api/v1/namespaces/{GPU_NS}") is None
    assert cluster.get(f"/api/v1/namespaces/{QUOTA_NS}/configmaps/not-ours") is not None
    assert cluster.get(f"/apis/apps/v1/namespaces/{FOREIGN_NS}/daemonsets/{cm.DEVICE_PLUGIN_NAME}")
    assert cluster.get(f"/api/v1/namespaces/{QUOTA_NS}") is not None  # not ours: kept
    node = cluster.get(f"/api/v1/nodes/{NODE}")
    assert "node-role.kubernetes.io/gpu" not in node["metadata"]["labels"]
    assert "example.com/pool" not in node["metadata"]["labels"]
    assert node["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"  # not ours: kept
    assert node_taints(node) == [FOREIGN_TAINT]
    assert cn.APPLIED_LABELS_ANNOTATION not in (node["metadata"].get("annotations") or {})
    again = run_playbook("gpu_cluster_reset.yml", str(kube_cluster.kubeconfig), tmp_path)
    assert again["rc"] == 0 and again["stats"]["changed"] == 0


# --- a controller killed mid-apply and mid-prune -------------------------------------------------

FAULT_NS = "kubegpu-faults"
# The layer alone in a namespace of its own, with no cluster-wide object the other tests share.
FAULT_SETTINGS = {
    "gpu_cluster_namespace": FAULT_NS,
    "gpu_cluster_runtime_class_enabled": False,
    "gpu_cluster_api_timeout": 5,
}


def _start(kubeconfig: str, tmp: Path, settings: dict[str, Any]) -> Any:
    """The cluster layer's playbook as a process the test can kill (in a session of its own)."""
    import subprocess
    import sys

    vars_file = tmp / f"fault-{len(list(tmp.glob('fault-*')))}.json"
    vars_file.write_text(json.dumps(dict(settings, kubegpu_kubeconfig=kubeconfig)))
    return subprocess.Popen(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            str(PLAYBOOKS / "gpu_cluster.yml"),
            "-i",
            "localhost,",
            "-e",
            f"@{vars_file}",
        ],
        cwd=REPO,
        env=ansible_json.environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _kill_on(api_client: Any, kind_path: str, event_type: str, proc: Any) -> threading.Thread:
    """A real watch on kind_path (namespaced in FAULT_NS): SIGKILLs the controller, its whole
    process tree, at the first event of event_type."""
    from kubernetes import watch

    core_paths = {
        "serviceaccounts": "list_namespaced_service_account",
        "daemonsets": "list_namespaced_daemon_set",
    }
    from kubernetes import client

    api = (
        client.CoreV1Api(api_client)
        if kind_path == "serviceaccounts"
        else client.AppsV1Api(api_client)
    )
    lister = getattr(api, core_paths[kind_path])
    existing = lister(FAULT_NS).metadata.resource_version

    def run() -> None:
        for event in watch.Watch().stream(
            lister, FAULT_NS, resource_version=existing, timeout_seconds=120
        ):
            if event["type"] == event_type:
                kill_tree(proc.pid)
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(0.5)
    return thread


def _ours_in_namespace(cluster: Cluster) -> list[tuple[str, str]]:
    return sorted(
        (path, name) for path, namespace, name, _ in cluster.owned() if namespace == FAULT_NS
    )


def test_a_controller_killed_mid_apply_and_mid_prune_converges_on_the_next_run(
    kube_cluster: KubeCluster, cluster: Cluster, tmp_path: Path
) -> None:
    """While the controllers act on what is applied. Killed (SIGKILL, its whole process tree)
    the moment the first ServiceAccount of the layer appears: part of the layer is there. The
    next run applies the rest, the run after changes nothing. Then, with the DCGM exporter
    switched off, killed the moment the first of its objects is deleted: the next run prunes
    the rest and keeps everything else. (The module's fixture removes the layer afterwards.)"""
    import signal

    kubeconfig = str(kube_cluster.kubeconfig)
    client = kube_cluster.client()
    cluster.ensure("/api/v1/namespaces", {"metadata": {"name": FAULT_NS}})

    first = _start(kubeconfig, tmp_path, FAULT_SETTINGS)
    watcher = _kill_on(client, "serviceaccounts", "ADDED", first)
    out, _ = first.communicate(timeout=300)
    watcher.join(timeout=10)
    assert first.returncode == -signal.SIGKILL, out[-3000:]
    partial = _ours_in_namespace(cluster)
    resumed = run_playbook("gpu_cluster.yml", kubeconfig, tmp_path, FAULT_SETTINGS)
    assert resumed["rc"] == 0, resumed["failures"] or resumed["raw"][-3000:]
    complete = _ours_in_namespace(cluster)
    assert set(partial) < set(complete), (partial, complete)
    assert ("/apis/apps/v1/daemonsets", "dcgm-exporter") in complete
    steady = run_playbook("gpu_cluster.yml", kubeconfig, tmp_path, FAULT_SETTINGS)
    assert steady["rc"] == 0 and steady["stats"]["changed"] == 0, steady["raw"][-3000:]

    without = dict(FAULT_SETTINGS, gpu_cluster_dcgm_exporter_enabled=False)
    pruning = _start(kubeconfig, tmp_path, without)
    watcher = _kill_on(client, "serviceaccounts", "DELETED", pruning)
    out, _ = pruning.communicate(timeout=300)
    watcher.join(timeout=10)
    assert pruning.returncode == -signal.SIGKILL, out[-3000:]
    pruned = run_playbook("gpu_cluster.yml", kubeconfig, tmp_path, without)
    assert pruned["rc"] == 0, pruned["failures"] or pruned["raw"][-3000:]
    after = _ours_in_namespace(cluster)
    assert not [name for _, name in after if "dcgm" in name], after
    assert set(after) == {o for o in complete if "dcgm" not in o[1]}
    steady = run_playbook("gpu_cluster.yml", kubeconfig, tmp_path, without)
    assert steady["rc"] == 0 and steady["stats"]["changed"] == 0, steady["raw"][-3000:]
