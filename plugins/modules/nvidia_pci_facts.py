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
          description: C(state) (enabled, disabled, unsupported, unknown) and C(source).
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

import hashlib
import os
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_driver as nd
from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_smi import (
    NvidiaParseError,
    parse_proc_version,
)

SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def _read(path, binary=False):
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read()
    except (IOError, OSError):
        return None


def _below(root, path):
    return os.path.join(root, path.lstrip("/"))


def read_functions(root):
    """NVIDIA PCI functions under <root>/sys/bus/pci/devices, sorted by address."""
    base = _below(root, "/sys/bus/pci/devices")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    functions = []
    for name in names:
        path = os.path.join(base, name)
        vendor = (_read(os.path.join(path, "vendor")) or "").strip()
        pci_class = (_read(os.path.join(path, "class")) or "").strip()
        if not vendor or not pci_class:
            continue
        try:
            kind = nd.classify_pci_function(vendor, pci_class)
        except nd.DriverInputError:
            continue
        if kind is None:
            continue
        device = nd.parse_hex_id((_read(os.path.join(path, "device")) or "0").strip())
        driver_link = os.path.join(path, "driver")
        driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None
        entry = {
            "address": name,
            "device_id": "0x%04x" % device,
            "class": pci_class,
            "kind": kind,
            "driver": driver,
            "subsystem_vendor": (_read(os.path.join(path, "subsystem_vendor")) or "").strip(),
            "subsystem_device": (_read(os.path.join(path, "subsystem_device")) or "").strip(),
        }
        functions.append(entry)
    return functions


def read_secure_boot(module, root):
    efi = _below(root, "/sys/firmware/efi")
    if not os.path.isdir(efi):
        return {"state": "unsupported", "source": "no EFI firmware (legacy boot)"}
    value = nd.parse_efivar_secureboot(
        _read(os.path.join(efi, "efivars", SECURE_BOOT_VAR), binary=True)
    )
    if value is not None:
        return {"state": "enabled" if value else "disabled", "source": "efivars"}
    mokutil = module.get_bin_path("mokutil") if root == "/" else None
    if mokutil:
        _rc, out, err = module.run_command(
            [mokutil, "--sb-state"], environ_update={"LC_ALL": "C"}, check_rc=False
        )
        return {"state": nd.parse_mokutil_sb_state(out + err), "source": "mokutil"}
    return {"state": "unknown", "source": "EFI variable unreadable and no mokutil"}


def read_modules(root):
    text = _read(_below(root, "/proc/modules"))
    names = nd.loaded_modules(text) if text is not None else set()
    sys_module = _below(root, "/sys/module")
    return {
        "readable": text is not None,
        "nouveau": "nouveau" in names or os.path.isdir(os.path.join(sys_module, "nouveau")),
        "nvidia": "nvidia" in names or os.path.isdir(os.path.join(sys_module, "nvidia")),
    }


def read_loaded_driver(root):
    text = _read(_below(root, "/proc/driver/nvidia/version"))
    if text is None:
        return None
    try:
        parsed = parse_proc_version(text)
    except NvidiaParseError:
        return None
    return {"version": parsed["version"], "flavor": parsed["flavor"]}


def summarise(functions, product_name, requested, branch):
    gpus = []
    for function in functions:
        if function["kind"] != "gpu":
            continue
        gpu = nd.describe_gpu(function["device_id"])
        gpu["address"] = function["address"]
        gpu["driver"] = function["driver"]
        gpus.append(gpu)
    nvswitch_count = sum(1 for f in functions if f["kind"] == "nvswitch")
    present = {g["generation"] for g in gpus}
    facts = {
        "functions": functions,
        "gpus": gpus,
        "gpu_count": len(gpus),
        "nvswitch_count": nvswitch_count,
        "generations": [g for g in nd.GENERATION_ORDER if g in present],
        "product_name": product_name,
        "fabricmanager_needed": nd.needs_fabricmanager(nvswitch_count, product_name),
        "problems": [],
    }
    if requested:
        decision = {"requested": requested, "effective": None, "reason": ""}
        try:
            effective, reason = nd.choose_module_type(requested, gpus, branch)
            decision.update(effective=effective, reason=reason)
        except nd.DriverInputError as exc:
            facts["problems"].append(str(exc))
        facts["kernel_module_type"] = decision
    if branch:
        try:
            facts["problems"].extend(nd.generation_problems(gpus, branch))
        except nd.DriverInputError as exc:
            facts["problems"].append(str(exc))
    return facts


def read_file_state(path):
    """Type, mode, owner and (for a file) SHA-256 of path, or None when nothing is there."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode):
        kind = "link"
    elif stat.S_ISREG(info.st_mode):
        kind = "file"
    elif stat.S_ISDIR(info.st_mode):
        kind = "directory"
    else:
        kind = "other"
    state = {
        "type": kind,
        "mode": "%04o" % stat.S_IMODE(info.st_mode),
        "uid": info.st_uid,
        "gid": info.st_gid,
    }
    if kind == "file":
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(65536), b""):
                    digest.update(block)
        except (IOError, OSError):
            state["type"] = "other"
        else:
            state["sha256"] = digest.hexdigest()
    return state


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host_root=dict(type="path", default="/"),
            kernel_module_type=dict(type="str", choices=["auto", "open", "proprietary"]),
            branch=dict(type="str"),
            file_states=dict(type="list", elements="path", default=[]),
        ),
        required_by={"kernel_module_type": ("branch",)},
        supports_check_mode=True,
    )
    root = module.params["host_root"]
    if not os.path.isdir(root):
        module.fail_json(msg="host_root %s is not a directory" % root)
    functions = read_functions(root)
    product = (_read(_below(root, "/sys/class/dmi/id/product_name")) or "").strip()
    facts = summarise(
        functions, product, module.params["kernel_module_type"], module.params["branch"]
    )
    facts["modules"] = read_modules(root)
    facts["loaded_driver"] = read_loaded_driver(root)
    facts["secure_boot"] = read_secure_boot(module, root)
    relative = [path for path in module.params["file_states"] if not os.path.isabs(path)]
    if relative:
        module.fail_json(
            msg="file_states takes absolute paths; these are not: %s" % ", ".join(relative)
        )
    file_states = dict((path, read_file_state(path)) for path in module.params["file_states"])
    module.exit_json(changed=False, ansible_facts={"nvidia_pci": facts}, file_states=file_states)


if __name__ == "__main__":
    main()
