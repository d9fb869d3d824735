"""GPU node readiness from the API (plugins/module_utils/cluster_readiness.py).

Nodes are built from real captures: the status fragment of a 1-GPU node (allocatable and
capacity nvidia.com/gpu "1") and the labels GPU Feature Discovery put on a DGX A100 in MIG
single mode (gpu.count "7"). Scenarios with other counts change only the numbers in copies of
those. Pod objects are written here in the API's shape (no pod capture exists yet).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_manifests as cm
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_readiness as cr
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_settings as cs

STATUS = "k8s-node/podman-desktop-7778-node-status-fragment-nvidia-gpu-1.yaml"
GFD_LABELS = "k8s-node/nvidia-docs-gfd-labels-a100-sxm4-mig-single-450.json"


@pytest.fixture()
def real_status(fixtures_real: Path) -> dict[str, Any]:
    status: dict[str, Any] = yaml.safe_load((fixtures_real / STATUS).read_text())["status"]
    status["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        }
    ]
    return status


@pytest.fixture()
def real_labels(fixtures_real: Path) -> dict[str, str]:
    labels: dict[str, str] = json.loads((fixtures_real / GFD_LABELS).read_text())
    return labels


def make_node(
    status: dict[str, Any], labels: dict[str, str], gpus: str | None = None, name: str = "nvidia1"
) -> dict[str, Any]:
    status = copy.deepcopy(status)
    if gpus is not None:
        status["allocatable"]["nvidia.com/gpu"] = gpus
        status["capacity"]["nvidia.com/gpu"] = gpus
    labels = dict(labels, **{"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": name})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": status,
    }


def running_pod(name: str, node: str, restarts: int = 0) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "creationTimestamp": "2025-01-01T00:00:00Z",
        },
        "spec": {"nodeName": node},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {
                    "name": "ctr",
                    "ready": True,
                    "restartCount": restarts,
                    "state": {"running": {"startedAt": "2025-01-01T00:00:05Z"}},
                }
            ],
        },
    }


def crashlooping_pod(name: str, node: str) -> dict[str, Any]:
    pod = running_pod(name, node, restarts=6)
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    pod["status"]["containerStatuses"] = [
        {
            "name": "nvidia-device-plugin-ctr",
            "ready": False,
            "restartCount": 6,
            "state": {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": "back-off 5m0s restarting failed container=nvidia-device-plugin-ctr",
                }
            },
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
        }
    ]
    return pod


def configmap(config: dict[str, Any]) -> dict[str, Any]:
    normalized, errors = cs.validate_config(config)
    assert errors == []
    return {"metadata": {"name": cm.CONFIGMAP_NAME}, "data": cm.configmap_data(normalized)}


def view(
    node: dict[str, Any],
    cmap: dict[str, Any] | None,
    device_plugin: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    name = node["metadata"]["name"]
    return {
        "config": cr.select_config(node, cmap, "nvidia.com/device-plugin.config", "default"),
        "pods": {
            "device_plugin": [running_pod("nvidia-device-plugin-abcde", name)]
            if device_plugin is None
            else device_plugin,
            "gfd": [running_pod("gpu-feature-discovery-fghij", name)],
            "dcgm_exporter": [running_pod("dcgm-exporter-klmno", name)],
        },
        "runtime_class": {"metadata": {"name": "nvidia"}, "handler": "nvidia"},
        "smoke": None,
    }


OPTIONS = {"runtime_class": "nvidia", "runtime_class_handler": "nvidia", "namespace": "kube-system"}


def check(checks: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(c for c in checks if c["name"] == name)


def evaluate(node: dict[str, Any], the_view: dict[str, Any], **options: Any) -> dict[str, Any]:
    report: dict[str, Any] = cr.node_report(
        cr.evaluate_node(node, the_view, dict(OPTIONS, **options))
    )
    return report


# --- the brief's scenarios -----------------------------------------------------------------------


def test_four_gpus_ready_passes(real_status: dict[str, Any], real_labels: dict[str, str]) -> None:
    labels = dict(real_labels, **{"nvidia.com/gpu.count": "4", "nvidia.com/mig.strategy": "none"})
    node = make_node(real_status, labels, gpus="4")
    report = evaluate(node, view(node, configmap({})), expected_gpus=4)
    assert report["verdict"] == "ready", report
    assert report["summary"]["fail"] == 0 and report["summary"]["warn"] == 0
    allocatable = check(report["checks"], "gpu_allocatable")
    assert allocatable["observed"] == "nvidia.com/gpu=4"
    assert allocatable["expected"].startswith("nvidia.com/gpu=4 ")
    assert allocatable["remedy"] is None


def test_zero_allocatable_fails_with_a_remedy(
    real_status: dict[str, Any], real_labels: dict[str, str]
) -> None:
    node = make_node(real_status, real_labels, gpus="0")
    report = evaluate(node, view(node, configmap({})), expected_gpus=4)
    allocatable = check(report["checks"], "gpu_allocatable")
    assert allocatable["status"] == "fail"
    assert "device plugin has not registered GPUs" in allocatable["remedy"]
    assert report["verdict"] == "not_ready"


def test_no_gpu_resource_at_all_fails_even_without_an_expected_count(
    real_status: dict[str, Any], real_labels: dict[str, str]
) -> None:
    status = copy.deepcopy(real_status)
    del status["allocatable"]["nvidia.com/gpu"]
    del status["capacity"]["nvidia.com/gpu"]
    labels = {k: v for k, v in real_labels.items() if k != "nvidia.com/gpu.count"}
    node = make_node(status, labels)
    allocatable = check(evaluate(node, view(node, configmap({})))["checks"], "gpu_allocatable")
    assert allocatable["status"] == "fail"
    assert allocatable["observed"] == "no nvidia.com/* resources allocatable"


def test_plugin_pod_in_crashloopbackoff_fails_with_its_reason(
    real_status: dict[str, Any], real_labels: dict[str, str]
) -> None:
    node = make_node(real_status, real_labels, gpus="0")
    report = evaluate(
        node,
        view(
            node,
            configmap({}),
            device_plugin=[crashlooping_pod("nvidia-device-plugin-x1", "nvidia1")],
        ),
        expected_gpus=1,
    )
    plugin = check(report["checks"], "device_plugin_pod")
    assert plugin["status"] == "fail"
    assert "waiting: CrashLoopBackOff" in plugin["observed"]
    assert "6 restarts, last exit 1 Error" in plugin["observed"]
    assert "--previous" in plugin["remedy"] and "NVML" in plugin["remedy"]
    assert report["verdict"] == "not_ready"


def test_time_slicing_four_replicas_of_four_gpus_expects_sixteen(
    real_status: dict[str, Any], real_labels: dict[str, str]
) -> None:
    labels = dict(real_labels, **{"nvidia.com/gpu.count": "4", "nvidia.com/gpu.replicas": "4"})
    cmap = configmap({"sharing": {"strategy": "time-slicing", "replicas": 4}})
    node = make_node(real_status, labels, gpus="16")
    report = evaluate(node, view(node, cmap), expected_gpus=4)
    allocatable = check(report["checks"], "gpu_allocatable")
    assert allocatable["status"] == "pass", allocatable
    assert "nvidia.com/gpu=16" in allocatable["expected"]
    assert "4 GPU(s) x 4 time-slicing replicas" in allocatable["expected"]
    # The plugin still advertising the 4 unshared GPUs (config not picked up) fails.
    stale = make_node(real_status, labels, gpus="4")
    stale_check = check(
        evaluate(stale, view(stale, cmap), expected_gpus=4)["checks"], "gpu_allocatable"
    )
    assert stale_check["status"] == "fail"
    assert "Fewer devices than expected" in stale_check["remedy"]


# --- the real captures as they are ---------------------------------------------------------------


def test_real_one_gpu_node_with_expected_count_passes(real_status: dict[str, Any]) -> None:
    node = make_node(
        real_status,
        {
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
            "nvidia.com/gpu.count": "1",
            "nvidia.com/gpu.memory": "40960",
        },
    )
    report = evaluate(node, view(node, configmap({})), expected_gpus=1)
    assert report["verdict"] == "ready", report


def test_real_mig_single_labels_give_the_expected_count(
    real_status: dict[str, Any], real_labels: dict[str, str]
) -> None:
    # MIG strategy single: GFD's gpu.count (7) counts MIG devices, advertised as nvidia.com/gpu.
    cmap = configmap({"mig_strategy": "single"})
    node = make_node(real_status, real_labels, gpus="7")
    report = evaluate(node, view(node, cmap))
    allocatable = check(report["checks"], "gpu_allocatable")
    assert allocatable["status"] == "pass"
    assert "count from GFD label nvidia.com/gpu.count" in allocatable["expected"]
    labels_check = check(report["checks"], "gfd_labels")
    assert labels_check["status"] == "pass"
    assert "nvidia.com/gpu.product=A100-SXM4-40GB-MIG-1g.5gb" in labels_check["observed"]
    assert "MIG strategy single" in check(report["checks"], "device_plugin_config")["observed"]


def test_missing_gfd_labels_point_at_nfd(real_status: dict[str, Any]) -> None:
    node = make_node(real_status, {}, gpus="1")
    labels_check = check(
        evaluate(node, view(node, configmap({})), expected_gpus=1)["checks"], "gfd_labels"
    )
    assert labels_check["status"] == "fail"
    assert "nvidia.com/gpu.product" in labels_check["observed"]
    for what in ("gpu-feature-discovery pod", "nfd-master", "nodefeatures.nfd.k8s-sigs.io"):
        assert what in labels_check["remedy"]


@pytest.mark.parametrize(
    ("drop", "strategy", "status", "needle"),
    [
        # The real A100 MIG single labels, whole: pass.
        (None, "single", "pass", "nvidia.com/mig.strategy=single"),
        # Each of product, count, memory and the MIG strategy label is needed.
        ("nvidia.com/gpu.product", "single", "fail", "missing nvidia.com/gpu.product"),
        ("nvidia.com/gpu.count", "single", "fail", "missing nvidia.com/gpu.count"),
        ("nvidia.com/gpu.memory", "single", "fail", "missing nvidia.com/gpu.memory"),
        ("nvidia.com/mig.strategy", "single", "fail", "missing nvidia.com/mig.strategy"),
        # The node's config says mixed while GFD still labels single.
        (None, "mixed", "fail", "nvidia.com/gpu.product=A100-SXM4-40GB-MIG-1g.5gb"),
    ],
)
def test_gfd_labels_with_the_real_mig_label_set(
    real_status: dict[str, Any],
    real_labels: dict[str, str],
    drop: str | None,
    strategy: str,
    status: str,
    needle: str,
) -> None:
    labels = {k: v for k, v in real_labels.items() if k != drop}
    node = make_node(real_status, labels, gpus="7")
    report = evaluate(node, view(node, configmap({"mig_strategy": strategy})))
    labels_check = check(report["checks"], "gfd_labels")
    assert labels_check["status"] == status, labels_check
    assert needle in labels_check["observed"]
    if status == "fail":
        assert labels_check["remedy"]
    if strategy == "mixed":
        assert "MIG strategy 'single'" in labels_check["remedy"]


def test_without_mig_the_mig_label_is_not_required(real_status: dict[str, Any]) -> None:
    node = make_node(
        real_status,
        {
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
            "nvidia.com/gpu.count": "1",
            "nvidia.com/gpu.memory": "40960",
        },
    )
    labels_check = check(evaluate(node, view(node, configmap({})))["checks"], "gfd_labels")
    assert labels_check["status"] == "pass"
    assert "mig.strategy" not in labels_check["expected"]


# --- expected resources -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "gpus", "expected"),
    [
        ({}, 8, {"nvidia.com/gpu": 8}),
        ({"sharing": {"strategy": "time-slicing", "replicas": 4}}, 4, {"nvidia.com/gpu": 16}),
        (
            {"sharing": {"strategy": "time-slicing", "replicas": 4, "rename_by_default": True}},
            2,
            {"nvidia.com/gpu.shared": 8},
        ),
        ({"sharing": {"strategy": "mps", "replicas": 3}}, 2, {"nvidia.com/gpu": 6}),
        ({"mig_strategy": "single"}, 7, {"nvidia.com/gpu": 7}),
        ({"mig_strategy": "mixed"}, 1, None),
    ],
)
def test_expected_resources(
    config: dict[str, Any], gpus: int, expected: dict[str, int] | None
) -> None:
    normalized, errors = cs.validate_config(config)
    assert errors == []
    config_file = cr.parse_config_text(cm.configmap_data(normalized)["default"])
    got, why = cr.expected_resources(config_file, gpus)
    assert got == expected, why
    assert why


def test_a_config_that_renames_or_picks_devices_counts_as_the_plugin_reads_it() -> None:
    """A config file made elsewhere with per-resource rename and devices: device plugin
    v0.20.0 drops both, so all 4 GPUs are shared under nvidia.com/gpu."""
    text = yaml.safe_dump(
        {
            "version": "v1",
            "sharing": {
                "timeSlicing": {
                    "resources": [
                        {
                            "name": "nvidia.com/gpu",
                            "replicas": 2,
                            "rename": "example.com/half-gpu",
                            "devices": [0],
                        }
                    ]
                }
            },
        }
    )
    got, why = cr.expected_resources(cr.parse_config_text(text), 4)
    assert got == {"nvidia.com/gpu": 8}, why


def test_shared_resource_name_is_checked(real_status: dict[str, Any]) -> None:
    cmap = configmap(
        {"sharing": {"strategy": "time-slicing", "replicas": 2, "rename_by_default": True}}
    )
    status = copy.deepcopy(real_status)
    status["allocatable"]["nvidia.com/gpu.shared"] = "2"
    status["capacity"]["nvidia.com/gpu.shared"] = "2"
    del status["allocatable"]["nvidia.com/gpu"], status["capacity"]["nvidia.com/gpu"]
    node = make_node(status, {"nvidia.com/gpu.count": "1"})
    allocatable = check(evaluate(node, view(node, cmap))["checks"], "gpu_allocatable")
    assert allocatable["status"] == "pass", allocatable
    assert allocatable["observed"] == "nvidia.com/gpu.shared=2"


def test_unhealthy_devices_are_told_apart(real_status: dict[str, Any]) -> None:
    node = make_node(real_status, {"nvidia.com/gpu.count": "4"}, gpus="4")
    node["status"]["allocatable"]["nvidia.com/gpu"] = "3"
    allocatable = check(evaluate(node, view(node, configmap({})))["checks"], "gpu_allocatable")
    assert allocatable["status"] == "fail"
    assert "unhealthy" in allocatable["remedy"] and "XID" in allocatable["remedy"]


def test_per_node_config_is_selected_by_the_node_label(real_status: dict[str, Any]) -> None:
    cmap = configmap(
        {
            "device_plugin_configs": {
                "shared": {"sharing": {"strategy": "time-slicing", "replicas": 8}}
            }
        }
    )
    labelled = make_node(
        real_status,
        {"nvidia.com/device-plugin.config": "shared", "nvidia.com/gpu.count": "2"},
        gpus="16",
    )
    report = evaluate(labelled, view(labelled, cmap))
    assert check(report["checks"], "gpu_allocatable")["status"] == "pass"
    assert "config 'shared'" in check(report["checks"], "device_plugin_config")["observed"]
    wrong = make_node(real_status, {"nvidia.com/device-plugin.config": "nope"}, gpus="1")
    config_check = check(evaluate(wrong, view(wrong, cmap))["checks"], "device_plugin_config")
    assert config_check["status"] == "fail"
    assert (
        "names a config the ConfigMap does not have (it has: default, shared)"
        in config_check["observed"]
    )


# --- pods, node conditions, runtime class --------------------------------------------------------


def test_pod_health_reasons() -> None:
    assert cr.pod_health([]) == (False, "no pod on this node", "NoPod")
    ok, text, _ = cr.pod_health([running_pod("p", "n", restarts=2)])
    assert ok and "(2 restarts)" in text
    pull = running_pod("p", "n")
    pull["status"] = {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": "c",
                "ready": False,
                "restartCount": 0,
                "state": {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": 'Back-off pulling image "nvcr.io/x"',
                    }
                },
            }
        ],
    }
    ok, text, reason = cr.pod_health([pull])
    assert not ok and reason == "ImagePullBackOff" and "Back-off pulling image" in text
    unschedulable = {
        "metadata": {"name": "p"},
        "spec": {"nodeName": "n"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    }
    ok, text, reason = cr.pod_health([unschedulable])
    assert not ok and reason == "Unschedulable" and "Insufficient nvidia.com/gpu" in text
    # A rollout: the new pod runs while the old one terminates.
    old = crashlooping_pod("old", "n")
    old["metadata"]["deletionTimestamp"] = "2025-01-01T00:01:00Z"
    assert cr.pod_health([old, running_pod("new", "n")])[0]


def test_missing_plugin_pod_explains_the_node_selection(real_status: dict[str, Any]) -> None:
    node = make_node(real_status, {"nvidia.com/gpu.count": "1"}, gpus="1")
    plugin = check(
        evaluate(node, view(node, configmap({}), device_plugin=[]))["checks"], "device_plugin_pod"
    )
    assert plugin["status"] == "fail"
    assert "nvidia.com/gpu.present=true" in plugin["remedy"]


def test_not_ready_and_cordoned_nodes(real_status: dict[str, Any]) -> None:
    node = make_node(real_status, {"nvidia.com/gpu.count": "1"}, gpus="1")
    node["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": "container runtime network not ready",
        }
    ]
    ready = check(evaluate(node, view(node, configmap({})))["checks"], "node_ready")
    assert ready["status"] == "fail" and ready["layer"] == "kubelet"
    assert "KubeletNotReady" in ready["observed"]
    node["status"]["conditions"][0].update(status="True", reason="KubeletReady")
    node["spec"]["unschedulable"] = True
    assert (
        check(evaluate(node, view(node, configmap({})))["checks"], "node_ready")["status"] == "warn"
    )


def test_runtime_class_checks(real_status: dict[str, Any]) -> None:
    node = make_node(real_status, {"nvidia.com/gpu.count": "1"}, gpus="1")
    the_view = view(node, configmap({}))
    the_view["runtime_class"] = None
    assert check(evaluate(node, the_view)["checks"], "runtime_class")["status"] == "fail"
    the_view["runtime_class"] = {"handler": "runc"}
    assert check(evaluate(node, the_view)["checks"], "runtime_class")["status"] == "fail"
    the_view["runtime_class"] = {
        "handler": "nvidia",
        "scheduling": {"nodeSelector": {"pool": "gpu"}},
    }
    mismatch = check(evaluate(node, the_view)["checks"], "runtime_class")
    assert mismatch["status"] == "fail" and "does not match this node" in mismatch["observed"]
    node["metadata"]["labels"]["pool"] = "gpu"
    assert check(evaluate(node, the_view)["checks"], "runtime_class")["status"] == "pass"


def test_dcgm_exporter_problems_only_warn(real_status: dict[str, Any]) -> None:
    node = make_node(
        real_status,
        {
            "nvidia.com/gpu.count": "1",
            "nvidia.com/gpu.product": "T4",
            "nvidia.com/gpu.memory": "15360",
        },
        gpus="1",
    )
    the_view = view(node, configmap({}))
    the_view["pods"]["dcgm_exporter"] = []
    report = evaluate(node, the_view)
    assert check(report["checks"], "dcgm_exporter_pod")["status"] == "warn"
    assert report["verdict"] == "ready_with_warnings"


def test_overall_verdict() -> None:
    assert cr.overall_verdict({}) == "not_ready"
    assert (
        cr.overall_verdict({"a": {"verdict": "ready"}, "b": {"verdict": "ready_with_warnings"}})
        == "ready_with_warnings"
    )
    assert (
        cr.overall_verdict({"a": {"verdict": "ready"}, "b": {"verdict": "not_ready"}})
        == "not_ready"
    )


# --- smoke test ---------------------------------------------------------------------------------


def test_smoke_pod_asks_the_scheduler_for_one_gpu_on_that_node(real_status: dict[str, Any]) -> None:
    node = make_node(real_status, {}, gpus="1")
    node["spec"]["taints"] = [
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
    ]
    pod = cr.smoke_pod(
        "kubegpu-smoke-1",
        "default",
        node,
        "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
        "nvidia.com/gpu",
        "nvidia",
        120,
    )
    spec = pod["spec"]
    assert "nodeName" not in spec
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["nvidia1"]
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["restartPolicy"] == "Never"
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubegpu"


# The lines the vectorAdd sample prints (its source prints these, ending in "Test PASSED").
SAMPLE_LOG = (
    "[Vector addition of 50000 elements]\nCopy input data from the host memory to the "
    "CUDA device\nCUDA kernel launch with 196 blocks of 256 threads\nCopy output data "
    "from the CUDA device to the host memory\nTest PASSED\nDone\n"
)


@pytest.mark.parametrize(
    ("phase", "log", "timed_out", "status", "text"),
    [
        ("Succeeded", SAMPLE_LOG, False, "pass", "Test PASSED"),
        (
            "Succeeded",
            "[Vector addition of 50000 elements]\nDone\n",
            False,
            "fail",
            "without 'Test PASSED'",
        ),
        ("Succeeded", None, False, "warn", "could not be read"),
        (
            "Failed",
            "Failed to allocate device vector A (error code CUDA driver version is "
            "insufficient for CUDA runtime version)!\n",
            False,
            "fail",
            "CUDA driver version",
        ),
        ("Pending", None, True, "fail", "still Pending after 60s"),
    ],
)
def test_judge_smoke(phase: str, log: str | None, timed_out: bool, status: str, text: str) -> None:
    pod = {"metadata": {"name": "kubegpu-smoke-x"}, "status": {"phase": phase}}
    result = cr.judge_smoke(
        pod, log, "HTTP 404" if log is None else None, "Test PASSED", timed_out, 60, "img", True
    )
    assert result["status"] == status
    assert text in result["observed"]
    if status != "pass":
        assert result["remedy"]


def test_smoke_pod_left_behind_is_reported() -> None:
    pod = {"metadata": {"name": "kubegpu-smoke-x"}, "status": {"phase": "Succeeded"}}
    result = cr.judge_smoke(pod, SAMPLE_LOG, None, "Test PASSED", False, 60, "img", False)
    assert "delete kubegpu-smoke-x by hand" in result["observed"]


# --- DRA nodes (gpu_cluster_allocation dra) -------------------------------------------------------


def resource_slice(
    node: str, devices: list[tuple[str, str]], generation: int = 1
) -> dict[str, Any]:
    """A ResourceSlice as NVIDIA's DRA driver publishes one per node (driver gpu.nvidia.com, a
    pool named after the node, devices gpu-<minor> and MIG devices with their type attribute)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com-{generation}"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {"name": name, "attributes": {"type": {"string": kind}}} for name, kind in devices
            ],
        },
    }


def dra_view(
    node: dict[str, Any], slices: list[dict[str, Any]], plugin: bool = True
) -> dict[str, Any]:
    the_view = view(node, None, device_plugin=[])
    name = node["metadata"]["name"]
    pods = [running_pod("nvidia-dra-driver-kubelet-plugin-x1y2z", name)] if plugin else []
    the_view["dra"] = {"pods": pods, "slices": slices}
    return the_view


DRA_LABEL = "nvidia.com/gpu.deploy.dra-driver"


def test_a_dra_node_is_ready_when_its_slices_list_its_gpus(
    real_status: dict[str, Any], real_labels: dict[str, str]
) -> None:
    labels = dict(real_labels, **{"nvidia.com/gpu.count": "2", DRA_LABEL: "true"})
    node = make_node(real_status, labels, name="dra1")
    slices = [
        # An older generation of the pool (being replaced) and another node's slice: not counted.
        resource_slice("dra1", [("gpu-0", "gpu")], generation=1),
        resource_slice("dra1", [("gpu-0", "gpu"), ("gpu-1", "gpu"), ("gpu-1-mig-9-4-1", "mig")], 2),
        resource_slice("other", [("gpu-0", "gpu")]),
    ]
    report = evaluate(node, dra_view(node, slices), dra_node_label=DRA_LABEL)
    slices_check = check(report["checks"], "dra_resource_slices")
    assert slices_check["status"] == "pass", slices_check
    assert slices_check["observed"] == "2 GPU(s): gpu-0, gpu-1"
    # The device plugin does not run on a DRA node: its checks skip, the DRA plugin's pod counts.
    for name in ("device_plugin_config", "gpu_allocatable", "device_plugin_pod"):
        assert check(report["checks"], name)["status"] == "skip"
    assert check(report["checks"], "dra_kubelet_plugin_pod")["status"] == "pass"


def test_a_dra_node_missing_a_gpu_in_its_slices_fails_naming_the_plugin_pod(
    real_status: dict[str, Any], real_labels: dict[str, str]
) -> None:
    labels = dict(real_labels, **{DRA_LABEL: "true"})
    node = make_node(real_status, labels, name="dra1")
    the_view = dra_view(node, [resource_slice("dra1", [("gpu-0", "gpu")])], plugin=False)
    report = evaluate(node, the_view, dra_node_label=DRA_LABEL, expected_gpus=4)
    assert report["verdict"] == "not_ready"
    slices_check = check(report["checks"], "dra_resource_slices")
    assert slices_check["status"] == "fail"
    assert "4 GPU(s)" in slices_check["expected"]
    assert "nvidia-dra-driver-kubelet-plugin" in slices_check["remedy"]
    assert "spec.nodeName=dra1" in slices_check["remedy"]
    assert check(report["checks"], "dra_kubelet_plugin_pod")["status"] == "fail"
    # No slice at all fails too, whatever count is expected.
    empty = evaluate(node, dra_view(node, []), dra_node_label=DRA_LABEL)
    assert check(empty["checks"], "dra_resource_slices")["observed"] == "0 GPU(s)"
    assert check(empty["checks"], "dra_resource_slices")["status"] == "fail"


def test_nodes_without_the_dra_label_get_no_dra_checks(
    real_status: dict[str, Any], real_labels: dict[str, str]
) -> None:
    node = make_node(real_status, dict(real_labels, **{"nvidia.com/gpu.count": "4"}), gpus="4")
    report = evaluate(node, view(node, configmap({})), dra_node_label=DRA_LABEL, expected_gpus=4)
    names = [c["name"] for c in report["checks"]]
    assert "dra_resource_slices" not in names and "dra_kubelet_plugin_pod" not in names
    assert check(report["checks"], "device_plugin_pod")["status"] == "pass"
