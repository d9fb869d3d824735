"""kubegpu.gpu.gpu_manifests' action: the objects' templates reach the module.

AnsiballZ ships only the Python files of module_utils, so the action reads the templates
(module_utils/data/cluster/) on the controller and passes them in the internal option
_object_templates. The plays run on localhost through ansible-playbook, up to the first thing
that needs an API server (tests/integration/test_gpu_cluster.py goes on from there).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubegpu.gpu.plugins.modules import gpu_manifests

from tests.unit.test_nvidia_driver_roles import host_results, run_playbook


def _plan(tmp_path: Path, **args: Any) -> dict[str, Any]:
    task = {
        "name": "Plan",
        "kubegpu.gpu.gpu_manifests": {"kubeconfig": str(tmp_path / "no-kubeconfig"), **args},
        "ignore_errors": True,
    }
    play = [{"name": "plan", "hosts": "all", "gather_facts": False, "tasks": [task]}]
    rc, report, stderr = run_playbook(tmp_path, play, {"h1": {}})
    assert rc == 0, stderr
    [(_, result)] = host_results(report, "h1")
    return result


def test_the_module_gets_the_templates_and_the_result_leaves_them_out(tmp_path: Path) -> None:
    result = _plan(tmp_path, config={"sharing": {"strategy": "time-slicing", "replicas": 2}})
    # Past the settings and the templates, up to the kubeconfig (there is no API server here).
    assert result["failed"] is True
    assert result["msg"].startswith("kubegpu_kubeconfig (option kubeconfig): "), result["msg"]
    assert "_object_templates" not in json.dumps(result)
    # ansible-core 2.21 leaves the invocation out of a failed module's result; 2.19 shows it.
    shown = result.get("invocation", {}).get("module_args")
    if shown is not None:
        assert shown["config"]["sharing"]["replicas"] == 2


def test_a_task_may_not_give_the_templates(tmp_path: Path) -> None:
    result = _plan(tmp_path, _object_templates={})
    assert result["failed"] is True
    assert "_object_templates is internal" in result["msg"]


def test_the_bare_module_without_templates_says_what_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = {"kubeconfig": str(tmp_path / "no-kubeconfig")}
    with patch_module_args(args), pytest.raises(SystemExit):
        gpu_manifests.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True
    assert "_object_templates is missing" in result["msg"]
    assert "action plugin" in result["msg"]


class ListingDouble:
    """A stand-in for the API server's list calls (guard_crds only lists): objects by path.
    The real control plane runs the same case in tests/integration/test_cluster.py."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        self.objects = objects

    def list(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return self.objects.get(path, [])


def _crd(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "name": name,
        "namespace": None,
    }


NODEFEATURES = "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeatures"
RULES = "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules"
OURS = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "nfd-worker", "namespace": "gpu"}]


@pytest.mark.parametrize(
    ("objects", "kept"),
    [
        # Only GFD's and kubegpu's nfd-worker's objects: every CRD goes.
        (
            {
                NODEFEATURES: [
                    {"metadata": {"namespace": "gpu", "name": "nvidia-features-for-n1"}},
                    {
                        "metadata": {
                            "namespace": "gpu",
                            "name": "n1",
                            "ownerReferences": [{"kind": "DaemonSet", "name": "nfd-worker"}],
                        }
                    },
                ]
            },
            [],
        ),
        # Another agent's NodeFeature, or GFD's name in a namespace that is not kubegpu's.
        (
            {NODEFEATURES: [{"metadata": {"namespace": "gpu", "name": "vendor-x-n1"}}]},
            ["nodefeatures.nfd.k8s-sigs.io"],
        ),
        (
            {
                NODEFEATURES: [
                    {"metadata": {"namespace": "other", "name": "nvidia-features-for-n1"}}
                ]
            },
            ["nodefeatures.nfd.k8s-sigs.io"],
        ),
        # Any NodeFeatureRule (kubegpu makes none).
        ({RULES: [{"metadata": {"name": "someone-elses"}}]}, ["nodefeaturerules.nfd.k8s-sigs.io"]),
    ],
)
def test_nfd_crds_stay_while_objects_others_made_use_them(
    objects: dict[str, list[dict[str, Any]]], kept: list[str]
) -> None:
    crds = [_crd(n) for n in gpu_manifests.NFD_CRDS.values()]
    delete, notes = gpu_manifests.guard_crds(ListingDouble(objects), [*OURS, *crds], OURS)
    assert [r["name"] for r in delete if r["kind"] == "CustomResourceDefinition"] == [
        n for n in gpu_manifests.NFD_CRDS.values() if n not in kept
    ]
    assert OURS[0] in delete
    assert [n.split()[1] for n in notes] == kept
    for note in notes:
        assert "that kubegpu did not make use it" in note


def test_one_call_applies_the_plan_in_order_and_one_deletes_what_it_prunes() -> None:
    """run_lists: what the role's single kubernetes.core.k8s calls get. The manifests keep
    their order (the namespace first); in check mode, while the namespace is not there, the
    objects inside it are left out and counted; the objects to delete become minimal
    definitions, a cluster-wide one without a namespace."""
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu"}}
    sa = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "a", "namespace": "gpu"},
    }
    rc = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}}
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "x"}}
    plan = {
        "manifests": [ns, sa, rc, other],
        "namespace_missing": True,
        "delete": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "namespace": "gpu", "name": "dcgm"},
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "name": "r",
                "namespace": None,
            },
        ],
    }
    applied = gpu_manifests.run_lists(plan, "gpu", check_mode=False)
    assert applied["apply"] == [ns, sa, rc, other] and applied["deferred"] == 0
    assert applied["delete_definitions"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "dcgm", "namespace": "gpu"},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "r"},
        },
    ]
    checked = gpu_manifests.run_lists(plan, "gpu", check_mode=True)
    assert checked["apply"] == [ns, rc, other] and checked["deferred"] == 1
    there = gpu_manifests.run_lists(dict(plan, namespace_missing=False), "gpu", check_mode=True)
    assert there["apply"] == [ns, sa, rc, other] and there["deferred"] == 0


class ServingDouble(ListingDouble):
    """ListingDouble that serves every kind owned_objects asks about."""

    def has_resource(self, api_version: str, plural: str) -> bool:
        return True


def test_what_a_controller_owns_is_left_to_the_garbage_collector() -> None:
    """A DaemonSet's pod carries the template's (kubegpu's) labels, but its DaemonSet owns it:
    reset and prune delete the DaemonSet and leave the pod to Kubernetes' garbage collector
    (deleting it as well raced the collector: 404). A pod kubegpu made itself is deleted."""
    from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_api import object_path

    daemonset = {"metadata": {"name": "nvidia-device-plugin", "namespace": "gpu"}}
    owned_pod = {
        "metadata": {
            "name": "nvidia-device-plugin-x7k2p",
            "namespace": "gpu",
            "ownerReferences": [
                {"kind": "DaemonSet", "name": "nvidia-device-plugin", "controller": True}
            ],
        }
    }
    own_pod = {"metadata": {"name": "kubegpu-smoke", "namespace": "gpu"}}
    api = ServingDouble(
        {
            object_path("apps/v1", "DaemonSet"): [daemonset],
            object_path("v1", "Pod"): [owned_pod, own_pod],
        }
    )
    found = gpu_manifests.owned_objects(api, service_monitor_api=False)
    assert [(r["kind"], r["name"]) for r in found] == [
        ("DaemonSet", "nvidia-device-plugin"),
        ("Pod", "kubegpu-smoke"),
    ]
