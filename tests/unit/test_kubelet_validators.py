"""Validators and merge helpers of module_utils/kubelet.py and kubelet_labels.py, table-driven, each with its message."""

from __future__ import annotations

import re

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubelet, kubelet_labels

NAME_RULE = (
    "63 characters or fewer, start and end with a letter or digit, and contain only letters, "
    "digits, '-', '_' and '.'"
)
ALLOWED_LIST = (
    "kubelet.kubernetes.io/ or node.kubernetes.io/ (or their subdomains) and "
    "beta.kubernetes.io/arch, beta.kubernetes.io/instance-type, beta.kubernetes.io/os, "
    "failure-domain.beta.kubernetes.io/region, failure-domain.beta.kubernetes.io/zone, "
    "kubernetes.io/arch, kubernetes.io/hostname, kubernetes.io/os, "
    "node.kubernetes.io/instance-type, topology.kubernetes.io/region, topology.kubernetes.io/zone"
)


def restricted(key: str, namespace: str) -> str:
    return (
        f"node_labels: {key!r} is in the {namespace} namespace, where a kubelet may not label its "
        "own node (NodeRestriction): the kubelet refuses to start with it. In the kubernetes.io "
        f"and k8s.io namespaces a kubelet may only set keys under {ALLOWED_LIST}. Use a prefix of "
        "your own (for example nvidia.com/ or example.com/), or set the label through the API "
        "(role gpu_cluster)."
    )


# ----------------------------------------------------------------------------- feature gates

GATE_CASES = [
    ("1.36", {"KubeletPodResourcesGet": True}, []),
    ("v1.34.2", {"KubeletPodResourcesGet": True, "KubeletPodResourcesDynamicResources": True}, []),
    ("1.33", {"DynamicResourceAllocation": True, "DRAResourceClaimDeviceStatus": True}, []),
    ("1.33", {"DynamicResourceAllocation": False}, []),
    (
        "1.35",
        {"DynamicResourceAllocation": False},
        [
            "feature_gates: 'DynamicResourceAllocation' is locked to true in Kubernetes 1.35 "
            "(GA); the kubelet refuses to start with DynamicResourceAllocation=false. Set it to "
            "true or remove it."
        ],
    ),
    ("1.37", {"DynamicResourceAllocation": True}, []),
    (
        "1.34",
        {"DevicePlugins": True},
        [
            "feature_gates: 'DevicePlugins' was removed from Kubernetes in 1.28; the kubelet of "
            "1.34 does not have it and would refuse to start. Remove it."
        ],
    ),
    (
        "1.33",
        {"Accelerators": True},
        [
            "feature_gates: 'Accelerators' was removed from Kubernetes in 1.12; the kubelet of "
            "1.33 does not have it and would refuse to start. Remove it."
        ],
    ),
    (
        "1.33",
        {"CPUManager": True},
        [
            "feature_gates: 'CPUManager' was removed from Kubernetes in 1.33; the kubelet of 1.33 "
            "does not have it and would refuse to start. Remove it."
        ],
    ),
    (
        "1.35",
        {"TopologyManager": True},
        [
            "feature_gates: 'TopologyManager' was removed from Kubernetes in 1.29; the kubelet of "
            "1.35 does not have it and would refuse to start. Remove it."
        ],
    ),
    (
        "1.33",
        {"KubeletPodResourcesGetAllocatable": True},
        [
            "feature_gates: 'KubeletPodResourcesGetAllocatable' was removed from Kubernetes in "
            "1.30; the kubelet of 1.33 does not have it and would refuse to start. Remove it."
        ],
    ),
    ("1.33", {"DevicePluginCDIDevices": True}, []),
    (
        "1.34",
        {"DevicePluginCDIDevices": True},
        [
            "feature_gates: 'DevicePluginCDIDevices' was removed from Kubernetes in 1.34; the "
            "kubelet of 1.34 does not have it and would refuse to start. Remove it."
        ],
    ),
    ("1.35", {"MemoryManager": True}, []),
    (
        "1.36",
        {"MemoryManager": True},
        [
            "feature_gates: 'MemoryManager' was removed from Kubernetes in 1.36; the kubelet of "
            "1.36 does not have it and would refuse to start. Remove it."
        ],
    ),
    (
        "1.33",
        {"DRADeviceTaintRules": True},
        [
            "feature_gates: 'DRADeviceTaintRules' does not exist in Kubernetes 1.33; it was added "
            "in 1.35 (alpha). Remove it, or use a kubelet of 1.35 or later."
        ],
    ),
    (
        "1.36",
        {"DynamicResourceAllocation": True, "AtomicWriteVolumeUserFields": True},
        [
            "feature_gates: 'AtomicWriteVolumeUserFields' does not exist in Kubernetes 1.36; it "
            "was added in 1.37 (alpha). Remove it, or use a kubelet of 1.37 or later."
        ],
    ),
    (
        "1.33",
        {"SidecarContainers": False},
        [
            "feature_gates: 'SidecarContainers' is locked to true in Kubernetes 1.33 (GA); the "
            "kubelet refuses to start with SidecarContainers=false. Set it to true or remove it."
        ],
    ),
    (
        "1.37",
        {"SidecarContainers": True},
        [
            "feature_gates: 'SidecarContainers' was removed from Kubernetes in 1.37; the kubelet "
            "of 1.37 does not have it and would refuse to start. Remove it."
        ],
    ),
    (
        "1.35",
        {"DynamicResourceAlocation": True},
        [
            "feature_gates: 'DynamicResourceAlocation' is not a feature gate of Kubernetes 1.35 "
            "(no release kubegpu knows of has it). Did you mean 'DynamicResourceAllocation'? "
            "Remove it, or if your kubelet does have it, list it in unchecked_feature_gates."
        ],
    ),
    (
        "1.35",
        {"NvidiaGPU": True},
        [
            "feature_gates: 'NvidiaGPU' is not a feature gate of Kubernetes 1.35 (no release "
            "kubegpu knows of has it). Remove it, or if your kubelet does have it, list it in "
            "unchecked_feature_gates."
        ],
    ),
    (
        "1.35",
        {"KubeletPodResourcesGet": "true"},
        [
            "feature_gates: 'KubeletPodResourcesGet' must be true or false, got 'true' (str); "
            "write the value without quotes"
        ],
    ),
    ("1.33", {"ElasticIndexedJob": True}, []),
    (
        "1.34",
        {"ElasticIndexedJob": True},
        [
            "feature_gates: 'ElasticIndexedJob' was removed from Kubernetes in 1.34; the "
            "kubelet of 1.34 does not have it and would refuse to start. Remove it."
        ],
    ),
    # A removal the table bounds to a window (a gate gone before the releases it covers).
    (
        "1.33",
        {"SeccompDefault": True, "GRPCContainerProbe": True},
        [
            "feature_gates: 'GRPCContainerProbe' was removed from Kubernetes between 1.29 and "
            "1.31; the kubelet of 1.33 does not have it and would refuse to start. Remove it.",
            "feature_gates: 'SeccompDefault' was removed from Kubernetes in 1.29; the kubelet of "
            "1.33 does not have it and would refuse to start. Remove it.",
        ],
    ),
    (
        "1.32",
        {"KubeletPodResourcesGet": True},
        [
            "kubernetes_version: 1.32 is outside the releases kubegpu supports (1.33 to 1.37), so "
            "its feature gates cannot be checked; use a kubelet from 1.33 to 1.37"
        ],
    ),
    (
        "1.38",
        {"KubeletPodResourcesGet": True},
        [
            "kubernetes_version: 1.38 is outside the releases kubegpu supports (1.33 to 1.37), so "
            "its feature gates cannot be checked; use a kubelet from 1.33 to 1.37"
        ],
    ),
    (
        "1.3x",
        {"KubeletPodResourcesGet": True},
        ["kubernetes_version: '1.3x' is not a Kubernetes version; write it as 1.35 or v1.35.2"],
    ),
    ("1.35", {}, []),
]


@pytest.mark.parametrize(("version", "gates", "expected"), GATE_CASES)
def test_validate_feature_gates(version: str, gates: dict, expected: list[str]) -> None:
    assert kubelet.validate_feature_gates(gates, version) == expected


def test_unchecked_gates_are_only_checked_for_a_boolean() -> None:
    gates = {"WatchListClient": True, "InformerResourceVersion": "yes"}
    assert kubelet.validate_feature_gates(gates, "1.35", unchecked=["WatchListClient"]) == [
        "feature_gates: 'InformerResourceVersion' must be true or false, got 'yes' (str); write "
        "the value without quotes"
    ]


@pytest.mark.parametrize(
    ("name", "release", "status"),
    [
        ("DynamicResourceAllocation", (1, 33), "present"),
        ("MemoryManager", (1, 35), "present"),
        ("MemoryManager", (1, 36), "removed"),
        ("SizeMemoryBackedVolumes", (1, 35), "removed"),
        ("GRPCContainerProbe", (1, 30), "maybe_removed"),
        ("AtomicWriteVolumeUserFields", (1, 36), "not_yet"),
        ("NoSuchGate", (1, 35), "unknown"),
    ],
)
def test_gate_state(name: str, release: tuple[int, int], status: str) -> None:
    assert kubelet.gate_state(name, release)["status"] == status


def test_gate_table_covers_every_supported_release_and_is_well_formed() -> None:
    """Each gate's entries ascend; each supported release has the GPU gates a guide may name."""
    for name, entry in kubelet.FEATURE_GATES.items():
        since = [s["since"] for s in entry["states"]]
        assert since == sorted(since), name
        if entry["removed"]:
            lo, hi = entry["removed"]
            assert lo <= hi and since[0] < hi, name
    for minor in range(29, 36):
        state = kubelet.gate_state("DynamicResourceAllocation", (1, minor))
        assert state["status"] == "present"
        assert kubelet.gate_state("KubeletPodResourcesGet", (1, minor))["status"] == "present"


@pytest.mark.parametrize(
    ("text", "printed", "expected"),
    [
        ("1.31", False, (1, 31)),
        ("v1.31.2", False, (1, 31)),
        ("v1.31.2+k3s1", False, (1, 31)),
        ("Kubernetes v1.31.2", False, None),
        ("Kubernetes v1.31.2", True, (1, 31)),
        ("k3s version v1.30.6+k3s1 (1829eaae)\ngo version go1.22.8\n", True, (1, 30)),
        ("rke2 version v1.32.1+rke2r1 (8d52a8e8)", True, (1, 32)),
        ("1.3x", False, None),
        (None, False, None),
    ],
)
def test_parse_kubernetes_version(text: str | None, printed: bool, expected) -> None:
    assert kubelet.parse_kubernetes_version(text, printed=printed) == expected


# ----------------------------------------------------------------------------- node labels

LABEL_CASES = [
    ({"nvidia.com/gpu.present": "true"}, []),
    (
        {
            "node.kubernetes.io/gpu": "a100",
            "kubelet.kubernetes.io/role": "",
            "gpu.node.kubernetes.io/count": "8",
            "topology.kubernetes.io/zone": "rack-7",
            "kubernetes.io/hostname": "gpu-1",
            "beta.kubernetes.io/os": "linux",
            "gpu": "yes",
        },
        [],
    ),
    (
        {"alpha.kubernetes.io/nvidia-gpu-name": "Tesla-K80"},
        [restricted("alpha.kubernetes.io/nvidia-gpu-name", "kubernetes.io")],
    ),
    (
        {"node-restriction.kubernetes.io/gpu": "true"},
        [restricted("node-restriction.kubernetes.io/gpu", "kubernetes.io")],
    ),
    ({"example.k8s.io/gpu": "true"}, [restricted("example.k8s.io/gpu", "k8s.io")]),
    (
        {"nvidia.com/gpu.product": "Tesla K80"},
        [
            "node_labels: the value of 'nvidia.com/gpu.product' is 'Tesla K80', which is not a "
            f"valid label value: it must be empty or {NAME_RULE}; for example 'Tesla-K80'"
        ],
    ),
    (
        {"nvidia.com/gpu.present": True},
        [
            "node_labels: the value of 'nvidia.com/gpu.present' must be a string, got True "
            '(bool); quote it in YAML, for example "true"'
        ],
    ),
    (
        {"example.com/long": "v" * 64},
        [
            f"node_labels: the value of 'example.com/long' is {'v' * 64!r}, which is not a valid "
            f"label value: it must be empty or {NAME_RULE}; for example {'v' * 63!r}"
        ],
    ),
    (
        {"a/b/c": "x"},
        [
            "node_labels: key 'a/b/c' is not a valid key: it may hold at most one '/', between "
            "the prefix and the name"
        ],
    ),
    (
        {"Example.com/gpu": "x"},
        [
            "node_labels: key 'Example.com/gpu' is not a valid key: the prefix 'Example.com' must "
            "be a DNS subdomain (lowercase letters, digits, '-' and '.', each part starting and "
            "ending with a letter or digit, at most 253 characters)"
        ],
    ),
    (
        {"-gpu": "x"},
        [f"node_labels: key '-gpu' is not a valid key: the name '-gpu' must be {NAME_RULE}"],
    ),
    (
        {"nvidia.com/": "x"},
        [f"node_labels: key 'nvidia.com/' is not a valid key: the name '' must be {NAME_RULE}"],
    ),
    (
        {"": "x"},
        ["node_labels: a key is empty; keys look like example.com/name or name"],
    ),
    (
        ["nvidia.com/gpu.present=true"],
        ["node_labels: must be a mapping of label key to value, got list"],
    ),
]


@pytest.mark.parametrize(("labels", "expected"), LABEL_CASES)
def test_validate_node_labels(labels, expected: list[str]) -> None:
    assert kubelet_labels.validate_node_labels(labels) == expected


def test_long_prefix_and_name_are_refused() -> None:
    prefix = ".".join(["a" * 63] * 4)  # 255 characters
    messages = kubelet_labels.validate_node_labels({prefix + "/" + "n" * 64: "x"})
    assert messages == [
        f"node_labels: key {prefix + '/' + 'n' * 64!r} is not a valid key: the prefix "
        f"{prefix!r} must be a DNS subdomain (lowercase letters, digits, '-' and '.', each part "
        "starting and ending with a letter or digit, at most 253 characters)",
        f"node_labels: key {prefix + '/' + 'n' * 64!r} is not a valid key: the name "
        f"{'n' * 64!r} must be {NAME_RULE}",
    ]


def test_split_node_labels() -> None:
    own, api_only = kubelet_labels.split_node_labels(
        {
            "nvidia.com/gpu.present": "true",
            "node.kubernetes.io/gpu": "a100",
            "node-role.kubernetes.io/gpu": "",
            "alpha.kubernetes.io/nvidia-gpu-name": "Tesla-K80",
        }
    )
    assert own == {"nvidia.com/gpu.present": "true", "node.kubernetes.io/gpu": "a100"}
    assert api_only == {
        "node-role.kubernetes.io/gpu": "",
        "alpha.kubernetes.io/nvidia-gpu-name": "Tesla-K80",
    }


# ----------------------------------------------------------------------------- taints

TAINT_CASES = [
    ([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}], []),
    (["nvidia.com/gpu=present:NoSchedule", "dedicated:PreferNoSchedule"], []),
    ([{"key": "nvidia.com/gpu", "effect": "NoExecute"}, "nvidia.com/gpu:NoSchedule"], []),
    (
        [{"key": "nvidia.com/gpu", "effect": "NoScheduel"}],
        [
            "node_taints[0]: effect 'NoScheduel' is not one of NoSchedule, PreferNoSchedule, NoExecute"
        ],
    ),
    (
        [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}, "nvidia.com/gpu=other:NoSchedule"],
        [
            "node_taints[1]: same key 'nvidia.com/gpu' and effect NoSchedule as node_taints[0]; "
            "a node holds one taint per key and effect"
        ],
    ),
    ([{"effect": "NoSchedule"}], ["node_taints[0]: the key is missing"]),
    (
        [{"key": "gpu", "effect": "NoSchedule", "operator": "Exists"}],
        ["node_taints[0]: unknown field(s) operator; a taint has key, value and effect"],
    ),
    (
        ["gpu=A 100:NoSchedule"],
        [
            "node_taints[0]: the value is 'A 100', which is not a valid taint value: it must be "
            f"empty or {NAME_RULE}; for example 'A-100'"
        ],
    ),
    (
        ["gpu"],
        [
            "node_taints[0]: 'gpu' is not a taint; write key=value:Effect or key:Effect, or a "
            "mapping with key, value and effect"
        ],
    ),
    (
        [7],
        [
            "node_taints[0]: must be a mapping with key, value and effect, or a string "
            "key=value:Effect, got int"
        ],
    ),
    ({"key": "gpu"}, ["node_taints: must be a list of taints, got dict"]),
]


@pytest.mark.parametrize(("taints", "expected"), TAINT_CASES)
def test_validate_taints(taints, expected: list[str]) -> None:
    assert kubelet_labels.validate_taints(taints) == expected


# ----------------------------------------------------------------------------- settings

SETTINGS_CASES = [
    (
        {"maxPods": 200, "cpuManagerPolicy": "static", "evictionHard": {"memory.available": "5%"}},
        [],
    ),
    (
        {"max_pods": 200},
        [
            "settings: 'max_pods' is not a KubeletConfiguration field name; fields are camelCase, "
            "for example maxPods"
        ],
    ),
    (
        {"featureGates": {"KubeletPodResourcesGet": True}},
        [
            "settings: put feature gates in feature_gates, not settings.featureGates, so that they "
            "are checked against the kubelet's version"
        ],
    ),
    (
        {"kind": "KubeletConfiguration"},
        ["settings: 'kind' is set by kubegpu (KubeletConfiguration); remove it from settings"],
    ),
]


@pytest.mark.parametrize(("settings", "expected"), SETTINGS_CASES)
def test_validate_settings(settings, expected: list[str]) -> None:
    assert kubelet.validate_settings(settings) == expected


# ----------------------------------------------------------------------------- GFD names


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Tesla K80", "Tesla-K80"),
        ("  Quadro RTX 4000 ", "Quadro-RTX-4000"),
        ("GeForce RTX 2080 Ti (rev a1)", "GeForce-RTX-2080-Ti--rev-a1"),
        ("--A100--", "A100"),
        ("x" * 70, "x" * 63),
        ("", ""),
    ],
)
def test_sanitize_label_value(text: str, expected: str) -> None:
    assert kubelet_labels.sanitize_label_value(text) == expected


def test_sanitize_real_product_names(fixtures_real) -> None:
    """Product names from real nvidia-smi captures become the labels GFD writes for them."""
    names = []
    for path in sorted((fixtures_real / "nvidia-smi-xml").glob("*.xml")):
        names += re.findall(r"<product_name>([^<]+)</product_name>", path.read_text())
    for path in sorted((fixtures_real / "nvidia-smi-table").glob("*-L.txt")):
        names += re.findall(r"^GPU \d+: (.+?) \(UUID", path.read_text(), re.M)
    values = {kubelet_labels.sanitize_label_value(n) for n in names}
    assert values == {
        "NVIDIA-A100-SXM4-40GB",
        "Tesla-T4",
        "Quadro-RTX-4000",
        "A100-SXM4-40GB",
        "NVIDIA-H100-80GB-HBM3",
    }
    assert (
        kubelet_labels.validate_node_labels({f"example.com/g{i}": v for i, v in enumerate(values)})
        == []
    )


def test_gfd_product_value_matches_a_real_gfd_label(fixtures_real) -> None:
    """NVIDIA's MIG guide: the -L output and the labels GFD set on that same A100 node."""
    listing = (
        fixtures_real
        / "nvidia-smi-table"
        / "nvidia-docs-a100-sxm4-40gb-450-mig-mixed-legacy-uuid-L.txt"
    ).read_text()
    labels = yaml.safe_load(
        (
            fixtures_real / "k8s-node" / "nvidia-docs-gfd-labels-a100-sxm4-mig-single-450.json"
        ).read_text()
    )
    model = re.search(r"^GPU 0: (.+?) \(UUID", listing, re.M).group(1)
    assert "1g.5gb" in re.findall(r"MIG (\S+)", listing)
    assert kubelet_labels.gfd_product_value(model, "1g.5gb") == labels["nvidia.com/gpu.product"]
    assert kubelet_labels.gfd_product_value("Tesla K80") == "Tesla-K80"


# ----------------------------------------------------------------------------- merging

DEFAULT_KUBELET = (
    "# Extra flags for the kubelet, added by the provisioning team.\n"
    "# Keep --node-ip in sync with the VLAN plan.\n"
    "\n"
    "KUBELET_EXTRA_ARGS='--node-ip=10.20.0.15 --node-labels=team=ml,nvidia.com/gpu.present=false "
    "--max-pods 180 --register-with-taints=maintenance:NoExecute'\n"
    "HTTPS_PROXY=http://proxy.internal:3128\r\n"
    "# end\n"
)


def test_extra_args_merge_keeps_every_other_byte() -> None:
    taints = kubelet_labels.normalize_taints(
        [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    )
    merged = kubelet.merge_extra_args_file(
        DEFAULT_KUBELET, {"nvidia.com/gpu.present": "true", "gpu": "a100"}, taints
    )
    before_lines = DEFAULT_KUBELET.splitlines(True)
    after_lines = merged.splitlines(True)
    assert len(after_lines) == len(before_lines)
    changed = [i for i, (a, b) in enumerate(zip(before_lines, after_lines, strict=True)) if a != b]
    assert changed == [3]
    assert after_lines[3] == (
        "KUBELET_EXTRA_ARGS='--node-ip=10.20.0.15 --node-labels=team=ml,nvidia.com/gpu.present=true,"
        "gpu=a100 --max-pods 180 --register-with-taints=maintenance:NoExecute,"
        "nvidia.com/gpu=present:NoSchedule'\n"
    )
    # A second merge of the same settings leaves the text exactly as it is.
    assert (
        kubelet.merge_extra_args_file(
            merged, {"nvidia.com/gpu.present": "true", "gpu": "a100"}, taints
        )
        == merged
    )


def test_extra_args_merge_collapses_repeated_and_spaced_flags() -> None:
    text = 'KUBELET_EXTRA_ARGS="--node-labels a=1 --v=2 --node-labels=b=2"\n'
    assert kubelet.merge_extra_args_file(text, {"c": "3"}) == (
        'KUBELET_EXTRA_ARGS="--node-labels=a=1,b=2,c=3 --v=2"\n'
    )


def test_extra_args_file_created_with_drop_in_flag_and_environment() -> None:
    text = kubelet.merge_extra_args_file(
        "# no flags yet",
        {"nvidia.com/gpu.present": "true"},
        flags={"--config-dir": "/etc/kubernetes/kubelet.conf.d"},
        env={"KUBELET_CONFIG_DROPIN_DIR_ALPHA": "on"},
    )
    assert text == (
        "# no flags yet\n"
        'KUBELET_EXTRA_ARGS="--node-labels=nvidia.com/gpu.present=true '
        '--config-dir=/etc/kubernetes/kubelet.conf.d"\n'
        "KUBELET_CONFIG_DROPIN_DIR_ALPHA=on\n"
    )


def test_merge_kubelet_config_keeps_other_keys_and_merges_deeply() -> None:
    existing = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"},
        "featureGates": {"GracefulNodeShutdown": True},
    }
    merged = kubelet.merge_kubelet_config(
        existing,
        {"KubeletPodResourcesGet": True},
        {"evictionHard": {"memory.available": "5%"}, "maxPods": 200},
    )
    assert merged == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        "evictionHard": {"memory.available": "5%", "nodefs.available": "10%"},
        "featureGates": {"GracefulNodeShutdown": True, "KubeletPodResourcesGet": True},
        "maxPods": 200,
    }
    assert existing["evictionHard"]["memory.available"] == "100Mi"


def test_merge_rancher_config_merges_lists_and_keeps_other_keys() -> None:
    data = {
        "token": "K10abc::server:def",
        "server": "https://10.20.0.2:6443",
        "node-label": ["team=ml", "nvidia.com/gpu.present=false"],
        "node-taint": "maintenance=yes:NoExecute",
        "kubelet-arg": ["max-pods=180", "feature-gates=GracefulNodeShutdown=true"],
    }
    merged = kubelet.merge_rancher_config(
        data,
        {"nvidia.com/gpu.present": "true"},
        kubelet_labels.normalize_taints(["nvidia.com/gpu:NoSchedule"]),
        feature_gates={"KubeletPodResourcesGet": True},
    )
    assert merged == {
        "token": "K10abc::server:def",
        "server": "https://10.20.0.2:6443",
        "node-label": ["team=ml", "nvidia.com/gpu.present=true"],
        "node-taint": ["maintenance=yes:NoExecute", "nvidia.com/gpu:NoSchedule"],
        "kubelet-arg": [
            "max-pods=180",
            "feature-gates=GracefulNodeShutdown=true,KubeletPodResourcesGet=true",
        ],
    }


def _plan(files: dict, **kwargs):
    def dump(data):
        return yaml.safe_dump(data, default_flow_style=False, sort_keys=False)

    return kubelet.plan_kubelet_files(
        read=files.get, load_yaml=yaml.safe_load, dump_yaml=dump, **kwargs
    )


def test_plan_drop_in_for_kubeadm_1_29_adds_flag_and_alpha_environment() -> None:
    plans = _plan(
        {},
        flavor="kubeadm",
        config_path="/var/lib/kubelet/config.yaml",
        extra_args_path="/etc/default/kubelet",
        feature_gates={"KubeletPodResourcesGet": True},
        config_dir="/etc/kubernetes/kubelet.conf.d",
        release=(1, 29),
    )
    assert [(p["path"], p["before"], p["mode"]) for p in plans] == [
        ("/etc/kubernetes/kubelet.conf.d/50-kubegpu.conf", None, 0o644),
        ("/etc/default/kubelet", None, 0o644),
    ]
    assert yaml.safe_load(plans[0]["after"]) == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "featureGates": {"KubeletPodResourcesGet": True},
    }
    assert plans[1]["after"] == (
        'KUBELET_EXTRA_ARGS="--config-dir=/etc/kubernetes/kubelet.conf.d"\n'
        "KUBELET_CONFIG_DROPIN_DIR_ALPHA=on\n"
    )


def test_plan_refuses_a_file_of_another_kind() -> None:
    with pytest.raises(kubelet.KubeletConfigError) as err:
        _plan(
            {"/var/lib/kubelet/config.yaml": "apiVersion: v1\nkind: ConfigMap\n"},
            flavor="kubeadm",
            config_path="/var/lib/kubelet/config.yaml",
            feature_gates={"KubeletPodResourcesGet": True},
        )
    assert str(err.value) == (
        "/var/lib/kubelet/config.yaml is a 'ConfigMap', not a KubeletConfiguration; point "
        "config_path at the kubelet's --config file"
    )


def test_plan_is_empty_when_everything_is_in_place() -> None:
    files = {
        "/etc/rancher/k3s/config.yaml": "node-label:\n- nvidia.com/gpu.present=true\n# a comment\n",
    }
    assert (
        _plan(
            files,
            flavor="k3s",
            config_path="/etc/rancher/k3s/config.yaml",
            node_labels={"nvidia.com/gpu.present": "true"},
        )
        == []
    )
