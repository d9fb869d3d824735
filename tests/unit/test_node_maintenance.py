"""node_maintenance: which pods a drain evicts, budget refusals, and the node's record."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import node_maintenance as nm

CLOCK = 1796095800.0  # 2026-12-01T03:30:00Z


def pod(
    name: str,
    *,
    ns: str = "default",
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    init: bool = False,
    owner: str | None = None,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    mirror: bool = False,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "i", "resources": {}}
    if limits:
        container["resources"]["limits"] = limits
    if requests:
        container["resources"]["requests"] = requests
    plain = {"name": "p", "image": "i"}
    spec = (
        {"containers": [plain], "initContainers": [container]}
        if init
        else {"containers": [plain, container]}
    )
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {}, "uid": name}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True}]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"limits": {"nvidia.com/gpu": "1"}}, ["nvidia.com/gpu"]),
        ({"requests": {"nvidia.com/mig-1g.10gb": "1"}}, ["nvidia.com/mig-1g.10gb"]),
        ({"limits": {"nvidia.com/gpu.shared": "2"}, "init": True}, ["nvidia.com/gpu.shared"]),
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, []),
        ({"limits": {"amd.com/gpu": "1"}}, []),
        ({}, []),
    ],
)
def test_gpu_resources_of_a_pod(kwargs: dict[str, Any], expected: list[str]) -> None:
    assert nm.gpu_resources(pod("p", **kwargs)) == expected
    assert nm.is_gpu_pod(pod("p", **kwargs)) is bool(expected)


def test_gpu_prefixes_are_configurable() -> None:
    assert nm.is_gpu_pod(pod("p", limits={"amd.com/gpu": "1"}), ("amd.com/",))


def _node_pods() -> list[dict[str, Any]]:
    gpu = {"nvidia.com/gpu": "1"}
    return [
        pod("train", limits=gpu),
        pod("web"),
        pod("plugin", ns="kube-system", limits=gpu, owner="DaemonSet"),
        pod("static", ns="kube-system", mirror=True, limits=gpu),
        pod("done", limits=gpu, phase="Succeeded"),
        pod("rs", owner="ReplicaSet", limits=gpu),
    ]


def test_gpu_drain_takes_gpu_pods_and_keeps_the_rest_with_reasons() -> None:
    to_evict, kept = nm.select_pods(_node_pods(), "gpu")
    assert [nm.pod_key(p) for p in to_evict] == ["default/rs", "default/train"]
    assert kept == [
        {"pod": "default/done", "reason": "finished (Succeeded)"},
        {"pod": "default/web", "reason": "holds no GPU resource"},
        {"pod": "kube-system/plugin", "reason": "DaemonSet pod"},
        {"pod": "kube-system/static", "reason": "mirror pod of a static pod"},
    ]


def test_full_drain_takes_every_pod_but_daemonset_static_and_finished() -> None:
    to_evict, kept = nm.select_pods(_node_pods(), "all")
    assert [nm.pod_key(p) for p in to_evict] == ["default/rs", "default/train", "default/web"]
    assert {k["pod"] for k in kept} == {"default/done", "kube-system/plugin", "kube-system/static"}


def test_unknown_drain_mode_is_refused() -> None:
    with pytest.raises(nm.MaintenanceError, match="'gpu' or 'all'"):
        nm.select_pods([], "some")


def _pdb(name: str, ns: str, selector: dict[str, Any] | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"selector": selector}}


@pytest.mark.parametrize(
    ("selector", "covered"),
    [
        ({"matchLabels": {"app": "train"}}, True),
        ({"matchLabels": {"app": "web"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["train"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["train"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
        ({}, True),  # policy/v1: an empty selector covers every pod of the namespace
        (None, False),
    ],
)
def test_which_budgets_cover_a_pod(selector: dict[str, Any] | None, covered: bool) -> None:
    target = pod("t", labels={"app": "train"})
    budgets = [_pdb("b", "default", selector), _pdb("other-ns", "ml", {})]
    assert nm.budgets_for(target, budgets) == (["default/b"] if covered else [])


@pytest.mark.parametrize(
    ("status", "now", "outcome"),
    [
        (201, 0, "evicted"),
        (200, 50, "evicted"),
        (404, 0, "gone"),
        (429, 10, "retry"),
        (429, 60, "blocked"),
        (429, 61, "blocked"),
        (500, 0, "error"),
        (403, 0, "error"),
    ],
)
def test_what_an_eviction_answer_means(status: int, now: float, outcome: str) -> None:
    assert nm.eviction_outcome(status, now, deadline=60) == outcome


class FakeApi:
    """A test double for ClusterApi that answers evictions from a script (HTTP statuses)."""

    class Refused(Exception):
        def __init__(self, status: int, message: str) -> None:
            super().__init__(message)
            self.status = status
            self.body = json.dumps({"message": message})
            self.reason = message

    def __init__(self, answers: dict[str, list[int]], pdbs: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.pdbs = pdbs
        self.evictions: list[str] = []

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> dict[str, Any]:
        name = path.split("/")[-2]
        self.evictions.append(name)
        script = self.answers[name]
        status = script.pop(0) if len(script) > 1 else script[0]
        if status >= 400:
            raise self.Refused(status, "Cannot evict pod as it would violate the budget")
        return {}

    def get(self, path: str, query: Any = None, missing_ok: bool = False) -> Any:
        if path.endswith("poddisruptionbudgets"):
            return {"items": self.pdbs}
        return None  # every evicted pod is gone


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_drain_retries_a_budget_refusal_until_it_is_allowed() -> None:
    clock = Clock()
    api = FakeApi({"a": [429, 429, 201], "b": [201]}, [])
    done = nm.drain(api, [pod("a"), pod("b")], timeout=30, poll=5, clock=clock, sleep=clock.sleep)
    assert done == {"evicted": ["default/a", "default/b"], "gone": []}
    assert api.evictions == ["a", "b", "a", "a"]
    assert clock.now == 10


def test_drain_fails_at_the_timeout_naming_the_budget() -> None:
    clock = Clock()
    budget = _pdb("train-pdb", "default", {"matchLabels": {"app": "train"}})
    api = FakeApi({"train": [429]}, [budget])
    with pytest.raises(nm.MaintenanceError) as err:
        nm.drain(
            api,
            [pod("train", labels={"app": "train"})],
            20,
            poll=5,
            clock=clock,
            sleep=clock.sleep,
        )
    assert "timed out after 20s" in str(err.value)
    assert "default/train (budget default/train-pdb" in str(err.value)
    assert clock.now == 20


def test_drain_stops_on_an_eviction_error_that_is_not_a_budget() -> None:
    clock = Clock()
    api = FakeApi({"a": [500]}, [])
    with pytest.raises(nm.MaintenanceError, match="HTTP 500"):
        nm.drain(api, [pod("a")], 20, poll=5, clock=clock, sleep=clock.sleep)


def node(unschedulable: bool = False, record: Any = None) -> dict[str, Any]:
    annotations = {}
    if record is not None:
        annotations[nm.ANNOTATION] = record if isinstance(record, str) else json.dumps(record)
    return {
        "metadata": {"name": "gpu1", "annotations": annotations},
        "spec": {"unschedulable": unschedulable},
    }


@pytest.mark.parametrize(
    ("the_node", "action"),
    [
        (node(False), "proceed"),
        (node(False, {"state": "done"}), "proceed"),
        (node(True), "skip"),
        (node(True, {"state": "done"}), "skip"),
        (node(True, {"state": "in_progress", "phase": "drained"}), "resume"),
        (node(True, {"state": "failed", "reason": "x"}), "resume"),
    ],
)
def test_plan_for_a_node(the_node: dict[str, Any], action: str) -> None:
    assert nm.plan_node(the_node)[0] == action


def test_a_record_we_cannot_read_stops_the_plan() -> None:
    with pytest.raises(nm.MaintenanceError, match="not a kubegpu record"):
        nm.plan_node(node(True, "someone else's text"))
    assert nm.parse_record(node(True, '{"state": "weird"}'))["state"] == "unknown"


def test_record_state_machine_through_a_whole_upgrade() -> None:
    def at(t: float) -> Any:
        return lambda: CLOCK + t

    r1 = nm.next_record({}, "in_progress", "cordoned", "580.95.05", clock=at(0))
    assert r1 == {
        "state": "in_progress",
        "phase": "cordoned",
        "target": "580.95.05",
        "started": "2026-12-01T03:30:00Z",
        "time": "2026-12-01T03:30:00Z",
    }
    r2 = nm.next_record(r1, "failed", reason="drain timed out", clock=at(60))
    assert r2["state"] == "failed" and r2["reason"] == "drain timed out"
    assert r2["started"] == r1["started"] and r2["target"] == "580.95.05"
    assert r2["time"] == "2026-12-01T03:31:00Z"
    r3 = nm.next_record(r2, "in_progress", "cordoned", clock=at(120))
    assert r3["started"] == r1["started"] and "reason" not in r3
    r4 = nm.next_record(r3, "done", clock=at(180))
    assert r4["state"] == "done" and "phase" not in r4
    r5 = nm.next_record(r4, "in_progress", "cordoned", "595.1", clock=at(240))
    assert r5["started"] == "2026-12-01T03:34:00Z" and r5["target"] == "595.1"


@pytest.mark.parametrize(
    ("before", "state", "phase", "message"),
    [
        ({}, "done", None, "from no record to done"),
        ({}, "failed", None, "from no record to failed"),
        ({"state": "failed"}, "done", None, "from failed to done"),
        ({}, "in_progress", None, "needs a phase"),
        ({}, "paused", None, "must be one of"),
        ({"state": "unknown", "raw": "x"}, "in_progress", "cordoned", "not a kubegpu record"),
    ],
)
def test_transitions_that_are_refused(
    before: dict[str, Any], state: str, phase: str | None, message: str
) -> None:
    with pytest.raises(nm.MaintenanceError, match=message):
        nm.next_record(before, state, phase)


def test_patches_cordon_and_uncordon_with_the_record() -> None:
    record = {"state": "done", "time": "t"}
    assert nm.node_patch(True, record) == {
        "spec": {"unschedulable": True},
        "metadata": {"annotations": {nm.ANNOTATION: json.dumps(record, sort_keys=True)}},
    }
    # Merge patch null removes the field, as `kubectl uncordon` leaves the node.
    assert nm.node_patch(False) == {"spec": {"unschedulable": None}}
    assert nm.node_patch() == {}


def test_module_documentation_parses_and_names_every_state() -> None:
    import yaml
    from ansible_collections.kubegpu.gpu.plugins.modules import gpu_node_maintenance as mod

    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert doc["module"] == "gpu_node_maintenance"
    assert doc["options"]["state"]["choices"] == [
        "inspect",
        "cordon",
        "drain",
        "uncordon",
        "record",
    ]
    # kubeconfig, context and timeout come from the doc fragment the API modules share.
    from ansible_collections.kubegpu.gpu.plugins.doc_fragments.cluster_api import (
        ModuleDocFragment,
    )

    assert "kubegpu.gpu.cluster_api" in doc["extends_documentation_fragment"]
    shared = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    assert "Never logged" in shared["kubeconfig"]["description"][0]
    assert set(yaml.safe_load(mod.RETURN)) >= {"plan", "record", "evicted", "kept", "skipped"}
    assert all("kubegpu.gpu.gpu_node_maintenance" in task for task in yaml.safe_load(mod.EXAMPLES))
