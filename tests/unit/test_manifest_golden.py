"""What a cluster gets: every rendered Kubernetes object and dashboard, kept as golden files.

Each case renders one component group (the gpu_cluster layer, tenants' objects, training
workloads, the smoke Job, the Grafana dashboard and the alert rules) for representative settings
and compares the text with tests/unit/golden/<group>/<case>.<ext>; a review diff of those files
shows exactly what a cluster receives. When a change is meant, render them again and read the
diff before committing:

    KUBEGPU_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_manifest_golden.py

YAML keeps the keys in rendering order (the order kubegpu.workloads writes examples/ in), so a
change of order shows too.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_manifests as cm
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_settings as cs
from ansible_collections.kubegpu.gpu.plugins.module_utils import dra_workloads as dra
from ansible_collections.kubegpu.gpu.plugins.module_utils import gpu_monitoring as mon
from ansible_collections.kubegpu.gpu.plugins.module_utils import tenancy as t
from ansible_collections.kubegpu.gpu.plugins.module_utils import tenancy_settings as ts
from ansible_collections.kubegpu.gpu.plugins.module_utils import training as tr
from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import read_templates

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("KUBEGPU_UPDATE_GOLDEN") == "1"
HEADER = (
    "# Golden file of tests/unit/test_manifest_golden.py. Do not edit: render again with\n"
    "# KUBEGPU_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_manifest_golden.py\n"
)

MIRROR = "registry.example.internal:5000/mirror"
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


class _Dumper(yaml.SafeDumper):
    """Block YAML; multi-line strings (config files, scripts, dashboard JSON) as literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)


def dump(manifests: list[dict[str, Any]]) -> str:
    """Manifests as one multi-document YAML text, each headed by its kind and name."""
    docs = []
    for manifest in manifests:
        meta = manifest["metadata"]
        where = meta["namespace"] + "/" if meta.get("namespace") else ""
        body = yaml.dump(manifest, Dumper=_Dumper, sort_keys=False, width=100)
        docs.append(f"---\n# {manifest['kind']} {where}{meta['name']}\n{body}")
    return HEADER + "".join(docs)


# --- the gpu_cluster layer ------------------------------------------------------------------------

CLUSTER_TEMPLATES = read_templates(cm.TEMPLATE_FOLDER)

# gpu_cluster_* settings (without the prefix) and the capabilities the module discovers.
CLUSTER_CASES: dict[str, tuple[dict[str, Any], dict[str, bool]]] = {
    # The role's defaults on a cluster without the Prometheus operator.
    "defaults": ({}, {}),
    # Every GPU shared four ways by time-slicing, renamed to nvidia.com/gpu.shared.
    "time-slicing": (
        {
            "sharing": {
                "strategy": "time-slicing",
                "replicas": 4,
                "rename_by_default": True,
                "fail_requests_greater_than_one": True,
            },
            "device_plugin_resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
            "runtime_class_node_selector": {"nvidia.com/gpu.present": "true"},
        },
        {"service_monitor": True},
    ),
    # DRA on the node groups labelled for it (NVIDIA's DRA driver, its DeviceClasses), the device
    # plugin with MPS sharing on the other GPU nodes: both DaemonSets' affinities exclude each
    # other's nodes.
    "dra": (
        {
            "allocation": "dra",
            "sharing": {"strategy": "mps", "replicas": 2},
            "dra_driver_resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        },
        {},
    ),
    # MIG (mixed) through CDI as the default, with named per-node configs: an MPS-shared pool and
    # a MIG-single pool, so the config-manager sidecars, their RBAC and the MPS daemon render.
    "mig-mixed": (
        {
            "mig_strategy": "mixed",
            "device_list_strategy": ["cdi-cri"],
            "driver_root": "/run/nvidia/driver",
            "device_plugin_configs": {
                "h100-mps": {"mig_strategy": "none", "sharing": {"strategy": "mps", "replicas": 2}},
                "a100-single": {"mig_strategy": "single"},
            },
            "dcgm_exporter_service_monitor_labels": {"release": "prometheus"},
        },
        {"service_monitor": True},
    ),
    # An air-gapped cluster: images from a private mirror by digest with a pull secret, kubegpu's
    # own namespace, a foreign RuntimeClass left alone, GPU quotas and tolerations.
    "air-gapped": (
        {
            "namespace": "gpu-system",
            "image_registry": MIRROR,
            "image_pull_policy": "Always",
            "image_pull_secrets": ["mirror-pull"],
            "device_plugin_digest": DIGEST_A,
            "dcgm_exporter_digest": DIGEST_B,
            "dcgm_exporter_port": 9500,
            "dcgm_exporter_resources": {"limits": {"memory": "512Mi"}},
            "gfd_sleep_interval": "120s",
            "extra_tolerations": [
                {
                    "key": "dedicated",
                    "operator": "Equal",
                    "value": "ml",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
            "runtime_class_tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "quotas": [
                {
                    "namespace": "ml-team",
                    "gpus": "8",
                    "max_per_container": 4,
                    "hard": {"requests.cpu": "64", "limits.memory": "256Gi"},
                },
                {"namespace": "research", "resource": "nvidia.com/mig-1g.10gb", "gpus": "14"},
            ],
        },
        {"create_namespace": True, "manage_runtime_class": True},
    ),
}


def render_cluster(case: str) -> str:
    config, caps = CLUSTER_CASES[case]
    normalized, errors = cs.validate_config(config)
    assert errors == []
    return dump(cm.render_manifests(normalized, CLUSTER_TEMPLATES, caps))


# --- tenancy, workloads, dashboard ----------------------------------------------------------------

VISION = {
    "name": "vision",
    "description": "Computer vision research",
    "gpus": {"nvidia.com/gpu": "8"},
    "max_gpus_per_container": "4",
    "cpu": {"requests": "96", "limits": "192"},
    "memory": {"requests": "768Gi", "limits": "1Ti"},
    "pods": "100",
    "gpu_products": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"],
    "members": [
        {"kind": "User", "name": "alice@example.com"},
        {"kind": "Group", "name": "vision-researchers"},
    ],
}
INFERENCE = {
    "name": "inference-lab",
    "gpus": {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/gpu.shared": "4"},
    "cpu": "32",
    "memory": "128Gi",
    "members": [{"kind": "Group", "name": "inference"}],
    "pod_security": {"level": "baseline", "reason": "vendor image needs NET_BIND_SERVICE"},
    "container_defaults": {"cpu_request": "500m", "memory_limit": "4Gi"},
    "adopt_namespace": True,
}

# gpu_tenancy_* settings (without the prefix); the role's defaults fill the rest.
TENANCY_CASES: dict[str, dict[str, Any]] = {
    # Two tenants (whole GPUs; MIG and time-sliced GPUs in an adopted namespace), defaults.
    "defaults": {"tenants": [VISION, INFERENCE]},
    # Time-sliced GPUs renamed, MIG of another profile, no DNS egress, other monitoring labels.
    "time-slicing": {
        "tenants": [VISION],
        "dns_egress": False,
        "pod_security_version": "v1.33",
        "workload_shared_resource": "nvidia.com/gpu.shared",
        "workload_mig_resource": "nvidia.com/mig-3g.40gb",
        "workload_nodes": 4,
        "workload_gpus_per_node": 8,
        "workload_gpu_taint_effect": "",
        "monitoring_namespace": "observability",
        "monitoring_dashboard_labels": {"grafana_dashboard": "1", "team": "platform"},
        "monitoring_dashboard_annotations": {"grafana_folder": "GPUs"},
        "monitoring_rule_labels": {"release": "prometheus"},
        "monitoring_namespace_label": "namespace",
        "monitoring_temperature_threshold": 80,
    },
    # Air-gapped: workload images from a private mirror, no RuntimeClass, no GPU taint, any GPU.
    "air-gapped": {
        "tenants": [INFERENCE],
        "workload_image_registry": MIRROR + "/",
        "workload_image_pull_policy": "Always",
        "workload_runtime_class": "",
        "workload_gpu_taint_key": "",
        "workload_gpu_products": [],
        "workload_gpu_memory_min_mib": 0,
        "workload_run_as_user": 2000,
    },
}


def tenancy_settings(case: str) -> dict[str, Any]:
    settings, errors = ts.validate_settings(TENANCY_CASES[case])
    assert errors == []
    return settings


def render_tenants(case: str) -> str:
    settings = tenancy_settings(case)
    adopted = [x["name"] for x in settings["tenants"] if x["adopt_namespace"]]
    return dump(t.render_tenants(settings, adopted))


def render_workloads(case: str) -> str:
    settings = tenancy_settings(case)
    namespace = settings["tenants"][0]["name"]
    workloads = dict(tr.render_workloads(settings, namespace))
    workloads.update(dra.render_dra_workloads(settings, namespace))
    return dump([m for ms in workloads.values() for m in ms])


def render_smoke(case: str) -> str:
    settings = tenancy_settings(case)
    tenant = settings["tenants"][0]
    return dump(
        tr.render_smoke(settings, tenant["name"], "golden", products=tenant["gpu_products"])
    )


def render_monitoring(case: str) -> str:
    """The dashboard's ConfigMap (the dashboard JSON Grafana reads) and the PrometheusRule."""
    return dump(mon.render_monitoring(tenancy_settings(case), True))


# (group, extension, render function, cases)
GROUPS: list[tuple[str, str, Callable[[str], str], list[str]]] = [
    ("cluster", "yaml", render_cluster, list(CLUSTER_CASES)),
    ("tenants", "yaml", render_tenants, list(TENANCY_CASES)),
    ("workloads", "yaml", render_workloads, list(TENANCY_CASES)),
    ("smoke", "yaml", render_smoke, ["defaults", "air-gapped"]),
    ("monitoring", "yaml", render_monitoring, ["defaults", "time-slicing"]),
]
CASES = [
    pytest.param(group, ext, render, case, id=f"{group}/{case}")
    for group, ext, render, cases in GROUPS
    for case in cases
]


@pytest.mark.parametrize(("group", "ext", "render", "case"), CASES)
def test_rendered_objects_match_their_golden_file(
    group: str, ext: str, render: Callable[[str], str], case: str
) -> None:
    path = GOLDEN / group / f"{case}.{ext}"
    text = render(case)
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        return
    if not path.is_file():
        pytest.fail(
            f"{path.relative_to(GOLDEN.parent)} is missing: render it with KUBEGPU_UPDATE_GOLDEN=1"
        )
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"golden/{group}/{case}.{ext}",
                tofile="rendered now",
            )
        )
        pytest.fail(
            "rendered output differs from its golden file; if the change is meant, render "
            "again with KUBEGPU_UPDATE_GOLDEN=1 and review the diff:\n" + diff,
            pytrace=False,
        )


def test_every_golden_file_belongs_to_a_case() -> None:
    wanted = {f"{group}/{case}.{ext}" for group, ext, _, cases in GROUPS for case in cases}
    present = {str(p.relative_to(GOLDEN)) for p in GOLDEN.rglob("*") if p.is_file()}
    if UPDATE:
        for stale in present - wanted:
            (GOLDEN / stale).unlink()
        return
    assert sorted(present - wanted) == [], "golden files no case renders: delete them"


def test_golden_yaml_reads_back_as_the_rendered_objects() -> None:
    """The files hold the objects themselves, not only a text that looks like them."""
    config, caps = CLUSTER_CASES["mig-mixed"]
    normalized, _ = cs.validate_config(config)
    text = (GOLDEN / "cluster" / "mig-mixed.yaml").read_text(encoding="utf-8")
    assert list(yaml.safe_load_all(text)) == cm.render_manifests(
        normalized, CLUSTER_TEMPLATES, caps
    )
