#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: mig_layout
short_description: Apply a MIG layout (mig-parted style) to a host's NVIDIA GPUs
version_added: "0.2.0"
description:
  - Reads the MIG state of every GPU with C(nvidia-smi) (C(--query-gpu) for the MIG mode, and
    C(nvidia-smi mig -lgip), C(-lgipp), C(-lgi) and C(-lci) where MIG is on), works out the steps
    that turn it into the wanted layout, and runs them in order. Nothing runs when the GPUs
    already hold the layout.
  - Layouts are named as NVIDIA's mig-parted names them. V(all-disabled) turns MIG off,
    V(all-enabled) turns it on with no instances, V(all-balanced) makes two of the smallest 1g
    profile, one 2g and (on GPUs with seven compute slices) one 3g, and V(all-<profile>), for
    example V(all-1g.10gb), makes as many of that profile as the GPU offers (V(all-1g.10gb.me) for
    the C(+me) profile). Other names come from O(layouts).
  - The steps are, per GPU, destroy the compute instances (C(mig -dci)) and the GPU instances
    (C(mig -dgi)) it holds, turn MIG mode on or off (C(-mig 1|0)), and create the GPU instances,
    the largest first, each with its default compute instance (C(mig -cgi <ids> -C)).
  - A profile the GPU does not offer, a count above what it offers or counts that do not fit
    together fail the task before any GPU changes, naming the profile, the GPU and what it
    offers. Where MIG is still off the GPU lists no profiles; then MIG is turned on first, the
    layout checked against what the GPU now lists, and MIG turned back off when it does not fit.
  - A GPU that runs processes is not touched unless O(drained=true) says the node went through
    maintenance; the task fails naming the processes.
options:
  layout:
    description:
      - The layout to apply, for example V(all-1g.10gb), V(all-balanced), V(all-disabled) or a
        key of O(layouts).
    type: str
    required: true
  layouts:
    description:
      - Custom layouts by name. Each is a list of entries with C(devices) (V(all) or a list of
        GPU indexes), C(mig_enabled) (default V(true)) and C(mig_devices) (profile name to
        count, for example V(1g.10gb) to V(7)). GPUs that no entry names are left as they are.
    type: dict
    default: {}
  drained:
    description:
      - Whether GPU workloads were moved off the node for this change (cordoned and drained).
      - When V(false), a GPU that the plan touches and that runs processes fails the task.
    type: bool
    default: false
  nvidia_smi:
    description:
      - Absolute path of the nvidia-smi to run; when not given, the first C(nvidia-smi) on
        E(PATH), then in C(/usr/bin) and C(/usr/local/nvidia/bin).
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reads the state and returns the plan; runs no step.
  diff_mode:
    support: full
    details: The layout of each GPU before and after, one line per GPU.
  platform:
    platforms: posix
notes:
  - Needs root (C(become)); nvidia-smi's mig commands refuse other users.
  - A GPU whose MIG mode stays pending after C(-mig) (some drivers need a GPU reset or a reboot
    to switch) fails the task with what to run; run it again afterwards.
  - When the nvidia-smi that answered is kubegpu's SIMULATED one (tests), the result says
    C(simulated=true).
seealso:
  - module: kubegpu.gpu.nvidia_gpu_facts
  - module: kubegpu.gpu.gpu_node_maintenance
author:
  - kubegpu maintainers
"""

EXAMPLES = r"""
- name: Split every GPU into 1g.10gb slices
  kubegpu.gpu.mig_layout:
    layout: all-1g.10gb
  become: true

- name: Apply a layout of our own, GPU 0 split in two, GPU 1 whole
  kubegpu.gpu.mig_layout:
    layout: half-and-whole
    layouts:
      half-and-whole:
        - devices: [0]
          mig_enabled: true
          mig_devices:
            3g.40gb: 2
        - devices: [1]
          mig_enabled: false
  become: true

- name: Show what turning MIG off would do
  kubegpu.gpu.mig_layout:
    layout: all-disabled
  check_mode: true
  diff: true
  register: plan
"""

RETURN = r"""
layout:
  description: The layout asked for.
  returned: always
  type: str
  sample: all-1g.10gb
plan:
  description: The steps, in order; empty when the GPUs already hold the layout.
  returned: always
  type: list
  elements: dict
  sample:
    - gpu: 0
      action: mig-mode-on
      command: nvidia-smi -i 0 -mig 1
      why: the layout wants MIG on on GPU 0
    - gpu: 0
      action: create-gpu-instances
      command: nvidia-smi mig -i 0 -cgi 19,19,19,19,19,19,19 -C
      why: create 7 x 1g.10gb, each with its default compute instance
before:
  description: The MIG layout per GPU before the task (text, one line per GPU).
  returned: always
  type: str
  sample: "GPU 0: MIG disabled\n"
after:
  description: The MIG layout per GPU after the task (in check mode, the wanted one).
  returned: always
  type: str
  sample: "GPU 0: MIG enabled, 7 x 1g.10gb\n"
gpus:
  description: The GPUs nvidia-smi listed.
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      name: NVIDIA H100 PCIe
      pci_bus_id: "00000000:01:00.0"
simulated:
  description: Whether the nvidia-smi that answered is kubegpu's simulated one.
  returned: always
  type: bool
  sample: false
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.gpu.plugins.module_utils import mig_layout as mig
from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_smi import (
    SIMULATION_MARKER,
    resolve_nvidia_smi,
)


class Runner:
    def __init__(self, module):
        self.module = module
        self.simulated = False

    def __call__(self, argv):
        rc, out, err = self.module.run_command(argv, environ_update={"LC_ALL": "C"})
        if SIMULATION_MARKER in (err or ""):
            self.simulated = True
        return rc, out, err


def _command(step):
    if step["argv"] is None:
        return "nvidia-smi mig -i %d -cgi <the profiles it lists once MIG is on> -C" % step["gpu"]
    return " ".join(["nvidia-smi"] + step["argv"])


def _wanted_text(state, wanted):
    merged = dict(state)
    for index, target in wanted.items():
        if target is not None:
            merged[index] = target
    return mig.describe_layout(merged)


def _apply(module, run, nvidia_smi, read, name, steps):
    """Run the steps; a create step whose profiles were unknown (MIG was off) is worked out,
    and checked, once MIG is on and the GPU lists them."""
    for step in steps:
        argv = step["argv"]
        index = step["gpu"]
        if argv is None:
            current = read()
            indexes = [g["index"] for g in current["gpus"]]
            try:
                fresh = mig.resolve_layout(
                    name, module.params["layouts"], indexes, current["profiles"]
                )
            except mig.MigLayoutError as exc:
                module.fail_json(msg=str(exc))
            target = {index: fresh[index]}
            names = dict((g["index"], g["name"]) for g in current["gpus"])
            problems = mig.validate(target, current["profiles"], current["placements"], names, name)
            if problems:
                run([nvidia_smi, "-i", str(index), "-mig", "0"])
                module.fail_json(msg="; ".join(problems) + "; MIG mode turned back off")
            again = mig.plan(current["state"], target, current["profiles"])
            argv = next(s for s in again if s["action"] == "create-gpu-instances")["argv"]
        rc, out, err = run([nvidia_smi, *argv])
        if rc != 0:
            module.fail_json(
                msg="%s failed (rc %d) on GPU %d: %s"
                % (" ".join(["nvidia-smi", *argv]), rc, index, (err or out).strip()),
                stdout=out,
                stderr=err,
            )
        if step["action"].startswith("mig-mode"):
            gpu = next(g for g in read()["gpus"] if g["index"] == index)
            if gpu["mig"]["current"] != gpu["mig"]["pending"]:
                module.fail_json(
                    msg="MIG mode of GPU %d is pending: reset the GPU (nvidia-smi -i %d "
                    "--gpu-reset) or reboot the node, then run again" % (index, index)
                )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            layout=dict(type="str", required=True),
            layouts=dict(type="dict", default={}),
            drained=dict(type="bool", default=False),
            nvidia_smi=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    nvidia_smi, failure, error = resolve_nvidia_smi(
        module.params["nvidia_smi"], os.environ.get("PATH", "")
    )
    if error or failure:
        module.fail_json(msg=error or failure["message"] + ": " + failure["remedy"])
    run = Runner(module)
    name = module.params["layout"]

    def read():
        try:
            return mig.read_state(run, nvidia_smi)
        except mig.MigLayoutError as exc:
            module.fail_json(msg=str(exc))

    current = read()
    gpus = current["gpus"]
    indexes = [g["index"] for g in gpus]
    try:
        wanted = mig.resolve_layout(name, module.params["layouts"], indexes, current["profiles"])
        steps = mig.plan(current["state"], wanted, current["profiles"])
    except mig.MigLayoutError as exc:
        module.fail_json(msg=str(exc))
    names = dict((g["index"], g["name"]) for g in gpus)
    problems = mig.unsupported(wanted, gpus) + mig.validate(
        wanted, current["profiles"], current["placements"], names, name
    )
    if problems:
        module.fail_json(msg="; ".join(problems))
    busy = mig.busy_gpus(steps, gpus, current["apps"])
    if busy and not module.params["drained"]:
        module.fail_json(
            msg="GPUs the layout %r changes run processes: %s; drain the node first "
            "(playbooks/mig.yml cordons and drains it) or set drained=true"
            % (name, "; ".join(busy))
        )
    result = dict(
        changed=bool(steps),
        layout=name,
        plan=[
            dict(gpu=s["gpu"], action=s["action"], command=_command(s), why=s["why"]) for s in steps
        ],
        before=mig.describe_layout(current["state"]),
        after=_wanted_text(current["state"], wanted),
        gpus=[dict(index=g["index"], name=g["name"], pci_bus_id=g["pci_bus_id"]) for g in gpus],
    )
    if steps and not module.check_mode:
        _apply(module, run, nvidia_smi, read, name, steps)
        final = read()
        result["after"] = mig.describe_layout(final["state"])
        # Counts that hung on the profiles (MIG was off) are known now.
        wanted = mig.resolve_layout(name, module.params["layouts"], indexes, final["profiles"])
        left = mig.plan(final["state"], wanted, final["profiles"])
        if left:
            module.fail_json(
                msg="the GPUs do not hold layout %r after the steps; still to do: %s"
                % (name, "; ".join(_command(s) for s in left)),
                **result,
            )
    result["simulated"] = run.simulated
    if module._diff:
        result["diff"] = dict(before=result["before"], after=result["after"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
