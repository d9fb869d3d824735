"""The SIMULATED GPU: a test double for what cannot exist where kubegpu's tests run.

No GPU, driver or nvidia-smi is available on the test machines. This package stands in for
them, driven only by output captured on real GPU machines (``kubegpu/captures``, each file listed
with its source in SOURCES.md there), and says that it is a simulation everywhere it appears:

- ``nvidia_smi_replay.py`` (REPLAY_SCRIPT): a standalone python3 script that answers
  ``nvidia-smi -q -x``, ``-L`` and ``--version`` from a capture set, and writes a line naming the
  simulation to stderr on every call.
- ``write_capture_set(dest, capture)``: the capture set the script reads.
- ``write_replay(dest_dir, capture)``: the script as ``dest_dir/nvidia-smi`` with its capture set
  beside it (``dest_dir/nvidia-smi.capture``); copy both to a node together.
- ``build_simulated_host_root(dest, capture)``: a fake host root (sysfs PCI functions,
  /proc/modules, /proc/driver/nvidia/version, /dev/nvidia*) consistent with the capture, with a
  ``SIMULATED-GPU-README`` at its top.

A capture is named by the stem of a file in nvidia-smi-xml/ (``telegraf-tesla-t4-515``), by
one of FAILURE_CAPTURES (``no-driver``) or MIG_CAPTURES (``scaleway-h100-pcie-525-mig``: a
stateful MIG GPU, see nvidia_smi_replay.py), or given as a path to an nvidia-smi XML file.
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FAILURE_CAPTURES",
    "MIG_CAPTURES",
    "README_NAME",
    "REPLAY_SCRIPT",
    "Capture",
    "CaptureError",
    "build_simulated_host_root",
    "find_fixtures",
    "list_captures",
    "resolve_capture",
    "write_capture_set",
    "write_replay",
]

REPLAY_SCRIPT = Path(__file__).with_name("nvidia_smi_replay.py")
CAPTURES = Path(__file__).resolve().parent.parent / "captures"
README_NAME = "SIMULATED-GPU-README"
MARKER = "KUBEGPU-SIMULATED-NVIDIA-SMI"

# Failure captures: the real message and the exit status nvidia-smi gives with it.
FAILURE_CAPTURES: dict[str, tuple[str, int]] = {
    "no-driver": ("nvidia-smi-errors/couldnt-communicate.txt", 9),
    "no-devices": ("nvidia-smi-errors/no-devices-rtx5090-rebar-disabled-ogkm-862.txt", 6),
    "driver-library-mismatch": ("nvidia-smi-errors/nvml-mismatch-550.144-intel-llvm-17614.txt", 18),
}


# MIG captures: one machine's real `nvidia-smi mig -lgip`, `-lgipp`, `-L` and `--query-gpu` (in
# nvidia-smi-mig/), the file names the capture set gives them, and the facts the host root needs
# (driver version and PCI device id, read from the same page's nvidia-smi table and the PCI ID
# of an H100 PCIe, 0x2331).
MIG_CAPTURES: dict[str, dict[str, Any]] = {
    "scaleway-h100-pcie-525-mig": {
        "files": {
            "mig-lgip.txt": "nvidia-smi-mig/scaleway-h100-pcie-525-lgip.txt",
            "mig-lgipp.txt": "nvidia-smi-mig/scaleway-h100-pcie-525-lgipp.txt",
            "list.txt": "nvidia-smi-mig/scaleway-h100-pcie-525-L-3g40gb-3x1g10gb.txt",
            "query-gpu.csv": "nvidia-smi-mig/scaleway-h100-pcie-525-query-mig-mode-current.csv",
        },
        "driver_version": "525.125.06",
        "pci_device_id": "2331",
    },
}


class CaptureError(ValueError):
    """A capture name or path that does not lead to a real capture."""


@dataclass(frozen=True)
class Capture:
    """One real capture: its name, the file, where it was published, and its kind."""

    name: str
    path: Path
    source: str
    kind: str  # "xml", "failure" or "mig"
    rc: int = 0


def find_fixtures() -> Path:
    """The real captures that ship inside the package (kubegpu/captures)."""
    if not CAPTURES.is_dir():
        raise CaptureError(f"real captures not found: {CAPTURES} is missing from the package")
    return CAPTURES


def _source_of(fixtures: Path, relpath: str) -> str:
    """The Source column of the file's row in SOURCES.md ('' when it has no row)."""
    sources = fixtures / "SOURCES.md"
    if not sources.is_file():
        return ""
    for line in sources.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] == relpath:
            return cells[1]
    return ""


def list_captures(fixtures: Path | None = None) -> list[str]:
    """The capture names there are: every nvidia-smi XML, then the failure captures."""
    root = fixtures or find_fixtures()
    names = sorted(p.stem for p in (root / "nvidia-smi-xml").glob("*.xml"))
    return names + [n for n, (rel, _) in FAILURE_CAPTURES.items() if (root / rel).is_file()]


def resolve_capture(capture: str, fixtures: Path | None = None) -> Capture:
    """A capture name (or a path to an nvidia-smi XML file) as a Capture."""
    if capture in FAILURE_CAPTURES:
        root = fixtures or find_fixtures()
        rel, rc = FAILURE_CAPTURES[capture]
        path = root / rel
        if not path.is_file():
            raise CaptureError(f"failure capture {capture!r}: {path} is missing")
        return Capture(capture, path, _source_of(root, rel), "failure", rc)
    if capture in MIG_CAPTURES:
        root = fixtures or find_fixtures()
        rel = MIG_CAPTURES[capture]["files"]["mig-lgip.txt"]
        for needed in MIG_CAPTURES[capture]["files"].values():
            if not (root / needed).is_file():
                raise CaptureError(f"MIG capture {capture!r}: {root / needed} is missing")
        return Capture(capture, root / rel, _source_of(root, rel), "mig")
    as_path = Path(capture)
    if as_path.suffix == ".xml" and as_path.is_file():
        return Capture(as_path.stem, as_path.resolve(), str(as_path.resolve()), "xml")
    root = fixtures or find_fixtures()
    path = root / "nvidia-smi-xml" / f"{capture}.xml"
    if not path.is_file():
        known = ", ".join([*list_captures(root), *MIG_CAPTURES])
        raise CaptureError(f"capture {capture!r} is not a real capture; known: {known}")
    return Capture(capture, path, _source_of(root, f"nvidia-smi-xml/{path.name}"), "xml")


def write_capture_set(
    dest: Path, capture: str, *, list_text: Path | None = None, fixtures: Path | None = None
) -> Path:
    """Write the capture set the replay script reads into dest (created); returns dest.

    list_text: a real `nvidia-smi -L` capture of the same machine, when there is one; without
    it the script derives the GPU lines from the XML.
    """
    found = resolve_capture(capture, fixtures)
    dest.mkdir(parents=True, exist_ok=True)
    manifest = {
        "name": found.name,
        "source": f"{found.path.name}: {found.source}".rstrip(": "),
        "kind": found.kind,
        "rc": found.rc,
    }
    if found.kind == "mig":
        root = fixtures or find_fixtures()
        manifest["driver_version"] = MIG_CAPTURES[found.name]["driver_version"]
        for target, rel in MIG_CAPTURES[found.name]["files"].items():
            shutil.copyfile(root / rel, dest / target)
    else:
        target = "query.xml" if found.kind == "xml" else "failure.txt"
        shutil.copyfile(found.path, dest / target)
    (dest / "capture.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    if list_text is not None:
        shutil.copyfile(list_text, dest / "list.txt")
    return dest


def write_replay(
    dest_dir: Path,
    capture: str,
    *,
    list_text: Path | None = None,
    fixtures: Path | None = None,
    python: str | None = None,
) -> Path:
    """dest_dir/nvidia-smi (the replay script, mode 0755) with dest_dir/nvidia-smi.capture.

    python: the interpreter for the script's #! line (default: `/usr/bin/env python3`).
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    script = dest_dir / "nvidia-smi"
    text = REPLAY_SCRIPT.read_text(encoding="utf-8")
    if python:
        text = f"#!{python}\n" + text.split("\n", 1)[1]
    script.write_text(text, encoding="utf-8")
    script.chmod(0o755)
    capture_dir = dest_dir / "nvidia-smi.capture"
    if capture_dir.exists():
        shutil.rmtree(capture_dir)
    write_capture_set(capture_dir, capture, list_text=list_text, fixtures=fixtures)
    return script


def _text(elem: ET.Element | None, path: str) -> str | None:
    if elem is None:
        return None
    found = elem.findtext(path)
    if found is None:
        return None
    value = " ".join(found.split())
    return None if value in ("", "N/A", "[N/A]") else value


def _sysfs_bdf(pci_bus_id: str) -> str:
    """'00000000:00:1E.0' (nvidia-smi) -> '0000:00:1e.0' (sysfs)."""
    match = re.match(r"^([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$", pci_bus_id)
    if not match:
        raise CaptureError(f"unexpected PCI bus id {pci_bus_id!r} in the capture")
    domain, bus, dev, fn = match.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{dev.lower()}.{fn}"


def _proc_version(version: str, flavor: str) -> str:
    if flavor == "open":
        header = f"NVIDIA UNIX Open Kernel Module for x86_64  {version}  Release Build"
    else:
        header = f"NVIDIA UNIX x86_64 Kernel Module  {version}"
    return (
        f"NVRM version: {header}  [kubegpu simulation: build host and date not captured]\n"
        "GCC version:  [kubegpu simulation: not captured]\n"
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _xml_gpus(path: Path) -> list[dict[str, Any]]:
    """The PCI facts of each GPU of an nvidia-smi XML capture."""
    gpus = []
    for index, gpu in enumerate(ET.parse(path).getroot().findall("gpu")):
        bus_id = _text(gpu, "pci/pci_bus_id") or gpu.get("id") or ""
        ids = (_text(gpu, "pci/pci_device_id") or "").lower()
        base_class, sub_class = _text(gpu, "pci/pci_base_class"), _text(gpu, "pci/pci_sub_class")
        minor = _text(gpu, "minor_number")
        sub = (_text(gpu, "pci/pci_sub_system_id") or "").lower()
        gpus.append(
            {
                "bdf": _sysfs_bdf(bus_id),
                "vendor": ids[4:8],
                "device": ids[0:4],
                "class": f"0x{int(base_class or 3):02x}{int(sub_class or 2):02x}00",
                "class_assumed": base_class is None,
                "subsystem": sub if len(sub) == 8 else "",
                "minor": int(minor) if minor is not None else index,
                "mig": _text(gpu, "mig_mode/current_mig") == "Enabled",
            }
        )
    return gpus


def _mig_gpus(name: str, fixtures: Path) -> tuple[list[dict[str, Any]], str]:
    """The PCI facts of the GPUs of a MIG capture (bus ids from its --query-gpu CSV)."""
    spec = MIG_CAPTURES[name]
    csv = (fixtures / spec["files"]["query-gpu.csv"]).read_text(encoding="utf-8")
    rows = [r for r in csv.splitlines()[1:] if r.strip()]
    gpus = [
        {
            "bdf": _sysfs_bdf(row.split(",")[0].strip()),
            "vendor": "10de",
            "device": spec["pci_device_id"],
            "class": "0x030200",
            "class_assumed": False,
            "subsystem": "",
            "minor": index,
            "mig": False,
        }
        for index, row in enumerate(rows)
    ]
    return gpus, str(spec["driver_version"])


# Top-level folders a simulated host root can borrow from the real system, so that the layers
# above the GPU (toolkit, runtime configs, kubelet) are read from where they really are.
REAL_ROOT_LINKS = ("etc", "usr", "var", "run", "opt")


def build_simulated_host_root(
    dest: Path,
    capture: str,
    *,
    flavor: str = "proprietary",
    fixtures: Path | None = None,
    real_root: Path | None = None,
) -> dict[str, Any]:
    """Lay out a fake host root at dest consistent with a real capture; return what it holds.

    For an XML capture: sys/bus/pci/devices/<bdf>/{vendor,device,class,subsystem_*} and a
    driver link per GPU, proc/modules with the nvidia modules, proc/driver/nvidia/version and
    sys/module/nvidia/version of the capture's driver version (flavor: proprietary or open),
    dev/nvidiactl, dev/nvidia-uvm*, dev/nvidia<minor> (empty regular files), dev/nvidia-caps/
    when MIG is on. A failure capture ("no-driver") gets an empty host: no GPU data exists for
    it. Always writes SIMULATED-GPU-README at the top, naming the capture and its source.

    With real_root (on a testbed node: "/"), etc/, usr/, var/, run/ and opt/ are symlinks to
    that root's folders: only the GPU, its kernel module and device nodes are simulated.
    """
    if flavor not in ("proprietary", "open"):
        raise ValueError(f"flavor must be 'proprietary' or 'open', got {flavor!r}")
    found = resolve_capture(capture, fixtures)
    dest.mkdir(parents=True, exist_ok=True)
    for directory in ("sys/bus/pci/devices", "dev", "proc"):
        (dest / directory).mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {
        "root": str(dest),
        "capture": found.name,
        "source_file": str(found.path),
        "source": found.source,
        "kind": found.kind,
        "driver_version": None,
        "gpu_count": 0,
        "pci_bus_ids": [],
        "mig_enabled": False,
        "flavor": None,
    }
    derived: list[str] = []
    if found.kind in ("xml", "mig"):
        if found.kind == "xml":
            gpus = _xml_gpus(found.path)
            version = _text(ET.parse(found.path).getroot(), "driver_version") or ""
        else:
            gpus, version = _mig_gpus(found.name, fixtures or find_fixtures())
            derived.append(
                "the GPU's PCI class (3D controller) and subsystem ids are not in the MIG "
                "capture; MIG starts disabled, as on the captured machine before `-mig 1`"
            )
        info["driver_version"] = version
        info["flavor"] = flavor
        (dest / "sys/bus/pci/drivers/nvidia").mkdir(parents=True, exist_ok=True)
        minors = []
        for gpu in gpus:
            device_dir = dest / "sys/bus/pci/devices" / gpu["bdf"]
            _write(device_dir / "vendor", f"0x{gpu['vendor']}\n")
            _write(device_dir / "device", f"0x{gpu['device']}\n")
            _write(device_dir / "class", gpu["class"] + "\n")
            if gpu["subsystem"]:
                _write(device_dir / "subsystem_vendor", f"0x{gpu['subsystem'][4:8]}\n")
                _write(device_dir / "subsystem_device", f"0x{gpu['subsystem'][0:4]}\n")
            link = device_dir / "driver"
            if link.is_symlink():
                link.unlink()
            link.symlink_to("../../drivers/nvidia")
            info["pci_bus_ids"].append(gpu["bdf"])
            minors.append(gpu["minor"])
            if gpu["mig"]:
                info["mig_enabled"] = True
            if gpu["class_assumed"]:
                derived.append(
                    f"{gpu['bdf']}/class: {gpu['class']} (3D controller) assumed; the capture "
                    "does not give the PCI class"
                )
        info["gpu_count"] = len(minors)
        modules = ["nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia"]
        _write(
            dest / "proc/modules",
            "".join(f"{m} 0 0 - Live 0x0000000000000000 (POE)\n" for m in modules),
        )
        _write(dest / "proc/driver/nvidia/version", _proc_version(version, flavor))
        _write(dest / "sys/module/nvidia/version", version + "\n")
        for name in ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"] + [
            f"nvidia{m}" for m in minors
        ]:
            _write(dest / "dev" / name, "")
        if info["mig_enabled"] or found.kind == "mig":
            for name in ("nvidia-cap1", "nvidia-cap2"):
                _write(dest / "dev/nvidia-caps" / name, "")
        derived += [
            "proc/modules: module names only; sizes and addresses are zero",
            f"proc/driver/nvidia/version: the capture's driver version {version}, {flavor} "
            "kernel module, x86_64; build host and date were not captured",
            "dev/nvidia*: empty regular files, not character devices",
        ]
    else:
        _write(dest / "proc/modules", "")
        derived.append(
            "no GPU data: the capture is nvidia-smi's failure message only, so this "
            "tree holds no NVIDIA PCI functions, modules or device nodes"
        )
    if real_root is not None:
        for name in REAL_ROOT_LINKS:
            link = dest / name
            if link.is_symlink():
                link.unlink()
            link.symlink_to(real_root / name)
        derived.append(
            f"{', '.join(REAL_ROOT_LINKS)}: links to the real system's folders under "
            f"{real_root}, not simulated"
        )
    readme = dest / README_NAME
    readme.write_text(
        "SIMULATED GPU - kubegpu test double. This is not a real host.\n\n"
        f"Built by kubegpu.simulate.build_simulated_host_root from the real capture\n"
        f"  {found.name} ({found.path.name})\n"
        f"published at: {found.source or 'see SOURCES.md beside the capture'}\n\n"
        "Values come from that capture. Where the capture says nothing, this tree fills in:\n"
        + "".join(f"  - {line}\n" for line in derived),
        encoding="utf-8",
    )
    info["readme"] = str(readme)
    return info
