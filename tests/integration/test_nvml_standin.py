"""NVIDIA's own GPU Feature Discovery and device plugin (v0.19.0, built from
github.com/NVIDIA/k8s-device-plugin by tests/nvml/build.py) on the NVML TEST DOUBLE
(tests/nvml, KUBEGPU_SIMULATED), which replays a real nvidia-smi capture.

- GFD runs `--oneshot` with file output and no NodeFeature API, its library path at the double;
  the labels it writes are checked against the capture's values, and against kubegpu's own
  readiness rule for GFD labels. GFD's output is kept as a capture in tests/nvml/captures.
- The device plugin runs on a testbed node next to a real kubelet (Kubernetes 1.37,
  tests/cluster) joined to a real control plane: the Node's allocatable nvidia.com/gpu, a pod
  scheduled by the real scheduler and started by containerd under runc, with the environment the
  plugin's Allocate gave it.

Nothing but the NVML library is a double; the GPU it describes is the capture's, and v0.19.0 is
one minor behind kubegpu's deployment pin (v0.20.0): the newest release the Go module proxy
serves to these machines.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_readiness

from tests.nvml import capture_to_data

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
XML = REPO / "src" / "kubegpu" / "captures" / "nvidia-smi-xml"
NVML = REPO / "tests" / "nvml"
# capture -> the file GFD's output for it is kept in, under tests/nvml/captures
GFD_CAPTURES = {
    "telegraf-tesla-t4-515.xml": "gfd-0.19.0-oneshot-telegraf-tesla-t4-515.txt",
    "netdata-a100-sxm4-40gb-mig-510.xml": "gfd-0.19.0-oneshot-netdata-a100-sxm4-40gb-mig-510.txt",
}
# NVIDIA's family names by compute capability major (Turing is 7.5, Volta 7.0).
FAMILY = {(7, 5): "turing", (8, 0): "ampere", (9, 0): "hopper"}


@pytest.fixture(scope="session")
def built() -> dict[str, Any]:
    if not shutil.which("go") or not shutil.which("gcc"):
        pytest.skip("go and gcc are needed to build the NVML double and NVIDIA's programs")
    proc = subprocess.run(
        [sys.executable, str(NVML / "build.py"), "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    print(f"\nnvml build: {'cached' if result['cached'] else 'built'}: {result}")
    return result


def xml_value(element: ET.Element, path: str) -> str:
    found = element.find(path)
    assert found is not None and found.text is not None, path
    return found.text.strip()


# GFD reads each GPU's PCI class from /sys/bus/pci/devices/<bus id>. The capture's bus id may
# name an unrelated device of this machine (a virtio one at 0000:00:04.0), on which v0.19.0
# dereferences a nil device; GFD runs in a mount namespace where that folder is empty, as on a
# machine without the capture's PCI devices (GFD then labels nvidia.com/gpu.mode=unknown).
NO_PCI_DEVICES = 'mount -t tmpfs -o ro,size=4k kubegpu-no-pci /sys/bus/pci/devices && exec "$@"'


def run_gfd(
    built: dict[str, Any], data: Path, out: Path, *flags: str
) -> subprocess.CompletedProcess[str]:
    if os.geteuid() != 0:
        pytest.skip("GFD runs in a mount namespace of its own (unshare -m needs root)")
    machine = out.parent / "product_name"
    machine.write_text("KUBEGPU_SIMULATED test machine\n")
    return subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            NO_PCI_DEVICES,
            "gpu-feature-discovery",
            built["bin"]["gpu-feature-discovery"],
            "--oneshot",
            "--no-timestamp",
            "--use-node-feature-api=false",
            f"--output-file={out}",
            f"--machine-type-file={machine}",
            *flags,
        ],
        env={
            "PATH": os.environ["PATH"],
            "LD_LIBRARY_PATH": built["libdir"],
            "KUBEGPU_NVML_DATA": str(data),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def labels_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line.strip())


@pytest.mark.parametrize("capture", sorted(GFD_CAPTURES))
def test_gfd_labels_the_captures_gpu(built: dict[str, Any], tmp_path: Path, capture: str) -> None:
    data = tmp_path / "gpu.data"
    data.write_text(capture_to_data.convert(XML / capture))
    out = tmp_path / "gfd"
    proc = run_gfd(built, data, out)
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = out.read_text()
    labels = labels_of(text)
    root = ET.parse(XML / capture).getroot()
    gpu = root.findall("gpu")[0]
    product = xml_value(gpu, "product_name")
    major, minor = capture_to_data.COMPUTE_CAPABILITY[product]
    driver = xml_value(root, "driver_version")
    cuda = xml_value(root, "cuda_version")
    mig = xml_value(gpu, "mig_mode/current_mig") == "Enabled"
    expected = {
        "nvidia.com/gpu.product": product.replace(" ", "-"),
        "nvidia.com/gpu.count": str(len(root.findall("gpu"))),
        "nvidia.com/gpu.memory": xml_value(gpu, "fb_memory_usage/total").split()[0],
        "nvidia.com/gpu.family": FAMILY[(major, minor)],
        "nvidia.com/gpu.compute.major": str(major),
        "nvidia.com/gpu.compute.minor": str(minor),
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.driver-version.major": driver.split(".")[0],
        "nvidia.com/cuda.driver-version.minor": driver.split(".")[1],
        "nvidia.com/cuda.driver-version.revision": driver.split(".")[2],
        "nvidia.com/cuda.runtime-version.full": cuda,
        "nvidia.com/cuda.runtime-version.major": cuda.split(".")[0],
        "nvidia.com/cuda.runtime-version.minor": cuda.split(".")[1],
        "nvidia.com/mig.capable": str(mig).lower(),
        "nvidia.com/gpu.machine": "KUBEGPU_SIMULATED-test-machine",
        "nvidia.com/gpu.mode": "unknown",
        "nvidia.com/vgpu.present": "false",
        # GFD's own rule: a GPU in MIG mode offers no full-GPU replica under strategy none.
        "nvidia.com/gpu.replicas": "0" if mig else "1",
        "nvidia.com/gpu.sharing-strategy": "none",
    }
    assert {key: labels.get(key) for key in expected} == expected, text
    # Under MIG strategy none GFD writes no strategy label (kubegpu's rule then needs none).
    assert "nvidia.com/mig.strategy" not in labels
    # kubegpu's readiness rule for GFD's labels passes on what NVIDIA's GFD wrote.
    check = cluster_readiness.check_gfd_labels(
        {"metadata": {"labels": labels}},
        list(cluster_readiness.DEFAULT_GFD_LABELS),
        True,
        len(root.findall("gpu")),
    )
    assert check["status"] == "pass", check
    kept = NVML / "captures" / GFD_CAPTURES[capture]
    if os.environ.get("KUBEGPU_NVML_RECAPTURE") == "1":
        kept.write_text(text)
    # GFD writes its labels in map order: the kept output is compared as a set of labels.
    assert labels_of(kept.read_text()) == labels, "GFD's output changed; KUBEGPU_NVML_RECAPTURE=1"
    assert "KUBEGPU_SIMULATED" in proc.stderr


@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_gfd_mig_strategies_stop_at_the_mig_devices_the_double_does_not_replay(
    built: dict[str, Any], tmp_path: Path, strategy: str
) -> None:
    """The XML capture has MIG mode and two MIG devices but no MIG UUIDs or profile ids: the
    double answers NOT_SUPPORTED for them, and GFD says so instead of writing labels."""
    data = tmp_path / "gpu.data"
    data.write_text(capture_to_data.convert(XML / "netdata-a100-sxm4-40gb-mig-510.xml"))
    out = tmp_path / "gfd"
    proc = run_gfd(built, data, out, f"--mig-strategy={strategy}")
    assert proc.returncode == 1, proc.stderr[-4000:]
    assert "error getting max MIG device count: Not Supported" in proc.stderr
    assert not out.exists()
