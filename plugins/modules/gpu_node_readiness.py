#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_node_readiness
short_description: Check that a GPU node is ready for Kubernetes, layer by layer
version_added: "0.1.0"
description:
  - Checks one node from the hardware up to the kubelet and returns every check with its
    layer, status (V(pass), V(fail), V(warn) or V(skip)), what was observed, what was expected
    and, for failures and warnings, a remedy; plus a verdict for the node.
  - "hardware: NVIDIA display/3D PCI functions present in sysfs (vendor 0x10de)."
  - "kernel: nouveau not loaded and blacklisted; nvidia modules loaded; kernel module version
    equal to the userspace version; /dev/nvidia* device nodes."
  - "driver: nvidia-smi healthy (a failure is classified, for example C(driver_not_loaded));
    GPU count equal to the PCI count and to O(expected_gpu_count); driver on O(driver_branch);
    persistence mode; fabric manager active on NVSwitch systems (NVSwitch PCI functions or an
    HGX/DGX system name)."
  - "gpu: no uncorrectable ECC errors, no page retirement pending, no row remap pending or
    failed; MIG mode equal to O(mig_mode)."
  - "container toolkit: nvidia-container-runtime or nvidia-ctk installed; the CDI specs of kind
    nvidia.com/gpu in /etc/cdi and /var/run/cdi (YAML or JSON) read, define each device once,
    and name every GPU (by index or UUID) and every MIG device the node has, and none it does
    not have (a spec from before a GPU or MIG change, or from another machine, fails)."
  - "container runtime: the configuration of O(runtime) (containerd with its imported
    drop-ins, docker's daemon.json, or CRI-O's drop-ins) defines the nvidia runtime; the
    runtime's service is active and started after those files last changed, with no restart a
    cut-off kubegpu run left pending (else it runs another configuration than the files')."
  - "kubelet: running; its device plugin socket present; an NVIDIA device plugin registered;
    started after its configuration files last changed, with no restart left pending."
  - Runs C(nvidia-smi -q -x) once. Reads files through O(host_root), so it can check a host
    mounted into a container. Service states come from C(systemctl is-active) and start times
    from C(systemctl show), asked only when O(host_root) is C(/) and systemd runs; otherwise
    those checks are skipped with the reason.
  - Never changes anything on the host.
options:
  expected_gpu_count:
    description:
      - How many GPUs the node must have. When unset, the count nvidia-smi reports only has to
        match the PCI count.
    type: int
  driver_branch:
    description:
      - The pinned driver, as a branch (V(580)) or a full version (V(580.95.05)). When unset,
        the branch that role C(kubegpu.gpu.nvidia_driver) recorded on the host (its local fact
        C(/etc/ansible/facts.d/kubegpu_driver.fact), under O(host_root)) is expected; without
        that record, any driver passes.
    type: str
  mig_mode:
    description:
      - The MIG mode every GPU must be in. When unset, MIG mode is not checked.
    type: str
    choices: [enabled, disabled]
  runtime:
    description:
      - The container runtime whose configuration must name the nvidia runtime. V(none) skips
        the container toolkit and runtime checks.
    type: str
    choices: [containerd, docker, crio, none]
    default: containerd
  check_kubelet:
    description:
      - Whether to check the kubelet and its device plugin sockets.
    type: bool
    default: true
  fail_on:
    description:
      - The task fails when any check has one of these statuses. V([]) never fails the task;
        read RV(verdict) instead.
    type: list
    elements: str
    choices: [fail, warn, skip]
    default: [fail]
  nvidia_smi:
    description:
      - Absolute path of the nvidia-smi to run. When unset, the first C(nvidia-smi) on E(PATH),
        then in C(/usr/bin) and C(/usr/local/nvidia/bin).
    type: path
  host_root:
    description:
      - Where the host's root file system is mounted (C(/) on the host itself). sysfs, /proc,
        /dev and the configuration files are read under it.
    type: path
    default: /
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
    details: Every check only reads, so check mode runs them all and reports the same result.
  diff_mode:
    support: N/A
    details: Nothing is changed, so there is nothing to diff.
  facts:
    support: full
  platform:
    platforms: posix
notes:
  - A node without a GPU, or with the driver not loaded, is reported as such
    (C(pci_gpus_present), C(nvidia_smi_healthy) with class C(driver_not_loaded)); that is a
    verdict, not an error of the module.
  - When the GPU data comes from kubegpu's simulated nvidia-smi or the host root is a simulated
    tree, the result says C(simulated=true) and the task warns about it.
seealso:
  - module: kubegpu.gpu.nvidia_gpu_facts
author:
  - kubegpu maintainers
"""

EXAMPLES = r"""
- name: Check that the node is ready for GPU workloads
  kubegpu.gpu.gpu_node_readiness:
    expected_gpu_count: 8
    driver_branch: "580"
    mig_mode: disabled
    runtime: containerd

- name: Collect the verdict without failing, for a report
  kubegpu.gpu.gpu_node_readiness:
    fail_on: []
  register: __readiness

- name: Show the failing checks
  ansible.builtin.debug:
    msg: "{{ __readiness.checks | selectattr('status', 'equalto', 'fail') | list }}"

- name: Check a host mounted into a container at /host, without the kubelet
  kubegpu.gpu.gpu_node_readiness:
    host_root: /host
    nvidia_smi: /usr/bin/nvidia-smi
    check_kubelet: false
    fail_on: [fail, warn]
"""

RETURN = r"""
checks:
  description: Every check, in layer order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Stable name of the check.
      type: str
      sample: nvidia_smi_healthy
    layer:
      description: hardware, kernel, driver, gpu, container_toolkit, container_runtime or kubelet.
      type: str
      sample: driver
    status:
      description: pass, fail, warn or skip.
      type: str
      sample: fail
    observed:
      description: What was found (for skip, why the check did not run).
      type: str
      sample: "driver_not_loaded (rc 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. ..."
    expected:
      description: What the check wants.
      type: str
      sample: nvidia-smi -q -x answers with every GPU
    remedy:
      description: What to do, for fail and warn; null otherwise.
      type: str
verdict:
  description: not_ready if any check failed, ready_with_warnings if any warned, else ready.
  returned: always
  type: str
  sample: ready
summary:
  description: How many checks ended in each status.
  returned: always
  type: dict
  sample: {"pass": 17, "fail": 0, "warn": 2, "skip": 4}
simulated:
  description: Whether the GPU data came from kubegpu's simulated nvidia-smi or a simulated host tree.
  returned: always
  type: bool
  sample: false
ansible_facts:
  description: The same verdict, summary and checks as C(kubegpu_node_readiness), for reports.
  returned: success
  type: dict
  contains:
    kubegpu_node_readiness:
      description: verdict, summary, checks and simulated, as above.
      type: dict
"""

import json
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.gpu.plugins.module_utils.node_readiness import (
    FABRIC_MANAGER_UNIT,
    KUBELET_UNITS,
    RUNTIME_UNITS,
    evaluate,
    failing,
    read_host_view,
    summarize,
    verdict,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_smi import (
    make_runner,
    run_query,
    version_tuple,
)


def validate(module):
    """Reject bad input before anything runs; each message names the option."""
    params = module.params
    count = params["expected_gpu_count"]
    if count is not None and count < 0:
        module.fail_json(msg="expected_gpu_count must be 0 or more, got %d" % count)
    branch = params["driver_branch"]
    if branch is not None:
        parts = version_tuple(branch)
        if parts is None or len(parts) > 3 or not 100 <= parts[0] <= 9999:
            module.fail_json(
                msg="driver_branch must be a branch like '580' or a version like '580.95.05', "
                "got %r" % branch
            )
    if not os.path.isdir(params["host_root"]):
        module.fail_json(
            msg="host_root %r is not a directory; give where the host's / is mounted (default /)"
            % params["host_root"]
        )


def service_states(module, run, units):
    """({unit: state}, reason): states from one `systemctl is-active`, or None and why not."""
    if os.path.realpath(module.params["host_root"]) != "/":
        return None, (
            "host_root (kubegpu_host_root) is %s, and systemctl here would answer for this machine, not that host"
            % module.params["host_root"]
        )
    if not os.path.isdir("/run/systemd/system"):
        return None, "systemd is not running on this host"
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return None, "systemctl not found"
    units = sorted(set(units))
    rc, out, err = run([systemctl, "is-active", *units])
    lines = out.splitlines()
    if len(lines) != len(units):
        return None, "systemctl is-active gave %d answers for %d units (rc %d): %s" % (
            len(lines),
            len(units),
            rc,
            (err or out).strip()[:200],
        )
    # zip(strict=) needs Python 3.10; targets may run 3.8, and the lengths are checked above.
    states = dict(zip(units, (line.strip() for line in lines)))
    return states, "asked systemctl"


def start_times(module, run, services):
    """({unit: when it last became active, seconds since the epoch}, reason) for the active
    units, from one `systemctl show` (systemd's monotonic timestamps, turned into wall-clock
    time with this host's clocks), or None and why not."""
    if services is None:
        return None, "service states unknown"
    active = sorted(u for u, state in services.items() if state == "active")
    if not active:
        return {}, "no unit active"
    systemctl = module.get_bin_path("systemctl")
    rc, out, err = run(
        [systemctl, "show", "-p", "Id", "-p", "ActiveEnterTimestampMonotonic", *active]
    )
    if rc != 0:
        return None, "systemctl show failed (rc %d): %s" % (rc, (err or out).strip()[:200])
    now_wall, now_mono = time.time(), time.monotonic()
    started = {}
    for block in out.split("\n\n"):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        unit = fields.get("Id", "")
        unit = unit[: -len(".service")] if unit.endswith(".service") else unit
        micros = fields.get("ActiveEnterTimestampMonotonic", "")
        if unit in active and micros.isdigit() and int(micros) > 0:
            started[unit] = now_wall - (now_mono - int(micros) / 1e6)
    return started, "asked systemctl"


DRIVER_RECORD = "etc/ansible/facts.d/kubegpu_driver.fact"


def recorded_branch(host_root):
    """The branch role nvidia_driver recorded on the host (its local fact), or None."""
    try:
        with open(os.path.join(host_root, DRIVER_RECORD)) as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    branch = record.get("branch") if isinstance(record, dict) else None
    return branch if isinstance(branch, str) and re.fullmatch(r"[0-9]+", branch) else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            expected_gpu_count=dict(type="int"),
            driver_branch=dict(type="str"),
            mig_mode=dict(type="str", choices=["enabled", "disabled"]),
            runtime=dict(
                type="str", default="containerd", choices=["containerd", "docker", "crio", "none"]
            ),
            check_kubelet=dict(type="bool", default=True),
            fail_on=dict(
                type="list", elements="str", default=["fail"], choices=["fail", "warn", "skip"]
            ),
            nvidia_smi=dict(type="path"),
            host_root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    validate(module)
    params = module.params
    run = make_runner(module)
    smi, _, error = run_query(run, params["nvidia_smi"], os.environ.get("PATH", ""))
    if error:
        module.fail_json(msg=error)
    view = read_host_view(params["host_root"], params["runtime"])
    units = [FABRIC_MANAGER_UNIT, *list(RUNTIME_UNITS[params["runtime"]])]
    if params["check_kubelet"]:
        units += list(KUBELET_UNITS)
    services, reason = service_states(module, run, units)
    started, started_reason = start_times(module, run, services)
    checks = evaluate(
        view,
        smi,
        {
            "expected_gpu_count": params["expected_gpu_count"],
            "driver_branch": params["driver_branch"] or recorded_branch(params["host_root"]),
            "mig_mode": params["mig_mode"],
            "runtime": params["runtime"],
            "check_kubelet": params["check_kubelet"],
            "services": services,
            "services_reason": reason,
            "started": started,
            "started_reason": started_reason,
        },
    )
    simulated = bool(smi["simulated"] or view["simulated"])
    if simulated:
        module.warn(
            "This readiness report is built on kubegpu's SIMULATED GPU (a replay of a "
            "real capture); it says nothing about real GPUs on this host."
        )
    report = {
        "verdict": verdict(checks),
        "summary": summarize(checks),
        "checks": checks,
        "simulated": simulated,
    }
    bad = failing(checks, params["fail_on"])
    if bad:
        module.fail_json(
            msg="GPU node readiness: %d check(s) with status in %s: %s"
            % (
                len(bad),
                params["fail_on"],
                "; ".join("%s (%s): %s" % (c["name"], c["status"], c["observed"]) for c in bad),
            ),
            changed=False,
            **report,
        )
    module.exit_json(changed=False, ansible_facts={"kubegpu_node_readiness": report}, **report)


if __name__ == "__main__":
    main()
