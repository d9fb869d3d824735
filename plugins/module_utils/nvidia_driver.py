# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Facts and rules about NVIDIA driver branches, GPU generations and CUDA compatibility.

Pure functions over text and numbers: they run on the target's Python (3.8+), import only the
standard library, and are shared by the module `nvidia_pci_facts` and the unit tests. The roles
carry the same rules as data (vars/main.yml of nvidia_driver and cuda_toolkit); a unit test keeps
the two in step.

Where each fact comes from:

- Open kernel modules work on Turing and newer only, because they need the GPU System Processor
  that Turing introduced; since R560 they are NVIDIA's default; mixed systems with pre-Turing
  GPUs keep the proprietary modules; Grace Hopper and Blackwell require the open modules.
  Sources: NVIDIA Driver Installation Guide, "Kernel Modules"; NVIDIA technical blog "NVIDIA
  Transitions Fully Towards Open-Source GPU Kernel Modules" (July 2024).
- The first Turing PCI device id, 0x1E02 (TITAN RTX), is the lowest entry of the "Compatible
  GPUs" table in the README of NVIDIA/open-gpu-kernel-modules; every id below 0x1E00 belongs to
  an older generation (Volta ends at 0x1DFx). The other ranges are the device-id blocks NVIDIA
  assigns per chip family (see the pci.ids database); they name the generation for messages,
  while the decisions only need "older than Turing", "Turing or newer" and "Blackwell".
- CUDA minor-version compatibility: CUDA 13.x needs a driver >= 580, CUDA 12.x >= 525, CUDA
  11.x >= 450. Source: NVIDIA "CUDA Compatibility" guide, table "CUDA Toolkit 11.x, 12.x, and
  13.x Driver Version Ranges". The per-release driver each toolkit shipped with (used only for a
  warning: minor-version compatibility limits PTX JIT on older drivers) is from table "CUDA
  Toolkit and Corresponding Driver Versions" of the CUDA Toolkit release notes.
- Branch limits per generation: Hopper and Ada need R520 or newer (CUDA 11.8 introduced sm_90 and
  sm_89 with driver 520.61.05); Blackwell needs R570 or newer (CUDA 12.8 with driver 570.26
  introduced sm_100 and sm_120); R580 is the last branch for Maxwell, Pascal and Volta, R470 the
  last for Kepler (NVIDIA driver release notes / support announcements).
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

NVIDIA_VENDOR_ID = 0x10DE

# --- branches and versions ---------------------------------------------------------------------

BRANCH_RE = re.compile(r"^[0-9]{3}\Z")
# 535.309.01, 580.65.06, 570.26 (some releases have two parts)
VERSION_RE = re.compile(r"^([0-9]{3})\.([0-9]{1,3})(?:\.([0-9]{1,3}))?\Z")
# The oldest branch these roles can be asked for: CUDA 11's minor-version baseline.
MIN_BRANCH = 450
# Branches NVIDIA publishes for data center use that these roles were written against.
KNOWN_BRANCHES = ("535", "550", "570", "575", "580", "590", "595")


class DriverInputError(ValueError):
    """A value that cannot be used; the message names what was wrong and what is allowed."""


def parse_branch(value, name="nvidia_driver_branch"):
    """'580' -> 580. Raises DriverInputError naming the variable when it is not a branch."""
    text = "" if value is None else str(value)
    if not BRANCH_RE.match(text):
        raise DriverInputError(
            "%s is %r: a driver branch is three digits, such as '535', '570' or '580'"
            % (name, value)
        )
    branch = int(text)
    if branch < MIN_BRANCH:
        raise DriverInputError(
            "%s is %r: branches older than %d are not supported (CUDA 11 needs %d or newer)"
            % (name, value, MIN_BRANCH, MIN_BRANCH)
        )
    return branch


def parse_driver_version(value, name="nvidia_driver_version"):
    """'535.309.01' -> (535, 309, 1). Raises DriverInputError when it is not a driver version."""
    text = "" if value is None else str(value)
    match = VERSION_RE.match(text)
    if not match:
        raise DriverInputError(
            "%s is %r: a driver version looks like '580.65.06' (branch.minor.patch), "
            "or leave it empty to take the newest of nvidia_driver_branch" % (name, value)
        )
    return tuple(int(part) for part in match.groups() if part is not None)


def version_branch(version):
    """'580.65.06' -> '580'."""
    return "%03d" % parse_driver_version(version)[0]


def version_matches_branch(version, branch):
    """True when the exact version belongs to the branch ('580.65.06' is in '580')."""
    return version_branch(version) == str(branch).strip()


_UPSTREAM_RE = re.compile(r"^(?:[0-9]+:)?([0-9]{3}(?:\.[0-9]+){1,2})(?:[-~+].*)?$")


def upstream_version(package_version):
    """The driver version inside a package version, or None.

    '535.309.01-0+deb12u1' (Debian) -> '535.309.01'; '3:580.95.05-1.el9' (RHEL, with epoch) ->
    '580.95.05'; '580.95.05-0ubuntu0.24.04.2' (Ubuntu) -> '580.95.05'.
    """
    match = _UPSTREAM_RE.match((package_version or "").strip())
    return match.group(1) if match else None


def compare_versions(left, right):
    """-1, 0 or 1, comparing two driver versions numerically ('535.54.03' < '535.309.01')."""
    a, b = parse_driver_version(left), parse_driver_version(right)
    width = max(len(a), len(b))
    a = a + (0,) * (width - len(a))
    b = b + (0,) * (width - len(b))
    return (a > b) - (a < b)


# --- GPU generations ---------------------------------------------------------------------------

# name -> facts the roles decide on. Order is oldest first.
GENERATIONS = (
    ("legacy", {"open": False, "requires_open": False, "min_branch": None, "max_branch": 390}),
    ("kepler", {"open": False, "requires_open": False, "min_branch": None, "max_branch": 470}),
    ("maxwell", {"open": False, "requires_open": False, "min_branch": None, "max_branch": 580}),
    ("pascal", {"open": False, "requires_open": False, "min_branch": None, "max_branch": 580}),
    ("volta", {"open": False, "requires_open": False, "min_branch": None, "max_branch": 580}),
    ("turing", {"open": True, "requires_open": False, "min_branch": None, "max_branch": None}),
    ("ampere", {"open": True, "requires_open": False, "min_branch": None, "max_branch": None}),
    ("hopper", {"open": True, "requires_open": False, "min_branch": 520, "max_branch": None}),
    ("ada", {"open": True, "requires_open": False, "min_branch": 520, "max_branch": None}),
    ("blackwell", {"open": True, "requires_open": True, "min_branch": 570, "max_branch": None}),
)
GENERATION_FACTS = dict(GENERATIONS)
GENERATION_ORDER = tuple(name for name, _ in GENERATIONS)
FIRST_OPEN_DEVICE_ID = 0x1E00

# (first id, last id, generation) for GPU functions (class 0x0300 / 0x0302) of vendor 0x10de.
DEVICE_ID_RANGES = (
    (0x0000, 0x0FBF, "legacy"),  # Fermi and older
    (0x0FC0, 0x12FF, "kepler"),  # GK104 .. GK208
    (0x1300, 0x15EF, "maxwell"),  # GM107, GM108, GM204, GM206
    (0x15F0, 0x15FF, "pascal"),  # GP100 (Tesla P100)
    (0x1600, 0x17FF, "maxwell"),  # GM200 (Tesla M40, 0x17FD)
    (0x1800, 0x1AFF, "pascal"),  # unassigned block between the families, nearest older family
    (0x1B00, 0x1D7F, "pascal"),  # GP102, GP104, GP106, GP107, GP108
    (0x1D80, 0x1DFF, "volta"),  # GV100 (Titan V 0x1D81, V100 0x1DB1..0x1DB6, 0x1DF6)
    (0x1E00, 0x1FFF, "turing"),  # TU102, TU104, TU106, TU117 (Tesla T4 0x1EB8)
    (0x2000, 0x217F, "ampere"),  # GA100 (A100 0x20B0..0x20B5, A30 0x20B7)
    (0x2180, 0x21FF, "turing"),  # TU116
    (0x2200, 0x22FF, "ampere"),  # GA102 (A40 0x2235, A10 0x2236)
    (0x2300, 0x23FF, "hopper"),  # GH100 (H100 0x2330/0x2331, H200 0x2335, GH200 0x2342)
    (0x2400, 0x25FF, "ampere"),  # GA103, GA104, GA106, GA107 (A2 0x25B6)
    (0x2600, 0x28FF, "ada"),  # AD102, AD103, AD104, AD106, AD107 (L40S 0x26B9, L4 0x27B8)
    (0x2900, 0xFFFF, "blackwell"),  # GB100/GB102 (B200 0x2901), GB20x (RTX 5090 0x2B85), newer
)

# Grace Hopper superchips: Hopper GPUs that NVIDIA supports only with the open kernel modules.
REQUIRES_OPEN_DEVICE_IDS = frozenset((0x2342, 0x2348))

PCI_CLASS_VGA = 0x0300
PCI_CLASS_3D = 0x0302
PCI_CLASS_BRIDGE_OTHER = 0x0680  # NVSwitch functions
PCI_CLASS_AUDIO = 0x0403
PCI_CLASS_USB = 0x0C03
PCI_CLASS_SERIAL_OTHER = 0x0C80  # USB-C controller (UCSI) on consumer boards


def parse_hex_id(value):
    """'0x2330' / '2330' / '0x233010DE' (nvidia-smi's device+vendor form) / 9008 -> int."""
    if isinstance(value, int):
        return value
    text = str(value).strip().lower()
    if text.startswith("0x"):
        text = text[2:]
    if not re.fullmatch(r"[0-9a-f]{1,8}", text):
        raise DriverInputError("%r is not a PCI id (hexadecimal, such as 0x2330)" % (value,))
    number = int(text, 16)
    # nvidia-smi prints pci.device_id as 0xDDDDVVVV: device id in the high half, vendor low.
    if number > 0xFFFF and (number & 0xFFFF) == NVIDIA_VENDOR_ID:
        number >>= 16
    return number


def generation_for_device_id(device_id):
    """The GPU generation of an NVIDIA device id ('0x2330' -> 'hopper')."""
    number = parse_hex_id(device_id)
    for first, last, generation in DEVICE_ID_RANGES:
        if first <= number <= last:
            return generation
    raise DriverInputError("device id 0x%04x is outside the 16-bit PCI range" % number)


def device_requires_open(device_id):
    """True for GPUs NVIDIA supports only with the open kernel modules."""
    number = parse_hex_id(device_id)
    if number in REQUIRES_OPEN_DEVICE_IDS:
        return True
    return GENERATION_FACTS[generation_for_device_id(number)]["requires_open"]


def device_supports_open(device_id):
    """True when the open kernel modules can drive this GPU (Turing and newer)."""
    return GENERATION_FACTS[generation_for_device_id(device_id)]["open"]


def classify_pci_function(vendor, pci_class):
    """What an NVIDIA PCI function is: gpu, nvswitch, audio, usb, other; None if not NVIDIA.

    pci_class is sysfs' 24-bit class ('0x030200'); only base class and subclass matter.
    """
    if parse_hex_id(vendor) != NVIDIA_VENDOR_ID:
        return None
    code = parse_hex_id(pci_class)
    if code > 0xFFFF:
        code >>= 8
    if code in (PCI_CLASS_VGA, PCI_CLASS_3D):
        return "gpu"
    if code == PCI_CLASS_BRIDGE_OTHER:
        return "nvswitch"
    if code == PCI_CLASS_AUDIO:
        return "audio"
    if code in (PCI_CLASS_USB, PCI_CLASS_SERIAL_OTHER):
        return "usb"
    return "other"


def describe_gpu(device_id):
    """A dict with the facts the roles decide on for one GPU."""
    number = parse_hex_id(device_id)
    generation = generation_for_device_id(number)
    return {
        "device_id": "0x%04x" % number,
        "generation": generation,
        "open_supported": GENERATION_FACTS[generation]["open"],
        "requires_open": device_requires_open(number),
    }


_SWITCH_PRODUCT_RE = re.compile(r"\b(DGX|HGX)\b", re.IGNORECASE)


def needs_fabricmanager(nvswitch_count, product_name):
    """NVSwitch systems need nvidia-fabricmanager: NVSwitch PCI functions, or a DGX/HGX board."""
    if nvswitch_count:
        return True
    return bool(_SWITCH_PRODUCT_RE.search(product_name or ""))


def choose_module_type(requested, gpus, branch):
    """Resolve nvidia_driver_kernel_module_type to 'open' or 'proprietary', with the reason.

    gpus is a list of describe_gpu() dicts (empty on a host without GPUs, e.g. an image build).
    Raises DriverInputError when the request cannot drive these GPUs.
    """
    branch = parse_branch(branch)
    old = sorted({g["device_id"] for g in gpus if not g["open_supported"]})
    need_open = sorted({g["device_id"] for g in gpus if g["requires_open"]})
    if old and need_open:
        raise DriverInputError(
            "this host mixes GPUs that only the proprietary kernel modules drive (%s) with GPUs "
            "that only the open kernel modules drive (%s): no single driver flavour runs both"
            % (", ".join(old), ", ".join(need_open))
        )
    if requested == "open":
        if old:
            raise DriverInputError(
                "nvidia_driver_kernel_module_type is 'open' but GPU(s) %s are older than Turing; "
                "the open kernel modules need Turing or newer: use 'proprietary' or 'auto'"
                % ", ".join(old)
            )
        return "open", "requested"
    if requested == "proprietary":
        if need_open:
            raise DriverInputError(
                "nvidia_driver_kernel_module_type is 'proprietary' but GPU(s) %s (Blackwell or "
                "Grace Hopper) are supported only by the open kernel modules: use 'open' or "
                "'auto'" % ", ".join(need_open)
            )
        return "proprietary", "requested"
    if requested != "auto":
        raise DriverInputError(
            "nvidia_driver_kernel_module_type is %r: allowed are auto, open, proprietary"
            % (requested,)
        )
    if old:
        return "proprietary", "GPU(s) older than Turing: %s" % ", ".join(old)
    if gpus:
        return "open", "every GPU is Turing or newer"
    if branch >= 560:
        return "open", "no GPU present; open is NVIDIA's default from branch 560"
    return "proprietary", "no GPU present; proprietary is NVIDIA's default before branch 560"


def generation_problems(gpus, branch):
    """Messages for GPUs this branch cannot drive (too new for old GPUs, too old for new ones)."""
    branch = parse_branch(branch)
    problems = []
    for generation in GENERATION_ORDER:
        ids = sorted({g["device_id"] for g in gpus if g["generation"] == generation})
        if not ids:
            continue
        facts = GENERATION_FACTS[generation]
        if facts["min_branch"] and branch < facts["min_branch"]:
            problems.append(
                "nvidia_driver_branch %d is too old for %s GPU(s) %s: they need branch %d or newer"
                % (branch, generation.capitalize(), ", ".join(ids), facts["min_branch"])
            )
        if facts["max_branch"] and branch > facts["max_branch"]:
            problems.append(
                "nvidia_driver_branch %d no longer supports %s GPU(s) %s: the last branch for "
                "them is %d"
                % (branch, generation.capitalize(), ", ".join(ids), facts["max_branch"])
            )
    return problems


# --- CUDA ----------------------------------------------------------------------------------------

# CUDA major -> oldest driver branch that runs it through minor-version compatibility.
CUDA_MIN_BRANCH = {11: 450, 12: 525, 13: 580}
# Toolkit release -> the driver it shipped with (full feature set, PTX JIT included).
CUDA_TOOLKIT_DRIVER = {
    "11.5": "495.29.05",
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.3": "545.23.06",
    "12.4": "550.54.14",
    "12.5": "555.42.02",
    "12.6": "560.28.03",
    "12.8": "570.26",
    "12.9": "575.51.03",
    "13.0": "580.65.06",
}
CUDA_VERSION_RE = re.compile(r"^([0-9]{2})\.([0-9]{1,2})\Z")


def parse_cuda_version(value, name="cuda_toolkit_version"):
    """'12.4' -> (12, 4). Raises DriverInputError naming the variable otherwise."""
    text = "" if value is None else str(value)
    match = CUDA_VERSION_RE.match(text)
    if not match:
        raise DriverInputError(
            "%s is %r: a CUDA version is major.minor, such as '12.4' or '13.0'" % (name, value)
        )
    major, minor = int(match.group(1)), int(match.group(2))
    if major not in CUDA_MIN_BRANCH:
        raise DriverInputError(
            "%s is %r: supported CUDA majors are %s"
            % (name, value, ", ".join(str(m) for m in sorted(CUDA_MIN_BRANCH)))
        )
    return major, minor


def cuda_driver_check(cuda_version, driver):
    """Whether a driver (branch '580' or version '580.65.06') runs a CUDA toolkit release.

    Returns (ok, message); message explains a failure, or warns when only minor-version
    compatibility applies (ok stays True then).
    """
    major, minor = parse_cuda_version(cuda_version)
    driver = str(driver).strip()
    if BRANCH_RE.match(driver):
        branch = parse_branch(driver)
        version = None
    else:
        branch = parse_driver_version(driver)[0]
        version = driver
    need = CUDA_MIN_BRANCH[major]
    if branch < need:
        return False, (
            "CUDA %d.%d needs an NVIDIA driver of branch %d or newer (CUDA %d.x minor-version "
            "compatibility); the driver is %s" % (major, minor, need, major, driver)
        )
    shipped = CUDA_TOOLKIT_DRIVER.get("%d.%d" % (major, minor))
    if shipped and (
        (version is None and branch < parse_driver_version(shipped)[0])
        or (version is not None and compare_versions(version, shipped) < 0)
    ):
        return True, (
            "CUDA %d.%d shipped with driver %s; driver %s runs it through minor-version "
            "compatibility (no PTX JIT of newer code)" % (major, minor, shipped, driver)
        )
    return True, ""


# --- host state ----------------------------------------------------------------------------------


def loaded_modules(proc_modules):
    """Module names from /proc/modules text."""
    names = set()
    for line in (proc_modules or "").splitlines():
        parts = line.split()
        if parts:
            names.add(parts[0])
    return names


def parse_mokutil_sb_state(text):
    """`mokutil --sb-state` -> 'enabled', 'disabled', 'unsupported' or 'unknown'."""
    lowered = (text or "").lower()
    if "secureboot enabled" in lowered:
        return "enabled"
    if "secureboot disabled" in lowered:
        return "disabled"
    if "doesn't support secure boot" in lowered or "efi variables are not supported" in lowered:
        return "unsupported"
    return "unknown"


def parse_efivar_secureboot(data):
    """The SecureBoot EFI variable (4 attribute bytes, then one value byte) -> True/False/None."""
    if data is None or len(data) < 5:
        return None
    value = data[4] if isinstance(data[4], int) else ord(data[4])
    return value == 1
