"""GPU Feature Discovery's labels on a real Node through a real node-feature-discovery, and a pod
placed by them.

One trixie testbed node (derived testbed 6) with Debian's containerd and a real kubelet 1.37
(tests/cluster) joined to a real control plane on the bridge; kubegpu's `gpu_cluster` role
deploys node-feature-discovery (`gpu_cluster_nfd: deploy`: CRDs, ServiceAccounts, RBAC, the
nfd-worker ConfigMap, nfd-master, nfd-worker) and GFD, twice (the second run changes nothing).

The programs are real and built here: nfd-master and nfd-worker from
sigs.k8s.io/node-feature-discovery at kubegpu's pin v0.19.0 (tests/cluster/nfd_build.py), GFD
and the device plugin from github.com/NVIDIA/k8s-device-plugin v0.19.0 (tests/nvml/build.py).
The only double is NVML (tests/nvml, KUBEGPU_SIMULATED) at the node's driver library path,
replaying the T4 capture.

They run as HOST PROCESSES on the node (transient systemd units), not as the pods of the role's
Deployment and DaemonSets: those pods stay unstarted, as no registry here serves their images and
the test cluster has no Service proxy through which a pod reaches the API server. Each process
gets what its pod would get from the live object the role applied: its command line, its plain
environment variables, its `spec.nodeName`/`metadata.namespace` fields, its ConfigMap files at
their mount paths, and the API identity of its ServiceAccount (a token from the TokenRequest
API, so kubegpu's RBAC decides every call). nfd-master's port differs from the Deployment's only
because nfd-worker's port is the same and both run on the one node. The device plugin runs as
test_nvml_standin.py runs it, with its own defaults: kubegpu's default device list strategy
(cdi-cri) needs nvidia-ctk and the driver's files, which the node does not have.

Shown: nfd-worker publishes the node's NodeFeature and nfd-master writes
`feature.node.kubernetes.io/*` labels that match the node; GFD (its NodeFeature API output, on by
default in v0.19.0) publishes `nvidia-features-for-<node>` and nfd-master puts GFD's
`nvidia.com/*` labels, with the capture's values, on the Node; the device plugin makes
`nvidia.com/gpu` allocatable; a pod with the GPU-model node affinity kubegpu's training examples
render (`training.gpu_affinity`) is placed by the real scheduler and runs, and a pod asking for a
product the node lacks stays Pending with FailedScheduling.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_manifests as cm
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_readiness, training

from kubegpu.testbed import TestbedConfig, down, up
from tests.cluster import controlplane, images, kubelet, nfd_build
from tests.integration.conftest import derived_testbed_config
from tests.integration.test_nvml_standin import (
    FAMILY,
    NODE_DATA,
    NODE_LIBRARY,
    NODE_SETUP,
    PLUGIN_UNIT,
    SHELL_IMAGE,
    XML,
    Node,
    start_plugin,
    xml_value,
)
from tests.nvml import build as nvml_build
from tests.nvml import capture_to_data
from tests.processes import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

CAPTURE = "telegraf-tesla-t4-515.xml"
NS = "kubegpu-gfd"
SETTINGS = {
    "gpu_cluster_namespace": NS,
    "gpu_cluster_runtime_class_enabled": False,
    "gpu_cluster_dcgm_exporter_enabled": False,
    "gpu_cluster_api_timeout": 10,
}
NODE_BIN = "/usr/local/bin"
# A product kubegpu knows and the node's (SIMULATED) GPU is not.
ABSENT_PRODUCT = "NVIDIA-H100-80GB-HBM3"
FEATURE_PREFIX = "feature.node.kubernetes.io/"
GFD_FEATURE = "nvidia-features-for-"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
NFD_MASTER_PORT = "8081"


def gfd_labels_testbed_config() -> TestbedConfig:
    """One trixie node that can run containers, beside the session's testbed: derived number 6."""
    return derived_testbed_config(6, "nfd", "trixie")


def token_kubeconfig(cluster: controlplane.KubeCluster, account: str) -> bytes:
    """A kubeconfig carrying a token of ServiceAccount ``account`` (the TokenRequest API)."""
    made = cluster.kubectl("create", "token", account, "-n", NS, "--duration=2h")
    assert made.returncode == 0, made.stderr
    ca = base64.b64encode(cluster.ca_file.read_bytes()).decode()
    user = f"system:serviceaccount:{NS}:{account}"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": cluster.url, "certificate-authority-data": ca}}
        ],
        "users": [{"name": user, "user": {"token": made.stdout.strip()}}],
        "contexts": [{"name": user, "context": {"cluster": "test", "user": user}}],
        "current-context": user,
    }
    return yaml.safe_dump(doc).encode()


def live(cluster: controlplane.KubeCluster, kind: str, name: str) -> dict[str, Any]:
    """A live object as the API serves it (JSON, camelCase)."""
    got = cluster.kubectl("get", kind, name, "-n", NS, "-o", "json")
    assert got.returncode == 0, got.stderr
    loaded: dict[str, Any] = json.loads(got.stdout)
    return loaded


def start_as_pod_would(
    labelled: dict[str, Any],
    kind: str,
    name: str,
    overrides: dict[str, str] | None = None,
) -> None:
    """Run the first container of live workload ``kind``/``name`` as a transient unit on the
    node: its command and args (``overrides`` replaces a flag's value), its plain and field
    environment, its ConfigMap files at their mount paths, its ServiceAccount's identity."""
    node, cluster, core = labelled["node"], labelled["cluster"], labelled["core"]
    spec = live(cluster, kind, name)["spec"]["template"]["spec"]
    ctr = next(c for c in spec["containers"] if c["command"][0] in labelled["programs"])
    fields = {"spec.nodeName": node.name, "metadata.namespace": NS}
    env = {"KUBERNETES_NAMESPACE": NS}  # NFD's namespace where no ServiceAccount mount is
    for item in ctr.get("env", []):
        field = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if "value" in item or field in fields:
            env[item["name"]] = item["value"] if "value" in item else fields[field]
    maps = {v["name"]: v["configMap"] for v in spec.get("volumes", []) if "configMap" in v}
    for mount in ctr.get("volumeMounts", []):
        source = maps.get(mount["name"])
        if source is not None and "items" in source:
            data = core.read_namespaced_config_map(source["name"], NS).data
            for item in source["items"]:
                node.put(f"{mount['mountPath']}/{item['path']}", data[item["key"]].encode())
    account = spec["serviceAccountName"]
    kubeconfig = f"/etc/kubegpu-test/{account}.kubeconfig"
    node.put(kubeconfig, token_kubeconfig(cluster, account), 0o600)
    env["KUBECONFIG"] = kubeconfig
    args = []
    for arg in ctr.get("args", []):
        flag = arg.split("=", 1)[0]
        args.append(f"{flag}={overrides[flag]}" if overrides and flag in overrides else arg)
    if ctr["command"][0].startswith("nfd-"):
        args.append(f"-kubeconfig={kubeconfig}")
    unit = f"kubegpu-test-{name}"
    node.ssh(f"systemctl stop {unit}; systemctl reset-failed {unit}")
    node.ok(
        shlex.join(
            [
                "systemd-run",
                f"--unit={unit}",
                *(f"--setenv={key}={value}" for key, value in sorted(env.items())),
                f"{NODE_BIN}/{ctr['command'][0]}",
                *args,
            ]
        )
    )
    labelled["units"].append(unit)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The node joined, kubegpu's gpu_cluster role run twice against the cluster, the NVML
    double and the four programs on the node (started by the tests)."""
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (mounts, a bridge, systemd-nspawn)")
    if not shutil.which("go") or not shutil.which("gcc"):
        pytest.skip("go and gcc are needed to build NFD, GFD, the device plugin and the double")
    gomodcache = Path(os.environ.get("KUBEGPU_GOMODCACHE", nvml_build.DEFAULT_GOMODCACHE))
    nvml = nvml_build.build(
        Path(os.environ.get("KUBEGPU_NVML_CACHE", nvml_build.DEFAULT_CACHE)), gomodcache
    )
    nfd = nfd_build.from_environment()
    print(f"\nNFD build: {'cached' if nfd['cached'] else 'built'}: {nfd['bin']}")
    from kubernetes import client

    from tests.integration.test_gpu_cluster import run_playbook

    config = gfd_labels_testbed_config()
    testbed = up(config)
    node = Node(testbed)
    units: list[str] = []
    cluster = None
    try:
        node.ok(NODE_SETUP)
        dump = tomllib.loads(node.ok("containerd config dump"))
        sandbox = dump["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"]
        kubelet.import_images(
            node, [images.pause_archive(sandbox), images.shell_archive(SHELL_IMAGE)]
        )
        node.put(NODE_LIBRARY, Path(str(nvml["library"])).read_bytes())
        node.put(NODE_DATA, capture_to_data.convert(XML / CAPTURE).encode())
        programs: dict[str, str] = {**nvml["bin"], **nfd["bin"]}  # type: ignore[dict-item]
        for name, path in programs.items():
            node.put(f"{NODE_BIN}/{name}", Path(path).read_bytes(), 0o755)
        cluster = controlplane.start(
            tmp_path_factory.mktemp("cluster"), address=testbed.bridge_address
        )
        kubelet.join(node, cluster)
        work = tmp_path_factory.mktemp("role")
        runs = [
            run_playbook("gpu_cluster.yml", str(cluster.kubeconfig), work, SETTINGS)
            for _ in range(2)
        ]
        api = cluster.client()
        yield {
            "cluster": cluster,
            "node": node,
            "core": client.CoreV1Api(api),
            "custom": client.CustomObjectsApi(api),
            "runs": runs,
            "units": units,
            "programs": set(programs),
        }
    finally:
        for unit in units:
            node.ssh(f"systemctl stop {unit}")
        node.ssh("systemctl disable --now kubelet")
        if cluster is not None:
            cluster.stop()
        if os.environ.get("KUBEGPU_TESTBED_REUSE") != "1":
            down(config.state_dir)


def node_labels(core: Any, name: str) -> dict[str, str]:
    return dict(core.read_node(name).metadata.labels or {})


def node_feature(custom: Any, name: str) -> dict[str, Any] | None:
    """The NodeFeature ``name`` in kubegpu's namespace, or None."""
    items = custom.list_namespaced_custom_object(cm.NFD_GROUP, "v1alpha1", NS, "nodefeatures")
    found = [item for item in items["items"] if item["metadata"]["name"] == name]
    return found[0] if found else None


def capture_labels() -> dict[str, str]:
    """The labels GFD derives from the capture (as test_nvml_standin.py checks them)."""
    root = ET.parse(XML / CAPTURE).getroot()
    gpu = root.findall("gpu")[0]
    product = xml_value(gpu, "product_name")
    capability = capture_to_data.COMPUTE_CAPABILITY[product]
    values = {
        "gpu.product": product.replace(" ", "-"),
        "gpu.count": str(len(root.findall("gpu"))),
        "gpu.memory": xml_value(gpu, "fb_memory_usage/total").split()[0],
        "gpu.family": FAMILY[capability],
        "gpu.compute.major": str(capability[0]),
        "gpu.compute.minor": str(capability[1]),
        "cuda.driver-version.full": xml_value(root, "driver_version"),
        "cuda.runtime-version.full": xml_value(root, "cuda_version"),
    }
    return {f"nvidia.com/{key}": value for key, value in values.items()}


def test_the_role_deploys_nfd_and_a_second_run_changes_nothing(labelled: dict[str, Any]) -> None:
    first, second = labelled["runs"]
    assert first["rc"] == 0, first["failures"] or first["raw"][-3000:]
    assert first["stats"]["changed"] > 0
    assert second["rc"] == 0, second["failures"] or second["raw"][-3000:]
    assert second["stats"]["changed"] == 0, second["raw"][-5000:]
    for kind, name in (
        ("deployment", cm.NFD_MASTER_NAME),
        ("daemonset", cm.NFD_WORKER_NAME),
        ("daemonset", cm.GFD_NAME),
        ("daemonset", cm.DEVICE_PLUGIN_NAME),
    ):
        assert live(labelled["cluster"], kind, name)["metadata"]["namespace"] == NS


def start_nfd(labelled: dict[str, Any]) -> None:
    if "kubegpu-test-nfd-master" not in labelled["units"]:
        start_as_pod_would(labelled, "deployment", cm.NFD_MASTER_NAME, {"-port": NFD_MASTER_PORT})
        start_as_pod_would(labelled, "daemonset", cm.NFD_WORKER_NAME)


def labels_written_by(meta: Any, manager: str) -> set[str]:
    """The Node labels whose field manager is ``manager`` (the Node's managedFields)."""
    return {
        key[2:]
        for entry in meta.managed_fields or []
        if entry.manager == manager and not entry.subresource
        for key in entry.fields_v1.get("f:metadata", {}).get("f:labels", {})
        if key.startswith("f:")
    }


def master_wrote(labelled: dict[str, Any], feature: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Wait until the Node carries every label of NodeFeature ``feature`` with its value; the
    NodeFeature and the Node's labels then. The NodeFeature is read again on each try: its
    publisher rewrites it every interval (GFD's timestamp label)."""
    node, core, custom = labelled["node"], labelled["core"], labelled["custom"]

    def probe() -> tuple[dict[str, Any], dict[str, str]] | None:
        found = node_feature(custom, feature)
        if found is None or not found["spec"].get("labels"):
            return None
        labels = node_labels(core, node.name)
        published = found["spec"]["labels"]
        return (found, labels) if all(labels.get(k) == v for k, v in published.items()) else None

    published, labels = wait_for(f"NodeFeature {feature}'s labels on the Node", probe)
    assert published["metadata"]["labels"][NODE_NAME_LABEL] == node.name
    # Written by nfd-master (the Node's field manager for each of them), not by the test.
    owned = labels_written_by(core.read_node(node.name).metadata, "nfd-master")
    assert set(published["spec"]["labels"]) <= owned, owned
    return published, labels


def test_nfd_worker_publishes_and_nfd_master_labels_the_node(labelled: dict[str, Any]) -> None:
    node, core = labelled["node"], labelled["core"]
    assert not any(key.startswith(FEATURE_PREFIX) for key in node_labels(core, node.name))
    start_nfd(labelled)
    # nfd-worker's NodeFeature is named after the node.
    feature, labels = master_wrote(labelled, node.name)
    release = dict(
        line.split("=", 1) for line in node.ok("cat /etc/os-release").splitlines() if "=" in line
    )
    # What nfd-worker found is the node's own: its kernel and its OS release.
    expected = {
        "kernel-version.full": node.ok("uname -r").strip(),
        "system-os_release.ID": release["ID"].strip('"'),
        "system-os_release.VERSION_ID": release["VERSION_ID"].strip('"'),
    }
    assert {key: labels.get(FEATURE_PREFIX + key) for key in expected} == expected
    assert all(key.startswith(FEATURE_PREFIX) for key in feature["spec"]["labels"])
    print(f"\nnfd-worker published {len(feature['spec']['labels'])} labels")


def start_gfd(labelled: dict[str, Any]) -> None:
    start_nfd(labelled)
    if f"kubegpu-test-{cm.GFD_NAME}" not in labelled["units"]:
        start_as_pod_would(labelled, "daemonset", cm.GFD_NAME)


def test_gfd_publishes_its_nodefeature_and_nfd_master_labels_the_node(
    labelled: dict[str, Any],
) -> None:
    node, core = labelled["node"], labelled["core"]
    expected = capture_labels()
    assert "nvidia.com/gpu.product" not in node_labels(core, node.name)
    start_gfd(labelled)
    feature, labels = master_wrote(labelled, GFD_FEATURE + node.name)
    # GFD's labels, from NVIDIA's code on the double, are the capture's GPU.
    assert {key: feature["spec"]["labels"].get(key) for key in expected} == expected
    assert {key: labels.get(key) for key in expected} == expected
    assert all(key.startswith("nvidia.com/") for key in feature["spec"]["labels"])
    # kubegpu's readiness rule for GFD's labels passes on the real Node.
    count = int(expected["nvidia.com/gpu.count"])
    check = cluster_readiness.check_gfd_labels(
        {"metadata": {"labels": labels}}, list(cluster_readiness.DEFAULT_GFD_LABELS), True, count
    )
    assert check["status"] == "pass", check
    log = node.ok(f"journalctl -u kubegpu-test-{cm.GFD_NAME} --no-pager -o cat")
    assert "KUBEGPU_SIMULATED" in log, log[-3000:]
    print(f"\nGFD's NodeFeature: {json.dumps(feature, sort_keys=True)}")


def run_pod(labelled: dict[str, Any], name: str, affinity: dict[str, Any]) -> None:
    labelled["core"].create_namespaced_pod(
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "affinity": affinity,
                "containers": [
                    {
                        "name": "sh",
                        "image": SHELL_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", "echo placed on $NODE_NAME"],
                        "env": [
                            {
                                "name": "NODE_NAME",
                                "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                            }
                        ],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    )


def failed_scheduling(core: Any, name: str) -> str | None:
    events = core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={name},reason=FailedScheduling"
    ).items
    return events[0].message if events else None


def test_a_pod_with_kubegpus_gpu_affinity_runs_and_one_for_another_gpu_waits(
    labelled: dict[str, Any],
) -> None:
    node, core, cluster = labelled["node"], labelled["core"], labelled["cluster"]
    start_gfd(labelled)
    labels = wait_for(
        "GFD's labels on the Node",
        lambda: (
            found if "nvidia.com/gpu.memory" in (found := node_labels(core, node.name)) else None
        ),
    )
    # The plugin as test_nvml_standin.py runs it (its own defaults): kubegpu's default list
    # strategy, cdi-cri, has the plugin write a CDI spec with nvidia-ctk from the driver's files,
    # which the node does not have.
    start_plugin(node)
    labelled["units"].append(PLUGIN_UNIT)
    count = int(labels["nvidia.com/gpu.count"])
    wait_for(
        "allocatable nvidia.com/gpu",
        lambda: (
            (core.read_node(node.name).status.allocatable or {}).get("nvidia.com/gpu") == str(count)
        ),
    )
    product, memory = labels["nvidia.com/gpu.product"], int(labels["nvidia.com/gpu.memory"])
    # The affinity kubegpu's training examples render: product In [...], memory Gt N MiB.
    fits = training.gpu_affinity([product], memory - 1)
    elsewhere = training.gpu_affinity([ABSENT_PRODUCT], memory - 1)
    try:
        run_pod(labelled, "fits", fits)
        run_pod(labelled, "elsewhere", elsewhere)
        wait_for(
            "pod fits finished",
            lambda: (
                core.read_namespaced_pod("fits", "default").status.phase in ("Succeeded", "Failed")
            ),
            timeout_s=120,
        )
        pod = core.read_namespaced_pod("fits", "default")
        assert pod.status.phase == "Succeeded", pod.status
        assert pod.spec.node_name == node.name
        logs = cluster.kubectl("logs", "fits")
        assert logs.stdout == f"placed on {node.name}\n", logs.stderr
        message = wait_for(
            "FailedScheduling of pod elsewhere", lambda: failed_scheduling(core, "elsewhere")
        )
        assert "didn't match Pod's node affinity/selector" in message, message
        waiting = core.read_namespaced_pod("elsewhere", "default")
        assert waiting.status.phase == "Pending" and waiting.spec.node_name is None
    finally:
        for name in ("fits", "elsewhere"):
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
