"""GPU tenancy and `kubegpu smoke` on the test cluster (tests/cluster).

Real for tenancy: the gpu_tenancy role, run by ansible-playbook through playbooks/tenants.yml,
applying with kubernetes.core's server-side apply to kube-apiserver 1.37 built from Kubernetes'
module, with its admission chain (PodSecurity, LimitRanger, ResourceQuota) deciding on the
tenants' pods, and kube-controller-manager's namespace, service-account and quota controllers.
Played by the test: the node that advertises MIG slices (a kubelet's registration; no kubelet
runs there).

Real for smoke: `kubegpu smoke`'s submission, polling, log reading and cleanup through the
Kubernetes Python client; on the control plane alone, RuntimeClass admission, the Job
controller creating the pod and the scheduler finding no node for it (the timeout), and the
API's refusal of an unknown namespace; on a testbed node joined by a real kubelet, with
NVIDIA's device plugin v0.19.0 on the NVML TEST DOUBLE advertising a captured GPU, the Job
scheduled, run by containerd and its pod's log read through the API server. Doubles there: the
NVML library (tests/nvml) and the image, a TEST DOUBLE of the PyTorch one (busybox whose
`python` prints what it was given and a verdict line; no GPU and no PyTorch run here, and no
recorded output of the training script exists, so nothing of a real run is imitated).
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import gpu_monitoring as mon
from ansible_collections.kubegpu.gpu.plugins.module_utils import tenancy as t
from ansible_collections.kubegpu.gpu.plugins.module_utils import tenancy_settings as ts
from ansible_collections.kubegpu.gpu.plugins.module_utils.k8s_values import parse_quantity

from kubegpu import smoke
from tests.cluster import images, kubelet
from tests.cluster.controlplane import KubeCluster
from tests.integration import ansible_json
from tests.integration.test_nvml_standin import (  # noqa: F401 - built and joined are fixtures
    PLUGIN_CAPTURE,
    XML,
    allocatable_gpus,
    built,
    joined,
    start_plugin,
    xml_value,
)
from tests.processes import wait_for

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "tenants.yml"

ALPHA = {
    "name": "alpha",
    "description": "team alpha",
    "gpus": {"nvidia.com/gpu": "4"},
    "max_gpus_per_container": "2",
    "cpu": {"requests": "32", "limits": "64"},
    "memory": "256Gi",
    "pods": "50",
    "gpu_products": ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"],
    "members": [
        {"kind": "Group", "name": "alpha-researchers"},
        {"kind": "User", "name": "alice@example.com"},
    ],
}
BETA = {
    "name": "beta",
    "gpus": {"nvidia.com/mig-1g.10gb": "7"},
    # One GPU through DRA (NVIDIA's DRA driver's class); alpha gets none.
    "devices": {"gpu.nvidia.com": "1"},
    "cpu": "8",
    "memory": "32Gi",
    "members": [{"kind": "User", "name": "bob@example.com"}],
    "pod_security": {"level": "baseline", "reason": "legacy image runs as root (OPS-42)"},
}
SHARED = {
    "name": "shared-team",
    "gpus": {"nvidia.com/gpu": "1"},
    "members": [{"kind": "Group", "name": "shared"}],
    "adopt_namespace": True,
}


# --- helpers -------------------------------------------------------------------------------------


def run_tenancy(server: Any, tmp_path: Path, *options: str, **variables: Any) -> dict[str, Any]:
    """ansible-playbook playbooks/tenants.yml [options] with these gpu_tenancy_* variables.

    Returns {rc, stats (localhost), failures: [messages of failed tasks], output}.
    """
    extra = {
        "kubegpu_kubeconfig": str(server.kubeconfig),
        # kubernetes.core needs the kubernetes library: the Python running the tests has it.
        "ansible_python_interpreter": sys.executable,
        **{f"gpu_tenancy_{k}": v for k, v in variables.items()},
    }
    proc = ansible_json.playbook(
        PLAYBOOK.relative_to(REPO),
        *options,
        extra_vars=extra,
        vars_dir=tmp_path,
        json_report=True,
        env={"ANSIBLE_LOCALHOST_WARNING": "False"},
    )
    report = ansible_json.report(proc)
    failures, changed = [], []
    for play in report["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get("localhost", {})
            if result.get("failed"):
                failures.append(json.dumps(result.get("msg")))
            for item in result.get("results") or []:
                if item.get("failed"):
                    failures.append(json.dumps(item.get("msg")))
            if result.get("action") == "kubernetes.core.k8s" and not result.get("skipped"):
                changed.extend(_changed_objects(result))
    return {
        "rc": proc.returncode,
        "stats": report["stats"].get("localhost", {}),
        "changed": changed,
        "failures": failures,
        "output": proc.stdout[-20000:] + proc.stderr[-5000:],
    }


def _changed_objects(result: dict[str, Any]) -> list[str]:
    """The objects a kubernetes.core.k8s call changed: its definitions, paired with its results."""
    results = (result.get("result") or {}).get("results")
    if results is None:  # one definition: the module returns its result directly
        results = [result]
    definitions = result["invocation"]["module_args"]["definition"]
    if isinstance(definitions, dict):
        definitions = [definitions]
    assert len(definitions) == len(results)
    return [_describe(d) for d, r in zip(definitions, results, strict=True) if r.get("changed")]


def _describe(item: Any) -> str:
    """'Kind namespace/name' of a loop item (a manifest or an object reference)."""
    if not isinstance(item, dict):
        return str(item)
    meta = item.get("metadata") or item
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{item.get('kind')} {where}{meta.get('name')}"


def api(server: Any) -> tuple[Any, Any, Any, Any]:
    from kubernetes import client

    api_client = server.client()
    return (
        client.CoreV1Api(api_client),
        client.RbacAuthorizationV1Api(api_client),
        client.NetworkingV1Api(api_client),
        client.BatchV1Api(api_client),
    )


def raw(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """A read as plain JSON (camelCase, as in manifests)."""
    return dict(json.loads(call(*args, _preload_content=False, **kwargs).data))


def missing(call: Any, *args: Any) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        obj = raw(call, *args)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    # Without a namespace controller a deleted namespace stays Terminating.
    return bool(obj["metadata"].get("deletionTimestamp"))


# The MIG resource the test cluster's node advertises.
MIG_SLICE = "nvidia.com/mig-1g.10gb"


def expected(*tenants: dict[str, Any]) -> dict[str, Any]:
    normalized, errors = ts.validate_settings({"tenants": list(tenants)})
    assert errors == []
    return normalized


def same_quantities(got: dict[str, str], want: dict[str, str]) -> bool:
    return set(got) == set(want) and all(
        Fraction(parse_quantity(got[k])) == parse_quantity(want[k]) for k in want
    )


# --- tenants: apply, idempotence, read back ---------------------------------------------------


@pytest.fixture(scope="module")
def applied(
    kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Two namespaces nobody labelled exist first, and a node that advertises MIG slices (the
    mixed strategy, registered by the test); then three tenants are applied twice."""
    core, *_ = api(kube_cluster)
    for name in ("legacy", "shared-team"):
        core.create_namespace({"metadata": {"name": name, "labels": {"owner": "someone-else"}}})
    resources = {"cpu": "64", "memory": "512Gi", MIG_SLICE: "7"}
    core.create_node(
        {
            "metadata": {"name": "mig-node"},
            "status": {"capacity": resources, "allocatable": resources},
        }
    )
    tmp_path = tmp_path_factory.mktemp("tenancy")
    first = run_tenancy(kube_cluster, tmp_path, tenants=[ALPHA, BETA, SHARED])
    second = run_tenancy(kube_cluster, tmp_path, tenants=[ALPHA, BETA, SHARED])
    yield {"server": kube_cluster, "tmp": tmp_path, "first": first, "second": second}


def test_tenants_are_created_and_a_second_run_changes_nothing(applied: dict[str, Any]) -> None:
    first, second = applied["first"], applied["second"]
    assert first["rc"] == 0, first["failures"] or first["output"]
    # Every object was created (changed), each once.
    assert sorted(first["changed"]) == sorted(
        _describe(m) for m in t.render_tenants(expected(ALPHA, BETA, SHARED), (), [MIG_SLICE])
    )
    assert second["rc"] == 0, second["failures"] or second["output"]
    assert second["stats"]["changed"] == 0, second["changed"]
    assert second["stats"]["failures"] == 0


def test_quota_limits_and_rbac_read_back_exactly_as_specified(applied: dict[str, Any]) -> None:
    core, rbac, networking, _ = api(applied["server"])
    settings = expected(ALPHA, BETA, SHARED)
    for tenant in settings["tenants"]:
        ns = tenant["name"]
        quota = raw(core.read_namespaced_resource_quota, t.QUOTA_NAME, ns)
        # Every GPU resource of the cluster is capped, the MIG slices of its node too.
        hard = quota["spec"]["hard"]
        assert same_quantities(hard, t.quota_hard(tenant, [MIG_SLICE])), quota["spec"]
        assert hard["requests.nvidia.com/gpu.shared"] == tenant["gpus"].get(
            "nvidia.com/gpu.shared", "0"
        )
        assert hard["requests." + MIG_SLICE] == tenant["gpus"].get(MIG_SLICE, "0")
        limits = raw(core.read_namespaced_limit_range, t.LIMITS_NAME, ns)["spec"]["limits"]
        (want,) = t.limit_range_limits(tenant)
        (got,) = limits
        assert got["type"] == "Container"
        for part in ("default", "defaultRequest", "max"):
            assert same_quantities(got[part], want[part]), (ns, part, got[part])
        role = raw(rbac.read_namespaced_role, t.ROLE_NAME, ns)
        assert role["rules"] == t.ROLE_RULES
        binding = raw(rbac.read_namespaced_role_binding, t.BINDING_NAME, ns)
        assert binding["roleRef"] == t.role_binding_manifest(tenant)["roleRef"]
        assert binding["subjects"] == t.role_binding_manifest(tenant)["subjects"]
        for obj in (quota, role, binding):
            assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kubegpu"
            assert obj["metadata"]["labels"]["kubegpu.io/tenant"] == ns
            managers = {f["manager"] for f in obj["metadata"]["managedFields"]}
            assert "kubegpu" in managers
        policies = raw(networking.list_namespaced_network_policy, ns)["items"]
        assert {p["metadata"]["name"] for p in policies} == {
            t.DENY_ALL_NAME,
            t.SAME_NAMESPACE_NAME,
            t.DNS_NAME,
        }
    assert not raw(rbac.list_cluster_role_binding, label_selector=t.OWNED_SELECTOR)["items"]


def test_namespaces_carry_pod_security_and_ownership(applied: dict[str, Any]) -> None:
    core, *_ = api(applied["server"])
    alpha = raw(core.read_namespace, "alpha")["metadata"]
    assert alpha["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert alpha["labels"]["app.kubernetes.io/managed-by"] == "kubegpu"
    assert alpha["annotations"]["kubegpu.io/gpu-products"] == "NVIDIA-H100-80GB-HBM3,NVIDIA-H200"
    beta = raw(core.read_namespace, "beta")["metadata"]
    assert beta["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert (
        beta["annotations"]["kubegpu.io/pod-security-reason"]
        == "legacy image runs as root (OPS-42)"
    )
    shared = raw(core.read_namespace, "shared-team")["metadata"]
    # Adopted: kubegpu's tenant and Pod Security labels, the owner's label kept, and no
    # managed-by, so kubegpu never deletes it.
    assert shared["labels"]["kubegpu.io/tenant"] == "shared-team"
    assert shared["labels"]["owner"] == "someone-else"
    assert "app.kubernetes.io/managed-by" not in shared["labels"]
    legacy = raw(core.read_namespace, "legacy")["metadata"]
    assert "kubegpu.io/tenant" not in legacy["labels"]


def _tenant_pod(name: str, resources: dict[str, str], privileged: bool = False) -> dict[str, Any]:
    """A pod that meets the restricted Pod Security level (unless ``privileged``)."""
    security = (
        {"privileged": True}
        if privileged
        else {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    )
    return {
        "metadata": {"name": name},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "cuda",
                    "image": "registry.kubegpu.test/cuda-sample:1",
                    "securityContext": security,
                    "resources": {"limits": resources},
                }
            ],
        },
    }


def _refusal(core: Any, namespace: str, pod: dict[str, Any]) -> str:
    """Create ``pod``; the API server's refusal message, or '' when it was admitted."""
    from kubernetes.client.exceptions import ApiException

    try:
        core.create_namespaced_pod(namespace, pod)
    except ApiException as exc:
        assert exc.status == 403, exc.body
        return str(json.loads(exc.body)["message"])
    return ""


def _dra_claims(server: Any) -> dict[str, str]:
    """NVIDIA's GPU DeviceClass, then a one-GPU ResourceClaim in alpha and two in beta: the API
    server's refusal of each ('' when admitted). The claims are deleted again."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    objects = client.CustomObjectsApi(server.client())
    group, version = "resource.k8s.io", "v1"
    with contextlib.suppress(ApiException):
        objects.create_cluster_custom_object(
            group,
            version,
            "deviceclasses",
            {
                "apiVersion": f"{group}/{version}",
                "kind": "DeviceClass",
                "metadata": {"name": "gpu.nvidia.com"},
                "spec": {
                    "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]
                },
            },
        )
    found: dict[str, str] = {}
    for key, namespace in (("alpha", "alpha"), ("beta-first", "beta"), ("beta-second", "beta")):
        claim = {
            "apiVersion": f"{group}/{version}",
            "kind": "ResourceClaim",
            "metadata": {"name": key},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1},
                        }
                    ]
                }
            },
        }
        # ResourceQuota admission adds what it admits to the quota's usage at once.
        try:
            objects.create_namespaced_custom_object(
                group, version, namespace, "resourceclaims", claim
            )
            found[key] = ""
        except ApiException as exc:
            assert exc.status == 403, exc.body
            found[key] = str(json.loads(exc.body)["message"])
    for key, namespace in (("alpha", "alpha"), ("beta-first", "beta"), ("beta-second", "beta")):
        with contextlib.suppress(ApiException):
            objects.delete_namespaced_custom_object(
                group, version, namespace, "resourceclaims", key
            )
    return found


def test_the_admission_chain_caps_every_gpu_resource_of_a_tenant(applied: dict[str, Any]) -> None:
    """kube-apiserver's own ResourceQuota, LimitRanger and PodSecurity admission decide."""
    from kubernetes.client.exceptions import ApiException

    core, *_ = api(applied["server"])
    # ResourceQuota admission refuses every pod until the quota controller has written status.
    deadline = time.monotonic() + 60
    while not all(
        (raw(core.read_namespaced_resource_quota, t.QUOTA_NAME, ns).get("status") or {}).get("hard")
        for ns in ("alpha", "beta")
    ):
        assert time.monotonic() < deadline, "the quota controller wrote no quota status"
        time.sleep(0.2)
    gpu, shared = "nvidia.com/gpu", "nvidia.com/gpu.shared"
    # alpha: 4 whole GPUs, at most 2 per container, no shared GPU and no MIG slice.
    assert _refusal(core, "alpha", _tenant_pod("two-a", {gpu: "2"})) == ""
    assert _refusal(core, "alpha", _tenant_pod("two-b", {gpu: "2"})) == ""
    over = _refusal(core, "alpha", _tenant_pod("one-more", {gpu: "1"}))
    assert f"exceeded quota: {t.QUOTA_NAME}" in over and f"requests.{gpu}=1" in over, over
    for resource in (shared, MIG_SLICE):
        refused = _refusal(core, "alpha", _tenant_pod("other", {resource: "1"}))
        assert f"exceeded quota: {t.QUOTA_NAME}" in refused, refused
        assert f"limited: requests.{resource}=0" in refused, refused
    per_container = _refusal(core, "alpha", _tenant_pod("three", {gpu: "3"}))
    assert f"maximum {gpu} usage per Container is 2" in per_container, per_container
    privileged = _refusal(core, "alpha", _tenant_pod("root", {gpu: "1"}, privileged=True))
    assert 'violates PodSecurity "restricted:latest"' in privileged, privileged
    # beta: seven MIG slices and no whole GPU, Pod Security baseline.
    assert _refusal(core, "beta", _tenant_pod("slice", {MIG_SLICE: "1"})) == ""
    # LimitRanger decides first here: beta's containers may ask for no whole GPU at all.
    whole = _refusal(core, "beta", _tenant_pod("whole", {gpu: "1"}))
    assert f"maximum {gpu} usage per Container is 0" in whole, whole
    # A Service that would open a port on every node is refused too; a ClusterIP one is not.
    for kind, expect in (("NodePort", "services.nodeports"), ("ClusterIP", None)):
        service = {
            "metadata": {"name": kind.lower()},
            "spec": {"type": kind, "selector": {"app": "x"}, "ports": [{"port": 80}]},
        }
        try:
            core.create_namespaced_service("alpha", service)
            refused = ""
        except ApiException as exc:
            refused = str(json.loads(exc.body)["message"])
        if expect:
            assert f"exceeded quota: {t.QUOTA_NAME}" in refused and f"{expect}=1" in refused, (
                refused
            )
        else:
            assert refused == ""
            core.delete_namespaced_service(kind.lower(), "alpha")
    # DRA: claims on NVIDIA's GPU DeviceClass count per class; alpha may hold none, beta one.
    refused_claims = _dra_claims(applied["server"])
    assert f"exceeded quota: {t.QUOTA_NAME}" in refused_claims["alpha"], refused_claims
    assert f"limited: gpu.nvidia.com{t.DEVICE_CLASS_QUOTA}=0" in refused_claims["alpha"]
    assert refused_claims["beta-first"] == ""
    assert f"limited: gpu.nvidia.com{t.DEVICE_CLASS_QUOTA}=1" in refused_claims["beta-second"]
    used = raw(core.read_namespaced_resource_quota, t.QUOTA_NAME, "alpha")["status"]["used"]
    assert parse_quantity(used[f"requests.{gpu}"]) == 4
    for ns, names in (("alpha", ("two-a", "two-b")), ("beta", ("slice",))):
        for name in names:
            core.delete_namespaced_pod(name, ns, grace_period_seconds=0)


def test_check_mode_changes_nothing(applied: dict[str, Any]) -> None:
    core, *_ = api(applied["server"])
    epsilon = {"name": "epsilon", "gpus": {"nvidia.com/gpu": "1"}}
    result = run_tenancy(applied["server"], applied["tmp"], "--check", tenants=[ALPHA, epsilon])
    assert result["rc"] == 0, result["failures"] or result["output"]
    # It says what it would create, and creates nothing.
    assert "Namespace epsilon" in result["changed"]
    assert missing(core.read_namespace, "epsilon")


def test_bad_tenants_fail_before_anything_is_applied(applied: dict[str, Any]) -> None:
    core, *_ = api(applied["server"])
    bad = {"name": "gamma", "gpus": {"nvidia.com/gpu": "two"}, "members": [{"name": "carol"}]}
    good_new = {"name": "delta", "gpus": {"nvidia.com/gpu": "1"}}
    result = run_tenancy(applied["server"], applied["tmp"], tenants=[ALPHA, good_new, bad])
    assert result["rc"] != 0
    text = "\n".join(result["failures"])
    assert (
        "gpu_tenancy_tenants[2] (gamma).gpus.nvidia.com/gpu: 'two' is not a Kubernetes quantity"
        in text
    )
    assert "gpu_tenancy_tenants[2] (gamma).members[0].kind: missing" in text
    assert result["stats"]["changed"] == 0
    assert missing(core.read_namespace, "delta")
    assert missing(core.read_namespace, "gamma")


def test_a_namespace_kubegpu_did_not_create_is_refused(applied: dict[str, Any]) -> None:
    core, *_ = api(applied["server"])
    result = run_tenancy(
        applied["server"], applied["tmp"], tenants=[ALPHA, {"name": "legacy", "members": []}]
    )
    assert result["rc"] != 0
    assert "namespace 'legacy' exists and kubegpu did not create it" in "\n".join(
        result["failures"]
    )
    assert result["stats"]["changed"] == 0
    legacy = raw(core.read_namespace, "legacy")["metadata"]
    assert legacy["labels"] == {
        "owner": "someone-else",
        "kubernetes.io/metadata.name": "legacy",
    } or (legacy["labels"] == {"owner": "someone-else"})


def test_pruning_removes_only_what_kubegpu_made(applied: dict[str, Any]) -> None:
    """Runs after the tests above (pytest keeps file order): alpha stays, beta and shared-team go."""
    server, tmp = applied["server"], applied["tmp"]
    core, rbac, networking, _ = api(server)
    alpha_quota_before = raw(core.read_namespaced_resource_quota, t.QUOTA_NAME, "alpha")
    # Without pruning, former tenants' objects are left alone.
    kept = run_tenancy(server, tmp, tenants=[ALPHA])
    assert kept["rc"] == 0 and kept["stats"]["changed"] == 0, kept["output"]
    assert not missing(core.read_namespaced_resource_quota, t.QUOTA_NAME, "beta")

    pruned = run_tenancy(server, tmp, tenants=[ALPHA], prune=True, prune_namespaces=True)
    assert pruned["rc"] == 0, pruned["failures"] or pruned["output"]
    # Exactly beta's and shared-team's objects: deleted, and shared-team's namespace released.
    assert sorted(pruned["changed"]) == sorted(
        _describe(m) for m in t.render_tenants(expected(BETA, SHARED))
    )
    for ns in ("beta", "shared-team"):
        assert missing(core.read_namespaced_resource_quota, t.QUOTA_NAME, ns)
        assert missing(core.read_namespaced_limit_range, t.LIMITS_NAME, ns)
        assert missing(rbac.read_namespaced_role, t.ROLE_NAME, ns)
        assert missing(rbac.read_namespaced_role_binding, t.BINDING_NAME, ns)
        assert not raw(networking.list_namespaced_network_policy, ns)["items"]
    # The namespace kubegpu created is deleted; the adopted one and the foreign one survive.
    assert missing(core.read_namespace, "beta")
    shared = raw(core.read_namespace, "shared-team")["metadata"]
    assert not shared.get("deletionTimestamp")
    assert shared["labels"]["owner"] == "someone-else"
    # ... and get the labels kubegpu put there back (released through server-side apply).
    assert "kubegpu.io/tenant" not in shared["labels"]
    assert "pod-security.kubernetes.io/enforce" not in shared["labels"]
    legacy = raw(core.read_namespace, "legacy")["metadata"]
    assert not legacy.get("deletionTimestamp")
    # alpha is untouched.
    alpha_quota_after = raw(core.read_namespaced_resource_quota, t.QUOTA_NAME, "alpha")
    assert (
        alpha_quota_after["metadata"]["resourceVersion"]
        == alpha_quota_before["metadata"]["resourceVersion"]
    )

    again = run_tenancy(server, tmp, tenants=[ALPHA], prune=True, prune_namespaces=True)
    assert again["rc"] == 0 and again["stats"]["changed"] == 0, again["output"]


# --- kubegpu smoke -------------------------------------------------------------------------------


def _smoke(server: Any, namespace: str, **kwargs: Any) -> smoke.SmokeResult:
    progress: list[str] = []
    result = smoke.run_smoke(
        server.kubeconfig,
        namespace=namespace,
        api_client=server.client(),
        poll_s=0.2,
        on_progress=progress.append,
        **kwargs,
    )
    return result


def _nothing_left(server: Any, result: smoke.SmokeResult) -> None:
    core, _, _, batch = api(server)
    assert missing(batch.read_namespaced_job, result.job, result.namespace)
    assert missing(core.read_namespaced_config_map, f"{result.job}-script", result.namespace)
    pods = raw(
        core.list_namespaced_pod,
        result.namespace,
        label_selector=f"batch.kubernetes.io/job-name={result.job}",
    )["items"]
    assert pods == []
    assert result.cleanup_errors == ()


SMOKE_NAMESPACE = "smoke"


@pytest.fixture(scope="module")
def smoke_cluster(kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    """The real control plane with no node, the namespace the smoke Jobs run in and the
    RuntimeClass `nvidia` the smoke pod names (RuntimeClass admission refuses a pod whose class
    does not exist). What it made goes afterwards: the session's cluster is shared (test_reset
    makes a RuntimeClass `nvidia` of its own)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core, *_ = api(kube_cluster)
    node = client.NodeV1Api(kube_cluster.client())
    made = []
    for create, delete, body in (
        (
            core.create_namespace,
            core.delete_namespace,
            {"metadata": {"name": SMOKE_NAMESPACE}},
        ),
        (
            node.create_runtime_class,
            node.delete_runtime_class,
            {"metadata": {"name": "nvidia"}, "handler": "nvidia"},
        ),
    ):
        try:
            create(body)
            made.append((delete, body["metadata"]["name"]))
        except ApiException as exc:
            if exc.status != 409:
                raise
    yield kube_cluster
    for delete, name in reversed(made):
        delete(name)


@pytest.mark.cluster
def test_smoke_times_out_on_an_unschedulable_pod_and_still_cleans_up(
    smoke_cluster: KubeCluster,
) -> None:
    """The real Job controller creates the pod; the real scheduler finds no node with a GPU:
    the smoke check gives up naming the scheduler's reason, and deletes the Job and its pod."""
    result = _smoke(smoke_cluster, SMOKE_NAMESPACE, timeout_s=8)
    assert result.outcome == "timeout", result
    assert result.detail.startswith(f"gave up waiting: pod {result.job}-"), result.detail
    assert " Pending; unschedulable: " in result.detail, result.detail
    # The scheduler's word: no node at all, or none (a Node another test file of this session
    # registered) with a free nvidia.com/gpu or without a taint the pod does not tolerate.
    assert re.search(
        r"unschedulable: (no nodes available to schedule pods$"
        r"|0/\d+ nodes are available: .*(Insufficient nvidia\.com/gpu|untolerated taint))",
        result.detail,
    ), result.detail
    assert f"Job {SMOKE_NAMESPACE}/{result.job}" in result.deleted
    _nothing_left(smoke_cluster, result)


@pytest.mark.cluster
def test_smoke_in_a_missing_namespace_reports_the_api_error(smoke_cluster: KubeCluster) -> None:
    result = _smoke(smoke_cluster, "no-such-namespace", timeout_s=5)
    assert result.outcome == "failed"
    assert "API error" in result.detail and "no-such-namespace" in result.detail
    assert result.deleted == ()


# The smoke check on a node joined by a real kubelet, NVIDIA's device plugin on the NVML double
# advertising the capture's GPU (tests/integration/test_nvml_standin.py's node). The image is a
# TEST DOUBLE of the PyTorch image: busybox with `python` a shell script. No recorded output of
# kubegpu's training script on a GPU exists, so the double's output is minimal: what it was
# given (the script the Job mounted, the GPU the device plugin allocated) and one verdict line
# in the script's `KUBEGPU-TRAIN <PASS|FAIL> rank=<r>/<n>` form, saying that nothing trained.
SMOKE_DOUBLE = "registry.kubegpu.test/kubegpu-smoke-test-double"
DOUBLE_GIVEN = """#!/bin/sh
# kubegpu smoke TEST DOUBLE of `python /workload/train.py`: no GPU, no PyTorch here.
test -f "$1" || { echo "KUBEGPU-TRAIN FAIL rank=0/1 test double: $1 not mounted"; exit 1; }
echo "kubegpu-smoke-test-double: $1 $(wc -c < "$1") bytes, GPU $NVIDIA_VISIBLE_DEVICES"
"""
DOUBLES = {
    "pass": DOUBLE_GIVEN + 'echo "KUBEGPU-TRAIN PASS rank=0/1 test double: nothing trained"\n',
    "fail": DOUBLE_GIVEN
    + 'echo "kubegpu-smoke-test-double: fails on purpose"\n'
    + 'echo "KUBEGPU-TRAIN FAIL rank=0/1 test double: nothing trained"\nexit 1\n',
}
# The operator's settings for this node: two shared cores, and no RuntimeClass `nvidia` (the
# node's containerd is Debian's, without NVIDIA's runtime; the plugin's Allocate still sets
# NVIDIA_VISIBLE_DEVICES, which the double prints).
SMOKE_VARIABLES = {
    "gpu_tenancy_workload_runtime_class": "",
    "gpu_tenancy_workload_cpu": "500m",
    "gpu_tenancy_workload_memory": "256Mi",
    "gpu_tenancy_workload_shm_size": "64Mi",
}


@pytest.fixture(scope="module")
def gpu_node(joined: dict[str, Any]) -> dict[str, Any]:  # noqa: F811 - the fixture
    """The joined node with allocatable nvidia.com/gpu, the doubles imported, the namespace."""
    node, core = joined["node"], joined["core"]
    kubelet.import_images(
        node,
        [
            images.shell_archive(f"{SMOKE_DOUBLE}:{tag}", extra={"bin/python": (s.encode(), 0o755)})
            for tag, s in DOUBLES.items()
        ],
    )
    start_plugin(node)
    wait_for("allocatable nvidia.com/gpu", lambda: allocatable_gpus(core, node.name) or None)
    core.create_namespace({"metadata": {"name": SMOKE_NAMESPACE}})
    return joined


def _smoke_on_node(gpu_node: dict[str, Any], tag: str, **kwargs: Any) -> smoke.SmokeResult:
    cluster = gpu_node["cluster"]
    result = smoke.run_smoke(
        smoke.Target(kubeconfig=cluster.kubeconfig, variables=SMOKE_VARIABLES),
        namespace=SMOKE_NAMESPACE,
        image=f"{SMOKE_DOUBLE}:{tag}",
        api_client=cluster.client(),
        poll_s=0.5,
        timeout_s=120,
        **kwargs,
    )
    # The kubelet finishes the deletions smoke asked for.
    core, *_ = api(cluster)
    wait_for(
        "the smoke pods deleted by the kubelet",
        lambda: (
            not core.list_namespaced_pod(
                SMOKE_NAMESPACE, label_selector=f"batch.kubernetes.io/job-name={result.job}"
            ).items
        ),
    )
    _nothing_left(cluster, result)
    return result


def _double_given_line() -> str:
    """The double's first line: the mounted script's size and the capture's GPU."""
    tenancy = smoke.settings(SMOKE_VARIABLES)
    script = smoke.content_module("training").render_smoke(tenancy, SMOKE_NAMESPACE, "x")[0]
    size = len(script["data"]["train.py"].encode())
    uuid = xml_value(ET.parse(XML / PLUGIN_CAPTURE).getroot(), "gpu/uuid")
    return f"kubegpu-smoke-test-double: /workload/train.py {size} bytes, GPU {uuid}"


@pytest.mark.cluster
def test_smoke_passes_when_the_pod_succeeds_with_the_pass_line(gpu_node: dict[str, Any]) -> None:
    """The Job controller, the scheduler (allocatable nvidia.com/gpu from NVIDIA's plugin on the
    NVML double), the kubelet and containerd run the smoke Job; the TEST DOUBLE image prints."""
    result = _smoke_on_node(gpu_node, "pass")
    assert result.outcome == "passed", result
    assert result.detail == "KUBEGPU-TRAIN PASS rank=0/1 test double: nothing trained"
    assert result.log_tail == (_double_given_line(), result.detail)
    assert f"Job {SMOKE_NAMESPACE}/{result.job}" in result.deleted


@pytest.mark.cluster
def test_smoke_fails_with_the_pods_last_lines(gpu_node: dict[str, Any]) -> None:
    result = _smoke_on_node(gpu_node, "fail", log_lines=2)
    assert result.outcome == "failed", result
    assert "train exited 1 (Error)" in result.detail, result.detail
    # The pod's log through the API server (the kubelet's): its last two lines.
    assert result.log_tail == (
        "kubegpu-smoke-test-double: fails on purpose",
        "KUBEGPU-TRAIN FAIL rank=0/1 test double: nothing trained",
    )


# --- dashboards and alerting rules ---------------------------------------------------------------


def test_the_dashboard_configmap_is_applied_and_rules_wait_for_their_api(
    applied: dict[str, Any],
) -> None:
    server, tmp = applied["server"], applied["tmp"]
    core, *_ = api(server)
    absent = run_tenancy(server, tmp, tenants=[ALPHA], monitoring_enabled=True)
    assert absent["rc"] != 0
    assert "namespace monitoring does not exist" in "\n".join(absent["failures"])

    core.create_namespace({"metadata": {"name": "monitoring"}})
    first = run_tenancy(server, tmp, tenants=[ALPHA], monitoring_enabled=True)
    assert first["rc"] == 0, first["failures"] or first["output"]
    # The test server serves no monitoring.coreos.com API: only the ConfigMap is applied.
    assert first["changed"] == [f"ConfigMap monitoring/{mon.DASHBOARD_CONFIGMAP}"]
    configmap = raw(core.read_namespaced_config_map, mon.DASHBOARD_CONFIGMAP, "monitoring")
    settings = expected(ALPHA)
    want = mon.render_dashboard_configmap(settings)
    assert configmap["metadata"]["labels"] == want["metadata"]["labels"]
    assert configmap["data"] == want["data"]  # Grafana's {{Hostname}} legends survive Ansible
    second = run_tenancy(server, tmp, tenants=[ALPHA], monitoring_enabled=True)
    assert second["rc"] == 0 and second["stats"]["changed"] == 0, second["changed"]
