#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_node_maintenance
short_description: Cordon, drain and uncordon a GPU node, keeping a record on the node
version_added: "0.1.0"
description:
  - Takes one Kubernetes node in and out of maintenance for a driver upgrade, and keeps what
    it did in a node annotation (O(annotation_key)), a JSON record with the state
    (V(in_progress) with a phase, V(done) or V(failed)), the target version, the reason of a
    failure and the times. A node is never cordoned by this module without that record.
  - V(inspect) reads the node and says whether kubegpu may work on it (RV(plan)); a node that
    was cordoned by someone else (no record of ours) is to be skipped, and one cordoned with
    our V(in_progress) or V(failed) record is resumed.
  - V(cordon) marks the node unschedulable and writes the record, unless the plan is to skip
    it (then nothing changes and RV(skipped) is true).
  - V(drain) evicts the node's pods through the Eviction API, so PodDisruptionBudgets are
    respected. An eviction refused with HTTP 429 is retried until O(drain_timeout), and then
    the task fails naming the budget. By default only pods that hold GPU resources (a
    container requesting or limiting O(gpu_resource_prefixes)) are evicted; DaemonSet pods and
    static pods are never evicted. With O(wait_for_deletion), the task waits until the evicted
    pods are gone.
  - V(uncordon) makes the node schedulable again and writes the record; V(record) writes the
    record only.
  - Runs on the controller (delegate to localhost); the kubeconfig is never logged.
options:
  name:
    description: The Kubernetes node name.
    type: str
    required: true
  state:
    description: What to do with the node.
    type: str
    choices: [inspect, cordon, drain, uncordon, record]
    default: inspect
  record:
    description:
      - The maintenance record to write with V(cordon), V(uncordon) and V(record).
      - Only transitions that make sense are allowed (no record -> V(in_progress);
        V(in_progress) -> anything; V(failed) -> V(in_progress) or V(failed); V(done) ->
        V(in_progress)).
    type: dict
    suboptions:
      state:
        description: The state after this step.
        type: str
        choices: [in_progress, done, failed]
        required: true
      phase:
        description: How far the node got, for V(in_progress).
        type: str
        choices: [cordoned, drained, upgrading, validating]
      target_version:
        description: The driver version (or branch) the node is being moved to.
        type: str
      reason:
        description: Why the node failed, for V(failed).
        type: str
  annotation_key:
    description: The node annotation holding the record.
    type: str
    default: kubegpu.io/driver-upgrade
  drain_pods:
    description: V(gpu) evicts pods holding GPU resources, V(all) every pod but DaemonSet and static pods.
    type: str
    choices: [gpu, all]
    default: gpu
  drain_timeout:
    description: Seconds the whole drain may take, budget refusals and terminating pods included.
    type: int
    default: 600
  wait_for_deletion:
    description: Wait until the evicted pods are gone (their kubelet stopped them).
    type: bool
    default: true
  poll_interval:
    description: Seconds between retries of refused evictions and between deletion checks.
    type: float
    default: 2.0
  gpu_resource_prefixes:
    description: Extended resource name prefixes that make a pod a GPU pod.
    type: list
    elements: str
    default: [nvidia.com/]
extends_documentation_fragment:
  - kubegpu.gpu.cluster_api
attributes:
  check_mode:
    support: full
    details: Reads the node and its pods and reports what would change; changes nothing.
  diff_mode:
    support: full
    details: The node's unschedulable flag and record before and after.
  platform:
    platforms: posix
requirements:
  - kubernetes (Python library) on the controller
notes:
  - A drain that cannot finish fails the task and leaves the node cordoned; write a
    V(failed) record next (the upgrade playbook does).
seealso:
  - module: kubegpu.gpu.gpu_node_readiness
author:
  - kubegpu maintainers
"""

EXAMPLES = r"""
- name: Decide whether this node is ours to upgrade
  kubegpu.gpu.gpu_node_maintenance:
    kubeconfig: "{{ kubegpu_kubeconfig }}"
    name: "{{ inventory_hostname }}"
    state: inspect
  delegate_to: localhost
  register: __maintenance

- name: Cordon the node and record why
  kubegpu.gpu.gpu_node_maintenance:
    kubeconfig: "{{ kubegpu_kubeconfig }}"
    name: "{{ inventory_hostname }}"
    state: cordon
    record:
      state: in_progress
      phase: cordoned
      target_version: "580.95.05"
  delegate_to: localhost

- name: Evict the GPU pods, respecting disruption budgets, for at most 10 minutes
  kubegpu.gpu.gpu_node_maintenance:
    kubeconfig: "{{ kubegpu_kubeconfig }}"
    name: "{{ inventory_hostname }}"
    state: drain
    drain_timeout: 600
  delegate_to: localhost
"""

RETURN = r"""
node:
  description: The node's name and whether it is unschedulable after the task.
  returned: always
  type: dict
  sample: {"name": "gpu1", "unschedulable": true}
plan:
  description: Whether kubegpu may work on the node (proceed, resume or skip) and why.
  returned: always
  type: dict
  sample: {"action": "skip", "reason": "cordoned before this run and not by kubegpu"}
skipped:
  description: True when V(cordon) left the node alone because the plan was to skip it.
  returned: always
  type: bool
record_before:
  description: The record found on the node ({} when none).
  returned: always
  type: dict
record:
  description: The record on the node after the task.
  returned: always
  type: dict
  sample: {"state": "in_progress", "phase": "cordoned", "target": "535.261.03",
           "started": "2026-12-01T03:00:00Z", "time": "2026-12-01T03:00:00Z"}
evicted:
  description: Pods (namespace/name) evicted by V(drain) (in check mode, those that would be).
  returned: always
  type: list
  elements: str
gone:
  description: Pods that were gone by the time they were evicted.
  returned: always
  type: list
  elements: str
kept:
  description: Pods V(drain) did not evict, each with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{"pod": "kube-system/nvidia-device-plugin-x", "reason": "DaemonSet pod"}]
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_api import (
    API_ARGUMENT_SPEC,
    HAS_KUBERNETES,
    KUBERNETES_IMPORT_ERROR,
    ClusterApi,
    ClusterApiError,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.node_maintenance import (
    MaintenanceError,
    drain,
    next_record,
    node_patch,
    node_pods,
    parse_record,
    patch_node,
    plan_node,
    pod_key,
    read_node,
    select_pods,
)


def _record_for(module, before):
    wanted = module.params["record"]
    if not wanted:
        return None
    return next_record(
        before,
        wanted["state"],
        phase=wanted.get("phase"),
        target_version=wanted.get("target_version"),
        reason=wanted.get("reason"),
    )


def run(module, api):
    p = module.params
    name, key, state = p["name"], p["annotation_key"], p["state"]
    node = read_node(api, name)
    before = parse_record(node, key)
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    action, why = plan_node(node, key)
    result = dict(
        changed=False,
        plan={"action": action, "reason": why},
        skipped=False,
        record_before=before,
        record=before,
        evicted=[],
        gone=[],
        kept=[],
        node={"name": name, "unschedulable": unschedulable},
    )
    if state == "inspect":
        return result
    if state == "cordon" and action == "skip":
        result["skipped"] = True
        return result
    if state == "drain":
        to_evict, kept = select_pods(
            node_pods(api, name), p["drain_pods"], tuple(p["gpu_resource_prefixes"])
        )
        result["kept"] = kept
        if not unschedulable:
            raise MaintenanceError(
                "node %s is schedulable: cordon it before draining, or evicted pods may be "
                "scheduled back onto it" % name
            )
        if module.check_mode:
            result["evicted"] = [pod_key(pod) for pod in to_evict]
            result["changed"] = bool(to_evict)
            return result
        done = drain(
            api,
            to_evict,
            p["drain_timeout"],
            wait_for_deletion=p["wait_for_deletion"],
            poll=p["poll_interval"],
        )
        result.update(done)
        result["changed"] = bool(done["evicted"])
        return result

    record = _record_for(module, before)
    target_unschedulable = {"cordon": True, "uncordon": False}.get(state)
    flip = target_unschedulable is not None and target_unschedulable != unschedulable
    patch = node_patch(target_unschedulable if flip else None, record, key)
    result["changed"] = bool(patch)
    result["record"] = record if record is not None else before
    if flip:
        result["node"]["unschedulable"] = target_unschedulable
    if module._diff:
        result["diff"] = {
            "before": {"unschedulable": unschedulable, "record": before},
            "after": {"unschedulable": result["node"]["unschedulable"], "record": result["record"]},
        }
    if patch and not module.check_mode:
        patch_node(api, name, patch)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            **API_ARGUMENT_SPEC,
            state=dict(
                type="str",
                default="inspect",
                choices=["inspect", "cordon", "drain", "uncordon", "record"],
            ),
            record=dict(
                type="dict",
                options=dict(
                    state=dict(
                        type="str", required=True, choices=["in_progress", "done", "failed"]
                    ),
                    phase=dict(
                        type="str", choices=["cordoned", "drained", "upgrading", "validating"]
                    ),
                    target_version=dict(type="str"),
                    reason=dict(type="str"),
                ),
            ),
            annotation_key=dict(type="str", default="kubegpu.io/driver-upgrade"),
            drain_pods=dict(type="str", default="gpu", choices=["gpu", "all"]),
            drain_timeout=dict(type="int", default=600),
            wait_for_deletion=dict(type="bool", default=True),
            poll_interval=dict(type="float", default=2.0),
            gpu_resource_prefixes=dict(type="list", elements="str", default=["nvidia.com/"]),
        ),
        required_if=[("state", "record", ["record"])],
        supports_check_mode=True,
    )
    if not HAS_KUBERNETES:
        module.fail_json(
            msg=missing_required_lib("kubernetes"), exception=str(KUBERNETES_IMPORT_ERROR)
        )
    if module.params["drain_timeout"] < 0:
        module.fail_json(
            msg="drain_timeout must be 0 or more seconds, not %s" % module.params["drain_timeout"]
        )
    try:
        api = ClusterApi(
            module.params["kubeconfig"], module.params["context"], module.params["timeout"]
        )
    except ClusterApiError as exc:
        module.fail_json(msg=str(exc))
    try:
        result = run(module, api)
    except (MaintenanceError, ClusterApiError) as exc:
        module.fail_json(msg=str(exc), node={"name": module.params["name"]})
    finally:
        api.close()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
