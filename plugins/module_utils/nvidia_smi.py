# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Parsers for what nvidia-smi and the NVIDIA kernel module print.

Everything here is a pure function over text: it runs on the target's Python (3.8+), imports
only the standard library, and is tested against real captured outputs.

- parse_query_xml(text): `nvidia-smi -q -x`
- parse_gpu_list(text): `nvidia-smi -L`
- classify_failure(output, rc): why nvidia-smi did not answer, as one class of FAILURE_CLASSES
- parse_proc_version(text): /proc/driver/nvidia/version
- REMEDIES: one hint a person can act on, per failure class
"""

from __future__ import absolute_import, division, print_function

import os
import re

# The XML is the local output of nvidia-smi, run by this module on the same host, not data from
# the network; defusedxml is not available on targets, so the standard parser is used. Entity
# expansion is not a concern for this input, and external DTDs are never fetched by ElementTree.
import xml.etree.ElementTree as ET

__metaclass__ = type

FAILURE_CLASSES = (
    "not_installed",
    "driver_not_loaded",
    "driver_library_mismatch",
    "no_devices",
    "gpu_lost",
    "gpu_error",
    "unknown",
)

REMEDIES = {
    "not_installed": (
        "nvidia-smi or libnvidia-ml is missing: install the NVIDIA driver's userspace packages "
        "(role kubegpu.gpu.nvidia_driver), or set nvidia_smi to the binary's path."
    ),
    "driver_not_loaded": (
        "The nvidia kernel module is not loaded: check `lsmod | grep nvidia` and "
        "`dmesg | grep -i nvrm`, build the module for the running kernel (DKMS) or boot the "
        "kernel it was built for, make sure nouveau is blacklisted and Secure Boot accepts the "
        "module, then run `modprobe nvidia`."
    ),
    "driver_library_mismatch": (
        "The loaded kernel module and the userspace libraries are different versions (usually a "
        "driver upgrade without a reboot): drain the node and reboot it, or unload and reload "
        "the nvidia modules."
    ),
    "no_devices": (
        "The driver is loaded but no GPU came up: look for 'RmInitAdapter failed' in `dmesg`, "
        "check that the GPU is bound to the nvidia driver (not vfio-pci), that this driver "
        "branch supports the GPU, and the BIOS settings (Above 4G decoding, Resizable BAR)."
    ),
    "gpu_lost": (
        "A GPU fell off the bus: drain the node and reboot it; if it happens again, check power, "
        "cooling and seating (Xid 79 in `dmesg`) and have the GPU replaced."
    ),
    "gpu_error": (
        "A GPU returned an error: read the Xid messages in `dmesg`, drain the node and reset the "
        "GPU (`nvidia-smi -r -i <bus id>`) or reboot; have it replaced if the error comes back."
    ),
    "unknown": (
        "nvidia-smi failed in a way kubegpu does not recognise: run it by hand on the node and "
        "read `dmesg | grep -i -e nvrm -e xid`."
    ),
}

# Printed (to stderr) by kubegpu's simulated nvidia-smi on every call, so that any result built
# from it can say that it came from a simulation.
SIMULATION_MARKER = "KUBEGPU-SIMULATED-NVIDIA-SMI"

# Values nvidia-smi prints when it has nothing to report. Compared after whitespace is collapsed
# and case folded. "Not Found" is what cuda_version holds when no CUDA driver library answered.
_UNAVAILABLE = frozenset(
    v.lower()
    for v in (
        "",
        "N/A",
        "[N/A]",
        "Not Supported",
        "[Not Supported]",
        "Requested functionality has been deprecated",
        "[Requested functionality has been deprecated]",
        "Not Found",
        "Unknown Error",
        "[Unknown Error]",
    )
)
_TRUE = frozenset(("enabled", "yes", "active", "on", "true"))
_FALSE = frozenset(("disabled", "no", "not active", "off", "false"))


class NvidiaParseError(ValueError):
    """The text is not what the parser expects; the message says what was found."""


# --- small value helpers -------------------------------------------------------------------


def clean(value):
    """Collapse whitespace (values can span lines) and turn nvidia-smi's placeholders into None."""
    if value is None:
        return None
    text = " ".join(value.split())
    if text.lower() in _UNAVAILABLE:
        return None
    return text


def to_bool(value):
    """Enabled/Disabled, Yes/No, Active/Not Active -> True/False; anything else -> None."""
    text = clean(value)
    if text is None:
        return None
    low = text.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


_NUMBER = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%/]*)")
_MIB_FACTORS = {"": 1.0, "mib": 1.0, "mb": 1.0, "gib": 1024.0, "gb": 1024.0, "kib": 1 / 1024.0}


def to_number(value):
    """'66.92 W' -> 66.92, '36 C' -> 36, 'N/A' -> None. Returns int when the text is integral."""
    text = clean(value)
    if text is None:
        return None
    match = _NUMBER.match(text)
    if not match:
        return None
    number = match.group(1)
    if "." in number:
        return float(number)
    return int(number)


def to_mib(value):
    """'40960 MiB' -> 40960 (int), also for GiB/KiB; None when not reported."""
    text = clean(value)
    if text is None:
        return None
    match = _NUMBER.match(text)
    if not match:
        return None
    factor = _MIB_FACTORS.get(match.group(2).lower())
    if factor is None:
        return None
    return round(float(match.group(1)) * factor)


def _find_text(elem, path):
    if elem is None:
        return None
    found = elem.find(path)
    if found is None:
        return None
    return clean(found.text)


def _first(elem, paths):
    """The first of several element paths that holds a value (layouts changed across drivers)."""
    for path in paths:
        value = _find_text(elem, path)
        if value is not None:
            return value
    return None


# --- nvidia-smi -q -x ------------------------------------------------------------------------


def _sum_counts(values):
    numbers = [v for v in values if isinstance(v, (int, float))]
    if not numbers:
        return None
    return int(sum(numbers))


def _ecc_counts(bucket, kind):
    """Sum the corrected or uncorrected counters of one ECC bucket (volatile or aggregate).

    Driver 450-470 nest counters as <single_bit>/<double_bit> with a <total>; later drivers
    use flat sram_/dram_ counters (sram_uncorrectable split into _parity/_secded from 550).
    """
    if bucket is None:
        return None
    old = bucket.find("double_bit" if kind == "uncorrectable" else "single_bit")
    if old is not None:
        total = to_number(_find_text(old, "total"))
        if total is not None:
            return int(total)
        return _sum_counts(to_number(child.text) for child in old)
    values = []
    for child in bucket:
        tag = child.tag
        if (kind == "uncorrectable" and "uncorrectable" in tag) or (
            kind == "correctable" and tag.endswith("_correctable")
        ):
            values.append(to_number(child.text))
    return _sum_counts(values)


def _clock_reasons(gpu):
    """Active clock throttle/event reasons, named without their prefix."""
    block = gpu.find("clocks_event_reasons")
    if block is None:
        block = gpu.find("clocks_throttle_reasons")
    if block is None:
        return None
    active = []
    for child in block:
        name = re.sub(r"^clocks_(?:event|throttle)_reasons?_", "", child.tag)
        if to_bool(child.text):
            active.append(name)
    return active


def _mig_devices(gpu):
    container = gpu.find("mig_devices")
    devices = []
    if container is None:
        return devices
    for dev in container.findall("mig_device"):
        shared = dev.find("device_attributes/shared")
        devices.append(
            {
                "index": to_number(_find_text(dev, "index")),
                "gpu_instance_id": to_number(_find_text(dev, "gpu_instance_id")),
                "compute_instance_id": to_number(_find_text(dev, "compute_instance_id")),
                "uuid": _find_text(dev, "uuid"),
                "profile": _find_text(dev, "profile"),
                "multiprocessor_count": to_number(_find_text(shared, "multiprocessor_count")),
                "memory_total_mib": to_mib(_find_text(dev, "fb_memory_usage/total")),
                "memory_used_mib": to_mib(_find_text(dev, "fb_memory_usage/used")),
                "bar1_total_mib": to_mib(_find_text(dev, "bar1_memory_usage/total")),
                "sram_uncorrectable": to_number(
                    _find_text(dev, "ecc_error_count/volatile_count/sram_uncorrectable")
                ),
            }
        )
    return devices


def _remapped_rows(gpu):
    block = gpu.find("remapped_rows")
    result = {"pending": None, "failure": None, "correctable": None, "uncorrectable": None}
    if block is None or len(block) == 0:
        return result  # "N/A" as text: the GPU has no row remapper
    result["pending"] = to_bool(_find_text(block, "remapped_row_pending"))
    result["failure"] = to_bool(_find_text(block, "remapped_row_failure"))
    result["correctable"] = to_number(_find_text(block, "remapped_row_corr"))
    result["uncorrectable"] = to_number(_find_text(block, "remapped_row_unc"))
    return result


def _retired_pages(gpu):
    block = gpu.find("retired_pages")
    if block is None:
        return None, None
    pending = to_bool(_first(block, ("pending_retirement", "pending_blacklist")))
    counts = [
        to_number(_find_text(block, "multiple_single_bit_retirement/retired_count")),
        to_number(_find_text(block, "double_bit_retirement/retired_count")),
    ]
    return pending, _sum_counts(counts)


def _power_draw(gpu):
    """Power draw in W: <power_readings> up to 525, <gpu_power_readings> after, where later
    drivers report power_draw as N/A and give instant_/average_power_draw instead."""
    for block in ("gpu_power_readings", "power_readings"):
        value = _first(
            gpu,
            (block + "/power_draw", block + "/instant_power_draw", block + "/average_power_draw"),
        )
        if value is not None:
            return to_number(value)
    return None


def _parse_gpu(index, gpu):
    pci_bus_id = _find_text(gpu, "pci/pci_bus_id") or clean(gpu.get("id"))
    ecc_mode = gpu.find("ecc_mode")
    ecc_errors = gpu.find("ecc_errors")
    volatile = ecc_errors.find("volatile") if ecc_errors is not None else None
    aggregate = ecc_errors.find("aggregate") if ecc_errors is not None else None
    retired_pending, retired_count = _retired_pages(gpu)
    fabric = gpu.find("fabric")
    return {
        "index": index,
        "name": _find_text(gpu, "product_name"),
        "brand": _find_text(gpu, "product_brand"),
        "architecture": _find_text(gpu, "product_architecture"),
        "uuid": _find_text(gpu, "uuid"),
        "pci_bus_id": pci_bus_id,
        "pci_device_id": _find_text(gpu, "pci/pci_device_id"),
        "pci_sub_system_id": _find_text(gpu, "pci/pci_sub_system_id"),
        "serial": _find_text(gpu, "serial"),
        "minor_number": to_number(_find_text(gpu, "minor_number")),
        "vbios_version": _find_text(gpu, "vbios_version"),
        "memory_total_mib": to_mib(_find_text(gpu, "fb_memory_usage/total")),
        "persistence_mode": to_bool(_find_text(gpu, "persistence_mode")),
        "mig": {
            "current": to_bool(_find_text(gpu, "mig_mode/current_mig")),
            "pending": to_bool(_find_text(gpu, "mig_mode/pending_mig")),
            "devices": _mig_devices(gpu),
        },
        "ecc": {
            "current": to_bool(_find_text(ecc_mode, "current_ecc")),
            "pending": to_bool(_find_text(ecc_mode, "pending_ecc")),
            "volatile_uncorrected": _ecc_counts(volatile, "uncorrectable"),
            "aggregate_uncorrected": _ecc_counts(aggregate, "uncorrectable"),
            "volatile_corrected": _ecc_counts(volatile, "correctable"),
            "aggregate_corrected": _ecc_counts(aggregate, "correctable"),
        },
        "retired_pages_pending": retired_pending,
        "retired_pages_count": retired_count,
        "remapped_rows": _remapped_rows(gpu),
        "temperature_c": to_number(_find_text(gpu, "temperature/gpu_temp")),
        "power_draw_w": _power_draw(gpu),
        "compute_mode": _find_text(gpu, "compute_mode"),
        "performance_state": _find_text(gpu, "performance_state"),
        "clock_reasons_active": _clock_reasons(gpu),
        "fabric": {
            "state": _find_text(fabric, "state"),
            "status": _find_text(fabric, "status"),
        },
    }


def parse_query_xml(text):
    """Parse `nvidia-smi -q -x` output into a dict (see the module docstring of the facts module).

    Lines printed before the XML (nvidia-smi writes warnings such as a corrupted infoROM to
    stdout ahead of the document) are returned in "warnings".
    """
    if text is None or not text.strip():
        raise NvidiaParseError("nvidia-smi -q -x printed nothing")
    start = text.find("<?xml")
    if start < 0:
        start = text.find("<nvidia_smi_log")
    if start < 0:
        raise NvidiaParseError(
            "nvidia-smi -q -x output holds no <nvidia_smi_log> document; it starts with: %r"
            % text.strip()[:200]
        )
    warnings = [line.strip() for line in text[:start].splitlines() if line.strip()]
    try:
        root = ET.fromstring(text[start:].strip())
    except ET.ParseError as exc:
        raise NvidiaParseError("nvidia-smi -q -x output is not well-formed XML: %s" % exc) from exc
    if root.tag != "nvidia_smi_log":
        raise NvidiaParseError(
            "expected <nvidia_smi_log> as the root element, found <%s>" % root.tag
        )
    gpus = [_parse_gpu(i, gpu) for i, gpu in enumerate(root.findall("gpu"))]
    attached = to_number(_find_text(root, "attached_gpus"))
    return {
        "timestamp": _find_text(root, "timestamp"),
        "driver_version": _find_text(root, "driver_version"),
        "cuda_version": _find_text(root, "cuda_version"),
        "attached_gpus": attached,
        "gpus": gpus,
        "warnings": warnings,
    }


# --- nvidia-smi -L ---------------------------------------------------------------------------

_GPU_LINE = re.compile(r"^GPU\s+(\d+)\s*:\s*(.*?)\s*\(UUID:\s*([^)\s]*)\s*\)\s*$")
_MIG_LINE = re.compile(r"^MIG\s+(\S+)\s+Device\s+(\d+)\s*:\s*\(UUID:\s*([^)\s]+)\s*\)\s*$")
_LEGACY_MIG = re.compile(r"^MIG-(GPU-[0-9A-Fa-f-]+)/(\d+)/(\d+)$")


def parse_gpu_list(text):
    """Parse `nvidia-smi -L`: one dict per GPU with its MIG devices nested under it.

    MIG UUIDs come in two forms: `MIG-<uuid>` (R470 and later) and the legacy
    `MIG-GPU-<gpu uuid>/<gpu instance>/<compute instance>` (R450-R465); the legacy form also
    yields the instance ids. Lines that are neither a GPU nor a MIG device are ignored.
    """
    gpus = []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        match = _GPU_LINE.match(line)
        if match:
            gpus.append(
                {
                    "index": int(match.group(1)),
                    "name": clean(match.group(2)),
                    "uuid": clean(match.group(3)),
                    "mig_devices": [],
                }
            )
            continue
        match = _MIG_LINE.match(line)
        if match:
            if not gpus:
                raise NvidiaParseError("MIG device listed before any GPU: %r" % line)
            uuid = match.group(3)
            legacy = _LEGACY_MIG.match(uuid)
            gpus[-1]["mig_devices"].append(
                {
                    "profile": match.group(1),
                    "device_index": int(match.group(2)),
                    "uuid": uuid,
                    "uuid_format": "legacy" if legacy else "modern",
                    "parent_uuid": legacy.group(1) if legacy else None,
                    "gpu_instance_id": int(legacy.group(2)) if legacy else None,
                    "compute_instance_id": int(legacy.group(3)) if legacy else None,
                }
            )
    return gpus


def merge_gpu_list(facts, listing):
    """Add the profile and UUID that `-L` gives to the MIG devices that `-q -x` gives.

    GPUs are matched by UUID (by position when the UUID is missing), MIG devices by their
    device index. Returns the number of MIG devices that were matched.
    """
    by_uuid = dict((g["uuid"], g) for g in listing if g.get("uuid"))
    matched = 0
    for position, gpu in enumerate(facts.get("gpus", [])):
        entry = by_uuid.get(gpu.get("uuid"))
        if entry is None and position < len(listing) and not listing[position].get("uuid"):
            entry = listing[position]
        if entry is None:
            continue
        by_index = dict((d["device_index"], d) for d in entry["mig_devices"])
        for device in gpu["mig"]["devices"]:
            listed = by_index.get(device.get("index"))
            if listed is None:
                continue
            matched += 1
            device["uuid"] = device.get("uuid") or listed["uuid"]
            device["profile"] = device.get("profile") or listed["profile"]
            if device.get("gpu_instance_id") is None:
                device["gpu_instance_id"] = listed["gpu_instance_id"]
            if device.get("compute_instance_id") is None:
                device["compute_instance_id"] = listed["compute_instance_id"]
    return matched


# --- failures ----------------------------------------------------------------------------------

_QUOTES = re.compile("[\u2018\u2019\u201b\u00b4`]")

# Matched in this order against the output with quotes straightened, whitespace collapsed
# (wrapped lines joined) and case folded. "GPU is lost" must win over the generic device-handle
# error that carries it.
_FAILURE_PATTERNS = (
    (
        "not_installed",
        (
            r"couldn't find libnvidia-ml\.so",
            r"command not found",
            r"no such file or directory",
            r"nvidia-smi: not found",
        ),
    ),
    ("driver_library_mismatch", (r"driver/library version mismatch", r"\bapi mismatch\b")),
    (
        "driver_not_loaded",
        (
            r"couldn't communicate with the nvidia driver",
            r"\bdriver not loaded\b",
            r"nvidia kernel module is not loaded",
        ),
    ),
    ("no_devices", (r"no devices were found", r"no devices found")),
    (
        "gpu_lost",
        (r"gpu is lost", r"fallen off the bus", r"gpu has fallen", r"gpu requires reset"),
    ),
    (
        "gpu_error",
        (
            r"unable to determine the device handle",
            r"inforom is corrupted",
            r"insufficient power",
            r"interrupt issue",
        ),
    ),
)

# nvidia-smi's documented exit codes, for when the text says nothing we recognise.
_FAILURE_BY_RC = {
    127: "not_installed",
    12: "not_installed",  # NVML shared library could not be found
    9: "driver_not_loaded",
    18: "driver_library_mismatch",
    6: "no_devices",
    15: "gpu_lost",
    8: "gpu_error",  # external power cables not attached
    10: "gpu_error",  # interrupt issue with a GPU
    14: "gpu_error",  # infoROM corrupted
}


def _normalise(output):
    text = _QUOTES.sub("'", output or "")
    return " ".join(text.split()).lower()


def classify_failure(output, rc):
    """Name why nvidia-smi failed: one of FAILURE_CLASSES, from its output first, then its rc."""
    text = _normalise(output)
    for name, patterns in _FAILURE_PATTERNS:
        for pattern in patterns:
            if re.search(pattern, text):
                return name
    return _FAILURE_BY_RC.get(rc, "unknown")


_NVML_VERSION = re.compile(r"NVML library version:\s*([0-9]+(?:\.[0-9]+)+)", re.IGNORECASE)
_BUS_ID = re.compile(
    r"device handle for\s*(?:gpu)?\s*([0-9A-Fa-f]{3,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])",
    re.IGNORECASE,
)


def parse_nvml_library_version(output):
    """The userspace version a driver/library mismatch reports ('550.144'), else None."""
    match = _NVML_VERSION.search(output or "")
    return match.group(1) if match else None


def failed_bus_ids(output):
    """PCI bus ids named in 'Unable to determine the device handle for GPU <id>' lines."""
    return sorted(
        set(m.group(1).upper() for m in _BUS_ID.finditer(" ".join((output or "").split())))
    )


def describe_failure(output, rc):
    """A failure as data: class, remedy, rc, the first lines of output, and what they name."""
    name = classify_failure(output, rc)
    lines = [line.strip() for line in (output or "").splitlines() if line.strip()]
    lines = [line for line in lines if SIMULATION_MARKER not in line]
    return {
        "class": name,
        "remedy": REMEDIES[name],
        "rc": rc,
        "message": " ".join(lines[:4])[:500],
        "nvml_library_version": parse_nvml_library_version(output),
        "bus_ids": failed_bus_ids(output),
    }


# --- /proc/driver/nvidia/version -------------------------------------------------------------

_NVRM = re.compile(r"^\s*NVRM version:\s*(?P<desc>.*?)\s*$", re.MULTILINE)
_VERSION_TOKEN = re.compile(r"(?<![\w.])(\d{2,4}(?:\.\d+){1,3})(?![\w.])")
_ARCH_FOR = re.compile(r"Kernel Module\s+for\s+(\S+)", re.IGNORECASE)
_ARCH_BEFORE = re.compile(r"NVIDIA UNIX\s+(?:Open\s+)?(\S+)\s+Kernel Module", re.IGNORECASE)
_GCC = re.compile(r"^\s*GCC version:\s*(.*?)\s*$", re.MULTILINE)


def _flavor(desc):
    if re.search(r"\bOpen Kernel Module\b", desc, re.IGNORECASE):
        return "open"
    if re.search(r"\bKernel Module\b", desc, re.IGNORECASE):
        return "proprietary"
    return None  # a bare version (as nvidia-container-cli prints it) does not tell


def parse_proc_version(text):
    """Parse /proc/driver/nvidia/version into version, flavor (open|proprietary), arch, gcc.

    flavor is None for a bare version with no "Kernel Module" wording (as
    `nvidia-container-cli info` prints it).

    Known header layouts (the version follows the description, separated by spaces):
      NVIDIA UNIX x86_64 Kernel Module  535.129.03  <date>                  (proprietary)
      NVIDIA UNIX aarch64 Kernel Module  550.120  <date>                    (proprietary)
      NVIDIA UNIX Open Kernel Module for x86_64  565.57.01  Release Build ... (open)
    """
    match = _NVRM.search(text or "")
    if not match:
        raise NvidiaParseError(
            "no 'NVRM version:' line in /proc/driver/nvidia/version; it starts with: %r"
            % (text or "").strip()[:200]
        )
    desc = match.group("desc")
    module_at = desc.lower().find("kernel module")
    tail = desc[module_at:] if module_at >= 0 else desc
    version = _VERSION_TOKEN.search(tail)
    if not version:
        raise NvidiaParseError("no driver version in the NVRM line: %r" % desc)
    arch = _ARCH_FOR.search(desc) or _ARCH_BEFORE.search(desc)
    gcc = _GCC.search(text)
    return {
        "version": version.group(1),
        "flavor": _flavor(desc),
        "arch": arch.group(1) if arch else None,
        "gcc_version": gcc.group(1) if gcc else None,
        "header": desc,
    }


# --- versions ----------------------------------------------------------------------------------


def version_tuple(version):
    """'550.144.03' -> (550, 144, 3); None for anything that is not dotted numbers: the whole
    text, ASCII digits, at most nine in a part (it also checks gpu_node_readiness' driver_branch
    option)."""
    if not version or not re.fullmatch(r"[0-9]{1,9}(\.[0-9]{1,9})*", version):
        return None
    return tuple(int(part) for part in version.split("."))


def versions_agree(a, b):
    """True when two driver versions are equal on the components both give.

    NVML reports its library version with two components ('550.144') while the kernel module
    and nvidia-smi give three ('550.144.03').
    """
    ta, tb = version_tuple(a), version_tuple(b)
    if ta is None or tb is None:
        return False
    width = min(len(ta), len(tb))
    return ta[:width] == tb[:width]


# --- running nvidia-smi ------------------------------------------------------------------------

DEFAULT_SEARCH_DIRS = ("/usr/bin", "/usr/local/nvidia/bin")


def find_nvidia_smi(path_env, extra_dirs=DEFAULT_SEARCH_DIRS, is_executable=None):
    """First executable `nvidia-smi` on PATH, then in extra_dirs; None when there is none."""
    if is_executable is None:

        def is_executable(candidate):
            return os.path.isfile(candidate) and os.access(candidate, os.X_OK)

    dirs = [d for d in (path_env or "").split(os.pathsep) if d] + list(extra_dirs)
    for directory in dirs:
        candidate = os.path.join(directory, "nvidia-smi")
        if is_executable(candidate):
            return candidate
    return None


def query(run, nvidia_smi, with_list=True):
    """Run `nvidia-smi -q -x` once (and `-L` only when a GPU has MIG enabled) and parse it.

    run(argv) -> (rc, stdout, stderr). Returns a dict: ok (bool), facts (parsed XML or None),
    failure (describe_failure(...) or None), simulated (bool), notes (list of str).
    """
    result = {"ok": False, "facts": None, "failure": None, "simulated": False, "notes": []}
    if not nvidia_smi:
        result["failure"] = describe_failure("nvidia-smi: not found", 127)
        return result
    rc, out, err = run([nvidia_smi, "-q", "-x"])
    result["simulated"] = SIMULATION_MARKER in (err or "") or SIMULATION_MARKER in (out or "")
    if rc != 0:
        result["failure"] = describe_failure("\n".join(x for x in (out, err) if x), rc)
        return result
    try:
        facts = parse_query_xml(out)
    except NvidiaParseError as exc:
        failure = describe_failure("\n".join(x for x in (out, err) if x), rc)
        failure["message"] = str(exc)
        result["failure"] = failure
        return result
    result["ok"] = True
    result["facts"] = facts
    if with_list and any(g["mig"]["current"] for g in facts["gpus"]):
        lrc, lout, _lerr = run([nvidia_smi, "-L"])
        if lrc == 0:
            matched = merge_gpu_list(facts, parse_gpu_list(lout))
            wanted = sum(len(g["mig"]["devices"]) for g in facts["gpus"])
            if matched < wanted:
                result["notes"].append(
                    "nvidia-smi -L listed %d of the %d MIG devices; the others have no UUID or "
                    "profile here" % (matched, wanted)
                )
        else:
            result["notes"].append(
                "nvidia-smi -L failed (rc %d): MIG devices have no UUID or profile here" % lrc
            )
    return result


def resolve_nvidia_smi(given, path_env, exists=os.path.exists, is_executable=None):
    """Which nvidia-smi to run: (path, failure, error). exists and is_executable (see
    find_nvidia_smi) answer for the host; the defaults look at this one.

    error is a message about bad input (a relative path); failure is describe_failure() for an
    nvidia-smi that is not there (a finding about the host, not bad input).
    """
    if given:
        if not os.path.isabs(given):
            return (
                None,
                None,
                (
                    "nvidia_smi must be an absolute path, got %r; leave it unset to search PATH, "
                    "/usr/bin and /usr/local/nvidia/bin" % given
                ),
            )
        if not exists(given):
            return None, describe_failure("%s: No such file or directory" % given, 127), None
        return given, None, None
    found = find_nvidia_smi(path_env, is_executable=is_executable)
    if not found:
        message = "nvidia-smi: not found on PATH, in /usr/bin or in /usr/local/nvidia/bin"
        return None, describe_failure(message, 127), None
    return found, None, None


def run_query(run, given, path_env, exists=os.path.exists, is_executable=None):
    """resolve_nvidia_smi() then query(): (result, path, error)."""
    path, failure, error = resolve_nvidia_smi(given, path_env, exists, is_executable)
    if error:
        return None, None, error
    if failure:
        result = {"ok": False, "facts": None, "failure": failure, "simulated": False, "notes": []}
        return result, None, None
    return query(run, path), path, None


def kernel_module_facts(proc_version_text):
    """version, flavor and arch of the loaded module, or None when the text is absent/unknown."""
    if not proc_version_text:
        return None
    try:
        parsed = parse_proc_version(proc_version_text)
    except NvidiaParseError:
        return None
    return {"version": parsed["version"], "flavor": parsed["flavor"], "arch": parsed["arch"]}


def gpu_facts(result, path, proc_version_text):
    """The kubegpu_gpus fact from run_query()'s result and /proc/driver/nvidia/version."""
    parsed = result["facts"] or {}
    gpus = parsed.get("gpus", [])
    return {
        "available": result["ok"],
        "simulated": result["simulated"],
        "nvidia_smi": path,
        "driver_version": parsed.get("driver_version"),
        "cuda_version": parsed.get("cuda_version"),
        "attached_gpus": parsed.get("attached_gpus"),
        "count": len(gpus),
        "mig_enabled": any(g["mig"]["current"] for g in gpus),
        "gpus": gpus,
        "kernel_module": kernel_module_facts(proc_version_text),
        "failure": result["failure"],
        "notes": list(result["notes"]) + list(parsed.get("warnings", [])),
    }


def fact_warnings(facts):
    """What the task warns about for gpu_facts(): a SIMULATED nvidia-smi, then the notes."""
    warnings = []
    if facts["simulated"]:
        warnings.append(
            "%s is kubegpu's SIMULATED nvidia-smi replaying a real capture: these GPUs are not "
            "on this host" % facts["nvidia_smi"]
        )
    return warnings + list(facts["notes"])


C_ENV = {"LC_ALL": "C", "LANG": "C"}


def make_runner(module):
    """run(argv) -> (rc, stdout, stderr), in the C locale; an unrunnable file gives rc 126."""

    def run(argv):
        try:
            return module.run_command(argv, environ_update=C_ENV, handle_exceptions=False)
        except OSError as exc:
            return 126, "", "%s: %s" % (argv[0], exc)

    return run
