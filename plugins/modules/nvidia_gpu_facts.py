#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Read a host's NVIDIA GPUs with nvidia-smi and return them as facts
version_added: "0.1.0"
description:
  - Runs C(nvidia-smi -q -x) once and returns what it reports as C(ansible_facts.kubegpu_gpus),
    that is the driver and CUDA versions and, per GPU, name, UUID, PCI bus id, memory, persistence mode,
    MIG mode and MIG devices, ECC state and uncorrectable error counts, retired pages, row
    remapping, temperature, power draw and compute mode.
  - Runs C(nvidia-smi -L) as well only when a GPU has MIG enabled, to add the UUID and profile
    of each MIG device, which the XML of most drivers does not carry.
  - When nvidia-smi is missing or fails, the task still succeeds; the facts then say
    C(available=false) and give the failure class (for example C(driver_not_loaded) or
    C(driver_library_mismatch)), the message and a remedy a person can act on. Use
    M(kubegpu.gpu.gpu_node_readiness) to turn that into a verdict.
  - Reads the loaded kernel module's version and flavor (open or proprietary) from
    C(/proc/driver/nvidia/version) under O(host_root).
  - Never changes anything on the host.
options:
  nvidia_smi:
    description:
      - Absolute path of the nvidia-smi to run.
      - When not given, the first C(nvidia-smi) on E(PATH), then in C(/usr/bin) and
        C(/usr/local/nvidia/bin), is used.
      - When the path does not exist, the facts report the failure class C(not_installed).
    type: path
  host_root:
    description:
      - Where the host's root file system is mounted, for reading
        C(/proc/driver/nvidia/version); C(/) on the host itself, C(/host) in a container
        that mounts it there.
      - Does not change which nvidia-smi runs.
    type: path
    default: /
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
    details: nvidia-smi is only queried, so check mode runs the same queries and reports the same facts.
  diff_mode:
    support: N/A
    details: Nothing is changed, so there is nothing to diff.
  facts:
    support: full
  platform:
    platforms: posix
notes:
  - Output is read with C(LC_ALL=C). Values nvidia-smi reports as V(N/A), V([Not Supported]) or
    deprecated are returned as V(null).
  - When the nvidia-smi that answered is kubegpu's simulated one (used in tests, replaying a
    real capture), the facts say C(simulated=true) and the task warns about it.
  - When the connection pipelines (pipelining on, and a connection and become method that
    support it), the module's action plugin reads the node with one C(sh) script instead (which
    nvidia-smi is there, its C(-q -x) output and the kernel module's version) and runs this
    module's code on the controller, so the node starts no Python. The facts are the same;
    otherwise, or when an option holds C(~) or C($) for the node to expand, the module runs.
seealso:
  - module: kubegpu.gpu.gpu_node_readiness
author:
  - kubegpu maintainers
"""

EXAMPLES = r"""
- name: Read the GPUs of the node
  kubegpu.gpu.nvidia_gpu_facts:

- name: Report the driver version
  ansible.builtin.debug:
    msg: "Driver {{ ansible_facts['kubegpu_gpus']['driver_version'] }} on {{ ansible_facts['kubegpu_gpus']['count'] }} GPU(s)"
  when: ansible_facts['kubegpu_gpus']['available'] | bool

- name: Stop when nvidia-smi cannot talk to the driver
  ansible.builtin.fail:
    msg: "{{ ansible_facts['kubegpu_gpus']['failure']['class'] }}: {{ ansible_facts['kubegpu_gpus']['failure']['remedy'] }}"
  when: not (ansible_facts['kubegpu_gpus']['available'] | bool)

- name: Read the GPUs of the host from a container that mounts it at /host
  kubegpu.gpu.nvidia_gpu_facts:
    host_root: /host
    nvidia_smi: /usr/local/nvidia/bin/nvidia-smi
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to the host's facts.
  returned: always
  type: dict
  contains:
    kubegpu_gpus:
      description: What nvidia-smi reported, or why it did not.
      returned: always
      type: dict
      contains:
        available:
          description: Whether nvidia-smi answered with parseable XML.
          type: bool
          sample: true
        simulated:
          description: Whether the answer came from kubegpu's simulated nvidia-smi.
          type: bool
          sample: false
        nvidia_smi:
          description: The nvidia-smi that was run, null when none was found.
          type: str
          sample: /usr/bin/nvidia-smi
        driver_version:
          description: Driver version nvidia-smi reports.
          type: str
          sample: "510.47.03"
        cuda_version:
          description: Highest CUDA version the driver supports.
          type: str
          sample: "11.6"
        attached_gpus:
          description: The attached GPU count as nvidia-smi reports it.
          type: int
          sample: 1
        count:
          description: Number of GPUs in the XML.
          type: int
          sample: 1
        mig_enabled:
          description: Whether any GPU currently has MIG enabled.
          type: bool
          sample: true
        gpus:
          description: One entry per GPU, in nvidia-smi's order.
          type: list
          elements: dict
          sample:
            - index: 0
              name: NVIDIA A100-SXM4-40GB
              uuid: GPU-27b94a00-ed54-5c24-b1fd-1054085de32a
              pci_bus_id: "00000000:00:04.0"
              serial: "1324321002473"
              memory_total_mib: 40960
              persistence_mode: false
              mig:
                current: true
                pending: true
                devices:
                  - index: 0
                    gpu_instance_id: 1
                    compute_instance_id: 0
                    memory_total_mib: 19968
                    multiprocessor_count: 42
                    uuid: null
                    profile: null
              ecc:
                current: true
                pending: true
                volatile_uncorrected: null
                aggregate_uncorrected: 0
              retired_pages_pending: null
              remapped_rows:
                pending: null
                failure: null
              temperature_c: 36
              power_draw_w: 66.92
              compute_mode: Default
        kernel_module:
          description: The loaded nvidia kernel module, from /proc/driver/nvidia/version; null
            when the module is not loaded.
          type: dict
          sample:
            version: "565.57.01"
            flavor: open
            arch: x86_64
        failure:
          description: Why nvidia-smi gave no data; null when it did.
          type: dict
          contains:
            class:
              description: One of not_installed, driver_not_loaded, driver_library_mismatch,
                no_devices, gpu_lost, gpu_error, unknown.
              type: str
              sample: driver_not_loaded
            message:
              description: The first lines nvidia-smi printed.
              type: str
            remedy:
              description: What to do about it.
              type: str
            rc:
              description: nvidia-smi's exit status.
              type: int
              sample: 9
            nvml_library_version:
              description: The userspace version named by a driver/library mismatch.
              type: str
              sample: "550.144"
            bus_ids:
              description: PCI bus ids named in the error.
              type: list
              elements: str
        notes:
          description: Things worth knowing that did not stop the query.
          type: list
          elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_smi import (
    fact_warnings,
    gpu_facts,
    make_runner,
    run_query,
)


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="path"),
            host_root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    host_root = module.params["host_root"]
    if not os.path.isdir(host_root):
        module.fail_json(
            msg="host_root %r is not a directory; give where the host's / is mounted (default /)"
            % host_root
        )
    result, path, error = run_query(
        make_runner(module), module.params["nvidia_smi"], os.environ.get("PATH", "")
    )
    if error:
        module.fail_json(msg=error)
    facts = gpu_facts(
        result, path, read_text(os.path.join(host_root, "proc/driver/nvidia/version"))
    )
    for warning in fact_warnings(facts):
        module.warn(warning)
    module.exit_json(changed=False, ansible_facts={"kubegpu_gpus": facts})


if __name__ == "__main__":
    main()
