"""The NVML test double (tests/nvml, KUBEGPU_SIMULATED) answers with the real captures' values.

The library is compiled from tests/nvml/nvml_standin.c into a temporary cache (gcc, against
go-nvml's nvml.h from the Go module cache); a ctypes harness (tests/nvml/probe.py) calls it in a
fresh process per case. The expected values are read from the capture's XML here, independently
of the converter that wrote the data file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.nvml import build, capture_to_data

REPO = Path(__file__).resolve().parents[2]
XML = REPO / "src" / "kubegpu" / "captures" / "nvidia-smi-xml"
CAPTURES = ["telegraf-tesla-t4-515.xml", "netdata-a100-sxm4-40gb-mig-510.xml"]
MIB = 1024 * 1024
NOT_SUPPORTED, DRIVER_NOT_LOADED, INSUFFICIENT_SIZE, TIMEOUT, NOT_FOUND = 3, 9, 7, 10, 6
# nvml.h: NVML_DEVICE_ARCH_TURING 6, NVML_DEVICE_ARCH_AMPERE 7; NVML_BRAND_NVIDIA 14;
# NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH 1.
ARCHITECTURE = {"Turing": 6, "Ampere": 7}


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shutil.which("gcc") or not shutil.which("go"):
        pytest.skip("gcc and go are needed to build the NVML test double")
    gomodcache = Path(os.environ.get("KUBEGPU_GOMODCACHE", build.DEFAULT_GOMODCACHE))
    nvml = build.module_version((build.SRC / "go.mod").read_text(), build.NVML_MODULE)
    path, cached = build.build_library(tmp_path_factory.mktemp("nvml-cache"), gomodcache, nvml)
    assert not cached
    return path


def probe(library: Path, data: Path) -> tuple[dict[str, object], str]:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "nvml" / "probe.py"), str(library)],
        env={**os.environ, "KUBEGPU_NVML_DATA": str(data)},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout), proc.stderr


def value(gpu: ET.Element, path: str) -> str:
    found = gpu.find(path)
    assert found is not None and found.text is not None, path
    return found.text.strip()


def expected_migs(gpu: ET.Element) -> list[dict[str, object]]:
    """The capture's MIG devices as the double should answer for them (slice counts from the
    converter's table of NVIDIA's published profiles; no MIG UUID: NOT_SUPPORTED)."""
    name = value(gpu, "product_name")
    migs = []
    for mig in gpu.findall("mig_devices/mig_device"):
        sms = int(value(mig, "device_attributes/shared/multiprocessor_count"))
        slices = capture_to_data.MIG_SLICES_BY_SMS[name][sms]
        migs.append(
            {
                "is_mig": 1,
                "gpu_instance_id": int(value(mig, "gpu_instance_id")),
                "compute_instance_id": int(value(mig, "compute_instance_id")),
                "parent_matches": True,
                "attributes": {
                    "multiprocessorCount": sms,
                    "sharedCopyEngineCount": int(
                        value(mig, "device_attributes/shared/copy_engine_count")
                    ),
                    "sharedDecoderCount": int(value(mig, "device_attributes/shared/decoder_count")),
                    "sharedEncoderCount": int(value(mig, "device_attributes/shared/encoder_count")),
                    "sharedJpegCount": int(value(mig, "device_attributes/shared/jpg_count")),
                    "sharedOfaCount": int(value(mig, "device_attributes/shared/ofa_count")),
                    "gpuInstanceSliceCount": slices,
                    "computeInstanceSliceCount": slices,
                    "memorySizeMB": int(value(mig, "fb_memory_usage/total").split()[0]),
                },
                "uuid_rc": NOT_SUPPORTED,
            }
        )
    return migs


@pytest.mark.parametrize("capture", CAPTURES)
def test_values_are_the_captures(library: Path, tmp_path: Path, capture: str) -> None:
    data = tmp_path / "gpu.data"
    data.write_text(capture_to_data.convert(XML / capture))
    result, stderr = probe(library, data)
    root = ET.parse(XML / capture).getroot()
    gpus = root.findall("gpu")
    rc = result["rc"]
    assert isinstance(rc, dict)
    assert rc["nvmlInit_v2"] == 0
    assert result["driver_version"] == value(root, "driver_version")
    major, minor = value(root, "cuda_version").split(".")
    assert result["cuda_driver_version"] == int(major) * 1000 + int(minor) * 10
    assert result["count"] == len(gpus) == int(value(root, "attached_gpus"))
    devices = result["devices"]
    assert isinstance(devices, list)
    for index, (device, gpu) in enumerate(zip(devices, gpus, strict=True)):
        memory = {
            k: int(value(gpu, f"fb_memory_usage/{k}").split()[0]) * MIB
            for k in ("total", "reserved", "used", "free")
        }
        assert device == {
            "index": index,
            "name": value(gpu, "product_name"),
            "uuid": value(gpu, "uuid"),
            "handle_by_uuid_matches": True,
            "handle_by_pci_matches": True,
            "minor_number": int(value(gpu, "minor_number")),
            "brand": 14,
            "architecture": ARCHITECTURE[value(gpu, "product_architecture")],
            "virtualization_mode": 1,
            "compute_capability": list(
                capture_to_data.COMPUTE_CAPABILITY[value(gpu, "product_name")]
            ),
            "pci_bus_id": value(gpu, "pci/pci_bus_id"),
            "pci_device_id": int(value(gpu, "pci/pci_device_id"), 16),
            "pci_subsystem_id": int(value(gpu, "pci/pci_sub_system_id"), 16),
            "memory": {
                "total": memory["total"],
                "free": memory["free"],
                "used": memory["total"] - memory["free"],
            },
            "memory_v2": memory,
            **(
                {"mig_mode": [1, 1], "migs": expected_migs(gpu)}
                if value(gpu, "mig_mode/current_mig") == "Enabled"
                else {}
            ),
            "supported_events": 0b1011,
        }
    if value(gpus[0], "mig_mode/current_mig") == "N/A":
        assert rc["nvmlDeviceGetMigMode"] == NOT_SUPPORTED
    else:
        # A100: 7 MIG device slots (NVIDIA's table), the capture's 2 filled, the rest empty.
        assert rc["nvmlDeviceGetMaxMigDeviceCount"] == 0
        assert {k: v for k, v in rc.items() if k.startswith("nvmlDeviceGetMigDeviceHandle")} == {
            f"nvmlDeviceGetMigDeviceHandleByIndex({i})": NOT_FOUND for i in range(2, 7)
        }
    assert rc["nvmlSystemGetNVMLVersion"] == NOT_SUPPORTED
    assert rc["nvmlSystemGetDriverVersion(short buffer)"] == INSUFFICIENT_SIZE
    assert rc["nvmlEventSetWait_v2"] == TIMEOUT
    assert rc["nvmlShutdown"] == 0
    assert stderr.count("KUBEGPU_SIMULATED") == len(stderr.splitlines()) == 1
    assert capture in stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the data file {path} (KUBEGPU_NVML_DATA)"),
        ("driver_version=1\n", "has no simulated=KUBEGPU_SIMULATED line"),
        (
            "simulated=KUBEGPU_SIMULATED\ndevice.0.brand=Radeon\n",
            "device field brand has a value it cannot take: Radeon",
        ),
        ("simulated=KUBEGPU_SIMULATED\ndevice_count=1\n", "device 0 has no name or uuid"),
        ("simulated=KUBEGPU_SIMULATED\ncolour=blue\n", "unknown key colour"),
        ("simulated=KUBEGPU_SIMULATED\ndevice.99.name=x\n", "bad device key device.99.name"),
    ],
)
def test_bad_data_fails_init_with_a_clear_message(
    library: Path, tmp_path: Path, content: str | None, message: str
) -> None:
    data = tmp_path / "gpu.data"
    if content is not None:
        data.write_text(content)
    result, stderr = probe(library, data)
    assert result["rc"] == {"nvmlInit_v2": DRIVER_NOT_LOADED}
    assert message.format(path=data) in stderr
    assert all("KUBEGPU_SIMULATED" in line for line in stderr.splitlines())


def test_converter_refuses_a_product_without_known_compute_capability(tmp_path: Path) -> None:
    capture = tmp_path / "other.xml"
    capture.write_text(
        (XML / CAPTURES[0])
        .read_text()
        .replace("<product_name>Tesla T4<", "<product_name>Tesla K80<")
    )
    with pytest.raises(
        capture_to_data.CaptureError, match="no compute capability known for 'Tesla K80'"
    ):
        capture_to_data.convert(capture)


def test_converter_cli_names_the_capture_on_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "broken.xml"
    capture.write_text("<nvidia_smi_log><attached_gpus>2</attached_gpus></nvidia_smi_log>")
    assert capture_to_data.main([str(capture)]) == 2
    assert f"{capture}: 0 <gpu> elements but <attached_gpus> says 2" in capsys.readouterr().err
