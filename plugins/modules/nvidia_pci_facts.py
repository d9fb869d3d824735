#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_pci_facts
short_description: Read the NVIDIA PCI functions, Secure Boot state and loaded modules of a host
description:
  - Reads C(/sys/bus/pci/devices) for functions of vendor 0x10de and sorts them into GPUs
    (display and 3D controllers), NVSwitch functions, audio and USB functions.
  - Names each GPU's generation from its device id, and whether the open kernel modules can
    drive it (Turing and newer) or must (Blackwell, Grace Hopper).
  - Reports whether C(nouveau) and C(nvidia) are loaded, the loaded NVIDIA module's version,
    the board's product name (for DGX/HGX detection) and the Secure Boot state (EFI variable,
    or C(mokutil --sb-state) when the variable cannot be read).
  - Given I(kernel_module_type) and I(branch), also resolves C(auto) to open or proprietary and
    lists the problems that make the request impossible on these GPUs. It never fails for
    those; the caller decides.
  - Given I(file_states), also returns the type, SHA-256, mode and owner of those paths (outside
    the facts), so that the caller can leave out a task for a file that is already in place.
  - Changes nothing on the host.
version_added: "0.1.0"
author:
  - kubegpu contributors
options:
  host_root:
    description:
      - Where the host's root file system is mounted; C(/sys) and C(/proc) are read below it.
        Use it to inspect an image or a chroot. C(mokutil) is only run when it is C(/).
    type: path
    default: /
  kernel_module_type:
    description:
      - The requested kernel module flavour to resolve against the GPUs found.
    type: str
    choices: [auto, open, proprietary]
  branch:
    description:
      - The driver branch (three digits) used to resolve C(auto) and to check that the branch
        supports every GPU generation found.
    type: str
  file_states:
    description:
      - Absolute paths whose state to return in RV(file_states). They are read as given, not
        below I(host_root), because they are the files the role writes on this host.
    type: list
    elements: path
    default: []
  checks:
    description:
      - Checks of what was read, evaluated on the controller after the read as
        M(kubegpu.gpu.checks) evaluates its O(kubegpu.gpu.checks#module:checks), with the facts
        read among the host's facts and the task's result under its C(register) name. The
        first failed check fails the task with its message.
      - Taken by the action plugin only (the module never sees them), so the read and the
        checks of what it shows cost one task (one worker per host) instead of two.
    type: list
    elements: dict
  mok_certificate:
    description:
      - A DKMS signing certificate to test with C(mokutil --test-key) when Secure Boot is
        enabled and I(host_root) is C(/); the answer is C(secure_boot.key_test) in the facts
        (C(enrolled) and mokutil's words).
    type: path
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
notes:
  - Generations come from device-id ranges (see module_utils/nvidia_driver.py for sources); the
    boundary that decides open versus proprietary (0x1E00, Turing) is exact.
  - When the connection pipelines (pipelining on, and a connection and become method that
    support it), the module's action plugin reads the same files with one C(sh) script instead
    and runs this module's code (module_utils/nvidia_pci.py) on the controller, so the node
    starts no Python. The facts are the same; otherwise, or when a path holds C(~) or C($) for
    the node to expand, the module runs.
"""

EXAMPLES = r"""
- name: Read the NVIDIA hardware of the node
  kubegpu.gpu.nvidia_pci_facts:
    kernel_module_type: auto
    branch: "580"

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ ansible_facts['nvidia_pci']['gpu_count'] }} GPU(s): {{ ansible_facts['nvidia_pci']['generations'] }}"
"""

RETURN = r"""
file_states:
  description:
    - Each path of I(file_states) to null when nothing is there, else to its C(type) (C(file),
      C(directory), C(link) or C(other), not following a link), C(mode) (four octal digits),
      C(uid), C(gid) and, for a file, C(sha256) of its content.
  returned: always
  type: dict
  sample:
    /etc/modprobe.d/blacklist-nouveau.conf:
      type: file
      mode: "0644"
      uid: 0
      gid: 0
      sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
ansible_facts:
  description: Facts under the key C(nvidia_pci).
  returned: always
  type: dict
  contains:
    nvidia_pci:
      description: What was read.
      type: dict
      contains:
        functions:
          description: Every NVIDIA PCI function (address, device_id, class, kind, driver).
          type: list
          elements: dict
        gpus:
          description: GPU functions with generation, open_supported, requires_open.
          type: list
          elements: dict
        gpu_count:
          description: Number of GPU functions.
          type: int
        nvswitch_count:
          description: Number of NVSwitch functions.
          type: int
        generations:
          description: Sorted, unique generations of the GPUs (oldest first).
          type: list
          elements: str
        product_name:
          description: DMI product name, empty when unreadable.
          type: str
        fabricmanager_needed:
          description: True on NVSwitch systems (NVSwitch functions, or a DGX/HGX product name).
          type: bool
        modules:
          description: C(readable) (whether /proc/modules exists), C(nouveau), C(nvidia) loaded.
          type: dict
        loaded_driver:
          description: Version and flavor of the loaded NVIDIA module, or null.
          type: dict
        secure_boot:
          description:
            - C(state) (enabled, disabled, unsupported, unknown) and C(source).
            - C(key_test) (C(enrolled), C(output)) when I(mok_certificate) is given and Secure
              Boot is enabled.
          type: dict
        kernel_module_type:
          description: C(requested), C(effective) and C(reason), when kernel_module_type is given.
          type: dict
        problems:
          description: Why the requested flavour or branch cannot drive these GPUs.
          type: list
          elements: str
  sample:
    nvidia_pci:
      gpu_count: 1
      generations: [hopper]
      gpus:
        - address: "0000:00:09.0"
          device_id: "0x2330"
          generation: hopper
          open_supported: true
          requires_open: false
      secure_boot: {state: disabled, source: efivars}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_pci as pci

SECURE_BOOT_VAR = pci.SECURE_BOOT_VAR
summarise = pci.summarise
read_file_state = pci.file_state


def read_functions(root):
    return pci.read_functions(root, pci.LocalReader())


def read_modules(root):
    return pci.read_modules(root, pci.LocalReader())


def read_secure_boot(module, root):
    return pci.read_secure_boot(root, pci.LocalReader(), mokutil_of(module))


def _mokutil(module, *args):
    """A function that runs `mokutil ARGS` and returns its output (stdout then stderr), or
    None without mokutil."""

    def run():
        path = module.get_bin_path("mokutil")
        if not path:
            return None
        _rc, out, err = module.run_command(
            [path, *args], environ_update={"LC_ALL": "C"}, check_rc=False
        )
        return out + err

    return run


def mokutil_of(module):
    """mokutil --sb-state's output, or None without mokutil."""
    return _mokutil(module, "--sb-state") if module is not None else None


def mok_test_of(module, certificate):
    """mokutil --test-key CERTIFICATE's output, or None without mokutil."""
    return _mokutil(module, "--test-key", certificate) if certificate else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host_root=dict(type="path", default="/"),
            kernel_module_type=dict(type="str", choices=["auto", "open", "proprietary"]),
            branch=dict(type="str"),
            file_states=dict(type="list", elements="path", default=[]),
            mok_certificate=dict(type="path"),
            # Evaluated by the action plugin, which takes them out before the module runs.
            checks=dict(type="list", elements="dict"),
        ),
        required_by={"kernel_module_type": ("branch",)},
        supports_check_mode=True,
    )
    root = module.params["host_root"]
    if not os.path.isdir(root):
        module.fail_json(msg="host_root %s is not a directory" % root)
    relative = [path for path in module.params["file_states"] if not os.path.isabs(path)]
    if relative:
        module.fail_json(
            msg="file_states takes absolute paths; these are not: %s" % ", ".join(relative)
        )
    facts, file_states = pci.gather(
        root,
        pci.LocalReader(),
        module.params["kernel_module_type"],
        module.params["branch"],
        module.params["file_states"],
        mokutil_of(module),
        mok_test_of(module, module.params["mok_certificate"]),
    )
    module.exit_json(changed=False, ansible_facts={"nvidia_pci": facts}, file_states=file_states)


if __name__ == "__main__":
    main()
