#!/usr/bin/env python3
"""Turn a real `nvidia-smi -q -x` capture into the data file the NVML test double replays.

The test double (`libnvidia-ml.so.1` built from nvml_standin.c, KUBEGPU_SIMULATED) reads this
file at nvmlInit. Every value comes from the capture, except what `nvidia-smi -q -x` does not
print; those come from the tables below, each citing NVIDIA's published values.

Output: `key=value` lines, `#` comments, one `device.<i>.<field>` block per GPU. Keys:

  simulated            always `KUBEGPU_SIMULATED`: the file describes a test double
  capture              the capture's path under src/kubegpu/captures
  driver_version       <driver_version>
  cuda_driver_version  <cuda_version> as NVML encodes it (major * 1000 + minor * 10)
  device_count         number of <gpu> elements (checked against <attached_gpus>)
  device.<i>.name uuid pci_bus_id pci_device_id pci_subsystem_id minor_number brand
           architecture memory_total_mib memory_reserved_mib memory_used_mib memory_free_mib
           mig_mode (enabled / disabled / unsupported) compute_major compute_minor
           virtualization_mode, and on a GPU in MIG mode: max_mig_devices, then per MIG device
           device.<i>.mig.<j>.gpu_instance_id compute_instance_id multiprocessor_count
           copy_engine_count encoder_count decoder_count ofa_count jpg_count memory_total_mib
           slices

Standard library only:  python3 tests/nvml/capture_to_data.py CAPTURE.xml [-o OUT]
"""

from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CAPTURES = REPO / "src" / "kubegpu" / "captures"

# CUDA compute capability by product name: nvidia-smi does not print it. Values from NVIDIA's
# "CUDA GPUs - Compute Capability" table (https://developer.nvidia.com/cuda-gpus) and the CUDA C
# Programming Guide's "Compute Capabilities" appendix: Tesla T4 7.5 (Turing), A100 8.0
# (Ampere GA100), H100 9.0 (Hopper), Tesla P100 6.0 (Pascal).
COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "Tesla T4": (7, 5),
    "NVIDIA A100-SXM4-40GB": (8, 0),
    "NVIDIA H100 80GB HBM3": (9, 0),
    "NVIDIA H100 PCIe": (9, 0),
    "Tesla P100-PCIE-16GB": (6, 0),
}
# MIG, which nvidia-smi -q -x does not name: the most MIG devices a GPU can hold, and the GPU
# instance slice count of a MIG device by its multiprocessor count. From NVIDIA's MIG User Guide
# (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/, "Supported MIG Profiles"): the
# A100-SXM4-40GB holds up to 7 MIG devices; its 1g/2g/3g/4g/7g instances have 14/28/42/56/98 SMs.
MIG_MAX_DEVICES: dict[str, int] = {"NVIDIA A100-SXM4-40GB": 7}
MIG_SLICES_BY_SMS: dict[str, dict[int, int]] = {
    "NVIDIA A100-SXM4-40GB": {14: 1, 28: 2, 42: 3, 56: 4, 98: 7},
}
# nvidia-smi's <product_architecture> and <product_brand> text -> the names the test double maps
# onto nvml.h's NVML_DEVICE_ARCH_* and NVML_BRAND_* constants.
ARCHITECTURES = {"Pascal", "Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell"}
BRANDS = {"NVIDIA", "Tesla", "Quadro", "GeForce", "NVIDIA RTX", "Titan"}
# <gpu_virtualization_mode><virtualization_mode> text -> nvml.h's nvmlGpuVirtualizationMode_t.
VIRTUALIZATION_MODES = {"None": 0, "Pass-Through": 1, "VGPU": 2, "Host VGPU": 3, "Host VSGA": 4}


class CaptureError(ValueError):
    pass


def text(element: ET.Element, path: str) -> str:
    found = element.find(path)
    if found is None or found.text is None:
        raise CaptureError(f"capture has no <{path}>")
    return " ".join(found.text.split())


def mib(element: ET.Element, path: str) -> int:
    value = text(element, path)
    match = re.fullmatch(r"(\d+) MiB", value)
    if not match:
        raise CaptureError(f"<{path}> is {value!r}, expected '<n> MiB'")
    return int(match.group(1))


def cuda_version(value: str) -> int:
    match = re.fullmatch(r"(\d+)\.(\d+)", value)
    if not match:
        raise CaptureError(f"<cuda_version> is {value!r}, expected 'major.minor'")
    return int(match.group(1)) * 1000 + int(match.group(2)) * 10


def mig_mode(gpu: ET.Element) -> str:
    current = text(gpu, "mig_mode/current_mig")
    modes = {"Enabled": "enabled", "Disabled": "disabled", "N/A": "unsupported"}
    if current not in modes:
        raise CaptureError(f"<mig_mode/current_mig> is {current!r}, expected one of {list(modes)}")
    return modes[current]


def device_lines(index: int, gpu: ET.Element) -> list[str]:
    name = text(gpu, "product_name")
    if name not in COMPUTE_CAPABILITY:
        raise CaptureError(
            f"no compute capability known for {name!r}: add it to COMPUTE_CAPABILITY "
            f"(known: {sorted(COMPUTE_CAPABILITY)})"
        )
    architecture = text(gpu, "product_architecture")
    if architecture not in ARCHITECTURES:
        raise CaptureError(
            f"<product_architecture> {architecture!r} not in {sorted(ARCHITECTURES)}"
        )
    brand = text(gpu, "product_brand")
    if brand not in BRANDS:
        raise CaptureError(f"<product_brand> {brand!r} not in {sorted(BRANDS)}")
    virtualization = text(gpu, "gpu_virtualization_mode/virtualization_mode")
    if virtualization not in VIRTUALIZATION_MODES:
        raise CaptureError(
            f"<virtualization_mode> {virtualization!r} not in {sorted(VIRTUALIZATION_MODES)}"
        )
    major, minor = COMPUTE_CAPABILITY[name]
    fields = {
        "name": name,
        "uuid": text(gpu, "uuid"),
        "pci_bus_id": text(gpu, "pci/pci_bus_id"),
        "pci_device_id": "0x" + text(gpu, "pci/pci_device_id"),
        "pci_subsystem_id": "0x" + text(gpu, "pci/pci_sub_system_id"),
        "minor_number": text(gpu, "minor_number"),
        "brand": brand,
        "architecture": architecture,
        "memory_total_mib": mib(gpu, "fb_memory_usage/total"),
        "memory_reserved_mib": mib(gpu, "fb_memory_usage/reserved"),
        "memory_used_mib": mib(gpu, "fb_memory_usage/used"),
        "memory_free_mib": mib(gpu, "fb_memory_usage/free"),
        "mig_mode": mig_mode(gpu),
        "compute_major": major,
        "compute_minor": minor,
        "virtualization_mode": VIRTUALIZATION_MODES[virtualization],
    }
    lines = [f"device.{index}.{key}={value}" for key, value in fields.items()]
    if fields["mig_mode"] == "enabled":
        lines += mig_lines(index, name, gpu)
    return lines


def mig_lines(index: int, name: str, gpu: ET.Element) -> list[str]:
    """A MIG-enabled GPU's MIG devices: ids, shared engines and memory from the capture; the
    slice count from NVIDIA's table. MIG device UUIDs are not in nvidia-smi -q -x output."""
    if name not in MIG_MAX_DEVICES:
        raise CaptureError(f"no MIG table for {name!r}: add it to MIG_MAX_DEVICES")
    lines = [f"device.{index}.max_mig_devices={MIG_MAX_DEVICES[name]}"]
    for number, mig in enumerate(gpu.findall("mig_devices/mig_device")):
        sms = int(text(mig, "device_attributes/shared/multiprocessor_count"))
        if sms not in MIG_SLICES_BY_SMS[name]:
            raise CaptureError(f"MIG device with {sms} SMs: no {name} profile has that many")
        fields = {
            "gpu_instance_id": text(mig, "gpu_instance_id"),
            "compute_instance_id": text(mig, "compute_instance_id"),
            "multiprocessor_count": sms,
            "copy_engine_count": text(mig, "device_attributes/shared/copy_engine_count"),
            "encoder_count": text(mig, "device_attributes/shared/encoder_count"),
            "decoder_count": text(mig, "device_attributes/shared/decoder_count"),
            "ofa_count": text(mig, "device_attributes/shared/ofa_count"),
            "jpg_count": text(mig, "device_attributes/shared/jpg_count"),
            "memory_total_mib": mib(mig, "fb_memory_usage/total"),
            "slices": MIG_SLICES_BY_SMS[name][sms],
        }
        lines += [f"device.{index}.mig.{number}.{key}={value}" for key, value in fields.items()]
    return lines


def convert(capture: Path) -> str:
    root = ET.parse(capture).getroot()
    gpus = root.findall("gpu")
    attached = int(text(root, "attached_gpus"))
    if len(gpus) != attached:
        raise CaptureError(f"{len(gpus)} <gpu> elements but <attached_gpus> says {attached}")
    try:
        shown = capture.resolve().relative_to(REPO)
    except ValueError:
        shown = capture
    lines = [
        "# KUBEGPU_SIMULATED: data of the NVML test double (tests/nvml), not a GPU.",
        f"# Generated by tests/nvml/capture_to_data.py from {shown}; do not edit.",
        "simulated=KUBEGPU_SIMULATED",
        f"capture={shown}",
        f"driver_version={text(root, 'driver_version')}",
        f"cuda_driver_version={cuda_version(text(root, 'cuda_version'))}",
        f"device_count={len(gpus)}",
    ]
    for index, gpu in enumerate(gpus):
        lines += device_lines(index, gpu)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", type=Path, help="an nvidia-smi -q -x capture")
    parser.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    args = parser.parse_args(argv)
    try:
        data = convert(args.capture)
    except (CaptureError, ET.ParseError, OSError) as error:
        print(f"capture_to_data: {args.capture}: {error}", file=sys.stderr)
        return 2
    if args.output:
        args.output.write_text(data)
    else:
        sys.stdout.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
