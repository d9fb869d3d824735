"""GPU tenancy: validating tenants, rendering their objects, planning apply and prune.

plugins/module_utils/tenancy_settings.py and tenancy.py are pure, so everything here runs without
a cluster. Rendered objects are validated, strictly, against the upstream schemas of every
Kubernetes minor kubegpu supports, through kubernetes_validate's Python API. GPU product names
come from real captures (src/kubegpu/captures) where there are any.
"""

from __future__ import annotations

import copy
import json
import re
import xml.etree.ElementTree as ET
from fractions import Fraction
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.filter import tenancy as tenancy_filter
from ansible_collections.kubegpu.gpu.plugins.module_utils import tenancy as t
from ansible_collections.kubegpu.gpu.plugins.module_utils import tenancy_settings as ts
from ansible_collections.kubegpu.gpu.plugins.module_utils.k8s_values import parse_quantity

SUPPORTED_MINORS = [f"1.{minor}" for minor in range(29, 36)]
ROLE = Path(__file__).resolve().parents[2] / "roles" / "gpu_tenancy"

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
MIG_ONLY = {
    "name": "inference-lab",
    "gpus": {"nvidia.com/mig-1g.10gb": "14", "nvidia.com/gpu.shared": 4},
    "cpu": "32",
    "memory": "128Gi",
    "members": [{"kind": "Group", "name": "inference"}],
    "pod_security": {"level": "baseline", "reason": "vendor image needs NET_BIND_SERVICE"},
    "services": {"loadbalancers": 1},
}


def checked(*tenants: dict[str, Any], **settings: Any) -> dict[str, Any]:
    normalized, errors = ts.validate_settings({"tenants": list(tenants), **settings})
    assert errors == []
    return normalized


def errors_of(*tenants: Any, **settings: Any) -> list[str]:
    return ts.validate_settings({"tenants": list(tenants), **settings})[1]


def by_kind(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


def one(manifests: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [m for m in by_kind(manifests, kind) if name is None or m["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


# --- defaults and argument specs ------------------------------------------------------------------


def test_role_defaults_match_the_module_defaults() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert {k.removeprefix("gpu_tenancy_"): v for k, v in defaults.items()} == ts.DEFAULTS


def test_argument_specs_cover_every_default_with_the_same_value() -> None:
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert set(options) - {"kubegpu_kubeconfig"} == set(defaults)
    for name, value in defaults.items():
        assert options[name]["default"] == value, name
        assert options[name]["description"], name


def test_the_defaults_themselves_are_valid() -> None:
    settings, errors = ts.validate_settings({})
    assert errors == []
    assert settings["tenants"] == []


# --- bad input: every message names the variable, the tenant and the field ---------------------

BAD_TENANTS = [
    (
        {**VISION, "gpus": {"nvidia.com/gpu": "8 GPUs"}},
        "gpu_tenancy_tenants[0] (vision).gpus.nvidia.com/gpu: '8 GPUs' is not a Kubernetes quantity",
    ),
    (
        {**VISION, "gpus": {"nvidia.com/gpu": "1.5"}},
        "gpu_tenancy_tenants[0] (vision).gpus.nvidia.com/gpu: '1.5' is not a whole number",
    ),
    (
        {**VISION, "gpus": {"nvidia.com/gpu": 2.5}},
        "gpu_tenancy_tenants[0] (vision).gpus.nvidia.com/gpu: 2.5 is a float, not a string",
    ),
    (
        {**VISION, "cpu": "lots"},
        "gpu_tenancy_tenants[0] (vision).cpu: 'lots' is not a Kubernetes quantity",
    ),
    (
        {**VISION, "memory": {"requests": "2Ti", "limits": "1Ti"}},
        "gpu_tenancy_tenants[0] (vision).memory: requests 2Ti is more than limits 1Ti",
    ),
    (
        {**VISION, "name": "Vision_Team"},
        "gpu_tenancy_tenants[0] (Vision_Team).name: 'Vision_Team' is not a DNS-1123 label",
    ),
    ({**VISION, "name": "a" * 64}, ".name: '" + "a" * 64 + "' is not a DNS-1123 label"),
    (
        {**VISION, "name": "kube-gpus"},
        "(kube-gpus).name: 'kube-gpus' is a namespace Kubernetes reserves",
    ),
    (
        {**VISION, "gpu_products": ["NVIDIA H100 80GB HBM3"]},
        "(vision).gpu_products[0]: 'NVIDIA H100 80GB HBM3' has spaces; GFD replaces each space "
        "with '-': write 'NVIDIA-H100-80GB-HBM3'",
    ),
    (
        {**VISION, "gpu_products": ["NVIDIA-H300"]},
        "(vision).gpu_products[0]: 'NVIDIA-H300' is not a GPU product GFD reports for a known GPU",
    ),
    (
        {**VISION, "gpu_products": ["nvidia-h200"]},
        "GFD keeps NVML's capitals: 'NVIDIA-H200'",
    ),
    (
        {**VISION, "gpu_products": ["NVIDIA-H100-80GB-HBM3-MIG-big"]},
        "(vision).gpu_products[0]: 'NVIDIA-H100-80GB-HBM3-MIG-big': 'big' is not a MIG profile",
    ),
    (
        {**VISION, "members": [{"name": "bob"}]},
        "gpu_tenancy_tenants[0] (vision).members[0].kind: missing; say whether 'bob' is a User or "
        "a Group",
    ),
    (
        {**VISION, "members": [{"kind": "ServiceAccount", "name": "ci"}]},
        "(vision).members[0].kind: 'ServiceAccount' is not allowed; allowed: User, Group",
    ),
    (
        {**VISION, "members": [{"kind": "User", "name": ""}]},
        "(vision).members[0].name: '' is not a non-empty string",
    ),
    (
        {**VISION, "pod_security": {"level": "privileged"}},
        "(vision).pod_security.reason: required when level is 'privileged'",
    ),
    (
        {**VISION, "pod_security": {"level": "lax", "reason": "x"}},
        "(vision).pod_security.level: 'lax' is not allowed; allowed: restricted, baseline, privileged",
    ),
    (
        {**VISION, "gpus": {"gpu": "1"}},
        "(vision).gpus.gpu: bad resource name: 'gpu' is not an extended resource name",
    ),
    ({**VISION, "quota": {}}, "gpu_tenancy_tenants[0] (vision): unknown key(s) quota; allowed:"),
    ("vision", "gpu_tenancy_tenants[0]: 'vision' is not a mapping"),
]


@pytest.mark.parametrize(("tenant", "expected"), BAD_TENANTS)
def test_a_bad_tenant_is_reported_with_its_name_and_field(tenant: Any, expected: str) -> None:
    errors = errors_of(tenant)
    assert any(expected in e for e in errors), errors


def test_every_problem_is_reported_at_once() -> None:
    bad = {**VISION, "name": "Bad", "cpu": "x", "members": [{"name": "bob"}]}
    errors = errors_of(bad, {**VISION, "gpus": {"nvidia.com/gpu": "-1"}})
    assert len(errors) == 4, errors
    assert any("tenants[1] (vision).gpus.nvidia.com/gpu: '-1'" in e for e in errors)


def test_a_tenant_defined_twice_is_an_error() -> None:
    assert "gpu_tenancy_tenants[1] (vision).name: 'vision' is defined twice" in errors_of(
        VISION, VISION
    )


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"tenant": []}, "gpu_tenancy_tenant: unknown variable"),
        ({"prune": "sometimes"}, "gpu_tenancy_prune: 'sometimes' is not a boolean"),
        ({"default_cpu_limit": "one"}, "gpu_tenancy_default_cpu_limit: 'one' is not a Kubernetes"),
        (
            {"default_memory_request": "4Gi"},
            "gpu_tenancy_default_memory_request: memory request 4Gi",
        ),
        ({"workload_nodes": 0}, "gpu_tenancy_workload_nodes: 0 is below the minimum 1"),
        ({"workload_pytorch_image": "pytorch/pytorch"}, "has no tag: pin one"),
        ({"workload_gpu_products": ["H100"]}, "gpu_tenancy_workload_gpu_products[0]: 'H100'"),
        ({"workload_mig_resource": "nvidia.com/gpu"}, "is not a MIG resource"),
        ({"pod_security_version": "1.31"}, "gpu_tenancy_pod_security_version: '1.31'"),
        ({"dns_pod_labels": {}}, "gpu_tenancy_dns_pod_labels: is empty"),
        ({"extra_gpu_products": ["My GPU"]}, "gpu_tenancy_extra_gpu_products[0]: 'My GPU'"),
        ({"monitoring_namespace_label": "exported-namespace"}, "not a Prometheus label name"),
    ],
)
def test_bad_settings_are_reported_by_variable(settings: dict[str, Any], expected: str) -> None:
    errors = ts.validate_settings(settings)[1]
    assert any(expected in e for e in errors), errors


def test_text_from_extra_vars_is_coerced_like_ansible_does() -> None:
    settings, errors = ts.validate_settings({"prune": "yes", "workload_nodes": "4"})
    assert errors == []
    assert settings["prune"] is True
    assert settings["workload_nodes"] == 4


# --- GPU products: GFD's format, checked against real captures ------------------------------------


def _gfd_value(nvml_name: str) -> str:
    """What GFD writes for a device name (productLabel: spaces -> '-')."""
    return nvml_name.strip().replace(" ", "-")


def _names_in_captures(root: Path) -> set[str]:
    names: set[str] = set()
    for path in (root / "nvidia-smi-table").glob("*-L.txt"):
        for line in path.read_text().splitlines():
            match = re.match(r"^GPU \d+: (.+?) \(UUID:", line)
            if match:
                names.add(match.group(1))
    for path in (root / "nvidia-smi-xml").glob("*.xml"):
        names.add(ET.parse(path).getroot().findtext("gpu/product_name").strip())
    for path in (root / "nvidia-smi-csv").glob("*.csv"):
        header, *rows = path.read_text().splitlines()
        columns = [c.strip().split(" [")[0] for c in header.split(",")]
        if "name" in columns:
            for row in rows:
                names.add(row.split(",")[columns.index("name")].strip())
    return names


def test_every_gpu_in_the_real_captures_is_a_known_product(fixtures_real: Path) -> None:
    names = _names_in_captures(fixtures_real)
    assert len(names) >= 5, names  # H100, A100 (two driver eras), T4, P100, Quadro RTX 4000
    for name in sorted(names):
        assert ts.gpu_product_error(_gfd_value(name)) is None, name


def test_the_real_gfd_label_of_a_mig_node_is_accepted(fixtures_real: Path) -> None:
    labels = json.loads(
        (
            fixtures_real / "k8s-node" / "nvidia-docs-gfd-labels-a100-sxm4-mig-single-450.json"
        ).read_text()
    )
    product = labels[ts.GPU_PRODUCT_LABEL]
    assert product == "A100-SXM4-40GB-MIG-1g.5gb"
    assert ts.gpu_product_error(product) is None
    assert ts.gpu_product_error(product.replace("MIG-1g.5gb", "MIG-1g")) is not None


@pytest.mark.parametrize(
    "value",
    [
        "NVIDIA-H100-80GB-HBM3-SHARED",
        "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
        "NVIDIA-H200-MIG-1c.3g.71gb",
    ],
)
def test_shared_and_mig_suffixes_are_gfd_formats(value: str) -> None:
    assert ts.gpu_product_error(value) is None


def test_an_unknown_gpu_is_accepted_once_listed_as_extra() -> None:
    tenant = {**VISION, "gpu_products": ["NVIDIA-RTX-PRO-6000-Blackwell"]}
    assert errors_of(tenant)
    assert errors_of(tenant, extra_gpu_products=["NVIDIA-RTX-PRO-6000-Blackwell"]) == []


# --- rendered objects -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered() -> list[dict[str, Any]]:
    return t.render_tenants(checked(VISION, MIG_ONLY))


def test_every_tenant_object_is_valid_for_every_supported_kubernetes(
    rendered: list[dict[str, Any]],
) -> None:
    assert {m["kind"] for m in rendered} == {
        "Namespace",
        "ResourceQuota",
        "LimitRange",
        "Role",
        "RoleBinding",
        "NetworkPolicy",
    }
    for manifest in rendered:
        for version in SUPPORTED_MINORS:
            assert kubernetes_validate.validate(manifest, version, strict=True) == version


def test_every_object_carries_kubegpu_and_tenant_labels_but_not_part_of(
    rendered: list[dict[str, Any]],
) -> None:
    for manifest in rendered:
        labels = manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "kubegpu"
        tenant = manifest["metadata"].get("namespace", manifest["metadata"]["name"])
        assert labels["kubegpu.io/tenant"] == tenant
        # gpu_cluster prunes managed-by + part-of; tenants must stay out of its reach.
        assert "app.kubernetes.io/part-of" not in labels


def test_quantities_are_strings(rendered: list[dict[str, Any]]) -> None:
    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{path}.{key}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")
        else:
            assert not (isinstance(value, int) and not isinstance(value, bool)), path

    for manifest in by_kind(rendered, "ResourceQuota") + by_kind(rendered, "LimitRange"):
        walk(manifest["spec"], manifest["kind"])


def test_namespace_enforces_restricted_pod_security_by_default(
    rendered: list[dict[str, Any]],
) -> None:
    labels = one(rendered, "Namespace", "vision")["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == "latest"
    annotations = one(rendered, "Namespace", "vision")["metadata"]["annotations"]
    assert annotations["kubegpu.io/gpu-products"] == "NVIDIA-H100-80GB-HBM3,NVIDIA-H200"


def test_an_overridden_pod_security_level_records_its_reason(
    rendered: list[dict[str, Any]],
) -> None:
    meta = one(rendered, "Namespace", "inference-lab")["metadata"]
    assert meta["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert meta["annotations"]["kubegpu.io/pod-security-reason"] == (
        "vendor image needs NET_BIND_SERVICE"
    )


def test_quota_counts_gpus_mig_shared_cpu_memory_and_pods(rendered: list[dict[str, Any]]) -> None:
    vision = [
        m for m in by_kind(rendered, "ResourceQuota") if m["metadata"]["namespace"] == "vision"
    ]
    # Time-sliced replicas under their own name are capped at 0 for a tenant given whole GPUs.
    assert vision[0]["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "8",
        "requests.nvidia.com/gpu.shared": "0",
        "requests.cpu": "96",
        "limits.cpu": "192",
        "requests.memory": "768Gi",
        "limits.memory": "1Ti",
        "pods": "100",
        # No Service of the tenant's may open a port on the nodes or take a load balancer.
        "services.loadbalancers": "0",
        "services.nodeports": "0",
        # Nor may its DRA claims take NVIDIA's GPUs or MIG devices.
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "0",
        "mig.nvidia.com.deviceclass.resource.k8s.io/devices": "0",
    }
    lab = [
        m
        for m in by_kind(rendered, "ResourceQuota")
        if m["metadata"]["namespace"] == "inference-lab"
    ]
    # Whole GPUs are capped at 0 for a tenant given only slices.
    assert lab[0]["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "0",
        "requests.nvidia.com/gpu.shared": "4",
        "requests.nvidia.com/mig-1g.10gb": "14",
        "requests.cpu": "32",
        "limits.cpu": "32",
        "requests.memory": "128Gi",
        "limits.memory": "128Gi",
        "services.loadbalancers": "1",
        "services.nodeports": "0",
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "0",
        "mig.nvidia.com.deviceclass.resource.k8s.io/devices": "0",
    }


def test_dra_devices_are_capped_per_device_class() -> None:
    """A tenant's DRA claims count against its quota per DeviceClass: NVIDIA's GPU and MIG
    classes at 0 unless `devices` gives some, any other class at what is given."""
    settings, errors = ts.validate_settings(
        {"tenants": [{"name": "dra", "devices": {"gpu.nvidia.com": "2", "example.com/x": "1"}}]}
    )
    assert [str(e) for e in errors] == [
        "gpu_tenancy_tenants[0] (dra).devices.example.com/x: 'example.com/x' is not a "
        "DeviceClass name (a DNS subdomain)"
    ]
    settings, errors = ts.validate_settings(
        {"tenants": [{"name": "dra", "devices": {"gpu.nvidia.com": "2", "fpga.example.com": 1}}]}
    )
    assert errors == []
    assert settings["tenants"][0]["name"] == "dra"
    hard = t.quota_hard(settings["tenants"][0])
    devices = {k: v for k, v in hard.items() if k.endswith(".deviceclass.resource.k8s.io/devices")}
    assert devices == {
        "fpga.example.com.deviceclass.resource.k8s.io/devices": "1",
        "gpu.nvidia.com.deviceclass.resource.k8s.io/devices": "2",
        "mig.nvidia.com.deviceclass.resource.k8s.io/devices": "0",
    }
    for bad in ("two", "1.5", "-1", "1\n"):
        _, errors = ts.validate_settings(
            {"tenants": [{"name": "d", "devices": {"gpu.nvidia.com": bad}}]}
        )
        assert errors and "devices.gpu.nvidia.com" in str(errors[0]), bad


def test_limit_range_keeps_gpu_requests_equal_to_limits(rendered: list[dict[str, Any]]) -> None:
    for manifest in by_kind(rendered, "LimitRange"):
        (limits,) = manifest["spec"]["limits"]
        assert limits["type"] == "Container"
        gpu_keys = [k for k in limits["max"] if k.startswith("nvidia.com/")]
        assert gpu_keys
        for key in gpu_keys:
            # Extended resources cannot be overcommitted: the defaults must be equal, and 0 so
            # that containers without GPUs get none.
            assert limits["default"][key] == limits["defaultRequest"][key] == "0"
        for key in ("cpu", "memory"):
            assert parse_quantity(limits["defaultRequest"][key]) <= parse_quantity(
                limits["default"][key]
            )
    vision = one([m for m in rendered if m["metadata"].get("namespace") == "vision"], "LimitRange")
    # max_gpus_per_container 4 is below the quota of 8.
    assert vision["spec"]["limits"][0]["max"] == {"nvidia.com/gpu": "4"}


def test_role_lets_members_run_jobs_and_pods_and_read_logs_only_in_their_namespace(
    rendered: list[dict[str, Any]],
) -> None:
    assert not [m for m in rendered if m["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    role = one([m for m in rendered if m["metadata"].get("namespace") == "vision"], "Role")

    def allowed(group: str, resource: str, verb: str) -> bool:
        return any(
            group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
            for r in role["rules"]
        )

    for verb in ("create", "get", "list", "watch", "delete"):
        assert allowed("batch", "jobs", verb)
        assert allowed("", "pods", verb)
    assert allowed("", "pods/log", "get")
    assert allowed("", "configmaps", "create")
    assert allowed("", "services", "create")
    assert not allowed("", "pods/exec", "create")
    assert not allowed("", "secrets", "get")
    assert not allowed("", "resourcequotas", "update")
    assert not allowed("rbac.authorization.k8s.io", "roles", "create")
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]

    binding = one(
        [m for m in rendered if m["metadata"].get("namespace") == "vision"], "RoleBinding"
    )
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "vision-researchers"},
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice@example.com"},
    ]


def test_network_policies_deny_all_then_allow_the_namespace_and_dns(
    rendered: list[dict[str, Any]],
) -> None:
    policies = {
        m["metadata"]["name"]: m["spec"]
        for m in rendered
        if m["kind"] == "NetworkPolicy" and m["metadata"]["namespace"] == "vision"
    }
    deny = policies[t.DENY_ALL_NAME]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    same = policies[t.SAME_NAMESPACE_NAME]
    assert same["ingress"] == [{"from": [{"podSelector": {}}]}]
    assert same["egress"] == [{"to": [{"podSelector": {}}]}]
    dns = policies[t.DNS_NAME]
    (rule,) = dns["egress"]
    assert {(p["protocol"], p["port"]) for p in rule["ports"]} == {("UDP", 53), ("TCP", 53)}
    assert rule["to"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "kube-system"
    }
    without_dns = t.render_tenants(checked(VISION, dns_egress=False))
    assert t.DNS_NAME not in {m["metadata"]["name"] for m in by_kind(without_dns, "NetworkPolicy")}


def test_quota_values_read_as_the_quantities_given() -> None:
    settings = checked({**VISION, "cpu": "1.5", "memory": "1536Mi"})
    hard = t.quota_hard(settings["tenants"][0])
    assert parse_quantity(hard["requests.cpu"]) == Fraction(3, 2)
    assert parse_quantity(hard["limits.memory"]) == 1536 * 2**20


def _node(name: str, **resources: str) -> dict[str, Any]:
    """A Node as the API returns it, with these extended resources in capacity and allocatable."""
    status = {"cpu": "64", "memory": "512Gi", **resources}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"capacity": dict(status), "allocatable": dict(status)},
    }


# A cluster with whole GPUs, time-sliced replicas under their own name, MIG slices of two
# profiles (mixed strategy) and a device of another vendor.
CLUSTER_NODES = [
    _node("gpu-a", **{"nvidia.com/gpu": "8"}),
    _node("gpu-b", **{"nvidia.com/gpu.shared": "32"}),
    _node("gpu-c", **{"nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "4"}),
    _node("fpga", **{"example.com/fpga": "2"}),
]


def test_a_tenant_quota_caps_every_gpu_resource_the_cluster_advertises() -> None:
    """A tenant given 8 whole GPUs takes no shared replica and no MIG slice: each GPU resource
    a node advertises is capped at 0 unless the tenant lists it (not only those it lists)."""
    settings = checked(VISION, MIG_ONLY)
    result = t.plan(settings, [], [], CLUSTER_NODES)
    quotas = {
        m["metadata"]["namespace"]: m["spec"]["hard"]
        for m in by_kind(result["manifests"], "ResourceQuota")
    }
    gpu_caps = {
        ns: {k: v for k, v in hard.items() if k.startswith("requests.nvidia.com/")}
        for ns, hard in quotas.items()
    }
    assert gpu_caps["vision"] == {
        "requests.nvidia.com/gpu": "8",
        "requests.nvidia.com/gpu.shared": "0",
        "requests.nvidia.com/mig-1g.10gb": "0",
        "requests.nvidia.com/mig-3g.40gb": "0",
    }
    assert gpu_caps["inference-lab"] == {
        "requests.nvidia.com/gpu": "0",
        "requests.nvidia.com/gpu.shared": "4",
        "requests.nvidia.com/mig-1g.10gb": "14",
        "requests.nvidia.com/mig-3g.40gb": "0",
    }
    assert not any("fpga" in key for hard in quotas.values() for key in hard)
    # Without nodes (or before any advertises MIG), whole GPUs and shared replicas are capped.
    bare = t.quota_hard(checked(VISION)["tenants"][0])
    assert bare["requests.nvidia.com/gpu.shared"] == "0"


def test_only_gpu_resource_names_are_taken_from_the_nodes() -> None:
    nodes = [
        _node("n", **{"nvidia.com/mig-2g.20gb": "3", "nvidia.com/gpu.product": "x"}),
        {"metadata": {"name": "no-status"}},
        _node("m", **{"nvidia.com/mig-1g.10gb\n": "1", "other.nvidia.com/gpu": "1"}),
    ]
    assert t.advertised_gpu_resources(nodes) == ["nvidia.com/mig-2g.20gb"]


# --- plan: apply, adopt, prune -------------------------------------------------------------------


def _ns(
    name: str, labels: dict[str, str] | None = None, applied_by: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
    if applied_by:
        meta["managedFields"] = [{"manager": applied_by, "operation": "Apply"}]
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def _owned(settings: dict[str, Any]) -> list[dict[str, Any]]:
    return [copy.deepcopy(m) for m in t.render_tenants(settings)]


def test_plan_applies_everything_when_the_cluster_is_empty() -> None:
    settings = checked(VISION)
    result = t.plan(settings, [_ns("default"), _ns("kube-system")], [])
    assert result["errors"] == []
    assert result["manifests"] == t.render_tenants(settings)
    assert result["delete"] == [] and result["release"] == []


def test_a_namespace_kubegpu_did_not_create_is_refused_unless_adopted() -> None:
    settings = checked(VISION)
    result = t.plan(settings, [_ns("vision", {"team": "cv"})], [])
    assert result["manifests"] == []
    (error,) = result["errors"]
    assert "gpu_tenancy_tenants[0] (vision): namespace 'vision' exists and kubegpu did not" in error
    assert "adopt_namespace: true" in error

    adopted = t.plan(checked({**VISION, "adopt_namespace": True}), [_ns("vision")], [])
    assert adopted["errors"] == [] and adopted["adopted"] == ["vision"]
    ns = one(adopted["manifests"], "Namespace")
    # Adopted: labelled for the tenant, but never marked as made by kubegpu.
    assert "app.kubernetes.io/managed-by" not in ns["metadata"]["labels"]
    assert ns["metadata"]["labels"]["kubegpu.io/tenant"] == "vision"


def test_prune_deletes_only_kubegpu_objects_of_former_tenants() -> None:
    before = checked(VISION, MIG_ONLY)
    owned = _owned(before)
    # Someone's hand-made object that only looks similar: no managed-by label.
    lab_role = [m for m in by_kind(owned, "Role") if m["metadata"]["namespace"] == "inference-lab"]
    stray = copy.deepcopy(lab_role[0])
    stray["metadata"]["name"] = "hand-made"
    del stray["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    now = checked(VISION, prune=True)
    result = t.plan(now, [_ns("vision", t.tenant_labels("vision"))], [*owned, stray])
    deleted = {
        (r["kind"], r["metadata"].get("namespace", ""), r["metadata"]["name"])
        for r in result["delete"]
    }
    assert deleted == {
        (m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"])
        for m in owned
        if m["metadata"]["labels"]["kubegpu.io/tenant"] == "inference-lab"
        and m["kind"] != "Namespace"
    }
    assert all(r["metadata"].get("namespace") != "vision" for r in result["delete"])


def test_prune_deletes_namespaces_only_when_asked_and_only_its_own() -> None:
    owned = _owned(checked(VISION, MIG_ONLY))
    kept = t.plan(checked(VISION, prune=True), [], owned)
    assert "Namespace" not in {r["kind"] for r in kept["delete"]}
    gone = t.plan(checked(VISION, prune=True, prune_namespaces=True), [], owned)
    namespaces = [r for r in gone["delete"] if r["kind"] == "Namespace"]
    assert namespaces == [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "inference-lab"}}
    ]
    # Namespaces go last, after what is inside them.
    assert gone["delete"][-1]["kind"] == "Namespace"
    # A namespace that only carries the tenant label (adopted, or labelled by hand) is never
    # deleted, whatever the selector returned.
    foreign = _ns("legacy", {"kubegpu.io/tenant": "legacy"})
    again = t.plan(checked(VISION, prune=True, prune_namespaces=True), [foreign], [foreign])
    assert again["delete"] == []


def test_adopted_namespaces_of_former_tenants_get_their_labels_back() -> None:
    labelled = _ns("old-team", {"kubegpu.io/tenant": "old-team"}, applied_by="kubegpu")
    by_hand = _ns("hand", {"kubegpu.io/tenant": "hand"})
    result = t.plan(checked(VISION), [labelled, by_hand], [])
    assert result["release"] == [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "old-team"}}
    ]


# --- the filter plugin ----------------------------------------------------------------------------


def test_the_filters_pass_data_through() -> None:
    filters = tenancy_filter.FilterModule().filters()
    checked_out = filters["tenancy_validate"]({"tenants": [VISION]})
    assert checked_out["errors"] == []
    planned = filters["tenancy_plan"](checked_out["settings"], [], [])
    assert planned["manifests"] == t.render_tenants(checked_out["settings"])
    assert [m["kind"] for m in filters["tenancy_monitoring"](checked_out["settings"], False)] == [
        "ConfigMap"
    ]
    assert [m["kind"] for m in filters["tenancy_monitoring"](checked_out["settings"], True)] == [
        "ConfigMap",
        "PrometheusRule",
    ]
    bad = filters["tenancy_validate"]({"tenants": [{**VISION, "cpu": "x"}]})
    assert bad["errors"] and "(vision).cpu" in bad["errors"][0]


def test_objects_already_being_deleted_are_not_deleted_again() -> None:
    owned = _owned(checked(VISION, MIG_ONLY))
    for manifest in owned:
        if manifest["metadata"]["labels"]["kubegpu.io/tenant"] == "inference-lab":
            manifest["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    result = t.plan(checked(VISION, prune=True, prune_namespaces=True), [], owned)
    assert result["delete"] == []


@pytest.mark.parametrize(
    ("services", "message"),
    [
        ({"nodeport": "1"}, "services.nodeport: unknown key; allowed: nodeports, loadbalancers"),
        ({"nodeports": "1.5"}, "services.nodeports:"),
        ("all", "services: must be a mapping with nodeports and loadbalancers"),
    ],
)
def test_service_quotas_are_checked(services: Any, message: str) -> None:
    _normalized, errors = ts.validate_settings(
        {"tenants": [{"name": "team", "gpus": {}, "services": services}]}
    )
    assert any(message in e for e in errors), errors
