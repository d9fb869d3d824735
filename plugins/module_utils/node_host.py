# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Node readiness: reading a host (PCI, modules, device nodes, runtime configs) into a view
that the checks in node_gpu_checks.py and node_readiness.py look at.

Runs on the target's Python (3.8+), standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import json
import os
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils import toml_text


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


def scan_files(files):
    """(item, entries) for each readable file, and "path: error" for each that is not TOML."""
    scanned, invalid = [], []
    for item in files:
        try:
            scanned.append((item, scan_toml(item["text"], item["path"])))
        except toml_text.TomlError as exc:
            invalid.append(str(exc))
    return scanned, invalid


def nvidia_runtime_paths(entries, scope):
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
    if text is None:
        return None
    return {"path": path, "text": text, "mtime": _mtime(host_root, path)}


def _mtime(host_root, path):
    try:
        return os.stat(host_path(host_root, path)).st_mtime
    except OSError:
        return None


# The kubelet's own configuration files for each layout (kubeadm packages, k3s, RKE2), and its
# drop-in folder; what kubegpu's kubelet_config writes among them.
KUBELET_CONFIG_FILES = (
    "/var/lib/kubelet/config.yaml",
    "/etc/default/kubelet",
    "/etc/sysconfig/kubelet",
    "/etc/rancher/k3s/config.yaml",
    "/etc/rancher/rke2/config.yaml",
)
KUBELET_RECORD = "/etc/ansible/facts.d/kubegpu_kubelet.fact"
# Written by kubegpu before it changes a daemon's configuration, removed once it restarted.
RESTART_MARKERS = {
    "containerd": "/var/lib/kubegpu/restart-pending/containerd.json",
    "kubelet": "/var/lib/kubegpu/restart-pending/kubelet.json",
}


def read_config_times(host_root, runtime, view):
    """{"runtime": [(path, mtime)], "kubelet": [(path, mtime)], "pending": [names]}: the
    configuration files each daemon reads, with when they last changed, and the daemons a
    kubegpu run left a restart pending for."""
    runtime_files = []
    if runtime == "containerd" and view.get("containerd"):
        containerd = view["containerd"]
        runtime_files = [f for f in [containerd["main"], *containerd["imported"]] if f]
    elif runtime == "docker" and view.get("docker"):
        runtime_files = [view["docker"]]
    elif runtime == "crio":
        runtime_files = list(view.get("crio") or [])
    kubelet = list(KUBELET_CONFIG_FILES)
    record = read_text(host_root, KUBELET_RECORD)
    try:
        recorded = json.loads(record or "{}").get("files") or {}
    except (ValueError, AttributeError):
        recorded = {}  # an unreadable record: the files above still count
    kubelet += sorted(recorded)
    kubelet_times = []
    for path in kubelet:
        mtime = _mtime(host_root, path)
        if mtime is not None and (path, mtime) not in kubelet_times:
            kubelet_times.append((path, mtime))
    return {
        "runtime": [(f["path"], f["mtime"]) for f in runtime_files if f.get("mtime") is not None],
        "kubelet": kubelet_times,
        "pending": sorted(n for n, path in RESTART_MARKERS.items() if _exists(host_root, path)),
    }


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
    view = {
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
    view["config_times"] = read_config_times(host_root, runtime, view)
    return view
