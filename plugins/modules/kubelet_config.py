#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kubelet_config
short_description: Set kubelet feature gates, settings, node labels and taints, checked against the kubelet they go to
version_added: "0.1.0"
description:
  - Checks every input first and fails with all problems at once, before anything on the host
    changes, naming the option, what was wrong and what is allowed. Feature gates are checked
    against a table of gates by Kubernetes release (1.33 to 1.37) for the version of the kubelet
    they go to (a gate that release does not have, one set against its locked value, a value
    that is not a boolean); node labels and taints for their syntax, and labels for what a
    kubelet may set on its own node under the NodeRestriction admission plugin.
  - Then merges them into the kubelet's files for its layout (O(flavor)), keeping every other
    setting. C(kubeadm) (the kubeadm packages' layout) - feature gates and settings go into the
    KubeletConfiguration file O(config_path) (featureGates merged gate by gate, settings merged
    deeply), labels and taints into the C(--node-labels) and C(--register-with-taints) flags of
    the C(KUBELET_EXTRA_ARGS) line of O(extra_args_path), merged with the labels and taints
    already there; every other line of that file stays byte for byte. C(k3s) and C(rke2) - the
    C(node-label), C(node-taint) and C(kubelet-arg) lists of O(config_path) are merged (feature
    gates go into the C(feature-gates) kubelet argument); every other key stays.
  - With O(config_dir), feature gates and settings go into a kubelet drop-in file of their own
    (O(dropin_name)) in that directory instead, and the kubelet is pointed at the directory
    (C(--config-dir) in C(KUBELET_EXTRA_ARGS), or a C(config-dir) kubelet argument for k3s and
    RKE2). This survives C(kubeadm upgrade), which rewrites O(config_path).
  - Computes the change first; writes only files whose content changes, atomically, after a
    backup (O(backup)); reports whether the kubelet must be restarted. Restarting is left to the
    caller (the role C(kubegpu.gpu.kubelet_gpu) has a handler).
  - With O(validate_only=true), only checks the inputs; nothing is read but the kubelet's version.
options:
  flavor:
    description:
      - The kubelet's layout. V(auto) picks V(rke2) when C(/etc/rancher/rke2) or an C(rke2)
        binary exists, then V(k3s) likewise, else V(kubeadm).
    type: str
    choices: [auto, kubeadm, k3s, rke2]
    default: auto
  kubelet_version:
    description:
      - The Kubernetes version of the kubelet (V(1.35), V(v1.35.2)). Needed to check
        O(feature_gates) and to use O(config_dir).
      - When not given, it is read from C(kubelet --version) (C(k3s --version), C(rke2 --version)
        for those flavors). The task fails when it is needed and neither is available.
      - When both are available and differ, the given one is used and a warning says so.
    type: str
  feature_gates:
    description:
      - Feature gates to set, name to V(true) or V(false), checked against O(kubelet_version).
    type: dict
    default: {}
  unchecked_feature_gates:
    description:
      - Names of gates in O(feature_gates) to accept without looking them up (their value must
        still be a boolean); for gates kubegpu's table does not know, such as client-go gates.
    type: list
    elements: str
    default: []
  settings:
    description:
      - KubeletConfiguration fields to merge in (camelCase, for example C(maxPods),
        C(cpuManagerPolicy), C(topologyManagerPolicy)). Nested mappings are merged key by key.
      - Not C(featureGates), C(apiVersion) or C(kind).
      - For V(k3s) and V(rke2), needs O(config_dir), since they have no KubeletConfiguration file.
    type: dict
    default: {}
  node_labels:
    description:
      - Labels the kubelet sets on its node when it registers, key to value (values are
        strings; quote V("true")). Keys in the kubernetes.io and k8s.io namespaces are refused
        unless a kubelet may set them (C(kubelet.kubernetes.io/), C(node.kubernetes.io/) and a
        few well-known keys); set those through the API instead.
    type: dict
    default: {}
  node_taints:
    description:
      - Taints the kubelet registers its node with. Each is a mapping with C(key), optional
        C(value) and C(effect) (V(NoSchedule), V(PreferNoSchedule) or V(NoExecute)), or a
        string C(key=value:Effect).
    type: list
    elements: raw
    default: []
  config_path:
    description:
      - The kubelet's KubeletConfiguration file (V(kubeadm)), or the k3s/RKE2 config file.
      - Default C(/var/lib/kubelet/config.yaml), C(/etc/rancher/k3s/config.yaml) or
        C(/etc/rancher/rke2/config.yaml) by flavor.
    type: path
  extra_args_path:
    description:
      - The environment file holding C(KUBELET_EXTRA_ARGS) (V(kubeadm) only). Default
        C(/etc/default/kubelet), or C(/etc/sysconfig/kubelet) when that exists or the host has
        C(/etc/sysconfig).
    type: path
  config_dir:
    description:
      - A kubelet drop-in directory (C(--config-dir), Kubernetes 1.28 and later) to write
        feature gates and settings to, as a file of their own, instead of O(config_path).
      - For 1.28 and 1.29 the kubelet also needs C(KUBELET_CONFIG_DROPIN_DIR_ALPHA) in its
        environment; for V(kubeadm) it is added to O(extra_args_path), which the kubelet's unit
        reads. For V(k3s) and V(rke2) those versions are refused.
    type: path
  dropin_name:
    description:
      - File name of the drop-in in O(config_dir); must end in C(.conf). The kubelet reads the
        files in name order, later ones overriding earlier ones.
    type: str
    default: 50-kubegpu.conf
  binary:
    description:
      - The binary to ask for the version (C(kubelet), C(k3s) or C(rke2) by flavor, looked up on
        E(PATH) and in C(/usr/local/bin)).
    type: path
  validate_only:
    description:
      - Only check the inputs (and read the kubelet's version when needed); change nothing.
    type: bool
    default: false
  without_pyyaml:
    description:
      - What to do when the target's Python cannot import PyYAML, after the inputs are checked.
      - V(fail) says what to install. V(report) changes nothing and returns RV(python_yaml)
        false, so that a role can install PyYAML and call the module again; with PyYAML there,
        one call checks and merges.
    type: str
    choices: [fail, report]
    default: fail
  backup:
    description:
      - Keep a timestamped copy of each file before changing it.
    type: bool
    default: true
  restart_marker:
    description:
      - A file the module writes before it changes the kubelet's files (when a kubelet is
        installed), for the caller to remove once the kubelet has restarted. While it exists, a
        run with nothing to change still returns C(changed) and C(restart_needed) (with
        C(restart_pending)), so a restart that an interrupted run never made is made by the
        next one.
      - An empty string keeps no marker.
    type: str
    default: ""
  state:
    description:
      - V(present) merges the inputs in (and records what changed in O(record_path)).
      - V(absent) undoes what the record says kubegpu changed, entry by entry (a feature gate,
        a setting, a label, a taint, a flag), each only while it still has the value kubegpu
        set; an entry someone changed since is kept, with a warning naming it. A file kubegpu
        created goes when nothing else was put in it; its drop-in goes. Then the record goes.
        Without a record nothing is changed. The other options are not used.
    type: str
    choices: [present, absent]
    default: present
  record_path:
    description:
      - The record of what the module changed in each file (JSON, a local fact file), written
        after each file it writes, keeping each entry's value from before kubegpu first set it.
      - An empty string keeps no record.
    type: str
    default: /etc/ansible/facts.d/kubegpu_kubelet.fact
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Computes and reports the same changes and diff, and writes nothing.
  diff_mode:
    support: full
    details: One diff per file that changes.
  platform:
    platforms: posix
requirements:
  - PyYAML on the target to read and write the YAML files (C(python3-yaml) on Debian and
    Ubuntu, C(python3-pyyaml) on RHEL); not needed with O(validate_only=true).
notes:
  - Labels and taints given to the kubelet apply when the node registers. For a node that has
    already joined, set them through the API (role C(kubegpu.gpu.gpu_cluster)).
  - C(kubeadm upgrade node) rewrites C(/var/lib/kubelet/config.yaml) from the cluster's
    kubelet ConfigMap; use O(config_dir) to keep gates and settings across upgrades.
  - Rewriting a k3s/RKE2 config file drops its YAML comments; the backup keeps them.
  - Commands run with C(LC_ALL=C).
  - When the connection pipelines (pipelining on, and a connection and become method that
    support it), the module's action plugin reads the node with one C(sh) script instead (the
    files, the kubelet's binary and its C(--version), and from the node's Python, with
    C(-c), whether it has PyYAML) and runs this module's code (module_utils/kubelet_node.py)
    on the controller. When nothing changes (or with O(validate_only=true)) that result is the
    answer, with no module on the node; anything else (a file to write, a problem with the
    inputs, a path with C(~) or C($) for the node to expand) runs the module.
seealso:
  - name: Feature gates
    description: The Kubernetes feature gate reference.
    link: https://kubernetes.io/docs/reference/command-line-tools-reference/feature-gates/
  - name: Kubelet drop-in configuration directory
    description: How the kubelet merges drop-in files.
    link: https://kubernetes.io/docs/tasks/administer-cluster/kubelet-config-file/#kubelet-conf-d
author:
  - kubegpu contributors
"""

EXAMPLES = r"""
- name: Check GPU kubelet settings before changing anything
  kubegpu.gpu.kubelet_config:
    kubelet_version: "1.35"
    feature_gates:
      KubeletPodResourcesGet: true
    node_labels:
      nvidia.com/gpu.present: "true"
    validate_only: true

- name: Label and taint GPU nodes and enable the pod resources Get endpoint (kubeadm)
  kubegpu.gpu.kubelet_config:
    flavor: kubeadm
    feature_gates:
      KubeletPodResourcesGet: true
    settings:
      cpuManagerPolicy: static
      topologyManagerPolicy: single-numa-node
      reservedSystemCPUs: "0,1"
    node_labels:
      nvidia.com/gpu.present: "true"
    node_taints:
      - key: nvidia.com/gpu
        value: present
        effect: NoSchedule
  register: kubelet
  notify: Restart kubelet

- name: Keep gates in a drop-in file that survives kubeadm upgrade
  kubegpu.gpu.kubelet_config:
    flavor: kubeadm
    kubelet_version: "1.33"
    config_dir: /etc/kubernetes/kubelet.conf.d
    feature_gates:
      DRAResourceClaimDeviceStatus: true

- name: Label a k3s agent's node
  kubegpu.gpu.kubelet_config:
    flavor: k3s
    node_labels:
      nvidia.com/gpu.present: "true"
"""

RETURN = r"""
python_yaml:
  description: Whether PyYAML can be imported by the Python that runs the module on the target,
    which the module needs to edit the files (the role installs it only when this is false).
  returned: when the inputs passed their checks
  type: bool
flavor:
  description: The kubelet layout used (V(kubeadm), V(k3s) or V(rke2)).
  returned: always
  type: str
  sample: kubeadm
kubelet_version:
  description: The version the inputs were checked against (major.minor), or null when none was needed.
  returned: always
  type: str
  sample: "1.35"
version_source:
  description: Where O(kubelet_version) came from - V(given), V(binary) or V(none).
  returned: always
  type: str
  sample: given
kubelet_found:
  description: Whether the kubelet's binary (kubelet, k3s or rke2) was found on the host.
  returned: always
  type: bool
  sample: false
files:
  description: The files that changed (or would change in check mode).
  returned: always
  type: list
  elements: str
  sample: [/var/lib/kubelet/config.yaml, /etc/default/kubelet]
restart_needed:
  description: Whether the kubelet must be restarted for the changes to take effect.
  returned: always
  type: bool
  sample: true
restart_pending:
  description: True when nothing changed but O(restart_marker) says a restart is still owed.
  returned: when a restart is pending
  type: bool
removed:
  description: With O(state=absent), the files removed (kubegpu created them, or its drop-in).
  returned: when O(state=absent)
  type: list
  elements: str
kept:
  description: With O(state=absent), the recorded entries someone changed since, left as they are.
  returned: when O(state=absent)
  type: list
  elements: str
backup_files:
  description: Backup copies made, one per changed file that existed.
  returned: always
  type: list
  elements: str
problems:
  description: Input problems found (empty when the task succeeds).
  returned: always
  type: list
  elements: str
self_labels:
  description: The node labels the kubelet sets on itself (all of O(node_labels) once valid).
  returned: always
  type: dict
  sample: {"nvidia.com/gpu.present": "true"}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.gpu.plugins.module_utils.files import (
    PLAIN_ABSOLUTE_PATH,
    mark_restart_pending,
    read_record,
    write_atomic,
    write_record,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.kubelet_node import (
    ARGUMENT_SPEC,
    BINARIES,
    EXTRA_DIRS,
    LocalNode,
    decide,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.kubelet_record import (
    describe,
    record_write,
    undo,
)


def reset(module):
    """state=absent: undo, file by file, what the record says kubegpu changed, keeping every
    entry someone changed since; then drop the record."""
    result = dict(changed=False, files=[], removed=[], kept=[], restart_needed=False)
    for option in ("restart_marker", "record_path"):
        value = module.params[option]
        if value and not PLAIN_ABSOLUTE_PATH.fullmatch(value):
            module.fail_json(
                msg="%s: %r must be a plain absolute path (or empty to keep none)" % (option, value)
            )
    path = module.params["record_path"]
    marker = module.params["restart_marker"]
    record = read_record(module, path)
    if record is None:
        if marker and os.path.exists(marker):
            # An earlier reset undid the files and was cut off before the restart.
            result.update(changed=True, restart_needed=True, restart_pending=True)
        module.exit_json(
            msg="no record of kubegpu's kubelet changes at %s: nothing was undone" % path, **result
        )
    yaml = LocalNode(module).import_yaml()
    if yaml is None:
        module.fail_json(msg="kubelet_config needs PyYAML on the target to undo its changes")

    def dump(data):
        return yaml.safe_dump(data, default_flow_style=False, sort_keys=False)

    plans = []
    for name, entry in sorted((record.get("files") or {}).items()):
        text = None
        if os.path.isfile(name):
            with open(name) as handle:
                text = handle.read()
        new, _undone, kept = undo(entry, text, yaml.safe_load, dump)
        result["kept"].extend("%s: %s" % (name, describe(key)) for key in kept)
        if new != text:
            plans.append((name, new))
    result["changed"] = True  # the record goes, at least
    result["files"] = [name for name, new in plans if new is not None]
    result["removed"] = [name for name, new in plans if new is None]
    result["restart_needed"] = bool(plans)
    if result["kept"]:
        module.warn(
            "kubegpu's kubelet settings that someone changed since were left as they are: "
            + "; ".join(result["kept"])
        )
    if module.check_mode:
        module.exit_json(**result)
    node = LocalNode(module)
    kubelet_found = any(node.bin_path(b, EXTRA_DIRS) for b in sorted(set(BINARIES.values())))
    if plans and kubelet_found:
        mark_restart_pending(module, marker, [n for n, _ in plans])
    for name, new in plans:
        if new is None:
            os.remove(name)
        else:
            write_atomic(module, name, new)
    os.remove(path)
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    if module.params["state"] == "absent":
        reset(module)
    result, msg, plans = decide(module.params, LocalNode(module), module._diff)
    if msg is not None:
        module.fail_json(msg=msg, **result)
    if module.check_mode:
        module.exit_json(**result)

    if plans and result["kubelet_found"]:
        mark_restart_pending(module, module.params["restart_marker"], result["files"])
    record_path = module.params["record_path"]
    record = read_record(module, record_path) if record_path and plans else None
    yaml = LocalNode(module).import_yaml() if plans else None
    for plan in plans:
        path = plan["path"]
        directory = os.path.dirname(path)
        if directory and not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        if plan["before"] is not None and module.params["backup"]:
            result["backup_files"].append(module.backup_local(path))
        write_atomic(module, path, plan["after"], plan["mode"])
        # Recorded after each write: a run cut off later still leaves a record of this file.
        if record_path:
            record = record_write(
                record, path, plan["kind"], plan["before"], plan["after"], yaml.safe_load
            )
            directory = os.path.dirname(record_path)
            if directory and not os.path.isdir(directory):
                os.makedirs(directory, 0o755)
            write_record(module, record_path, record)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
