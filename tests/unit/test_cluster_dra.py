"""gpu_cluster_allocation dra: NVIDIA's DRA driver rendered beside the device plugin, never on the
same node; its settings refused where they make no sense; the DeviceClasses the quotas name."""

from __future__ import annotations

import itertools
from typing import Any

import kubernetes_validate
import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import artifacts
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_manifests as cm
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_settings as cs
from ansible_collections.kubegpu.gpu.plugins.module_utils import tenancy_settings as ts
from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import read_templates

TEMPLATES = read_templates(cm.TEMPLATE_FOLDER)
DRA = {"allocation": "dra", "sharing": {"strategy": "mps", "replicas": 2}}


def render(config: dict[str, Any]) -> list[dict[str, Any]]:
    normalized, errors = cs.validate_config(config)
    assert errors == []
    return cm.render_manifests(normalized, TEMPLATES, {})


def one(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def matches(affinity: dict[str, Any], labels: dict[str, str]) -> bool:
    """The scheduler's reading of requiredDuringScheduling nodeSelectorTerms (In, NotIn)."""
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    for term in terms["nodeSelectorTerms"]:
        ok = True
        for expr in term["matchExpressions"]:
            value = labels.get(expr["key"])
            if expr["operator"] == "In":
                ok = ok and value in expr["values"]
            elif expr["operator"] == "NotIn":
                ok = ok and value not in expr["values"]
            else:
                raise AssertionError(f"operator {expr['operator']!r} not read here")
        if ok:
            return True
    return False


def affinity_keys(*affinities: dict[str, Any]) -> list[str]:
    keys = set()
    for affinity in affinities:
        terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        for term in terms["nodeSelectorTerms"]:
            keys.update(e["key"] for e in term["matchExpressions"])
    return sorted(keys)


def test_no_node_runs_both_the_device_plugin_and_the_dra_kubelet_plugin() -> None:
    manifests = render(DRA)
    dra = one(manifests, "DaemonSet", cm.DRA_KUBELET_PLUGIN_NAME)["spec"]["template"]["spec"]
    allocators = [
        one(manifests, "DaemonSet", name)["spec"]["template"]["spec"]
        for name in (cm.DEVICE_PLUGIN_NAME, cm.MPS_NAME)
    ]
    keys = affinity_keys(dra["affinity"], *(a["affinity"] for a in allocators))
    assert "nvidia.com/gpu.deploy.dra-driver" in keys
    seen = {"dra": 0, "device-plugin": 0}
    # Every node that differs in the labels the affinities read: absent, "true" or "false".
    for values in itertools.product((None, "true", "false"), repeat=len(keys)):
        labels = {k: v for k, v in zip(keys, values, strict=True) if v is not None}
        on_dra = matches(dra["affinity"], labels)
        for spec in allocators:
            assert not (on_dra and matches(spec["affinity"], labels)), labels
        seen["dra"] += on_dra
        seen["device-plugin"] += matches(allocators[0]["affinity"], labels)
    # Neither side is empty: a GPU node labelled for DRA gets the driver, one not labelled the
    # device plugin.
    assert seen["dra"] > 0 and seen["device-plugin"] > 0
    assert matches(dra["affinity"], {"nvidia.com/gpu.present": "true", dra_label(): "true"})
    assert matches(allocators[0]["affinity"], {"nvidia.com/gpu.present": "true"})


def dra_label() -> str:
    return str(cs.DEFAULTS["dra_node_label"])


def test_gfd_and_dcgm_stay_on_every_gpu_node() -> None:
    manifests = render(DRA)
    for name in (cm.GFD_NAME, cm.DCGM_NAME):
        spec = one(manifests, "DaemonSet", name)["spec"]["template"]["spec"]
        assert matches(spec["affinity"], {"nvidia.com/gpu.present": "true", dra_label(): "true"})


def test_the_dra_objects_render_only_with_dra() -> None:
    kinds = {(m["kind"], m["metadata"]["name"]) for m in render({})}
    assert not any(kind == "DeviceClass" for kind, _ in kinds)
    assert ("DaemonSet", cm.DRA_KUBELET_PLUGIN_NAME) not in kinds
    manifests = render(DRA)
    plugin = one(manifests, "DaemonSet", cm.DRA_KUBELET_PLUGIN_NAME)
    pod = plugin["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == cm.DRA_SERVICE_ACCOUNT
    one(manifests, "ServiceAccount", cm.DRA_SERVICE_ACCOUNT)
    binding = one(manifests, "ClusterRoleBinding", cm.DRA_CLUSTER_ROLE_NAME)
    assert binding["subjects"][0]["name"] == cm.DRA_SERVICE_ACCOUNT
    (container,) = pod["containers"]
    assert container["image"] == (
        "nvcr.io/nvidia/dra-driver-nvidia-gpu:v0.5.0@" + str(cs.DEFAULTS["dra_driver_digest"])
    )
    paths = {v["hostPath"]["path"] for v in pod["volumes"]}
    assert {
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
        "/var/run/cdi",
    } <= paths
    # The DeviceClasses are the ones tenant quotas cap, selecting by the driver's type attribute.
    classes = {
        m["metadata"]["name"]: m["spec"]["selectors"][0]["cel"]["expression"]
        for m in manifests
        if m["kind"] == "DeviceClass"
    }
    assert sorted(classes) == sorted(ts.DRA_GPU_CLASSES)
    assert "device.attributes['gpu.nvidia.com'].type == 'mig'" in classes["mig.nvidia.com"]
    # Objects in apply order: the ServiceAccount and RBAC before the DaemonSet that uses them.
    names = [m["metadata"]["name"] for m in manifests]
    assert names.index(cm.DRA_SERVICE_ACCOUNT) < names.index(cm.DRA_KUBELET_PLUGIN_NAME)


@pytest.mark.parametrize(
    ("config", "variable", "words"),
    [
        ({"allocation": "DRA"}, "gpu_cluster_allocation", "allowed: device-plugin, dra"),
        (
            {"allocation": "dra", "dra_node_label": "nvidia.com/gpu.present"},
            "gpu_cluster_dra_node_label",
            "every GPU node",
        ),
        ({"allocation": "dra", "dra_node_label": "bad label!"}, "gpu_cluster_dra_node_label", ""),
        (
            {"allocation": "dra", "device_plugin_enabled": False, "mig_strategy": "mixed"},
            "gpu_cluster_mig_strategy",
            "mig.nvidia.com",
        ),
        (
            {
                "allocation": "dra",
                "device_plugin_enabled": False,
                "sharing": {"strategy": "time-slicing", "replicas": 2},
            },
            "gpu_cluster_sharing",
            "per ResourceClaim",
        ),
        ({"dra_driver_version": "latest"}, "gpu_cluster_dra_driver_version", "not a pin"),
    ],
)
def test_settings_that_make_no_sense_are_refused_by_name(
    config: dict[str, Any], variable: str, words: str
) -> None:
    _, errors = cs.validate_config(config)
    assert any(e.startswith(variable) and words in e for e in errors), errors


def test_dra_without_the_device_plugin_and_defaults_is_accepted() -> None:
    _, errors = cs.validate_config({"allocation": "dra", "device_plugin_enabled": False})
    assert errors == []


def test_the_driver_image_is_pulled_only_with_dra() -> None:
    manifest = artifacts.load()
    defaults = artifacts.pinned_defaults(manifest)
    defaults.update({"gpu_cluster_" + k: v for k, v in cs.DEFAULTS.items()})
    names = {i["name"] for i in artifacts.wanted_images(manifest, defaults)}
    assert "dra-driver-nvidia-gpu" not in names
    defaults["gpu_cluster_allocation"] = "dra"
    names = {i["name"] for i in artifacts.wanted_images(manifest, defaults)}
    assert "dra-driver-nvidia-gpu" in names


@pytest.mark.parametrize("minor", ["1.33", "1.34", "1.35", "1.36", "1.37"])
def test_the_dra_objects_are_valid_where_resource_k8s_io_v1_is_served(minor: str) -> None:
    """Every object against the schema of each supported minor; DeviceClass of resource.k8s.io/v1
    exists from 1.34 (the module refuses an API server that does not serve it)."""
    manifests = [m for m in render(DRA) if m["kind"] != "ServiceMonitor"]
    for manifest in manifests:
        if manifest["kind"] == "DeviceClass" and minor == "1.33":
            with pytest.raises(kubernetes_validate.utils.SchemaNotFoundError):
                kubernetes_validate.validate(manifest, minor, strict=True)
            continue
        kubernetes_validate.validate(manifest, minor, strict=True)
    assert cs.DRA_KUBERNETES == "1.34"


def test_an_api_server_without_resource_k8s_io_v1_is_refused_naming_the_release() -> None:
    from ansible_collections.kubegpu.gpu.plugins.modules import gpu_manifests

    dra, _ = cs.validate_config({"allocation": "dra"})
    plain, _ = cs.validate_config({})
    problem = gpu_manifests.dra_api_problem(dra, False, {"gitVersion": "v1.33.5"})
    assert problem is not None
    assert "resource.k8s.io/v1" in problem and "Kubernetes 1.34" in problem
    assert "v1.33.5" in problem and "gpu_cluster_allocation" in problem
    assert gpu_manifests.dra_api_problem(dra, True, {"gitVersion": "v1.37.2"}) is None
    assert gpu_manifests.dra_api_problem(plain, False, {"gitVersion": "v1.33.5"}) is None
    assert gpu_manifests.DRA_API == ("resource.k8s.io/v1", "deviceclasses")
