# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""What kubegpu.gpu.nvidia_pci_facts reads of a host, through a reader.

LocalReader reads this machine (the module, on the node). The module's action plugin passes a
reader that answers from what one sh script read on the node, so that the same code builds the
same facts on the controller. Runs on the target's Python (3.8+) too.
"""

from __future__ import absolute_import, division, print_function

import hashlib
import os
import stat

from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_driver as nd
from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_smi import (
    NvidiaParseError,
    parse_proc_version,
)

__metaclass__ = type

SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

# What each NVIDIA function's folder is read for, beside vendor and class (every function's).
FUNCTION_FILES = ("device", "subsystem_vendor", "subsystem_device")


def below(root, path):
    return os.path.join(root, path.lstrip("/"))


class LocalReader(object):
    """This machine's files. read() gives None for what cannot be read."""

    def read(self, path, binary=False):
        try:
            with open(path, "rb" if binary else "r") as handle:
                return handle.read()
        except (IOError, OSError):
            return None

    def listdir(self, path):
        return os.listdir(path)

    def readlink(self, path):
        """The link's target, or None when path is not a symbolic link."""
        return os.readlink(path) if os.path.islink(path) else None

    def isdir(self, path):
        return os.path.isdir(path)

    def file_state(self, path):
        return file_state(path)


def file_state(path):
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


def read_functions(root, reader):
    """NVIDIA PCI functions under <root>/sys/bus/pci/devices, sorted by address."""
    base = below(root, "/sys/bus/pci/devices")
    try:
        names = sorted(reader.listdir(base))
    except OSError:
        return []
    functions = []
    for name in names:
        path = os.path.join(base, name)
        vendor = (reader.read(os.path.join(path, "vendor")) or "").strip()
        pci_class = (reader.read(os.path.join(path, "class")) or "").strip()
        if not vendor or not pci_class:
            continue
        try:
            kind = nd.classify_pci_function(vendor, pci_class)
        except nd.DriverInputError:
            continue
        if kind is None:
            continue
        device = nd.parse_hex_id((reader.read(os.path.join(path, "device")) or "0").strip())
        target = reader.readlink(os.path.join(path, "driver"))
        entry = {
            "address": name,
            "device_id": "0x%04x" % device,
            "class": pci_class,
            "kind": kind,
            "driver": os.path.basename(target) if target is not None else None,
            "subsystem_vendor": (reader.read(os.path.join(path, "subsystem_vendor")) or "").strip(),
            "subsystem_device": (reader.read(os.path.join(path, "subsystem_device")) or "").strip(),
        }
        functions.append(entry)
    return functions


def read_secure_boot(root, reader, mokutil=None):
    """The Secure Boot state: the EFI variable, else mokutil() -> its output, or None when
    there is no mokutil (it is only asked when root is /)."""
    efi = below(root, "/sys/firmware/efi")
    if not reader.isdir(efi):
        return {"state": "unsupported", "source": "no EFI firmware (legacy boot)"}
    value = nd.parse_efivar_secureboot(
        reader.read(os.path.join(efi, "efivars", SECURE_BOOT_VAR), binary=True)
    )
    if value is not None:
        return {"state": "enabled" if value else "disabled", "source": "efivars"}
    output = mokutil() if mokutil is not None and root == "/" else None
    if output is not None:
        return {"state": nd.parse_mokutil_sb_state(output), "source": "mokutil"}
    return {"state": "unknown", "source": "EFI variable unreadable and no mokutil"}


def read_modules(root, reader):
    text = reader.read(below(root, "/proc/modules"))
    names = nd.loaded_modules(text) if text is not None else set()
    sys_module = below(root, "/sys/module")
    return {
        "readable": text is not None,
        "nouveau": "nouveau" in names or reader.isdir(os.path.join(sys_module, "nouveau")),
        "nvidia": "nvidia" in names or reader.isdir(os.path.join(sys_module, "nvidia")),
    }


def read_loaded_driver(root, reader):
    text = reader.read(below(root, "/proc/driver/nvidia/version"))
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
    present = set(g["generation"] for g in gpus)
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


def key_test(output):
    """What `mokutil --test-key CERT` said (None: no mokutil) -> whether shim has the key."""
    if output is None:
        return {"enrolled": False, "output": "mokutil is not installed"}
    return {"enrolled": "is already enrolled" in output, "output": output.strip()}


def gather(root, reader, requested, branch, file_states, mokutil=None, mok_test=None):
    """The module's result: (ansible_facts' nvidia_pci, file_states) for a host root that is a
    directory and absolute file_states. mok_test() -> `mokutil --test-key`'s output (None
    without mokutil), asked only for / under Secure Boot."""
    functions = read_functions(root, reader)
    product = (reader.read(below(root, "/sys/class/dmi/id/product_name")) or "").strip()
    facts = summarise(functions, product, requested, branch)
    facts["modules"] = read_modules(root, reader)
    facts["loaded_driver"] = read_loaded_driver(root, reader)
    facts["secure_boot"] = read_secure_boot(root, reader, mokutil)
    if mok_test is not None and root == "/" and facts["secure_boot"]["state"] == "enabled":
        facts["secure_boot"]["key_test"] = key_test(mok_test())
    return facts, dict((path, reader.file_state(path)) for path in file_states)
