# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Node maintenance for rolling driver upgrades: cordon, record, drain, uncordon.

The decisions are pure functions over Node, Pod and PodDisruptionBudget dicts (as the API
returns them), so they are tested without a cluster:

- which pods a drain evicts (GPU pods, or all), and which it leaves (DaemonSet and mirror pods);
- which budgets cover a pod, so a refused eviction names the budget;
- what a refused eviction means (retry until the deadline, then fail);
- the maintenance record kept in a node annotation, and its allowed transitions;
- whether a node is ours to work on (a node someone else cordoned is left alone).

The functions that talk to the API take a ClusterApi (cluster_api.py).
"""

from __future__ import absolute_import, division, print_function

import json
import time

__metaclass__ = type

ANNOTATION = "kubegpu.io/driver-upgrade"
GPU_RESOURCE_PREFIXES = ("nvidia.com/",)

# The record's states. in_progress carries a phase saying how far the node got.
STATES = ("in_progress", "done", "failed")
PHASES = ("cordoned", "drained", "upgrading", "validating")
# state before -> states allowed after (None: no record yet).
TRANSITIONS = {
    None: ("in_progress",),
    "in_progress": ("in_progress", "done", "failed"),
    "failed": ("in_progress", "failed"),
    "done": ("in_progress", "done"),
}


class MaintenanceError(Exception):
    """A maintenance step cannot go on; the message says why and what to do."""


# ------------------------------------------------------------------------------ pods


def _quantities(container):
    resources = container.get("resources") or {}
    names = set((resources.get("requests") or {}).keys())
    names.update((resources.get("limits") or {}).keys())
    return names


def gpu_resources(pod, prefixes=GPU_RESOURCE_PREFIXES):
    """The GPU resource names (nvidia.com/*) any container of the pod requests or limits."""
    spec = pod.get("spec") or {}
    found = set()
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(key) or []:
            for name in _quantities(container):
                if any(name.startswith(p) for p in prefixes):
                    found.add(name)
    return sorted(found)


def is_gpu_pod(pod, prefixes=GPU_RESOURCE_PREFIXES):
    return bool(gpu_resources(pod, prefixes))


def is_daemonset_pod(pod):
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "DaemonSet" and ref.get("controller", False):
            return True
    return False


def is_mirror_pod(pod):
    """A static pod's mirror: the kubelet owns it, the API cannot evict it."""
    return "kubernetes.io/config.mirror" in ((pod.get("metadata") or {}).get("annotations") or {})


def pod_key(pod):
    meta = pod.get("metadata") or {}
    return "%s/%s" % (meta.get("namespace", ""), meta.get("name", ""))


def select_pods(pods, mode="gpu", prefixes=GPU_RESOURCE_PREFIXES):
    """Split a node's pods into (to_evict, skipped); skipped items are {pod, reason}.

    mode "gpu" evicts the pods holding GPU resources, "all" every pod. DaemonSet pods (their
    controller ignores cordons and would recreate them) and mirror pods are never evicted;
    pods already finished or deleting need no eviction.
    """
    if mode not in ("gpu", "all"):
        raise MaintenanceError("drain mode must be 'gpu' or 'all', not %r" % (mode,))
    to_evict, skipped = [], []
    for pod in sorted(pods, key=pod_key):
        phase = (pod.get("status") or {}).get("phase")
        reason = None
        if is_mirror_pod(pod):
            reason = "mirror pod of a static pod"
        elif is_daemonset_pod(pod):
            reason = "DaemonSet pod"
        elif phase in ("Succeeded", "Failed"):
            reason = "finished (%s)" % phase
        elif mode == "gpu" and not is_gpu_pod(pod, prefixes):
            reason = "holds no GPU resource"
        if reason:
            skipped.append({"pod": pod_key(pod), "reason": reason})
        else:
            to_evict.append(pod)
    return to_evict, skipped


# ------------------------------------------------------------------------------ budgets


def _expression_matches(expr, labels):
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False


def selector_matches(selector, labels):
    """A LabelSelector against labels. A PDB's empty selector matches every pod (policy/v1)."""
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def budgets_for(pod, pdbs):
    """Names (namespace/name) of the PodDisruptionBudgets that cover the pod."""
    meta = pod.get("metadata") or {}
    out = []
    for pdb in pdbs:
        pmeta = pdb.get("metadata") or {}
        if pmeta.get("namespace") != meta.get("namespace"):
            continue
        if selector_matches((pdb.get("spec") or {}).get("selector"), meta.get("labels")):
            out.append("%s/%s" % (pmeta.get("namespace"), pmeta.get("name")))
    return sorted(out)


def eviction_outcome(status, now, deadline):
    """What an eviction's HTTP status means for the drain.

    evicted: accepted (the pod is deleting); gone: the pod no longer exists; retry: refused
    by a disruption budget (429) with time left; blocked: refused and out of time; error:
    anything else (500 is upstream's answer when several budgets cover one pod).
    """
    if status in (200, 201):
        return "evicted"
    if status == 404:
        return "gone"
    if status == 429:
        return "retry" if now < deadline else "blocked"
    return "error"


# ------------------------------------------------------------------------------ record


def parse_record(node, key=ANNOTATION):
    """The maintenance record in the node's annotation: a dict, {} when absent.

    A value that is not a JSON object is kept as {"state": "unknown", "raw": value} so it is
    neither trusted nor silently dropped.
    """
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(key)
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"state": "unknown", "raw": raw}
    if not isinstance(value, dict) or value.get("state") not in STATES:
        return {"state": "unknown", "raw": raw}
    return value


def now_utc(clock=time.time):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock()))


def next_record(current, state, phase=None, target_version=None, reason=None, clock=time.time):
    """The record after a transition, or MaintenanceError when the transition is not allowed.

    It keeps when the maintenance started, and the target version unless a new one is given.
    """
    if state not in STATES:
        raise MaintenanceError(
            "record state must be one of %s, not %r" % (", ".join(STATES), state)
        )
    if state == "in_progress" and phase not in PHASES:
        raise MaintenanceError(
            "an in_progress record needs a phase, one of %s, not %r" % (", ".join(PHASES), phase)
        )
    before = (current or {}).get("state")
    if before == "unknown":
        raise MaintenanceError(
            "the node's %s annotation is not a kubegpu record (%r): remove it, or look at what "
            "wrote it, before kubegpu works on this node" % (ANNOTATION, (current or {}).get("raw"))
        )
    if state not in TRANSITIONS.get(before, ()):
        raise MaintenanceError(
            "a maintenance record cannot go from %s to %s" % (before or "no record", state)
        )
    stamp = now_utc(clock)
    record = {"state": state, "time": stamp}
    if state == "in_progress":
        record["phase"] = phase
    restarting = before in (None, "done") and state == "in_progress"
    record["started"] = stamp if restarting else (current or {}).get("started", stamp)
    target = target_version if target_version is not None else (current or {}).get("target")
    if target:
        record["target"] = target
    if reason:
        record["reason"] = reason
    return record


def plan_node(node, key=ANNOTATION):
    """Whether kubegpu may work on the node: (action, why).

    proceed: schedulable; resume: cordoned, and our record says we were in the middle of it
    (in_progress or failed); skip: cordoned by someone else (no record of ours, or our record
    says done, so the cordon came after us). A record we cannot read is an error.
    """
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    record = parse_record(node, key)
    state = record.get("state")
    if state == "unknown":
        raise MaintenanceError(
            "node %s carries a %s annotation that is not a kubegpu record (%r): remove it, or "
            "find what wrote it, before kubegpu works on this node"
            % ((node.get("metadata") or {}).get("name"), key, record.get("raw"))
        )
    if not unschedulable:
        return "proceed", "schedulable"
    if state in ("in_progress", "failed"):
        return "resume", "cordoned by kubegpu (%s%s)" % (
            state,
            (", " + record["phase"]) if record.get("phase") else "",
        )
    return "skip", (
        "cordoned before this run and not by kubegpu: left cordoned and untouched"
        if not state
        else "cordoned after kubegpu finished with it (record says done): left untouched"
    )


def node_patch(unschedulable=None, record=None, key=ANNOTATION):
    """A JSON merge patch that sets spec.unschedulable and/or the record."""
    patch = {}
    if unschedulable is not None:
        patch["spec"] = {"unschedulable": True if unschedulable else None}
    if record is not None:
        patch["metadata"] = {"annotations": {key: json.dumps(record, sort_keys=True)}}
    return patch


# ------------------------------------------------------------------------------ API calls


MERGE_PATCH = "application/merge-patch+json"


def _status_of(exc):
    return getattr(exc, "status", None)


def read_node(api, name):
    node = api.get("/api/v1/nodes/" + name, missing_ok=True)
    if node is None:
        raise MaintenanceError(
            "node %s does not exist in the cluster: check that the inventory name (or "
            "kubegpu_node_name) is the Kubernetes node name" % name
        )
    return node


def patch_node(api, name, patch):
    try:
        return api.request("PATCH", "/api/v1/nodes/" + name, body=patch, content_type=MERGE_PATCH)
    except Exception as exc:  # ApiException carries the HTTP status
        if _status_of(exc) is None:
            raise
        raise MaintenanceError(
            "updating node %s failed with HTTP %s: %s" % (name, _status_of(exc), _message(exc))
        ) from exc


def node_pods(api, name):
    found = api.get("/api/v1/pods", query={"fieldSelector": "spec.nodeName=" + name}) or {}
    return found.get("items") or []


def list_budgets(api):
    found = api.get("/apis/policy/v1/poddisruptionbudgets", missing_ok=True) or {}
    return found.get("items") or []


def _evict(api, pod):
    meta = pod["metadata"]
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
    }
    path = "/api/v1/namespaces/%s/pods/%s/eviction" % (meta["namespace"], meta["name"])
    try:
        api.request("POST", path, body=body)
        return 201, ""
    except Exception as exc:  # ApiException; the status decides
        status = _status_of(exc)
        if status is None:
            raise
        return status, _message(exc)


def _message(exc):
    try:
        return json.loads(exc.body or "{}").get("message") or str(exc.reason)
    except (ValueError, TypeError, AttributeError):
        return str(exc)


def _still_there(api, pod):
    meta = pod["metadata"]
    found = api.get(
        "/api/v1/namespaces/%s/pods/%s" % (meta["namespace"], meta["name"]), missing_ok=True
    )
    return found is not None and (found.get("metadata") or {}).get("uid") == meta.get("uid")


def drain(
    api,
    pods,
    timeout,
    wait_for_deletion=True,
    poll=2.0,
    clock=time.monotonic,
    sleep=time.sleep,
):
    """Evict the pods through the Eviction API, retrying budget refusals until the timeout.

    Returns {"evicted": [...], "gone": [...]}; raises MaintenanceError naming the blocking
    budgets (or the pods still terminating) when time runs out.
    """
    deadline = clock() + timeout
    pending = {pod_key(p): p for p in pods}
    evicted, gone, blocked = [], [], {}
    while pending:
        for key in sorted(pending):
            pod = pending[key]
            status, message = _evict(api, pod)
            outcome = eviction_outcome(status, clock(), deadline)
            if outcome == "evicted":
                evicted.append(key)
                blocked.pop(key, None)
                del pending[key]
            elif outcome == "gone":
                gone.append(key)
                blocked.pop(key, None)
                del pending[key]
            elif outcome in ("retry", "blocked"):
                blocked[key] = message
            else:
                raise MaintenanceError(
                    "evicting %s failed with HTTP %s: %s" % (key, status, message)
                )
        if not pending:
            break
        if clock() >= deadline:
            budgets = list_budgets(api)
            detail = "; ".join(
                "%s (budget %s: %s)"
                % (key, ", ".join(budgets_for(pending[key], budgets)) or "unknown", blocked[key])
                for key in sorted(pending)
            )
            raise MaintenanceError(
                "drain timed out after %ss: eviction refused by a PodDisruptionBudget for %s. "
                "Raise the budget's allowed disruptions, scale the workload, or raise the "
                "drain timeout" % (timeout, detail)
            )
        sleep(poll)
    if wait_for_deletion:
        waiting = [p for p in pods if pod_key(p) in evicted]
        while waiting:
            waiting = [p for p in waiting if _still_there(api, p)]
            if not waiting:
                break
            if clock() >= deadline:
                raise MaintenanceError(
                    "drain timed out after %ss: evicted pods still terminating: %s (is the "
                    "node's kubelet running?)" % (timeout, ", ".join(pod_key(p) for p in waiting))
                )
            sleep(poll)
    return {"evicted": sorted(evicted), "gone": sorted(gone)}
