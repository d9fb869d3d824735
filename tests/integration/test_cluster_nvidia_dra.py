"""NVIDIA's own DRA driver for GPUs on a real node: its GPU kubelet plugin (gpu-kubelet-plugin of
sigs.k8s.io/dra-driver-nvidia-gpu at the release kubegpu deploys, tests/cluster/nvidia_dra_build.py)
registers with a real kubelet, publishes the node's ResourceSlice with NVIDIA's attributes, and
the real scheduler allocates kubegpu's claims against it by kubegpu's DeviceClass and CEL.

One trixie node (derived testbed number 9), its containerd installed and wired by kubegpu's
container_runtime role, a real kubelet joined to a real control plane on the node's bridge
(test_cluster_dra_kubelet's fixtures). The GPU is the only double: NVML is kubegpu's NVML test
double (tests/nvml; installed as NVIDIA's driver installs NVML, libnvidia-ml.so.<driver version>
linked as libnvidia-ml.so.1; it logs itself as [KUBEGPU_SIMULATED]) replaying the real capture
telegraf-tesla-t4-515, and nvidia-smi (which the plugin requires in the driver root) is the
testbed's replaying nvidia-smi of the same capture. Everything the plugin reports of the GPU
comes from that capture. NVIDIA's nvidia-cdi-hook (the container toolkit's, built from its
module) is where the plugin's image has it. The plugin runs as a service, where kubegpu runs it
as a DaemonSet: with the environment and command of kubegpu's DaemonSet (its verbosity raised to
7, at which the plugin lets the CDI library log), under kubegpu's ServiceAccount and ClusterRole
for it, with a token from the API server's TokenRequest.

The plugin does not prepare the claim: the GPU's CDI device gets no edits, because the device
nodes NVIDIA's kernel driver makes (/dev/nvidia<minor>, /dev/nvidiactl, ...) do not exist here;
the test asserts the plugin's own account of that, and the pod stays Pending. Preparation, CDI
injection and unpreparation are shown with Kubernetes' DRA test driver (test_cluster_dra_kubelet).

Nothing else is a double: no ResourceSlice, claim status or Node object is written by the test.
"""

from __future__ import annotations

import dataclasses
import os
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_manifests as cm
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_readiness as cr
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_settings as cs
from ansible_collections.kubegpu.gpu.plugins.module_utils import dra_workloads as dw
from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import read_templates

from kubegpu.testbed import down, gobuild, nodes, toolkit_build, up
from kubegpu.workloads import settings as tenancy_settings
from tests.cluster import nvidia_dra_build
from tests.integration.conftest import derived_testbed_config
from tests.integration.test_cluster_dra_kubelet import (
    CDI_DIR,
    DRIVER_NS,
    GROUP,
    NS,
    VERSION,
    assert_left_pending,
    claim_of,
    driver_kubeconfig,
    joined,
    kubelet_plugin_token,
    plugin_unit,
    pod_with_claim,
    wired,
)
from tests.integration.test_container_runtime_suites import SUITES, Node
from tests.integration.test_nvml_standin import NODE_DATA, NODE_LIBRARY, XML
from tests.nvml import build as nvml_build
from tests.nvml import capture_to_data
from tests.processes import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

__all__ = ["joined", "wired"]  # test_cluster_dra_kubelet's fixtures, on this module's node

NUMBER = 9
CAPTURE = "telegraf-tesla-t4-515"
PLUGIN = nvidia_dra_build.PLUGIN
PLUGIN_UNIT = "kubegpu-nvidia-gpu-kubelet-plugin"
PLUGIN_BIN = f"/usr/local/bin/{PLUGIN}"
PLUGIN_KUBECONFIG = f"/etc/kubegpu-test/{PLUGIN}.kubeconfig"
# Where the plugin looks for nvidia-smi in the driver root; the testbed's replaying one is linked.
NODE_SMI = "/usr/bin/nvidia-smi"
NODE_CDI_HOOK = "/usr/bin/nvidia-cdi-hook"


def release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def captured(path: str) -> str:
    """A value of the capture: ``path`` under its (one) GPU, or under its root."""
    root = ET.parse(XML / f"{CAPTURE}.xml").getroot()
    gpu = root.find("gpu")
    assert gpu is not None
    return (gpu.findtext(path) or root.findtext(path) or "").strip()


@pytest.fixture(scope="module")
def dra_node(ansible_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """The trixie node of derived testbed NUMBER, its nvidia-smi replaying CAPTURE; taken down at
    the end."""
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (mounts, a bridge, systemd-nspawn)")
    derived = derived_testbed_config(NUMBER, "nvdra", SUITES["trixie"][1])
    config = dataclasses.replace(derived, simulate_gpu=((f"{derived.name_prefix}1", CAPTURE),))
    try:
        testbed = up(config)
        yield Node("trixie", testbed, ansible_bin, tmp_path_factory.mktemp("nvidia-dra"))
    finally:
        if os.environ.get("KUBEGPU_TESTBED_REUSE") != "1":
            down(config.state_dir)


def kubegpus_dra() -> list[dict[str, Any]]:
    """What cluster_manifests.dra_manifests renders for gpu_cluster_allocation dra."""
    config, errors = cs.validate_config({"allocation": "dra"})
    assert errors == []
    return list(cm.dra_manifests(config, read_templates(cm.TEMPLATE_FOLDER)))


def daemonset_container(node: str) -> tuple[dict[str, str], list[str]]:
    """The environment and command of kubegpu's DaemonSet's plugin container, for the plugin run
    as a service on ``node``: the values the DaemonSet sets, the pod's fields it reads (node name,
    namespace) filled in, and the folder it mounts the driver root at (DRIVER_ROOT_CTR_PATH) the
    node's own root; plus the kubeconfig of kubegpu's ServiceAccount (the pod's in-cluster
    credentials) and the data file of the NVML double."""
    (daemonset,) = [m for m in kubegpus_dra() if m["kind"] == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    environment = {e["name"]: str(e["value"]) for e in container["env"] if "value" in e}
    assert environment["DRIVER_ROOT_CTR_PATH"] == "/driver-root", environment
    environment.update(
        DRIVER_ROOT_CTR_PATH="/",
        NODE_NAME=node,
        NAMESPACE=DRIVER_NS,
        KUBECONFIG=PLUGIN_KUBECONFIG,
        KUBEGPU_NVML_DATA=NODE_DATA,
    )
    return environment, [str(word) for word in container["command"]]


def nvidia_slices(custom: Any, node: str) -> list[dict[str, Any]]:
    items = custom.list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"]
    return [
        s
        for s in items
        if s["spec"].get("driver") == dw.DRIVER and s["spec"].get("nodeName") == node
    ]


@pytest.fixture(scope="module")
def plugin(dra_node: Node, joined: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """NVIDIA's GPU kubelet plugin started on the node with the NVML double; its slice."""
    from kubernetes import client

    node, cluster = dra_node, joined["cluster"]
    custom = client.CustomObjectsApi(cluster.client())
    gomod = (nvml_build.SRC / "go.mod").read_text()
    library, _ = nvml_build.build_library(
        Path(os.environ.get("KUBEGPU_NVML_CACHE", nvml_build.DEFAULT_CACHE)),
        gobuild.module_cache(),
        nvml_build.module_version(gomod, nvml_build.NVML_MODULE),
    )
    # As NVIDIA's driver installs NVML: the library under its driver version, linked as .so.1.
    versioned = f"{Path(NODE_LIBRARY).parent}/libnvidia-ml.so.{captured('driver_version')}"
    node.put(versioned, library.read_bytes())
    node.ok(f"ln -sf {Path(versioned).name} {NODE_LIBRARY}")
    node.put(NODE_DATA, capture_to_data.convert(XML / f"{CAPTURE}.xml").encode())
    node.ok(f"ln -sf {nodes.SIMULATED_SMI} {NODE_SMI}")
    # NVIDIA's nvidia-cdi-hook (the container toolkit's, built from its module) where the plugin's
    # image has it: the plugin copies it into its folder and names it in the CDI specs it writes.
    toolkit = toolkit_build.build(max(toolkit_build.versions(), key=release))
    node.put(
        NODE_CDI_HOOK, (Path(str(toolkit["dir"])) / "bin" / "nvidia-cdi-hook").read_bytes(), 0o755
    )
    started = time.monotonic()
    result = nvidia_dra_build.from_environment()
    build_s = round(time.monotonic() - started, 1)
    binary = Path(str(result["bin"][PLUGIN]))  # type: ignore[index]
    node.put(
        PLUGIN_KUBECONFIG, driver_kubeconfig(cluster, kubelet_plugin_token(joined)).encode(), 0o600
    )
    node.put(PLUGIN_BIN, binary.read_bytes(), 0o755)
    assert not nvidia_slices(custom, node.name)
    environment, command = daemonset_container(node.name)
    settings = " ".join(f"-E {k}={v}" for k, v in sorted(environment.items()))
    # The plugin's folder, which the DaemonSet's hostPath volume (DirectoryOrCreate) makes; the
    # DaemonSet's command with verbosity 7, at which the plugin lets nvcdi (CDI specs) log.
    node.ok(f"mkdir -p /var/lib/kubelet/plugins/{dw.DRIVER} {CDI_DIR}")
    run = f"{settings} {PLUGIN_BIN} {' '.join(command[1:])} -v 7"
    with plugin_unit(node, PLUGIN_UNIT, run, lambda: nvidia_slices(custom, node.name)) as started:
        published, seconds = started
        timings = {
            "build_s": build_s,
            "build_cached": result["cached"],
            "plugin_to_slice_s": seconds,
        }
        yield {"custom": custom, "slices": published, "timings": timings}


def test_nvidias_plugin_publishes_the_captures_gpu_with_nvidias_attributes(
    dra_node: Node, joined: dict[str, Any], plugin: dict[str, Any]
) -> None:
    node, core = dra_node, joined["core"]
    (published,) = plugin["slices"]
    spec = published["spec"]
    assert spec["pool"]["name"] == node.name
    (device,) = spec["devices"]
    attributes = {k: next(iter(v.values())) for k, v in device["attributes"].items()}
    print(f"\nNVIDIA's GPU kubelet plugin: {plugin['timings']}\nits device: {device}")
    assert attributes["type"] == "gpu"
    assert attributes["uuid"] == captured("uuid")
    # NVML's name, architecture, CUDA compute capability and versions as the double answers them
    # from the capture; the PCI bus id NVML gives, published as Kubernetes' standard attribute.
    assert attributes["productName"] == captured("product_name"), attributes
    semver = ".".join(str(int(part)) for part in captured("driver_version").split("."))
    assert attributes["driverVersion"] == semver, attributes
    assert attributes["resource.kubernetes.io/pciBusID"] == captured("pci/pci_bus_id")[4:].lower()
    (owner,) = published["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Node", node.name)
    assert owner["uid"] == core.read_node(node.name).metadata.uid
    node.ok(f"test -S /var/lib/kubelet/plugins_registry/{dw.DRIVER}-reg.sock")
    wait_for(
        "the kubelet's log of the DRA plugin's registration",
        lambda: node.ok(
            "journalctl -u kubelet -o cat | grep 'Registered DRA plugin' "
            f"| grep -F '\"{dw.DRIVER}\"' || true"
        ),
    )
    # kubegpu's readiness check counts the slice's GPU: one, the node's one.
    every = plugin["custom"].list_cluster_custom_object(GROUP, VERSION, "resourceslices")
    check = cr.check_dra_resource_slices({"metadata": {"name": node.name}}, every["items"], 1, {})
    assert check["status"] == "pass", check
    assert check["observed"] == f"1 GPU(s): {device['name']}", check


@pytest.fixture(scope="module")
def workspace(joined: dict[str, Any], plugin: dict[str, Any]) -> dict[str, Any]:
    """kubegpu's DeviceClasses as cluster_manifests.dra_manifests renders them; the namespace."""
    core, custom = joined["core"], plugin["custom"]
    classes = [m for m in kubegpus_dra() if m["kind"] == "DeviceClass"]
    assert {c["metadata"]["name"] for c in classes} == set(cm.DRA_DEVICE_CLASSES)
    for device_class in classes:
        custom.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", device_class)
    core.create_namespace({"metadata": {"name": NS}})
    wait_for("the default service account", lambda: core.list_namespaced_service_account(NS).items)
    return {"core": core, "custom": custom}


def product_template(name: str, products: list[str]) -> dict[str, Any]:
    """kubegpu's example ResourceClaimTemplate (dra_single_gpu) for ``products``."""
    settings = tenancy_settings({"gpu_tenancy_workload_gpu_products": products})
    template = dw.dra_single_gpu(settings, NS, name=name)[0]
    assert template["kind"] == "ResourceClaimTemplate"
    return dict(template)


def test_kubegpus_class_and_template_get_the_captures_gpu_allocated(
    dra_node: Node, joined: dict[str, Any], plugin: dict[str, Any], workspace: dict[str, Any]
) -> None:
    node = dra_node
    core, custom = workspace["core"], workspace["custom"]
    (device,) = plugin["slices"][0]["spec"]["devices"]
    product = captured("product_name").replace(" ", "-")
    template = product_template("one-t4", [product])
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, "resourceclaimtemplates", template)
    core.create_namespaced_pod(NS, pod_with_claim("one-t4", "one-t4"))

    def allocated() -> dict[str, Any] | None:
        claim = claim_of(custom, "one-t4")
        return claim if claim and (claim.get("status") or {}).get("allocation") else None

    claim = wait_for("the claim of one-t4 allocated", allocated, 120)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (dw.DRIVER, node.name)
    assert result["device"] == device["name"]
    assert core.read_namespaced_pod("one-t4", NS).spec.node_name == node.name

    # The kubelet hands the claim to NVIDIA's plugin, which cannot prepare it: the container
    # toolkit's CDI spec generation finds nothing to put in the GPU's CDI device (the device
    # nodes NVIDIA's kernel driver makes, which no double provides).
    def refused() -> str:
        events = core.list_namespaced_event(
            NS, field_selector="involvedObject.name=one-t4,reason=FailedPrepareDynamicResources"
        ).items
        return str(events[0].message) if events else ""

    message = wait_for("the kubelet's report of the plugin's preparation", refused, 120)
    cdi = node.ssh(f"journalctl -u {PLUGIN_UNIT} -o cat | grep -i -E 'cdi|/dev/nvidia' | tail -25")
    print(f"\nNVIDIA's plugin on preparing {claim['metadata']['name']}:\n{message}\n{cdi.stdout}")
    assert f"NodePrepareResources failed for ResourceClaim {claim['metadata']['name']}" in message
    cdi_device = f"{claim['metadata']['uid']}-{device['name']}"
    assert f'failed add device "{cdi_device}": invalid device, empty device edits' in message
    assert f"Could not locate /dev/nvidia{captured('minor_number')}: " in cdi.stdout, cdi.stdout
    assert f"device nodes about to inject for device {cdi_device}: 0" in cdi.stdout, cdi.stdout
    assert core.read_namespaced_pod("one-t4", NS).status.phase == "Pending"
    assert claim["metadata"]["uid"] not in node.ok(f"ls {CDI_DIR}")


def test_a_claim_for_a_product_the_node_lacks_stays_unallocated(
    workspace: dict[str, Any],
) -> None:
    absent = product_template("one-b200", ["NVIDIA-B200"])
    assert_left_pending(workspace["core"], workspace["custom"], absent)
