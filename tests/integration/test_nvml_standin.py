"""NVIDIA's own GPU Feature Discovery and device plugin (v0.19.0, built from
github.com/NVIDIA/k8s-device-plugin by tests/nvml/build.py) on the NVML TEST DOUBLE
(tests/nvml, KUBEGPU_SIMULATED), which replays a real nvidia-smi capture.

- GFD runs `--oneshot` with file output and no NodeFeature API, its library path at the double;
  the labels it writes (MIG strategies none, single and mixed for the A100 MIG capture) are
  checked against the capture's values, and against kubegpu's own readiness rule for GFD
  labels. GFD's output is kept as a capture in tests/nvml/captures.
- The device plugin runs on a testbed node next to a real kubelet (Kubernetes 1.37,
  tests/cluster) joined to a real control plane: the Node's allocatable nvidia.com/gpu (also as
  kubegpu's readiness rule predicts it), a pod scheduled by the real scheduler and started by
  containerd under runc with the environment the plugin's Allocate gave it, and time-slicing
  replicas (allocatable 4 for one GPU; GFD's -SHARED product and replicas labels).

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
import time
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_readiness

from kubegpu.testbed import TestbedConfig, TestbedState, down, up
from tests.cluster import controlplane, images, kubelet
from tests.integration.conftest import derived_testbed_config
from tests.nvml import capture_to_data
from tests.processes import wait_for

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


MIG_CAPTURE = "netdata-a100-sxm4-40gb-mig-510.xml"


@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_gfd_mig_strategies_label_the_captures_mig_devices(
    built: dict[str, Any], tmp_path: Path, strategy: str
) -> None:
    """The A100 capture's two MIG devices (3g: 42 SMs, 19968 MiB each) as NVIDIA's GFD labels
    them under MIG strategies single and mixed; kubegpu's rule passes with the strategy."""
    data = tmp_path / "gpu.data"
    data.write_text(capture_to_data.convert(XML / MIG_CAPTURE))
    out = tmp_path / "gfd"
    proc = run_gfd(built, data, out, f"--mig-strategy={strategy}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = out.read_text()
    labels = labels_of(text)
    gpu = ET.parse(XML / MIG_CAPTURE).getroot().findall("gpu")[0]
    migs = gpu.findall("mig_devices/mig_device")
    shared = migs[0].find("device_attributes/shared")
    assert shared is not None
    # NVIDIA's profile name: <slices>g.<memory rounded up to GB>gb.
    sms = int(xml_value(shared, "multiprocessor_count"))
    slices = capture_to_data.MIG_SLICES_BY_SMS[xml_value(gpu, "product_name")][sms]
    memory = int(xml_value(migs[0], "fb_memory_usage/total").split()[0])
    profile = f"{slices}g.{-(-memory // 1024)}gb"
    product = xml_value(gpu, "product_name").replace(" ", "-")
    prefix = "nvidia.com/gpu" if strategy == "single" else f"nvidia.com/mig-{profile}"
    expected = {
        f"{prefix}.product": f"{product}-MIG-{profile}",
        f"{prefix}.count": str(len(migs)),
        f"{prefix}.memory": str(memory),
        f"{prefix}.multiprocessors": str(sms),
        f"{prefix}.slices.gi": str(slices),
        f"{prefix}.slices.ci": str(slices),
        f"{prefix}.engines.copy": xml_value(shared, "copy_engine_count"),
        f"{prefix}.engines.decoder": xml_value(shared, "decoder_count"),
        f"{prefix}.engines.encoder": xml_value(shared, "encoder_count"),
        f"{prefix}.engines.jpeg": xml_value(shared, "jpg_count"),
        f"{prefix}.engines.ofa": xml_value(shared, "ofa_count"),
        "nvidia.com/mig.strategy": strategy,
        "nvidia.com/mig.capable": "true",
    }
    assert {key: labels.get(key) for key in expected} == expected, text
    if strategy == "single":
        check = cluster_readiness.check_gfd_labels(
            {"metadata": {"labels": labels}},
            list(cluster_readiness.DEFAULT_GFD_LABELS),
            True,
            len(migs),
            mig_strategy=strategy,
        )
        assert check["status"] == "pass", check
    kept = NVML / "captures" / f"gfd-0.19.0-oneshot-netdata-a100-sxm4-40gb-mig-510-{strategy}.txt"
    if os.environ.get("KUBEGPU_NVML_RECAPTURE") == "1":
        kept.write_text(text)
    assert labels_of(kept.read_text()) == labels, "GFD's output changed; KUBEGPU_NVML_RECAPTURE=1"


# --- the device plugin next to a real kubelet ---------------------------------------------------

PLUGIN_CAPTURE = "telegraf-tesla-t4-515.xml"
SHELL_IMAGE = "registry.kubegpu.test/shell:1"
NODE_LIBRARY = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
NODE_DATA = "/usr/share/kubegpu/nvml-standin.data"
NODE_PLUGIN = "/usr/local/bin/nvidia-device-plugin"
PLUGIN_UNIT = "kubegpu-nvidia-device-plugin"
# containerd from the node's Debian (trixie: 1.7), its default config plus the one setting this
# machine needs (no CAP_SYS_RESOURCE in a node); the CNI plugins where containerd looks for them.
NODE_SETUP = r"""set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends containerd runc containernetworking-plugins >/dev/null
mkdir -p /etc/containerd /opt/cni/bin
containerd config default | sed 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' \
  > /etc/containerd/config.toml
ln -sf /usr/lib/cni/* /opt/cni/bin/
systemctl restart containerd
"""
TIME_SLICING = """version: v1
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""


def plugin_testbed_config() -> TestbedConfig:
    """One trixie node that can run containers, in a testbed of its own beside the session's."""
    return derived_testbed_config(4, "gpu", "trixie")


class Node:
    def __init__(self, testbed: TestbedState):
        self.testbed = testbed
        self.name = testbed.node_names[0]

    def ssh(self, command: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            self.testbed.ssh_argv(self.name, command),
            input=data,
            capture_output=True,
            timeout=600,
            check=False,
        )

    def ok(self, command: str) -> str:
        proc = self.ssh(command)
        assert proc.returncode == 0, f"{command}: {proc.stdout!r} {proc.stderr!r}"
        return proc.stdout.decode()

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        proc = self.ssh(
            f"mkdir -p $(dirname {path}) && cat > {path} && chmod {mode:o} {path}", data
        )
        assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def joined(
    built: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """A testbed node with containerd, its kubelet joined to a real control plane on the bridge,
    the node Ready; the NVML double and its data installed where NVIDIA's driver puts NVML."""
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (mounts, a bridge, systemd-nspawn)")
    config = plugin_testbed_config()
    testbed = up(config)
    node = Node(testbed)
    node.ok(NODE_SETUP)
    dump = tomllib.loads(node.ok("containerd config dump"))
    sandbox = dump["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"]
    kubelet.import_images(node, [images.pause_archive(sandbox), images.shell_archive(SHELL_IMAGE)])
    node.put(NODE_LIBRARY, Path(built["library"]).read_bytes())
    node.put(NODE_DATA, capture_to_data.convert(XML / PLUGIN_CAPTURE).encode())
    node.put(NODE_PLUGIN, Path(built["bin"]["nvidia-device-plugin"]).read_bytes(), 0o755)
    cluster = controlplane.start(tmp_path_factory.mktemp("cluster"), address=testbed.bridge_address)
    try:
        timings = kubelet.join(node, cluster)
        from kubernetes import client

        core = client.CoreV1Api(cluster.client())
        yield {"cluster": cluster, "core": core, "node": node, "timings": timings}
    finally:
        node.ssh(f"systemctl stop {PLUGIN_UNIT}; systemctl disable --now kubelet")
        cluster.stop()
        if os.environ.get("KUBEGPU_TESTBED_REUSE") != "1":
            down(config.state_dir)


def allocatable_gpus(core: Any, name: str) -> int:
    return int((core.read_node(name).status.allocatable or {}).get("nvidia.com/gpu", "0"))


def start_plugin(node: Node, *args: str) -> None:
    """NVIDIA's device plugin as a transient unit on the node, NVML from the node's library
    folder (the double), the kubelet's device-plugin socket as in its DaemonSet."""
    node.ssh(f"systemctl stop {PLUGIN_UNIT}; systemctl reset-failed {PLUGIN_UNIT}")
    node.ok(
        f"systemd-run --unit={PLUGIN_UNIT} -E KUBEGPU_NVML_DATA={NODE_DATA} "
        f"{NODE_PLUGIN} --fail-on-init-error=true {' '.join(args)}"
    )


def test_device_plugin_makes_the_captures_gpu_allocatable(joined: dict[str, Any]) -> None:
    node, core = joined["node"], joined["core"]
    root = ET.parse(XML / PLUGIN_CAPTURE).getroot()
    assert allocatable_gpus(core, node.name) == 0
    started = time.monotonic()
    start_plugin(node)
    count = wait_for(
        "allocatable nvidia.com/gpu", lambda: allocatable_gpus(core, node.name) or None
    )
    joined["timings"]["plugin_to_allocatable_s"] = round(time.monotonic() - started, 1)
    assert count == len(root.findall("gpu")) == int(xml_value(root, "attached_gpus"))
    # kubegpu's readiness rule predicts what NVIDIA's plugin advertised.
    expected, _ = cluster_readiness.expected_resources(None, len(root.findall("gpu")))
    assert expected == {"nvidia.com/gpu": count}
    log = node.ok(f"journalctl -u {PLUGIN_UNIT} --no-pager -o cat")
    assert "KUBEGPU_SIMULATED" in log and "Registered device plugin" in log, log[-3000:]
    # Health checks stay on: the double's event set API answers (no event ever arrives).
    assert "Ignoring the following XIDs for health checks" in log, log[-3000:]
    assert node.ok(f"systemctl is-active {PLUGIN_UNIT}").strip() == "active"
    print(f"\ndevice plugin: {joined['timings']}")


def gpu_pod_env(joined: dict[str, Any], name: str) -> str:
    """Run a pod asking for one nvidia.com/gpu; its log (the GPU variable Allocate set)."""
    node, core, cluster = joined["node"], joined["core"], joined["cluster"]
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "sh",
                        "image": SHELL_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": [
                            "sh",
                            "-c",
                            "echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES",
                        ],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    )
    try:
        wait_for(
            f"pod {name} finished",
            lambda: (
                core.read_namespaced_pod(name, "default").status.phase in ("Succeeded", "Failed")
            ),
            timeout_s=120,
        )
        pod = core.read_namespaced_pod(name, "default")
        assert pod.status.phase == "Succeeded", pod.status
        # Placed by the real scheduler: the test named no node.
        assert pod.spec.node_name == node.name
        assert "io.containerd.runc.v2" in node.ok("ctr -n k8s.io containers ls")
        return str(cluster.kubectl("logs", name).stdout)
    finally:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        wait_for(
            f"pod {name} gone",
            lambda: (
                name not in [p.metadata.name for p in core.list_namespaced_pod("default").items]
            ),
        )


def test_a_pod_gets_the_captures_gpu_from_the_plugins_allocate(joined: dict[str, Any]) -> None:
    node, core = joined["node"], joined["core"]
    uuid = xml_value(ET.parse(XML / PLUGIN_CAPTURE).getroot(), "gpu/uuid")
    if allocatable_gpus(core, node.name) == 0:
        start_plugin(node)
        wait_for("allocatable nvidia.com/gpu", lambda: allocatable_gpus(core, node.name) or None)
    assert gpu_pod_env(joined, "gpu") == f"NVIDIA_VISIBLE_DEVICES={uuid}\n"


def test_time_slicing_replicas_multiply_allocatable(joined: dict[str, Any]) -> None:
    node, core = joined["node"], joined["core"]
    root = ET.parse(XML / PLUGIN_CAPTURE).getroot()
    node.put("/etc/kubegpu/device-plugin-config.yaml", TIME_SLICING.encode())
    start_plugin(node, "--config-file=/etc/kubegpu/device-plugin-config.yaml")
    expected, _ = cluster_readiness.expected_resources(
        yaml.safe_load(TIME_SLICING), len(root.findall("gpu"))
    )
    assert expected == {"nvidia.com/gpu": 4 * len(root.findall("gpu"))}
    wait_for("allocatable nvidia.com/gpu times 4", lambda: allocatable_gpus(core, node.name) == 4)
    # Each replica is the capture's one GPU: a pod on a replica sees its UUID.
    uuid = xml_value(root, "gpu/uuid")
    assert gpu_pod_env(joined, "shared") == f"NVIDIA_VISIBLE_DEVICES={uuid}\n"


def test_gfd_labels_time_slicing_replicas(built: dict[str, Any], tmp_path: Path) -> None:
    """GFD reads the same device plugin config: the product gets -SHARED, replicas 4, and
    kubegpu's readiness rule still passes on the labels."""
    data = tmp_path / "gpu.data"
    data.write_text(capture_to_data.convert(XML / PLUGIN_CAPTURE))
    config = tmp_path / "config.yaml"
    config.write_text(TIME_SLICING)
    out = tmp_path / "gfd"
    proc = run_gfd(built, data, out, f"--config-file={config}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    labels = labels_of(out.read_text())
    product = xml_value(ET.parse(XML / PLUGIN_CAPTURE).getroot(), "gpu/product_name")
    keys = ("product", "replicas", "sharing-strategy", "count")
    assert {k: labels.get(f"nvidia.com/gpu.{k}") for k in keys} == {
        "product": product.replace(" ", "-") + "-SHARED",
        "replicas": "4",
        "sharing-strategy": "time-slicing",
        "count": "1",
    }
    check = cluster_readiness.check_gfd_labels(
        {"metadata": {"labels": labels}}, list(cluster_readiness.DEFAULT_GFD_LABELS), True, 1
    )
    assert check["status"] == "pass", check
