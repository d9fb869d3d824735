"""Rendering and validation of the gpu_cluster layer (plugins/module_utils/cluster_*.py).

Every rendered manifest is validated, strictly, against the upstream OpenAPI schemas of every
Kubernetes minor kubegpu supports, through kubernetes_validate's Python API (which raises on an
apiVersion a version no longer serves; its command line only warns).
"""

from __future__ import annotations

import copy
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_manifests as cm
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_nodes as cn
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_settings as cs
from ansible_collections.kubegpu.gpu.plugins.module_utils import k8s_values as kv
from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import read_templates
from ansible_collections.kubegpu.gpu.plugins.module_utils.kubelet_gates import SUPPORTED_RELEASES

# The releases whose schemas every manifest must pass: those the kubelet gate table covers.
SUPPORTED_MINORS = [
    f"{SUPPORTED_RELEASES[0][0]}.{minor}"
    for minor in range(SUPPORTED_RELEASES[0][1], SUPPORTED_RELEASES[1][1] + 1)
]
ROLE = Path(__file__).resolve().parents[2] / "roles" / "gpu_cluster"
TEMPLATES = read_templates(cm.TEMPLATE_FOLDER)


def render(config: dict[str, Any], **caps: bool) -> list[dict[str, Any]]:
    normalized, errors = cs.validate_config(config)
    assert errors == []
    return cm.render_manifests(normalized, TEMPLATES, caps)


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


def one(manifests: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [m for m in by_kind(manifests, kind) if m["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


# Configurations that exercise every branch of the renderer.
CONFIGS = {
    "defaults": {},
    "time_slicing": {
        "sharing": {
            "strategy": "time-slicing",
            "replicas": 4,
            "rename_by_default": True,
            "fail_requests_greater_than_one": True,
        }
    },
    "mps": {"sharing": {"strategy": "mps", "replicas": 2}},
    "mig_single_cdi": {"mig_strategy": "single", "device_list_strategy": ["cdi-cri", "envvar"]},
    "named_configs_quotas": {
        "namespace": "gpu-system",
        "image_registry": "registry.example.internal:5000/mirror",
        "image_pull_secrets": ["mirror-pull"],
        "device_plugin_digest": "sha256:" + "a" * 64,
        "device_plugin_resources": {"requests": {"cpu": "50m", "memory": 64}},
        "device_plugin_configs": {
            "a100-mixed": {"mig_strategy": "mixed"},
            "t4-shared": {"sharing": {"strategy": "time-slicing", "replicas": 8}},
            "l4-mps": {"sharing": {"strategy": "mps", "replicas": 4}},
        },
        "runtime_class_node_selector": {"nvidia.com/gpu.present": "true"},
        "runtime_class_tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ],
        "extra_tolerations": [
            {
                "key": "dedicated",
                "operator": "Equal",
                "value": "ml",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
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
        "dcgm_exporter_service_monitor_labels": {"release": "prometheus"},
        "dcgm_exporter_resources": {"limits": {"memory": "512Mi"}},
    },
    "everything_off": {
        "device_plugin_enabled": False,
        "gfd_enabled": False,
        "dcgm_exporter_enabled": False,
        "runtime_class_enabled": False,
    },
}


# --- defaults and argument specs ------------------------------------------------------------------


def test_role_defaults_match_the_module_defaults() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert {k.removeprefix("gpu_cluster_"): v for k, v in defaults.items()} == cs.DEFAULTS


def test_argument_specs_cover_every_default_with_the_same_value() -> None:
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert set(options) - {"kubegpu_kubeconfig"} == set(defaults)
    for name, value in defaults.items():
        assert options[name].get("default") == value, name
        assert options[name].get("description"), name
    assert options["kubegpu_kubeconfig"]["required"] is True
    assert specs["argument_specs"]["reset"]["options"]["kubegpu_kubeconfig"]["required"] is True


# --- quantities -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", Fraction(8)),
        ("0", Fraction(0)),
        ("500m", Fraction(1, 2)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("64Mi", Fraction(64 * 2**20)),
        ("32777408Ki", Fraction(32777408 * 1024)),  # memory in the real node status capture
        ("8443296967", Fraction(8443296967)),  # ephemeral-storage in the same capture
        ("1e3", Fraction(1000)),
        ("1E-2", Fraction(1, 100)),
        ("2k", Fraction(2000)),
        ("1E", Fraction(10**18)),  # exa, not an exponent
        ("+4", Fraction(4)),
        ("-1", Fraction(-1)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("0.25Ki", Fraction(256)),
    ],
)
def test_parse_quantity_accepts_kubernetes_quantities(text: str, value: Fraction) -> None:
    assert kv.parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    ["", "8x", "1.2.3", "Gi", "1 Gi", "1e", "1ki", "1KI", "1Gb", "one", "1e1.5", "--1", " 8", "8 "],
)
def test_parse_quantity_rejects_what_kubernetes_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        kv.parse_quantity(text)


@pytest.mark.parametrize("value", [8, 1.5, True, None])
def test_parse_quantity_wants_strings(value: Any) -> None:
    with pytest.raises(ValueError, match="not a string"):
        kv.parse_quantity(value)


def test_real_node_status_quantities_parse(fixtures_real: Path) -> None:
    fragment = yaml.safe_load(
        (
            fixtures_real
            / "k8s-node"
            / "podman-desktop-7778-node-status-fragment-nvidia-gpu-1.yaml"
        ).read_text()
    )
    for field in ("allocatable", "capacity"):
        for name, quantity in fragment["status"][field].items():
            assert kv.parse_quantity(quantity) >= 0, name
    assert kv.parse_quantity(fragment["status"]["allocatable"]["nvidia.com/gpu"]) == 1


# --- validation -----------------------------------------------------------------------------------

BAD_INPUTS = [
    (
        {"mig_strategy": "half"},
        "gpu_cluster_mig_strategy: 'half' is not allowed; allowed: none, single, mixed",
    ),
    ({"sharing": {"strategy": "time-slicing", "replicas": 0}}, "gpu_cluster_sharing.replicas: 0"),
    ({"sharing": {"strategy": "time-slicing", "replicas": -2}}, "gpu_cluster_sharing.replicas: -2"),
    # The device plugin refuses its whole config below 2 replicas, for time-slicing and MPS.
    (
        {"sharing": {"strategy": "time-slicing", "replicas": 1}},
        "gpu_cluster_sharing.replicas: 1 is not allowed; allowed: an integer of 2 or more",
    ),
    ({"sharing": {"strategy": "mps", "replicas": 1}}, "gpu_cluster_sharing.replicas: 1"),
    ({"sharing": {"strategy": "mps"}}, "gpu_cluster_sharing.replicas: missing"),
    ({"sharing": {"strategy": "sliced"}}, "gpu_cluster_sharing.strategy: 'sliced'"),
    (
        {
            "sharing": {
                "strategy": "time-slicing",
                "resources": [{"name": "nvidia.com/gpu", "replicas": 0}],
            }
        },
        "gpu_cluster_sharing.resources[0].replicas: 0",
    ),
    (
        {
            "sharing": {
                "strategy": "mps",
                "resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}],
            }
        },
        "gpu_cluster_sharing.resources: MPS shares only nvidia.com/gpu",
    ),
    (
        {"mig_strategy": "mixed", "sharing": {"strategy": "mps", "replicas": 2}},
        "gpu_cluster_sharing.strategy: mps cannot share MIG devices (MIG strategy is 'mixed'",
    ),
    (
        {"mig_strategy": "single", "sharing": {"strategy": "mps", "replicas": 2}},
        "gpu_cluster_sharing.strategy: mps cannot share MIG devices (MIG strategy is 'single'",
    ),
    (
        {"device_list_strategy": ["envvar", "cdi"]},
        "gpu_cluster_device_list_strategy: 'cdi' not allowed",
    ),
    (
        {
            "device_plugin_configs": {
                "big": {"sharing": {"strategy": "time-slicing", "replicas": 0}}
            }
        },
        "gpu_cluster_device_plugin_configs.big.sharing.replicas: 0",
    ),
    (
        {"device_plugin_configs": {"big": {"mig_strategy": "all"}}},
        "gpu_cluster_device_plugin_configs.big.mig_strategy: 'all'",
    ),
    ({"device_plugin_configs": {"default": {}}}, "is the default config's name"),
    (
        {"quotas": [{"namespace": "ml", "gpus": "eight"}]},
        "gpu_cluster_quotas[0].gpus: 'eight' is not a Kubernetes quantity",
    ),
    (
        {"quotas": [{"namespace": "ml", "gpus": "1.5"}]},
        "gpu_cluster_quotas[0].gpus: '1.5' is not a whole number",
    ),
    ({"quotas": [{"namespace": "ml", "gpus": 2.0}]}, "gpu_cluster_quotas[0].gpus: 2.0 is a float"),
    (
        {"quotas": [{"namespace": "ml", "hard": {"requests.cpu": "lots"}}]},
        "gpu_cluster_quotas[0].hard.requests.cpu: 'lots'",
    ),
    ({"quotas": [{"namespace": "ML", "gpus": "1"}]}, "gpu_cluster_quotas[0].namespace: 'ML'"),
    ({"quotas": [{"namespace": "ml"}]}, "gpu_cluster_quotas[0]: sets nothing"),
    (
        {"device_plugin_resources": {"limits": {"memory": "lots"}}},
        "gpu_cluster_device_plugin_resources.limits.memory",
    ),
    (
        {"device_plugin_version": "latest"},
        "gpu_cluster_device_plugin_version: 'latest' is not a pin",
    ),
    ({"dcgm_exporter_digest": "sha256:abc"}, "gpu_cluster_dcgm_exporter_digest"),
    ({"image_registry": "https://mirror.local"}, "gpu_cluster_image_registry"),
    ({"gpu_taint_effect": "NoRun"}, "gpu_cluster_gpu_taint_effect: 'NoRun'"),
    ({"gpu_node_label": "-bad-"}, "gpu_cluster_gpu_node_label"),
    (
        {"node_labels": {"gpu-1": {"pool": True}}},
        'gpu_cluster_node_labels.gpu-1.pool: True is a bool, not a string: quote it ("true")',
    ),
    (
        {"node_taints": {"gpu-1": [{"key": "a", "effect": "Never"}]}},
        "gpu_cluster_node_taints.gpu-1[0].effect: 'Never'",
    ),
    (
        {
            "node_taints": {
                "gpu-1": [
                    {"key": "a", "effect": "NoSchedule"},
                    {"key": "a", "effect": "NoSchedule"},
                ]
            }
        },
        "listed twice",
    ),
    ({"gfd_sleep_interval": "soon"}, "gpu_cluster_gfd_sleep_interval: 'soon'"),
    ({"api_timeout": 0}, "gpu_cluster_api_timeout: 0"),
    ({"dcgm_exporter_port": 70000}, "gpu_cluster_dcgm_exporter_port: 70000"),
    ({"mig_stratgy": "single"}, "gpu_cluster_mig_stratgy: not a variable of role gpu_cluster"),
    ({"namespace": "GPU_System"}, "gpu_cluster_namespace: 'GPU_System'"),
    ({"driver_root": "run/nvidia/driver"}, "gpu_cluster_driver_root: 'run/nvidia/driver'"),
    # v0.20.0 drops per-resource rename and devices (DisableResourceNamingInConfig).
    (
        {
            "sharing": {
                "strategy": "time-slicing",
                "resources": [{"name": "nvidia.com/gpu", "replicas": 2, "rename": "a.io/gpu"}],
            }
        },
        "gpu_cluster_sharing.resources[0].rename: 'a.io/gpu' is not supported: the device "
        "plugin v0.20.0 ignores per-resource rename",
    ),
    (
        {
            "device_plugin_configs": {
                "half": {
                    "sharing": {
                        "strategy": "mps",
                        "resources": [{"name": "nvidia.com/gpu", "replicas": 2, "devices": [0]}],
                    }
                }
            }
        },
        "gpu_cluster_device_plugin_configs.half.sharing.resources[0].devices: [0] is not "
        "supported: the device plugin v0.20.0 ignores per-resource devices",
    ),
    ({"nfd": "helm"}, "gpu_cluster_nfd: 'helm' is not allowed; allowed: deploy, existing, none"),
    ({"nfd_image_registry": "http://r.k8s.io"}, "gpu_cluster_nfd_image_registry"),
    ({"nfd_version": "latest"}, "gpu_cluster_nfd_version: 'latest' is not a pin"),
    (
        {"device_plugin_health_check_skip_xids": [79, "x"]},
        "gpu_cluster_device_plugin_health_check_skip_xids[1]: 'x' is not an Xid",
    ),
    (
        {"device_plugin_health_checks": False, "device_plugin_health_check_skip_xids": [79]},
        "gpu_cluster_device_plugin_health_check_skip_xids: [79] is set while "
        "gpu_cluster_device_plugin_health_checks is false",
    ),
    ({"nvidia_ctk_path": "nvidia-ctk"}, "gpu_cluster_nvidia_ctk_path: 'nvidia-ctk'"),
    ({"cdi_annotation_prefix": "cdi.k8s.io"}, "gpu_cluster_cdi_annotation_prefix"),
]


@pytest.mark.parametrize(("config", "message"), BAD_INPUTS)
def test_bad_input_gets_one_clear_message_naming_the_variable(
    config: dict[str, Any], message: str
) -> None:
    _, errors = cs.validate_config(config)
    assert any(message in e for e in errors), errors
    assert all(e.startswith("gpu_cluster_") for e in errors), errors


def test_every_problem_is_reported_at_once() -> None:
    _, errors = cs.validate_config(
        {
            "mig_strategy": "x",
            "sharing": {"strategy": "time-slicing", "replicas": 0},
            "quotas": [{"namespace": "a", "gpus": "x"}],
        }
    )
    assert len(errors) == 3


def test_text_from_the_command_line_is_read_like_ansible_reads_it() -> None:
    config, errors = cs.validate_config(
        {
            "api_timeout": "5",
            "prune": "false",
            "sharing": {"strategy": "time-slicing", "replicas": "4"},
        }
    )
    assert errors == []
    assert config["api_timeout"] == 5 and config["prune"] is False
    assert config["__configs"]["default"]["sharing"]["resources"][0]["replicas"] == 4


def test_defaults_are_valid_and_quantities_become_strings() -> None:
    config, errors = cs.validate_config(
        {"quotas": [{"namespace": "ml", "gpus": 8, "max_per_container": 2}]}
    )
    assert errors == []
    assert config["quotas"][0]["gpus"] == "8"
    assert config["quotas"][0]["max_per_container"] == "2"


# --- rendered manifests ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_manifest_is_valid_for_every_supported_kubernetes(name: str) -> None:
    manifests = render(CONFIGS[name], service_monitor=True, create_namespace=True)
    assert manifests
    for manifest in manifests:
        if manifest["kind"] == "ServiceMonitor":
            # A CRD: no upstream schema; its shape is checked in its own test.
            with pytest.raises(kubernetes_validate.utils.SchemaNotFoundError):
                kubernetes_validate.validate(manifest, SUPPORTED_MINORS[0], strict=True)
            continue
        for version in SUPPORTED_MINORS:
            try:
                kubernetes_validate.validate(manifest, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                pytest.fail(
                    f"{manifest['kind']} {manifest['metadata']['name']} for {version}: "
                    f"{path}: {exc.message}"
                )


def test_the_validator_raises_on_an_apiversion_no_longer_served() -> None:
    # What the test above relies on: the Python API raises where the CLI would only warn.
    removed = {
        "apiVersion": "node.k8s.io/v1beta1",
        "kind": "RuntimeClass",
        "metadata": {"name": "nvidia"},
        "handler": "nvidia",
    }
    with pytest.raises(kubernetes_validate.utils.SchemaNotFoundError):
        kubernetes_validate.validate(removed, "1.33", strict=True)
    versions = kubernetes_validate.utils.all_versions()
    assert {f"{v}.0" for v in SUPPORTED_MINORS} <= set(versions)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_everything_carries_the_owner_labels(name: str) -> None:
    for manifest in render(CONFIGS[name], service_monitor=True, create_namespace=True):
        labels = manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "kubegpu"
        assert labels["app.kubernetes.io/part-of"] == "kubegpu"
        if manifest["kind"] == "DaemonSet":
            selector = manifest["spec"]["selector"]["matchLabels"]
            template_labels = manifest["spec"]["template"]["metadata"]["labels"]
            assert selector.items() <= template_labels.items()
            assert "app.kubernetes.io/version" not in selector  # selectors are immutable


def _quantities(manifest: dict[str, Any]) -> list[Any]:
    found = []

    def walk(node: Any, key: str = "") -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in (
                    "requests",
                    "limits",
                    "hard",
                    "max",
                    "default",
                    "defaultRequest",
                ) and isinstance(v, dict):
                    found.extend(v.values())
                walk(v, k)
        elif isinstance(node, list):
            for item in node:
                walk(item, key)

    walk(manifest)
    return found


def test_quantities_are_written_as_strings() -> None:
    manifests = render(CONFIGS["named_configs_quotas"])
    values = [q for m in manifests for q in _quantities(m)]
    assert len(values) >= 8
    assert all(isinstance(v, str) for v in values), values
    quota = next(
        q for q in by_kind(manifests, "ResourceQuota") if q["metadata"]["namespace"] == "ml-team"
    )
    assert quota["metadata"]["name"] == cm.QUOTA_NAME
    assert quota["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "8",
        "requests.cpu": "64",
        "limits.memory": "256Gi",
    }


def test_limit_range_caps_gpus_without_giving_other_pods_any() -> None:
    manifests = render(CONFIGS["named_configs_quotas"])
    limits = by_kind(manifests, "LimitRange")
    assert len(limits) == 1  # only ml-team sets max_per_container
    item = limits[0]["spec"]["limits"][0]
    assert item == {
        "type": "Container",
        "max": {"nvidia.com/gpu": "4"},
        "default": {"nvidia.com/gpu": "0"},
        "defaultRequest": {"nvidia.com/gpu": "0"},
    }
    research = [
        q for q in by_kind(manifests, "ResourceQuota") if q["metadata"]["namespace"] == "research"
    ]
    assert research[0]["spec"]["hard"] == {"requests.nvidia.com/mig-1g.10gb": "14"}


def test_quota_resource_follows_the_shared_resource_name() -> None:
    config = dict(CONFIGS["time_slicing"], quotas=[{"namespace": "ml", "gpus": "16"}])
    quota = one(render(config), "ResourceQuota", cm.QUOTA_NAME)
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu.shared": "16"}


def test_device_plugin_runs_on_gpu_nodes_only_tolerating_the_gpu_taint() -> None:
    ds = one(render({}), "DaemonSet", cm.DEVICE_PLUGIN_NAME)
    spec = ds["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["serviceAccountName"] == cm.DEVICE_PLUGIN_NAME
    assert spec["runtimeClassName"] == "nvidia"
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # A node that node-feature-discovery sees an NVIDIA PCI device on, or that kubegpu's
    # kubelet role labels (the terms are ORed).
    assert terms["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {
                    "key": "feature.node.kubernetes.io/pci-10de.present",
                    "operator": "In",
                    "values": ["true"],
                }
            ]
        },
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
            ]
        },
    ]
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    container = spec["containers"][0]
    # By digest by default, the tag beside it (the artifact manifest's pin).
    assert container["image"] == (
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
        "@sha256:a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312"
    )
    assert {"name": "CONFIG_FILE", "value": "/config/config.yaml"} in container["env"]
    # One config: mounted straight from the ConfigMap, no sidecar, no API token, no RBAC.
    assert len(spec["containers"]) == 1 and "initContainers" not in spec
    assert spec["automountServiceAccountToken"] is False
    volume = next(v for v in spec["volumes"] if v["name"] == "config")
    assert volume["configMap"]["items"] == [{"key": "default", "path": "config.yaml"}]
    # RBAC for GFD and NFD only: none binds the device plugin's ServiceAccount.
    for binding in by_kind(render({}), "ClusterRoleBinding"):
        assert binding["subjects"][0]["name"] != cm.DEVICE_PLUGIN_NAME


def test_cdi_strategies_give_the_plugin_the_driver_root() -> None:
    plain = one(render({"device_list_strategy": "envvar"}), "DaemonSet", cm.DEVICE_PLUGIN_NAME)
    plain = plain["spec"]["template"]["spec"]
    assert not [v for v in plain["volumes"] if v["name"] == "driver-root"]
    ds = one(
        render({"device_list_strategy": ["cdi-cri"], "driver_root": "/run/nvidia/driver"}),
        "DaemonSet",
        cm.DEVICE_PLUGIN_NAME,
    )
    spec = ds["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert {"name": "NVIDIA_DRIVER_ROOT", "value": "/run/nvidia/driver"} in container["env"]
    assert {"name": "driver-root", "mountPath": "/driver-root", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert {
        "name": "driver-root",
        "hostPath": {"path": "/run/nvidia/driver", "type": "Directory"},
    } in spec["volumes"]


def test_label_keys_images_and_registry_are_variables() -> None:
    manifests = render(
        {
            "gpu_node_label": "example.com/accelerator",
            "gpu_node_label_value": "nvidia",
            "gpu_taint_key": "example.com/gpu",
            "gpu_taint_effect": "",
            "image_registry": "mirror.example.internal/nvcr/",
        }
    )
    worker = one(manifests, "DaemonSet", cm.NFD_WORKER_NAME)["spec"]["template"]["spec"]
    assert {"key": "example.com/gpu", "operator": "Exists"} in worker["tolerations"]
    for ds in by_kind(manifests, "DaemonSet"):
        if ds["metadata"]["name"] == cm.NFD_WORKER_NAME:
            continue  # on every node: it is what finds the GPU nodes
        spec = ds["spec"]["template"]["spec"]
        expr = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ][-1]["matchExpressions"][0]
        assert (expr["key"], expr["values"]) == ("example.com/accelerator", ["nvidia"])
        assert spec["tolerations"][0] == {"key": "example.com/gpu", "operator": "Exists"}
        for container in spec["containers"] + spec.get("initContainers", []):
            assert container["image"].startswith("mirror.example.internal/nvcr/nvidia/")


def test_named_configs_use_the_config_manager_and_may_read_nodes() -> None:
    manifests = render(CONFIGS["named_configs_quotas"])
    configmap = one(manifests, "ConfigMap", cm.CONFIGMAP_NAME)
    assert sorted(configmap["data"]) == ["a100-mixed", "default", "l4-mps", "t4-shared"]
    ds = one(manifests, "DaemonSet", cm.DEVICE_PLUGIN_NAME)
    spec = ds["spec"]["template"]["spec"]
    assert spec["shareProcessNamespace"] is True
    assert spec["automountServiceAccountToken"] is True
    sidecar = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert sidecar["command"] == ["config-manager"]
    assert env["NODE_LABEL"] == "nvidia.com/device-plugin.config"
    assert env["DEFAULT_CONFIG"] == "default"
    assert env["ONESHOT"] == "false" and env["PROCESS_TO_SIGNAL"] == "nvidia-device-plugin"
    assert spec["initContainers"][0]["command"] == ["config-manager"]
    role = one(manifests, "ClusterRole", cm.CLUSTER_ROLE_NAME)
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]
    binding = one(manifests, "ClusterRoleBinding", cm.CLUSTER_ROLE_NAME)
    assert {s["name"] for s in binding["subjects"]} == {cm.DEVICE_PLUGIN_NAME, cm.GFD_NAME}
    # MPS in one named config brings the MPS control daemon, on MPS-capable nodes only.
    mps = one(manifests, "DaemonSet", cm.MPS_NAME)
    assert mps["spec"]["template"]["spec"]["nodeSelector"] == {"nvidia.com/mps.capable": "true"}
    # MIG in one named config: SYS_ADMIN and MIG monitoring for the plugin.
    plugin = spec["containers"][1]
    assert plugin["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN"]}}
    assert {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"} in plugin["env"]
    for container in spec["containers"] + spec["initContainers"]:
        assert container["image"] == (
            "registry.example.internal:5000/mirror/nvidia/"
            "k8s-device-plugin:v0.20.0@sha256:" + "a" * 64
        )


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {},
            {
                "version": "v1",
                "flags": {
                    "migStrategy": "none",
                    "failOnInitError": True,
                    "plugin": {
                        "passDeviceSpecs": False,
                        "deviceListStrategy": ["cdi-cri"],
                        "deviceIDStrategy": "uuid",
                        "cdiAnnotationPrefix": "cdi.k8s.io/",
                        "nvidiaCTKPath": "/usr/bin/nvidia-ctk",
                        "containerDriverRoot": "/driver-root",
                    },
                },
            },
        ),
        (
            CONFIGS["time_slicing"],
            {
                "version": "v1",
                "flags": {
                    "migStrategy": "none",
                    "failOnInitError": True,
                    "plugin": {
                        "passDeviceSpecs": False,
                        "deviceListStrategy": ["cdi-cri"],
                        "deviceIDStrategy": "uuid",
                        "cdiAnnotationPrefix": "cdi.k8s.io/",
                        "nvidiaCTKPath": "/usr/bin/nvidia-ctk",
                        "containerDriverRoot": "/driver-root",
                    },
                },
                "sharing": {
                    "timeSlicing": {
                        "renameByDefault": True,
                        "failRequestsGreaterThanOne": True,
                        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
                    }
                },
            },
        ),
        (
            CONFIGS["mps"],
            {
                "version": "v1",
                "flags": {
                    "migStrategy": "none",
                    "failOnInitError": True,
                    "plugin": {
                        "passDeviceSpecs": False,
                        "deviceListStrategy": ["cdi-cri"],
                        "deviceIDStrategy": "uuid",
                        "cdiAnnotationPrefix": "cdi.k8s.io/",
                        "nvidiaCTKPath": "/usr/bin/nvidia-ctk",
                        "containerDriverRoot": "/driver-root",
                    },
                },
                "sharing": {
                    "mps": {
                        "renameByDefault": False,
                        "resources": [{"name": "nvidia.com/gpu", "replicas": 2}],
                    }
                },
            },
        ),
        (
            {
                "mig_strategy": "mixed",
                "device_list_strategy": "volume-mounts",
                "device_id_strategy": "index",
                "fail_on_init_error": False,
                "sharing": {
                    "strategy": "time-slicing",
                    "resources": [
                        {
                            "name": "nvidia.com/mig-1g.10gb",
                            "replicas": 2,
                        }
                    ],
                },
            },
            {
                "version": "v1",
                "flags": {
                    "migStrategy": "mixed",
                    "failOnInitError": False,
                    "plugin": {
                        "passDeviceSpecs": False,
                        "deviceListStrategy": ["volume-mounts"],
                        "deviceIDStrategy": "index",
                    },
                },
                "sharing": {
                    "timeSlicing": {
                        "renameByDefault": False,
                        "failRequestsGreaterThanOne": False,
                        "resources": [
                            {
                                "name": "nvidia.com/mig-1g.10gb",
                                "replicas": 2,
                            }
                        ],
                    }
                },
            },
        ),
    ],
)
def test_device_plugin_config_file(config: dict[str, Any], expected: dict[str, Any]) -> None:
    manifests = render(config)
    text = one(manifests, "ConfigMap", cm.CONFIGMAP_NAME)["data"]["default"]
    assert yaml.safe_load(text) == expected


def test_to_yaml_round_trips_and_is_stable() -> None:
    data = {"b": [1, {"x": "y: z", "n": None, "e": []}, [True, "0"]], "a": {}, "c": "#not-comment"}
    text = cm.to_yaml(data)
    assert yaml.safe_load(text) == data
    assert cm.to_yaml(copy.deepcopy(data)) == text


def test_rendering_is_deterministic_and_config_changes_roll_the_pods() -> None:
    first = render(CONFIGS["time_slicing"])
    assert json.dumps(first, sort_keys=True) == json.dumps(
        render(CONFIGS["time_slicing"]), sort_keys=True
    )
    other = render({"sharing": {"strategy": "time-slicing", "replicas": 8}})
    annotation = cm.CONFIG_CHECKSUM_ANNOTATION

    def checksum(manifests: list[dict[str, Any]]) -> str:
        ds = one(manifests, "DaemonSet", cm.DEVICE_PLUGIN_NAME)
        return str(ds["spec"]["template"]["metadata"]["annotations"][annotation])

    assert checksum(first) != checksum(other)


def test_service_monitor_only_when_the_api_exists() -> None:
    assert not by_kind(render({}), "ServiceMonitor")
    manifests = render(CONFIGS["named_configs_quotas"], service_monitor=True)
    monitor = one(manifests, "ServiceMonitor", cm.DCGM_NAME)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    service = one(manifests, "Service", cm.DCGM_NAME)
    # It selects the exporter's Service, and the Service the exporter's pods.
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector and selector.items() <= service["metadata"]["labels"].items()
    pods = one(manifests, "DaemonSet", cm.DCGM_NAME)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"] and service["spec"]["selector"].items() <= pods.items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-system"]}
    assert service["spec"]["ports"][0]["name"] == monitor["spec"]["endpoints"][0]["port"]
    assert not by_kind(
        render({"dcgm_exporter_service_monitor": False}, service_monitor=True), "ServiceMonitor"
    )


def test_namespace_and_runtime_class_follow_what_the_cluster_has() -> None:
    assert not by_kind(render({}), "Namespace")
    namespace = one(render({}, create_namespace=True), "Namespace", "kube-system")
    assert cm.OWNED_LABELS.items() <= namespace["metadata"]["labels"].items()
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    runtime_class = one(render(CONFIGS["named_configs_quotas"]), "RuntimeClass", "nvidia")
    assert runtime_class["handler"] == "nvidia"
    assert runtime_class["scheduling"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert "scheduling" not in one(render({}), "RuntimeClass", "nvidia")
    assert not by_kind(render({}, manage_runtime_class=False), "RuntimeClass")


def test_disabled_components_render_nothing() -> None:
    assert render(CONFIGS["everything_off"]) == []


# --- node labels and taints -----------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def apply_json_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A small RFC 6902 applier (add, replace, remove, test) for the tests."""
    doc = copy.deepcopy(obj)
    for op in ops:
        *parents, last = _pointer(op["path"])
        target = doc
        for part in parents:
            target = target[part]
        if op["op"] == "test":
            assert target[last] == op["value"], "test failed"
        elif op["op"] in ("add", "replace"):
            if op["op"] == "replace":
                assert last in target
            target[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del target[last]
    return doc


def real_node(fixtures_real: Path) -> dict[str, Any]:
    fragment = yaml.safe_load(
        (
            fixtures_real
            / "k8s-node"
            / "podman-desktop-7778-node-status-fragment-nvidia-gpu-1.yaml"
        ).read_text()
    )
    labels = json.loads(
        (
            fixtures_real / "k8s-node" / "nvidia-docs-gfd-labels-a100-sxm4-mig-single-450.json"
        ).read_text()
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "nvidia1", "labels": labels},
        "spec": {
            "taints": [
                {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                {"key": "nvidia.com/gpu", "value": "old", "effect": "NoSchedule"},
            ]
        },
        "status": fragment["status"],
    }


def test_node_patch_merges_taints_and_reset_removes_exactly_what_was_added(
    fixtures_real: Path,
) -> None:
    node = real_node(fixtures_real)
    labels = {
        "node-role.kubernetes.io/gpu": "",
        "nvidia.com/gpu.family": "ampere",
        "example.com/pool": "training",
    }
    taints = [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "example.com/dedicated", "effect": "NoExecute"},
    ]
    ops = cn.node_patch(node, labels, taints)
    assert {"op": "test", "path": "/spec/taints", "value": node["spec"]["taints"]} in ops
    patched = apply_json_patch(node, ops)
    assert patched["metadata"]["labels"]["node-role.kubernetes.io/gpu"] == ""
    assert patched["spec"]["taints"] == [
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "example.com/dedicated", "effect": "NoExecute"},
    ]
    # nvidia.com/gpu.family=ampere was there already (GFD's), so it is not recorded as ours.
    annotations = patched["metadata"]["annotations"]
    assert json.loads(annotations[cn.APPLIED_LABELS_ANNOTATION]) == [
        "example.com/pool",
        "node-role.kubernetes.io/gpu",
    ]
    assert cn.node_patch(patched, labels, taints) == []  # a second run changes nothing
    reset = apply_json_patch(patched, cn.node_reset_patch(patched))
    assert reset["metadata"]["labels"] == node["metadata"]["labels"]
    assert reset["spec"]["taints"] == [
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
    ]
    assert "annotations" not in reset["metadata"] or not reset["metadata"]["annotations"]
    assert cn.node_reset_patch(reset) == []


def test_node_patch_on_a_node_without_taints_or_annotations() -> None:
    node = {"metadata": {"name": "n", "labels": {"kubernetes.io/hostname": "n"}}, "spec": {}}
    ops = cn.node_patch(node, {}, [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    patched = apply_json_patch(node, ops)
    assert patched["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert cn.node_patch(patched, {}, [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]) == []
    assert cn.node_patch(node, {}, []) == []


def test_every_template_is_rendered_and_names_the_objects_as_the_constants_do() -> None:
    """The data files of data/cluster/ are all in use, and the names the module, the readiness
    checks and reset look objects up by are the names the files write."""
    used: set[str] = set()

    class Recording(dict[str, Any]):
        def __getitem__(self, name: str) -> Any:
            used.add(name)
            return super().__getitem__(name)

    # DRA on the node groups labelled for it, so that its objects render too.
    normalized, errors = cs.validate_config(dict(CONFIGS["named_configs_quotas"], allocation="dra"))
    assert errors == []
    caps = {"service_monitor": True, "create_namespace": True}
    manifests = cm.render_manifests(normalized, Recording(TEMPLATES), caps)
    assert used == set(TEMPLATES)
    names = {(m["kind"], m["metadata"]["name"]) for m in manifests}
    for kind, name in [
        ("ConfigMap", cm.CONFIGMAP_NAME),
        ("ClusterRole", cm.CLUSTER_ROLE_NAME),
        ("ClusterRoleBinding", cm.CLUSTER_ROLE_NAME),
        ("ResourceQuota", cm.QUOTA_NAME),
        ("LimitRange", cm.LIMIT_RANGE_NAME),
        *(
            ("DaemonSet", n)
            for n in (
                cm.DEVICE_PLUGIN_NAME,
                cm.GFD_NAME,
                cm.MPS_NAME,
                cm.DCGM_NAME,
                cm.DRA_KUBELET_PLUGIN_NAME,
            )
        ),
        ("ServiceAccount", cm.DRA_SERVICE_ACCOUNT),
        *(("DeviceClass", n) for n in cm.DRA_DEVICE_CLASSES),
    ]:
        assert (kind, name) in names
    for ds in by_kind(manifests, "DaemonSet"):
        pod = ds["spec"]["template"]
        assert ds["metadata"]["labels"]["app.kubernetes.io/name"] == ds["metadata"]["name"]
        assert ds["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
        if ds["metadata"]["name"] not in (cm.DCGM_NAME, cm.DRA_KUBELET_PLUGIN_NAME):
            assert cm.CONFIG_CHECKSUM_ANNOTATION in pod["metadata"]["annotations"]


def test_a_missing_template_is_named() -> None:
    partial = {k: v for k, v in TEMPLATES.items() if k != "dcgm-exporter-service"}
    normalized, _ = cs.validate_config({})
    with pytest.raises(ValueError, match="'dcgm-exporter-service' is missing"):
        cm.render_manifests(normalized, partial)


def test_shared_gpus_reach_the_dcgm_exporter_with_their_pods() -> None:
    """Time-sliced or MPS GPUs: the exporter maps each replica to its pod and reads the renamed
    resource; whole GPUs need neither setting."""

    def env(manifests: list[dict[str, Any]]) -> dict[str, Any]:
        container = one(manifests, "DaemonSet", cm.DCGM_NAME)["spec"]["template"]["spec"][
            "containers"
        ][0]
        assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}
        return {item["name"]: item.get("value") for item in container["env"]}

    whole = env(render({}))
    assert "KUBERNETES_VIRTUAL_GPUS" not in whole and "NVIDIA_RESOURCE_NAMES" not in whole
    shared = env(render(CONFIGS["time_slicing"]))
    assert shared["KUBERNETES_VIRTUAL_GPUS"] == "true"
    assert shared["NVIDIA_RESOURCE_NAMES"] == "nvidia.com/gpu.shared"


def test_gfd_is_privileged_and_the_mps_daemon_sees_the_host_pids() -> None:
    manifests = render({"sharing": {"strategy": "mps", "replicas": 2}})
    gfd = one(manifests, "DaemonSet", cm.GFD_NAME)["spec"]["template"]["spec"]
    assert gfd["containers"][-1]["securityContext"] == {"privileged": True}
    mps = one(manifests, "DaemonSet", cm.MPS_NAME)["spec"]["template"]["spec"]
    assert mps["hostPID"] is True
    assert "shareProcessNamespace" not in mps


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value") for item in container.get("env", [])}


def _rules(manifests: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return one(manifests, "ClusterRole", name)["rules"]


def test_gfd_publishes_through_the_node_feature_api_with_its_own_token_and_rbac() -> None:
    manifests = render({})
    spec = one(manifests, "DaemonSet", cm.GFD_NAME)["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == cm.GFD_NAME
    assert spec["automountServiceAccountToken"] is True
    env = _env(spec["containers"][-1])
    assert env["USE_NODE_FEATURE_API"] == "true"
    assert {"NODE_NAME", "NAMESPACE"} <= set(env)  # GFD's NodeFeature: its node, its namespace
    # As NVIDIA's chart grants GFD: nodefeatures get/list/watch/create/update.
    assert _rules(manifests, cm.GFD_CLUSTER_ROLE_NAME) == [
        {
            "apiGroups": ["nfd.k8s-sigs.io"],
            "resources": ["nodefeatures"],
            "verbs": ["get", "list", "watch", "create", "update"],
        }
    ]
    binding = one(manifests, "ClusterRoleBinding", cm.GFD_CLUSTER_ROLE_NAME)
    assert binding["roleRef"]["name"] == cm.GFD_CLUSTER_ROLE_NAME
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": cm.GFD_NAME, "namespace": "kube-system"}
    ]
    # Without NFD: the features.d file, no token, no RBAC, no NFD objects.
    bare = render({"nfd": "none"})
    spec = one(bare, "DaemonSet", cm.GFD_NAME)["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert _env(spec["containers"][-1])["USE_NODE_FEATURE_API"] == "false"
    assert not [m for m in bare if "nfd" in m["metadata"]["name"] or m["kind"] == "ClusterRole"]


def test_nfd_is_deployed_with_its_crds_rbac_and_gpu_node_tolerations() -> None:
    manifests = render({}, create_namespace=True)
    kinds = [m["kind"] for m in manifests]
    # CRDs first (after the namespace and RuntimeClass), so nothing waits for a kind.
    assert kinds.index("CustomResourceDefinition") < kinds.index("Deployment")
    crds = {m["spec"]["names"]["kind"]: m for m in by_kind(manifests, "CustomResourceDefinition")}
    assert {k: (c["metadata"]["name"], c["spec"]["scope"]) for k, c in crds.items()} == {
        "NodeFeature": ("nodefeatures.nfd.k8s-sigs.io", "Namespaced"),
        "NodeFeatureRule": ("nodefeaturerules.nfd.k8s-sigs.io", "Cluster"),
        "NodeFeatureGroup": ("nodefeaturegroups.nfd.k8s-sigs.io", "Namespaced"),
    }
    for crd in crds.values():
        assert crd["spec"]["group"] == cm.NFD_GROUP
        assert [v["name"] for v in crd["spec"]["versions"] if v["served"] and v["storage"]] == [
            "v1alpha1"
        ]
    worker = one(manifests, "DaemonSet", cm.NFD_WORKER_NAME)["spec"]["template"]["spec"]
    assert "affinity" not in worker and "nodeSelector" not in worker  # every node
    assert worker["tolerations"] == [
        cm.CONTROL_PLANE_TOLERATION,
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    container = worker["containers"][0]
    assert container["image"] == "registry.k8s.io/nfd/node-feature-discovery:v0.19.0"
    assert container["command"] == ["nfd-worker"]
    conf = one(manifests, "ConfigMap", cm.NFD_WORKER_CONFIG_NAME)["data"]["nfd-worker.conf"]
    assert yaml.safe_load(conf)["sources"]["pci"]["deviceLabelFields"] == ["vendor"]
    assert "0300" in yaml.safe_load(conf)["sources"]["pci"]["deviceClassWhitelist"]
    role = one(manifests, "Role", cm.NFD_WORKER_NAME)
    assert role["rules"][0]["resources"] == ["nodefeatures"]
    master = one(manifests, "Deployment", cm.NFD_MASTER_NAME)["spec"]["template"]["spec"]
    assert "-extra-label-ns=nvidia.com" in master["containers"][0]["args"]
    master_rules = _rules(manifests, cm.NFD_MASTER_CLUSTER_ROLE_NAME)
    assert {"apiGroups": [""], "resources": ["nodes", "nodes/status"]}.items() <= {
        **master_rules[1],
    }.items()
    assert _rules(manifests, cm.NFD_GC_CLUSTER_ROLE_NAME)[1]["verbs"] == ["delete", "list"]
    for name in (cm.NFD_MASTER_NAME, cm.NFD_WORKER_NAME, cm.NFD_GC_NAME):
        assert one(manifests, "ServiceAccount", name)["metadata"]["namespace"] == "kube-system"
    # An NFD that kubegpu did not create serves the API: used, nothing of NFD rendered, and
    # GFD still gets its RBAC to write there.
    used = render({}, deploy_nfd=False)
    assert not by_kind(used, "CustomResourceDefinition")
    assert not [m for m in used if m["metadata"]["name"].startswith("nfd-")]
    assert one(used, "ClusterRole", cm.GFD_CLUSTER_ROLE_NAME)
    # existing: never deployed.
    assert not by_kind(render({"nfd": "existing"}), "CustomResourceDefinition")


def test_gpu_components_select_nodes_by_nfd_pci_label_or_the_kubegpu_label() -> None:
    manifests = render({"sharing": {"strategy": "mps", "replicas": 2}})
    for name in (cm.DEVICE_PLUGIN_NAME, cm.GFD_NAME, cm.MPS_NAME, cm.DCGM_NAME):
        spec = one(manifests, "DaemonSet", name)["spec"]["template"]["spec"]
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        keys = [t["matchExpressions"][0]["key"] for t in terms["nodeSelectorTerms"]]
        assert keys == [cm.NFD_NVIDIA_PCI_LABEL, "nvidia.com/gpu.present"], name


def test_cdi_is_the_default_with_what_the_plugin_needs_and_envvar_stays() -> None:
    manifests = render({})
    config = yaml.safe_load(one(manifests, "ConfigMap", cm.CONFIGMAP_NAME)["data"]["default"])
    assert config["flags"]["plugin"]["deviceListStrategy"] == ["cdi-cri"]
    assert config["flags"]["plugin"]["nvidiaCTKPath"] == "/usr/bin/nvidia-ctk"
    assert config["flags"]["plugin"]["containerDriverRoot"] == "/driver-root"
    spec = one(manifests, "DaemonSet", cm.DEVICE_PLUGIN_NAME)["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["cdi-root"] == "/var/run/cdi" and mounts["driver-root"] == "/driver-root"
    legacy = render({"device_list_strategy": "envvar"})
    config = yaml.safe_load(one(legacy, "ConfigMap", cm.CONFIGMAP_NAME)["data"]["default"])
    assert config["flags"]["plugin"] == {
        "passDeviceSpecs": False,
        "deviceListStrategy": ["envvar"],
        "deviceIDStrategy": "uuid",
    }


@pytest.mark.parametrize(
    ("config", "value"),
    [
        ({}, None),
        ({"device_plugin_health_checks": False}, "all"),
        ({"device_plugin_health_check_skip_xids": ["109", 79, 79]}, "79,109"),
    ],
)
def test_health_check_settings_reach_the_device_plugin(
    config: dict[str, Any], value: str | None
) -> None:
    ds = one(render(config), "DaemonSet", cm.DEVICE_PLUGIN_NAME)
    env = _env(ds["spec"]["template"]["spec"]["containers"][0])
    assert env.get("DP_DISABLE_HEALTHCHECKS") == value
