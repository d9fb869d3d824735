# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Readiness of one GPU node, layer by layer, as data.

Two steps, both free of side effects:

1. read_host_view(host_root, runtime) reads what the checks need from a host's file system
   (sysfs, /proc, /dev, configuration files), addressed through host_root so that a mounted
   host (/host in a container) or a test tree can be read the same way as /.
2. evaluate(view, smi, options) turns that view plus the result of nvidia_smi.query() and the
   expectations into a list of checks: name, layer, status (pass|fail|warn|skip), observed,
   expected, remedy (for fail and warn). verdict(checks) sums them up.

Runs on the target's Python (3.8+), standard library only.
"""

from __future__ import absolute_import, division, print_function

import glob
import json
import os
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils import toml_text
from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_smi import (
    REMEDIES,
    NvidiaParseError,
    parse_proc_version,
    version_tuple,
    versions_agree,
)

__metaclass__ = type

STATUSES = ("pass", "fail", "warn", "skip")
LAYERS = (
    "hardware",
    "kernel",
    "driver",
    "gpu",
    "container_toolkit",
    "container_runtime",
    "kubelet",
)
RUNTIMES = ("containerd", "docker", "crio", "none")
MIG_MODES = ("enabled", "disabled")

NVIDIA_VENDOR = "0x10de"
# Units whose state the module asks systemd for (only when host_root is /).
KUBELET_UNITS = ("kubelet", "k3s", "k3s-agent", "rke2-agent", "rke2-server")
RUNTIME_UNITS = {
    "containerd": ("containerd", "k3s", "k3s-agent", "rke2-agent", "rke2-server"),
    "docker": ("docker",),
    "crio": ("crio",),
    "none": (),
}
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager"

CONTAINERD_CONFIGS = (
    "/etc/containerd/config.toml",
    "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
    "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
)
CONTAINERD_DROPIN_DIRS = ("/etc/containerd/conf.d", "/etc/containerd/config.d")
DOCKER_CONFIG = "/etc/docker/daemon.json"
CRIO_CONFIG = "/etc/crio/crio.conf"
CRIO_DROPIN_DIR = "/etc/crio/crio.conf.d"
CDI_DIRS = ("/etc/cdi", "/var/run/cdi", "/run/cdi")
TOOLKIT_BINARIES = ("nvidia-container-runtime", "nvidia-ctk", "nvidia-container-cli")
BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/sbin", "/bin", "/usr/local/nvidia/toolkit")
MODPROBE_DIRS = ("/etc/modprobe.d", "/usr/lib/modprobe.d", "/lib/modprobe.d", "/run/modprobe.d")
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
SIMULATION_README = "SIMULATED-GPU-README"

_READ_LIMIT = 4 * 1024 * 1024


# --- reading a host -----------------------------------------------------------------------------


def host_path(host_root, path):
    """Where an absolute path of the host lies under host_root."""
    return os.path.join(host_root, path.lstrip("/"))


def read_text(host_root, path):
    """The text of a file under host_root, or None when it is absent or unreadable."""
    try:
        with open(host_path(host_root, path), "rb") as handle:
            return handle.read(_READ_LIMIT).decode("utf-8", "replace")
    except (IOError, OSError):
        return None


def _listdir(host_root, path):
    try:
        return sorted(os.listdir(host_path(host_root, path)))
    except (IOError, OSError):
        return None


def _exists(host_root, path):
    return os.path.lexists(host_path(host_root, path))


def _pci_kind(pci_class):
    if pci_class.startswith("0x03"):
        return "gpu"  # display controller: VGA (0x0300) or 3D (0x0302)
    if pci_class.startswith("0x0680"):
        return "nvswitch"  # NVSwitch shows up as "bridge: other"
    return "other"  # HD audio, USB-C controllers on consumer boards, ...


def read_pci(host_root):
    """NVIDIA PCI functions from sysfs: bdf, device, class, kind and the driver bound."""
    entries = _listdir(host_root, "/sys/bus/pci/devices")
    if entries is None:
        return {"readable": False, "functions": []}
    functions = []
    for bdf in entries:
        base = "/sys/bus/pci/devices/" + bdf
        vendor = (read_text(host_root, base + "/vendor") or "").strip().lower()
        if vendor != NVIDIA_VENDOR:
            continue
        pci_class = (read_text(host_root, base + "/class") or "").strip().lower()
        driver_link = host_path(host_root, base + "/driver")
        driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None
        functions.append(
            {
                "bdf": bdf,
                "device": (read_text(host_root, base + "/device") or "").strip().lower(),
                "class": pci_class,
                "kind": _pci_kind(pci_class),
                "driver": driver,
            }
        )
    return {"readable": True, "functions": functions}


def read_modules(host_root):
    text = read_text(host_root, "/proc/modules")
    if text is None:
        return None
    return sorted(set(line.split()[0] for line in text.splitlines() if line.strip()))


_BLACKLIST = re.compile(
    r"^\s*(?:blacklist\s+nouveau\b|install\s+nouveau\s+/bin/(?:false|true))", re.M
)
_CMDLINE_BLACKLIST = re.compile(
    r"(?:^|\s)(?:(?:modprobe|rd\.driver)\.blacklist=\S*\bnouveau\b|nouveau\.modeset=0)"
)


def read_nouveau_blacklist(host_root):
    found = []
    for directory in MODPROBE_DIRS:
        for name in _listdir(host_root, directory) or []:
            if not name.endswith(".conf"):
                continue
            path = directory + "/" + name
            if _BLACKLIST.search(read_text(host_root, path) or ""):
                found.append(path)
    cmdline = read_text(host_root, "/proc/cmdline") or ""
    if _CMDLINE_BLACKLIST.search(cmdline):
        found.append("/proc/cmdline")
    return found


def find_binary(host_root, name, dirs=BIN_DIRS):
    for directory in dirs:
        path = directory + "/" + name
        if os.path.isfile(host_path(host_root, path)):
            return path
    return None


# --- TOML: the shared reader (module_utils/toml_text.py) ---------------------------------------


def scan_toml(text, source="TOML"):
    """Every table and key of a TOML document as (full key path tuple, value).

    Raises toml_text.TomlError on text that is not TOML: containerd and CRI-O refuse such a file
    too, so the checks report it instead of guessing at its keys."""
    return toml_text.scan_entries(text, source)


def toml_get(entries, path):
    return toml_text.entry_value(entries, path)


def _invalid_toml(name, layer, expected, invalid, runtime):
    return make_check(
        name,
        layer,
        "fail",
        "not valid TOML: " + "; ".join(invalid),
        expected,
        "%s does not start with a config it cannot read: fix the file at the place named."
        % runtime,
    )


def _scan_files(files):
    """(item, entries) for each readable file, and "path: error" for each that is not TOML."""
    scanned, invalid = [], []
    for item in files:
        try:
            scanned.append((item, scan_toml(item["text"], item["path"])))
        except toml_text.TomlError as exc:
            invalid.append(str(exc))
    return scanned, invalid


def _nvidia_runtime_paths(entries, scope):
    """Entries that define a runtime named nvidia: (..., runtimes, nvidia, ...) under scope."""
    found = []
    for key, value in entries:
        if not key or key[0] != scope:
            continue
        for i in range(len(key) - 1):
            if key[i] == "runtimes" and key[i + 1] == "nvidia":
                found.append((key, value))
                break
    return found


# --- runtime configuration views --------------------------------------------------------------


def _read_file(host_root, path):
    text = read_text(host_root, path)
    return {"path": path, "text": text} if text is not None else None


def read_containerd(host_root):
    main = None
    for candidate in CONTAINERD_CONFIGS:
        main = _read_file(host_root, candidate)
        if main:
            break
    view = {"main": main, "imports": [], "imported": [], "unimported": []}
    if not main:
        return view
    try:
        entries = scan_toml(main["text"], main["path"])
    except toml_text.TomlError:
        return view  # the check reports it; containerd does not start with it either
    imports = toml_get(entries, ("imports",)) or []
    if not isinstance(imports, list):
        imports = [imports]
    view["imports"] = [str(i) for i in imports]
    base = os.path.dirname(main["path"])
    seen = set()
    for pattern in view["imports"]:
        absolute = pattern if pattern.startswith("/") else base + "/" + pattern
        for match in sorted(glob.glob(host_path(host_root, absolute))):
            rel = "/" + os.path.relpath(match, host_root).replace(os.sep, "/")
            if rel in seen or not os.path.isfile(match):
                continue
            seen.add(rel)
            item = _read_file(host_root, rel)
            if item:
                view["imported"].append(item)
    for directory in CONTAINERD_DROPIN_DIRS:
        for name in _listdir(host_root, directory) or []:
            rel = directory + "/" + name
            if name.endswith(".toml") and rel not in seen:
                item = _read_file(host_root, rel)
                if item:
                    view["unimported"].append(item)
    return view


def read_docker(host_root):
    return _read_file(host_root, DOCKER_CONFIG)


def read_crio(host_root):
    files = []
    main = _read_file(host_root, CRIO_CONFIG)
    if main:
        files.append(main)
    for name in _listdir(host_root, CRIO_DROPIN_DIR) or []:
        item = _read_file(host_root, CRIO_DROPIN_DIR + "/" + name)
        if item:
            files.append(item)
    return files


def read_cdi_specs(host_root):
    specs, seen = [], set()
    for directory in CDI_DIRS:
        for name in _listdir(host_root, directory) or []:
            if not name.endswith((".yaml", ".yml", ".json")):
                continue
            real = os.path.realpath(host_path(host_root, directory + "/" + name))
            if real in seen:
                continue  # /var/run is usually a link to /run
            seen.add(real)
            item = _read_file(host_root, directory + "/" + name)
            if item and "nvidia.com/" in item["text"]:
                specs.append(item)
    return specs


def read_host_view(host_root, runtime="containerd"):
    """Read everything the checks look at; absent files become None or empty lists."""
    dmi = []
    for name in ("product_name", "board_name"):
        text = read_text(host_root, "/sys/class/dmi/id/" + name)
        if text and text.strip():
            dmi.append(text.strip())
    dev = [n for n in (_listdir(host_root, "/dev") or []) if n.startswith("nvidia")]
    plugin_dir = _listdir(host_root, DEVICE_PLUGIN_DIR)
    return {
        "host_root": host_root,
        "simulated": _exists(host_root, "/" + SIMULATION_README),
        "pci": read_pci(host_root),
        "modules": read_modules(host_root),
        "proc_version": read_text(host_root, "/proc/driver/nvidia/version"),
        "sys_module_version": (read_text(host_root, "/sys/module/nvidia/version") or "").strip()
        or None,
        "dev": dev,
        "dmi": dmi,
        "nouveau_blacklist": read_nouveau_blacklist(host_root),
        "toolkit": dict((name, find_binary(host_root, name)) for name in TOOLKIT_BINARIES),
        "cdi_specs": read_cdi_specs(host_root),
        "containerd": read_containerd(host_root) if runtime == "containerd" else None,
        "docker": read_docker(host_root) if runtime == "docker" else None,
        "crio": read_crio(host_root) if runtime == "crio" else None,
        "device_plugin_sockets": plugin_dir,
    }


# --- checks -------------------------------------------------------------------------------------


def make_check(name, layer, status, observed, expected, remedy=None):
    if status not in STATUSES:
        raise ValueError("unknown check status %r" % status)
    return {
        "name": name,
        "layer": layer,
        "status": status,
        "observed": observed,
        "expected": expected,
        "remedy": remedy if status in ("fail", "warn") else None,
    }


def _gpus(smi):
    facts = (smi or {}).get("facts") or {}
    return facts.get("gpus") or []


def _smi_ok(smi):
    return bool(smi and smi.get("ok"))


def _smi_reason(smi):
    failure = (smi or {}).get("failure") or {}
    return "nvidia-smi gave no GPU data (%s)" % failure.get("class", "not run")


def _label(gpu):
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("pci_bus_id"))


def check_pci(view):
    pci = view["pci"]
    gpus = [f for f in pci["functions"] if f["kind"] == "gpu"]
    expected = "at least one NVIDIA display/3D PCI function (vendor 0x10de, class 0x03xxxx)"
    if not pci["readable"]:
        return make_check(
            "pci_gpus_present",
            "hardware",
            "fail",
            "sysfs not readable under %s" % view["host_root"],
            expected,
            "Mount the host's /sys (read-only is enough) under host_root.",
        )
    if not gpus:
        return make_check(
            "pci_gpus_present",
            "hardware",
            "fail",
            "no NVIDIA GPU among the PCI functions",
            expected,
            "This machine has no NVIDIA GPU on its PCI bus (or the VM was given none): check the "
            "hardware, the hypervisor's passthrough and `lspci -nn -d 10de:`.",
        )
    listed = ", ".join(
        "%s [10de:%s] %s" % (f["bdf"], f["device"][2:], f["driver"] or "no driver") for f in gpus
    )
    return make_check(
        "pci_gpus_present",
        "hardware",
        "pass",
        "%d NVIDIA GPU(s): %s" % (len(gpus), listed),
        expected,
    )


def check_nouveau(view):
    modules = view["modules"]
    checks = []
    if modules is None:
        checks.append(
            make_check(
                "nouveau_not_loaded",
                "kernel",
                "skip",
                "/proc/modules not readable",
                "nouveau not loaded",
            )
        )
    elif "nouveau" in modules:
        checks.append(
            make_check(
                "nouveau_not_loaded",
                "kernel",
                "fail",
                "nouveau is loaded",
                "nouveau not loaded",
                "Blacklist nouveau (role kubegpu.gpu.nvidia_driver writes /etc/modprobe.d), rebuild the "
                "initramfs and reboot.",
            )
        )
    else:
        checks.append(
            make_check(
                "nouveau_not_loaded",
                "kernel",
                "pass",
                "nouveau is not loaded",
                "nouveau not loaded",
            )
        )
    found = view["nouveau_blacklist"]
    if found:
        checks.append(
            make_check(
                "nouveau_blacklisted",
                "kernel",
                "pass",
                "blacklisted in " + ", ".join(found),
                "nouveau blacklisted in modprobe.d or on the kernel command line",
            )
        )
    else:
        checks.append(
            make_check(
                "nouveau_blacklisted",
                "kernel",
                "warn",
                "no blacklist entry for nouveau found",
                "nouveau blacklisted in modprobe.d or on the kernel command line",
                "Add `blacklist nouveau` and `options nouveau modeset=0` to a file in /etc/modprobe.d "
                "and rebuild the initramfs, so that nouveau cannot claim the GPU at the next boot.",
            )
        )
    return checks


def _kernel_module(view):
    """(version, flavor) of the loaded nvidia module, from /proc or /sys."""
    if view["proc_version"]:
        try:
            parsed = parse_proc_version(view["proc_version"])
            return parsed["version"], parsed["flavor"]
        except NvidiaParseError:
            pass
    if view["sys_module_version"]:
        return view["sys_module_version"], None
    return None, None


def check_modules(view):
    modules = view["modules"]
    expected = "nvidia loaded (with nvidia_uvm for CUDA)"
    if modules is None:
        return make_check(
            "nvidia_modules_loaded", "kernel", "skip", "/proc/modules not readable", expected
        )
    loaded = [m for m in modules if m == "nvidia" or m.startswith("nvidia_")]
    version, flavor = _kernel_module(view)
    detail = "loaded: %s" % (", ".join(loaded) or "none")
    if version:
        detail += "; module %s (%s)" % (version, flavor or "flavor unknown")
    if "nvidia" not in loaded:
        return make_check(
            "nvidia_modules_loaded",
            "kernel",
            "fail",
            detail,
            expected,
            REMEDIES["driver_not_loaded"],
        )
    if "nvidia_uvm" not in loaded:
        return make_check(
            "nvidia_modules_loaded",
            "kernel",
            "warn",
            detail,
            expected,
            "nvidia_uvm is not loaded yet; CUDA loads it on first use through nvidia-modprobe. "
            "Load it at boot (`nvidia_uvm` in /etc/modules-load.d) so containers find /dev/nvidia-uvm.",
        )
    return make_check("nvidia_modules_loaded", "kernel", "pass", detail, expected)


def _userspace_version(smi):
    facts = (smi or {}).get("facts") or {}
    if facts.get("driver_version"):
        return facts["driver_version"], "nvidia-smi"
    failure = (smi or {}).get("failure") or {}
    if failure.get("nvml_library_version"):
        return failure["nvml_library_version"], "NVML library"
    return None, None


def check_module_version(view, smi):
    kernel, _ = _kernel_module(view)
    user, source = _userspace_version(smi)
    expected = "kernel module version == userspace driver version"
    if not kernel or not user:
        missing = (
            "kernel module version" if not kernel else "userspace version (%s)" % _smi_reason(smi)
        )
        return make_check(
            "kernel_module_matches_userspace",
            "kernel",
            "skip",
            "no %s to compare" % missing,
            expected,
        )
    observed = "kernel module %s, %s %s" % (kernel, source, user)
    if versions_agree(kernel, user):
        return make_check("kernel_module_matches_userspace", "kernel", "pass", observed, expected)
    return make_check(
        "kernel_module_matches_userspace",
        "kernel",
        "fail",
        observed,
        expected,
        REMEDIES["driver_library_mismatch"],
    )


def _expected_gpu_minors(view, smi):
    minors = [g.get("minor_number") for g in _gpus(smi) if g.get("minor_number") is not None]
    if minors:
        return sorted(minors)
    count = len([f for f in view["pci"]["functions"] if f["kind"] == "gpu"])
    return list(range(count))


def check_device_nodes(view, smi):
    minors = _expected_gpu_minors(view, smi)
    wanted = ["nvidiactl"] + ["nvidia%d" % m for m in minors]
    expected = "/dev/" + ", /dev/".join(wanted) + " (and /dev/nvidia-uvm)"
    if not minors:
        return make_check(
            "device_nodes",
            "kernel",
            "skip",
            "no GPU to expect device nodes for",
            "/dev/nvidiactl and /dev/nvidia<N> per GPU",
        )
    present = set(view["dev"])
    missing = [n for n in wanted if n not in present]
    observed = "present: " + (", ".join(sorted(present)) or "none")
    if missing:
        return make_check(
            "device_nodes",
            "kernel",
            "fail",
            observed + "; missing: " + ", ".join(missing),
            expected,
            "Device nodes appear once the nvidia module is loaded and nvidia-modprobe or "
            "nvidia-persistenced has run: load the module, then run `nvidia-modprobe -c0 -u` "
            "(or `nvidia-smi` as root).",
        )
    if "nvidia-uvm" not in present:
        return make_check(
            "device_nodes",
            "kernel",
            "warn",
            observed + "; missing: nvidia-uvm",
            expected,
            "Run `nvidia-modprobe -u -c=0` so that /dev/nvidia-uvm exists "
            "before containers start; CUDA in containers needs it.",
        )
    mig = any(g["mig"]["current"] for g in _gpus(smi))
    if mig and "nvidia-caps" not in present:
        return make_check(
            "device_nodes",
            "kernel",
            "warn",
            observed + "; missing: nvidia-caps/",
            expected + " and /dev/nvidia-caps for MIG",
            "Create the MIG capability nodes: `nvidia-modprobe -f "
            "/proc/driver/nvidia/capabilities/mig/config`, or run nvidia-ctk "
            "system create-dev-char-symlinks.",
        )
    return make_check("device_nodes", "kernel", "pass", observed, expected)


def check_nvidia_smi(smi):
    expected = "nvidia-smi -q -x answers with every GPU"
    if _smi_ok(smi):
        facts = smi["facts"]
        observed = "driver %s, CUDA %s, %d GPU(s)" % (
            facts.get("driver_version"),
            facts.get("cuda_version"),
            len(facts["gpus"]),
        )
        if smi.get("simulated"):
            observed += " (SIMULATED nvidia-smi replaying a real capture)"
        return make_check("nvidia_smi_healthy", "driver", "pass", observed, expected)
    failure = (smi or {}).get("failure") or {}
    observed = "%s (rc %s): %s" % (
        failure.get("class", "unknown"),
        failure.get("rc"),
        failure.get("message", ""),
    )
    return make_check(
        "nvidia_smi_healthy",
        "driver",
        "fail",
        observed,
        expected,
        failure.get("remedy") or REMEDIES["unknown"],
    )


def check_gpu_count(view, smi, expected_count):
    pci = [f for f in view["pci"]["functions"] if f["kind"] == "gpu"]
    drivers = {}
    for function in pci:
        drivers[function["driver"] or "none"] = drivers.get(function["driver"] or "none", 0) + 1
    bound = ", ".join("%d on %s" % (n, d) for d, n in sorted(drivers.items()))
    parts = ["PCI %d (%s)" % (len(pci), bound or "none")]
    smi_count = len(_gpus(smi)) if _smi_ok(smi) else None
    if smi_count is not None:
        parts.append("nvidia-smi %d" % smi_count)
    observed = ", ".join(parts)
    expected = "nvidia-smi count == PCI count"
    if expected_count is not None:
        expected += " == %d" % expected_count
    problems = []
    if smi_count is not None and smi_count != len(pci):
        problems.append("nvidia-smi sees %d of %d PCI GPUs" % (smi_count, len(pci)))
    if expected_count is not None:
        seen = smi_count if smi_count is not None else len(pci)
        if seen != expected_count:
            problems.append("%d GPU(s) where %d are expected" % (seen, expected_count))
    if problems:
        return make_check(
            "gpu_count",
            "driver",
            "fail",
            observed + ": " + "; ".join(problems),
            expected,
            "A GPU is missing: look for 'RmInitAdapter failed' and Xid messages in `dmesg`, check "
            "which driver each GPU is bound to (vfio-pci keeps it from the nvidia driver) and "
            "reseat or replace the GPU; or correct kubegpu_expected_gpu_count.",
        )
    if smi_count is None and expected_count is None:
        return make_check(
            "gpu_count", "driver", "skip", observed + "; " + _smi_reason(smi), expected
        )
    return make_check("gpu_count", "driver", "pass", observed, expected)


def driver_branch_matches(version, branch):
    """'580' pins the major branch; '580.95.05' pins a version (compared on shared parts)."""
    if "." in branch:
        return versions_agree(version, branch)
    parsed = version_tuple(version)
    return parsed is not None and parsed[0] == int(branch)


def check_driver_branch(view, smi, branch):
    expected = (
        "driver branch %s" % branch if branch else "any driver branch (nvidia_driver_branch unset)"
    )
    if not branch:
        return make_check(
            "driver_branch", "driver", "skip", "nvidia_driver_branch is not set", expected
        )
    version, source = _userspace_version(smi)
    if not version:
        version, _ = _kernel_module(view)
        source = "kernel module"
    if not version:
        return make_check("driver_branch", "driver", "skip", "no driver version found", expected)
    observed = "%s %s" % (source, version)
    if driver_branch_matches(version, branch):
        return make_check("driver_branch", "driver", "pass", observed, expected)
    return make_check(
        "driver_branch",
        "driver",
        "fail",
        observed,
        expected,
        "Install the pinned branch with role kubegpu.gpu.nvidia_driver (playbook "
        "upgrade_driver.yml drains and reboots the node), or set nvidia_driver_branch to the "
        "branch the node runs.",
    )


def check_persistence(smi):
    expected = "persistence mode enabled on every GPU (nvidia-persistenced running)"
    if not _smi_ok(smi):
        return make_check("persistence_mode", "driver", "skip", _smi_reason(smi), expected)
    states = [(g, g.get("persistence_mode")) for g in _gpus(smi)]
    off = [_label(g) for g, state in states if state is False]
    if off:
        return make_check(
            "persistence_mode",
            "driver",
            "warn",
            "disabled on " + ", ".join(off),
            expected,
            "Enable and start nvidia-persistenced (`systemctl enable --now nvidia-persistenced`) "
            "so the driver stays initialised between jobs.",
        )
    if all(state is None for _, state in states):
        return make_check("persistence_mode", "driver", "skip", "not reported", expected)
    return make_check("persistence_mode", "driver", "pass", "enabled on all GPUs", expected)


def _nvswitch_evidence(view, smi):
    evidence = []
    switches = [f for f in view["pci"]["functions"] if f["kind"] == "nvswitch"]
    if switches:
        evidence.append("%d NVSwitch PCI function(s)" % len(switches))
    for name in view["dmi"]:
        if re.search(r"\b[DH]GX\b", name, re.IGNORECASE):
            evidence.append("system '%s'" % name)
    return evidence


def check_fabric_manager(view, smi, services, services_reason):
    expected = "nvidia-fabricmanager active on NVSwitch systems"
    evidence = _nvswitch_evidence(view, smi)
    if not evidence:
        return make_check(
            "fabric_manager",
            "driver",
            "skip",
            "no NVSwitch PCI functions and no HGX/DGX system name: not needed",
            expected,
        )
    remedy = (
        "Install nvidia-fabricmanager of exactly the driver's version and run "
        "`systemctl enable --now nvidia-fabricmanager`; CUDA fails to initialise on NVSwitch "
        "systems without it."
    )
    observed = "; ".join(evidence)
    if services is not None:
        state = services.get(FABRIC_MANAGER_UNIT)
        observed += "; %s is %s" % (FABRIC_MANAGER_UNIT, state or "unknown")
        status = "pass" if state == "active" else "fail"
        return make_check("fabric_manager", "driver", status, observed, expected, remedy)
    states = [(g.get("fabric") or {}) for g in _gpus(smi)]
    known = [s for s in states if s.get("state")]
    if known:
        done = all(
            s["state"].lower() == "completed" and (s.get("status") or "").lower() == "success"
            for s in known
        )
        observed += "; GPU fabric state: " + ", ".join(
            "%s/%s" % (s.get("state"), s.get("status")) for s in known
        )
        return make_check(
            "fabric_manager", "driver", "pass" if done else "fail", observed, expected, remedy
        )
    return make_check(
        "fabric_manager",
        "driver",
        "skip",
        observed + "; service state unknown: " + services_reason,
        expected,
    )


def check_ecc(smi):
    expected = "no uncorrectable ECC errors; ECC mode not pending a change"
    if not _smi_ok(smi):
        return make_check("ecc_errors", "gpu", "skip", _smi_reason(smi), expected)
    gpus = _gpus(smi)
    volatile = [
        (g, g["ecc"]["volatile_uncorrected"])
        for g in gpus
        if (g["ecc"]["volatile_uncorrected"] or 0) > 0
    ]
    aggregate = [
        (g, g["ecc"]["aggregate_uncorrected"])
        for g in gpus
        if (g["ecc"]["aggregate_uncorrected"] or 0) > 0
    ]
    pending = [
        g
        for g in gpus
        if g["ecc"]["current"] is not None
        and g["ecc"]["pending"] is not None
        and g["ecc"]["current"] != g["ecc"]["pending"]
    ]
    if volatile:
        return make_check(
            "ecc_errors",
            "gpu",
            "fail",
            "uncorrectable errors since boot: "
            + ", ".join("%s: %d" % (_label(g), n) for g, n in volatile),
            expected,
            "Drain the node, reset the GPU (`nvidia-smi -r -i <bus id>`) or reboot, and check "
            "retired pages / remapped rows; replace the GPU if errors return.",
        )
    if all(g["ecc"]["current"] is None for g in gpus):
        return make_check("ecc_errors", "gpu", "skip", "ECC not supported by these GPUs", expected)
    modes = ", ".join(
        "%s ECC %s" % (_label(g), {True: "on", False: "off", None: "n/a"}[g["ecc"]["current"]])
        for g in gpus
    )
    if aggregate:
        return make_check(
            "ecc_errors",
            "gpu",
            "warn",
            modes
            + "; uncorrectable errors in the GPU's lifetime: "
            + ", ".join("%s: %d" % (_label(g), n) for g, n in aggregate),
            expected,
            "None since boot, but the GPU has a history: watch it with DCGM and check its retired "
            "pages or remapped rows.",
        )
    if pending:
        return make_check(
            "ecc_errors",
            "gpu",
            "warn",
            modes + "; ECC change pending on " + ", ".join(_label(g) for g in pending),
            expected,
            "An ECC mode change takes effect after a GPU reset or reboot: drain and reboot the node.",
        )
    return make_check("ecc_errors", "gpu", "pass", modes + "; no uncorrectable errors", expected)


def check_retired_pages(smi):
    expected = "no page retirement pending"
    if not _smi_ok(smi):
        return make_check("retired_pages", "gpu", "skip", _smi_reason(smi), expected)
    gpus = _gpus(smi)
    pending = [g for g in gpus if g.get("retired_pages_pending") is True]
    if pending:
        return make_check(
            "retired_pages",
            "gpu",
            "fail",
            "retirement pending on " + ", ".join(_label(g) for g in pending),
            expected,
            "Retired pages take effect after a GPU reset: drain the node and reboot (or "
            "`nvidia-smi -r`); replace the GPU when retirements keep growing.",
        )
    if all(g.get("retired_pages_pending") is None for g in gpus):
        return make_check(
            "retired_pages",
            "gpu",
            "skip",
            "page retirement not reported (GPUs with row remapping report that instead)",
            expected,
        )
    counts = ", ".join("%s: %s retired" % (_label(g), g.get("retired_pages_count")) for g in gpus)
    return make_check("retired_pages", "gpu", "pass", counts + "; none pending", expected)


def check_row_remapping(smi):
    expected = "no row remap pending and no remap failure"
    if not _smi_ok(smi):
        return make_check("row_remapping", "gpu", "skip", _smi_reason(smi), expected)
    gpus = _gpus(smi)
    failed = [g for g in gpus if g["remapped_rows"]["failure"] is True]
    pending = [g for g in gpus if g["remapped_rows"]["pending"] is True]
    if failed:
        return make_check(
            "row_remapping",
            "gpu",
            "fail",
            "row remap failure on " + ", ".join(_label(g) for g in failed),
            expected,
            "The GPU ran out of spare rows: drain the node and have the GPU replaced.",
        )
    if pending:
        return make_check(
            "row_remapping",
            "gpu",
            "fail",
            "row remap pending on " + ", ".join(_label(g) for g in pending),
            expected,
            "Drain the node and reset the GPU (`nvidia-smi -r -i <bus id>`) or reboot so "
            "the pending row remap is applied.",
        )
    if all(
        g["remapped_rows"]["pending"] is None and g["remapped_rows"]["failure"] is None
        for g in gpus
    ):
        return make_check(
            "row_remapping", "gpu", "skip", "row remapping not reported by these GPUs", expected
        )
    return make_check("row_remapping", "gpu", "pass", "no remap pending or failed", expected)


def check_mig(smi, desired):
    expected = "MIG %s on every GPU" % desired if desired else "any MIG mode (mig_mode unset)"
    if not desired:
        return make_check("mig_mode", "gpu", "skip", "mig_mode is not set", expected)
    if not _smi_ok(smi):
        return make_check("mig_mode", "gpu", "skip", _smi_reason(smi), expected)
    want = desired == "enabled"
    wrong, unsupported, pending = [], [], []
    for gpu in _gpus(smi):
        current = gpu["mig"]["current"]
        if current is None:
            if want:
                unsupported.append(_label(gpu))
            continue
        if current != want:
            wrong.append(_label(gpu))
        if gpu["mig"]["pending"] is not None and gpu["mig"]["pending"] != current:
            pending.append(_label(gpu))
    states = ", ".join(
        "%s MIG %s"
        % (_label(g), {True: "enabled", False: "disabled", None: "n/a"}[g["mig"]["current"]])
        for g in _gpus(smi)
    )
    if unsupported:
        return make_check(
            "mig_mode",
            "gpu",
            "fail",
            states + "; no MIG support: " + ", ".join(unsupported),
            expected,
            "Only A100/A30/H100/H200/B200-class GPUs support MIG: set "
            "mig_mode to disabled for this node.",
        )
    if wrong:
        verb = 1 if want else 0
        return make_check(
            "mig_mode",
            "gpu",
            "fail",
            states,
            expected,
            "Set it with `nvidia-smi -i <index> -mig %d` (or the MIG manager's config), then "
            "reset the GPU or reboot the drained node." % verb,
        )
    if pending:
        return make_check(
            "mig_mode",
            "gpu",
            "warn",
            states + "; change pending on " + ", ".join(pending),
            expected,
            "A MIG mode change waits for a GPU reset: drain and reboot the node.",
        )
    return make_check("mig_mode", "gpu", "pass", states, expected)


def check_toolkit(view, runtime):
    expected = "nvidia-container-runtime or nvidia-ctk installed"
    if runtime == "none":
        return make_check(
            "container_toolkit_installed", "container_toolkit", "skip", "runtime is none", expected
        )
    found = dict((k, v) for k, v in view["toolkit"].items() if v)
    observed = ", ".join(sorted(found.values())) or "none of " + ", ".join(TOOLKIT_BINARIES)
    if found.get("nvidia-container-runtime") or found.get("nvidia-ctk"):
        return make_check(
            "container_toolkit_installed", "container_toolkit", "pass", observed, expected
        )
    return make_check(
        "container_toolkit_installed",
        "container_toolkit",
        "fail",
        observed,
        expected,
        "Install nvidia-container-toolkit with role kubegpu.gpu.nvidia_container_toolkit.",
    )


_CDI_NAME = re.compile(r"^\s*-?\s*\"?name\"?\s*:\s*[\"']?([^\"',\s}]+)", re.MULTILINE)


def check_cdi(view, smi, runtime):
    expected = "a CDI spec for nvidia.com/gpu in /etc/cdi or /var/run/cdi naming every GPU"
    if runtime == "none":
        return make_check("cdi_spec", "container_toolkit", "skip", "runtime is none", expected)
    specs = view["cdi_specs"]
    remedy = (
        "Generate it: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (role "
        "kubegpu.gpu.nvidia_container_toolkit does), and again after a driver or GPU change."
    )
    if not specs:
        return make_check(
            "cdi_spec", "container_toolkit", "fail", "no NVIDIA CDI spec found", expected, remedy
        )
    names = set()
    for spec in specs:
        names.update(_CDI_NAME.findall(spec["text"]))
    observed = "%s; devices: %s" % (
        ", ".join(s["path"] for s in specs),
        ", ".join(sorted(names)) or "none",
    )
    gpus = _gpus(smi) if _smi_ok(smi) else []
    missing = [g for g in gpus if str(g["index"]) not in names and g.get("uuid") not in names]
    if missing:
        return make_check(
            "cdi_spec",
            "container_toolkit",
            "warn",
            observed + "; not in the spec: " + ", ".join(_label(g) for g in missing),
            expected,
            remedy,
        )
    return make_check("cdi_spec", "container_toolkit", "pass", observed, expected)


def _binary_present(view, path):
    if path.startswith("/"):
        return os.path.isfile(host_path(view["host_root"], path))
    return find_binary(view["host_root"], path) is not None


def _check_containerd(view):
    name, layer = "runtime_nvidia_configured", "container_runtime"
    expected = "containerd config (with its imports) defines the nvidia runtime"
    data = view["containerd"] or {}
    remedy = (
        "Let role kubegpu.gpu.container_runtime write the nvidia runtime drop-in and import it "
        "from the main config (module kubegpu.gpu.containerd_runtime)."
    )
    main = data.get("main")
    if not main:
        return make_check(
            name,
            layer,
            "fail",
            "no containerd config (%s): built-in defaults have no nvidia runtime"
            % ", ".join(CONTAINERD_CONFIGS),
            expected,
            remedy,
        )
    files, invalid = _scan_files([main] + data["imported"])
    if invalid:
        return _invalid_toml(name, layer, expected, invalid, "containerd")
    main_version = toml_get(files[0][1], ("version",))
    defined, binaries, defaults, too_new = [], [], [], []
    for item, entries in files:
        if _nvidia_runtime_paths(entries, "plugins"):
            defined.append(item["path"])
        for key, value in _nvidia_runtime_paths(entries, "plugins"):
            if key[-1] == "BinaryName" and isinstance(value, str):
                binaries.append(value)
        for key, value in entries:
            if key and key[-1] == "default_runtime_name" and isinstance(value, str):
                defaults.append(value)
        version = toml_get(entries, ("version",))
        if (
            item is not main
            and isinstance(version, int)
            and isinstance(main_version, int)
            and version > main_version
        ):
            too_new.append("%s (version %d > %d)" % (item["path"], version, main_version))
    observed = "%s (version %s), imports %s" % (
        main["path"],
        main_version,
        data["imports"] or "none",
    )
    if too_new:
        return make_check(
            name,
            layer,
            "fail",
            observed + "; drop-in newer than main config: " + ", ".join(too_new),
            expected,
            "containerd exits when an imported file has a higher config version than "
            "the main config: write the drop-in with the main config's version.",
        )
    if not defined:
        stray = [
            f["path"]
            for f, entries in _scan_files(data["unimported"])[0]
            if _nvidia_runtime_paths(entries, "plugins")
        ]
        if stray:
            return make_check(
                name,
                layer,
                "fail",
                observed
                + "; nvidia runtime only in files containerd does not import: "
                + ", ".join(stray),
                expected,
                "Add the drop-in's directory to `imports` in %s (nvidia-ctk 1.18.0 writes to "
                "/etc/containerd/config.d while imports often name conf.d), then restart "
                "containerd." % main["path"],
            )
        return make_check(name, layer, "fail", observed + "; no nvidia runtime", expected, remedy)
    observed += "; nvidia runtime in " + ", ".join(defined)
    if defaults:
        observed += "; default runtime " + defaults[-1]
    missing = [b for b in binaries if not _binary_present(view, b)]
    if binaries:
        observed += "; BinaryName " + ", ".join(binaries)
    if missing:
        return make_check(
            name,
            layer,
            "fail",
            observed + "; missing: " + ", ".join(missing),
            expected,
            "Install nvidia-container-toolkit, or point BinaryName at "
            "where nvidia-container-runtime is installed.",
        )
    return make_check(name, layer, "pass", observed, expected)


def _check_docker(view):
    name, layer = "runtime_nvidia_configured", "container_runtime"
    expected = "%s defines runtimes.nvidia" % DOCKER_CONFIG
    remedy = (
        "Configure it with role kubegpu.gpu.container_runtime (or `nvidia-ctk runtime "
        "configure --runtime=docker`) and restart docker."
    )
    item = view["docker"]
    if not item:
        return make_check(name, layer, "fail", "%s not found" % DOCKER_CONFIG, expected, remedy)
    try:
        config = json.loads(item["text"])
    except ValueError as exc:
        return make_check(
            name,
            layer,
            "fail",
            "%s is not valid JSON: %s" % (DOCKER_CONFIG, exc),
            expected,
            "Fix the JSON; dockerd does not start with an invalid daemon.json.",
        )
    runtimes = config.get("runtimes") if isinstance(config, dict) else None
    nvidia = runtimes.get("nvidia") if isinstance(runtimes, dict) else None
    if not isinstance(nvidia, dict):
        return make_check(
            name, layer, "fail", "%s has no runtimes.nvidia" % DOCKER_CONFIG, expected, remedy
        )
    path = nvidia.get("path") or ""
    observed = "runtimes.nvidia.path %s; default-runtime %s" % (
        path or "(none)",
        config.get("default-runtime", "runc (unset)"),
    )
    if not path or not _binary_present(view, path):
        return make_check(
            name,
            layer,
            "fail",
            observed + "; runtime binary not found",
            expected,
            "Install nvidia-container-toolkit, or fix runtimes.nvidia.path.",
        )
    return make_check(name, layer, "pass", observed, expected)


def _check_crio(view):
    name, layer = "runtime_nvidia_configured", "container_runtime"
    expected = "CRI-O config defines [crio.runtime.runtimes.nvidia]"
    files = view["crio"] or []
    scanned, invalid = _scan_files(files)
    if invalid:
        return _invalid_toml(name, layer, expected, invalid, "CRI-O")
    defined, paths = [], []
    for item, entries in scanned:
        found = _nvidia_runtime_paths(entries, "crio")
        if found:
            defined.append(item["path"])
        paths.extend(v for k, v in found if k[-1] == "runtime_path" and isinstance(v, str))
    read = ", ".join(f["path"] for f in files) or "no CRI-O config"
    if not defined:
        return make_check(
            name,
            layer,
            "fail",
            read + "; no nvidia runtime",
            expected,
            "Configure it with role kubegpu.gpu.container_runtime (or `nvidia-ctk "
            "runtime configure --runtime=crio`) and restart crio.",
        )
    observed = "nvidia runtime in " + ", ".join(defined)
    missing = [p for p in paths if not _binary_present(view, p)]
    if missing:
        return make_check(
            name,
            layer,
            "fail",
            observed + "; missing: " + ", ".join(missing),
            expected,
            "Install nvidia-container-toolkit, or fix runtime_path.",
        )
    return make_check(name, layer, "pass", observed, expected)


def check_runtime(view, runtime):
    if runtime == "none":
        return make_check(
            "runtime_nvidia_configured",
            "container_runtime",
            "skip",
            "runtime is none",
            "no container runtime to check",
        )
    return {"containerd": _check_containerd, "docker": _check_docker, "crio": _check_crio}[runtime](
        view
    )


def _service_check(name, layer, units, services, services_reason, remedy):
    expected = "one of %s active" % ", ".join(units)
    if services is None:
        return make_check(
            name, layer, "skip", "service state unknown: " + services_reason, expected
        )
    states = ", ".join("%s %s" % (u, services.get(u) or "unknown") for u in units)
    if any(services.get(u) == "active" for u in units):
        return make_check(name, layer, "pass", states, expected)
    return make_check(name, layer, "fail", states, expected, remedy)


def check_runtime_service(runtime, services, services_reason):
    if runtime == "none":
        return make_check(
            "runtime_service",
            "container_runtime",
            "skip",
            "runtime is none",
            "no container runtime to check",
        )
    return _service_check(
        "runtime_service",
        "container_runtime",
        RUNTIME_UNITS[runtime],
        services,
        services_reason,
        "Start it: `systemctl enable --now %s`, and read "
        "`journalctl -u %s` if it does not stay up." % (runtime, runtime),
    )


def check_kubelet(view, services, services_reason, enabled):
    if not enabled:
        return [
            make_check(n, "kubelet", "skip", "check_kubelet is false", "not checked")
            for n in (
                "kubelet_running",
                "kubelet_device_plugin_socket",
                "nvidia_device_plugin_registered",
            )
        ]
    checks = [
        _service_check(
            "kubelet_running",
            "kubelet",
            KUBELET_UNITS,
            services,
            services_reason,
            "Start the kubelet (`systemctl enable --now kubelet`) and read "
            "`journalctl -u kubelet`; join the node to the cluster first.",
        )
    ]
    sockets = view["device_plugin_sockets"]
    expected = DEVICE_PLUGIN_DIR + "/kubelet.sock"
    if sockets is not None and "kubelet.sock" in sockets:
        checks.append(
            make_check(
                "kubelet_device_plugin_socket", "kubelet", "pass", expected + " present", expected
            )
        )
    else:
        checks.append(
            make_check(
                "kubelet_device_plugin_socket",
                "kubelet",
                "fail",
                expected + " missing",
                expected,
                "The kubelet creates its device plugin socket when it runs: start the kubelet; with a "
                "non-default --root-dir, mount that directory where the device plugin expects it.",
            )
        )
    plugins = [s for s in (sockets or []) if s.startswith("nvidia")]
    expected = "an nvidia*.sock registered in " + DEVICE_PLUGIN_DIR
    if plugins:
        checks.append(
            make_check(
                "nvidia_device_plugin_registered", "kubelet", "pass", ", ".join(plugins), expected
            )
        )
    else:
        checks.append(
            make_check(
                "nvidia_device_plugin_registered",
                "kubelet",
                "warn",
                "no nvidia device plugin socket",
                expected,
                "Deploy the NVIDIA device plugin (role kubegpu.gpu.gpu_cluster) and check "
                "its pod on this node.",
            )
        )
    return checks


DEFAULT_OPTIONS = {
    "expected_gpu_count": None,
    "driver_branch": None,
    "mig_mode": None,
    "runtime": "containerd",
    "check_kubelet": True,
    "services": None,
    "services_reason": "not asked",
}


def evaluate(view, smi, options=None):
    """All checks, in layer order. smi is nvidia_smi.query()'s result; options as DEFAULT_OPTIONS.

    options["services"] maps unit names to `systemctl is-active` answers, or is None when the
    service state cannot be read (host_root is not /); options["services_reason"] says why.
    """
    opts = dict(DEFAULT_OPTIONS)
    opts.update(options or {})
    runtime = opts["runtime"]
    services = opts["services"]
    reason = opts["services_reason"]
    checks = [check_pci(view)]
    checks.extend(check_nouveau(view))
    checks.append(check_modules(view))
    checks.append(check_module_version(view, smi))
    checks.append(check_device_nodes(view, smi))
    checks.append(check_nvidia_smi(smi))
    checks.append(check_gpu_count(view, smi, opts["expected_gpu_count"]))
    checks.append(check_driver_branch(view, smi, opts["driver_branch"]))
    checks.append(check_persistence(smi))
    checks.append(check_fabric_manager(view, smi, services, reason))
    checks.append(check_ecc(smi))
    checks.append(check_retired_pages(smi))
    checks.append(check_row_remapping(smi))
    checks.append(check_mig(smi, opts["mig_mode"]))
    checks.append(check_toolkit(view, runtime))
    checks.append(check_cdi(view, smi, runtime))
    checks.append(check_runtime(view, runtime))
    checks.append(check_runtime_service(runtime, services, reason))
    checks.extend(check_kubelet(view, services, reason, opts["check_kubelet"]))
    return checks


def summarize(checks):
    counts = dict((s, 0) for s in STATUSES)
    for check in checks:
        counts[check["status"]] += 1
    return counts


def verdict(checks):
    """not_ready if any check failed, ready_with_warnings if any warned, else ready."""
    counts = summarize(checks)
    if counts["fail"]:
        return "not_ready"
    if counts["warn"]:
        return "ready_with_warnings"
    return "ready"


def failing(checks, fail_on):
    """The checks whose status is one of fail_on."""
    return [c for c in checks if c["status"] in fail_on]
