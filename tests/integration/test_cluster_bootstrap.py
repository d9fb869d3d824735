"""The cluster_bootstrap layer from bare testbed nodes: containerd from Debian by the
container_runtime role, then playbooks/bootstrap_cluster.yml installs kubeadm, kubelet and
kubectl from the testbed's signed Kubernetes repository (the build's binaries, packaged as the
Kubernetes project does: kubegpu.testbed.kubernetes_repo), runs kubeadm init on the first
control-plane node with the control-plane images imported from archives (the images are built
here from the same build: no registry), joins the other node with a short-lived token, gives
both the CNI bridge plugin with routes between their pod CIDRs, and hands the controller a 0600
kubeconfig. Both nodes go Ready; a second run changes nothing.

The testbed is two trixie nodes that can run containers, on a bridge, subnet, prefix and state
folder derived from the session's KUBEGPU_TESTBED_* settings (suffix 3, "bs", "-bootstrap"),
taken down at the end (KUBEGPU_TESTBED_REUSE=1 keeps and reuses it).

What this machine cannot give, and the test inventory (never the role's defaults) says so:
cgroup v1 (the cgroupfs driver and kubelet's failCgroupV1: false), no swap check, and the
kubeadm preflight checks that read what a systemd-nspawn node lacks
(TESTBED_PREFLIGHT_EXCEPTIONS below, each with its reason).
"""

from __future__ import annotations

import ipaddress
import json
import os
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubegpu.testbed import TestbedConfig, TestbedState, down, load_state, up
from kubegpu.testbed import kubernetes_repo as kr
from kubegpu.testbed.config import DEFAULT_BRIDGE, DEFAULT_PREFIX, DEFAULT_SUBNET, default_state_dir
from tests.cluster import build, images
from tests.integration import ansible_json

# restrict_oom_score_adj in containerd's main config (a node has no CAP_SYS_RESOURCE), as the
# runtime suites set it.
from tests.integration.test_container_runtime_suites import RESTRICT_OOM
from tests.processes import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
# kubeadm preflight checks a systemd-nspawn node on this machine fails, and why.
TESTBED_PREFLIGHT_EXCEPTIONS = {
    # kubeadm's system verification reads the kernel's configuration, which this VM's kernel
    # does not publish, and refuses cgroup v1.
    "SystemVerification": "no /proc/config.gz or /boot/config-*; cgroup v1",
    # No br_netfilter module can be loaded here, so its sysctl does not exist in a node.
    "FileContent--proc-sys-net-bridge-bridge-nf-call-iptables": "no br_netfilter module",
}
RUNTIME_PLAY = """
- name: Install containerd from the distribution
  hosts: k8s_cluster
  gather_facts: true
  roles:
    - role: kubegpu.gpu.container_runtime
      vars:
        container_runtime_install: true
        container_runtime_type: containerd
"""


def bootstrap_config() -> TestbedConfig:
    """Two container nodes on the session's bridge/subnet/prefix/state plus a suffix: bridge
    kgtb8 -> kgtb83, subnet 10.213.8.0/24 -> 10.213.83.0/24, prefix e -> ebs."""
    bridge = os.environ.get("KUBEGPU_TESTBED_BRIDGE", DEFAULT_BRIDGE) + "3"
    base = ipaddress.ip_network(os.environ.get("KUBEGPU_TESTBED_SUBNET", DEFAULT_SUBNET))
    octets = str(base.network_address).split(".")
    third = int(octets[2]) * 10 + 3
    if base.prefixlen != 24 or third > 255 or len(bridge) > 15:
        pytest.skip(f"cannot derive a testbed from bridge {bridge[:-1]} and subnet {base}")
    prefix = os.environ.get("KUBEGPU_TESTBED_PREFIX", DEFAULT_PREFIX) + "bs"
    return TestbedConfig(
        nodes=2,
        name_prefix=prefix,
        subnet=".".join([*octets[:2], str(third), "0"]) + "/24",
        bridge=bridge,
        suite="trixie",
        state_dir=Path(str(default_state_dir()) + "-bootstrap"),
        containers=(f"{prefix}1", f"{prefix}2"),
    )


@pytest.fixture(scope="module")
def bare(request: pytest.FixtureRequest) -> Iterator[TestbedState]:
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (mounts, a bridge, systemd-nspawn)")
    config = bootstrap_config()
    if os.environ.get("KUBEGPU_TESTBED_REUSE") == "1":
        current = load_state(config.state_dir)
        yield current if current is not None and current.running else up(config)
        return
    request.addfinalizer(lambda: down(config.state_dir))
    yield up(config)


def ssh(testbed: TestbedState, node: str, command: str, data: bytes | None = None) -> str:
    proc = subprocess.run(
        testbed.ssh_argv(node, command), input=data, capture_output=True, timeout=600
    )
    assert proc.returncode == 0, f"{node}: {command}: {proc.stdout!r} {proc.stderr!r}"
    return proc.stdout.decode()


def control_plane_images(
    kubeadm: str, binaries: dict[str, str], config: Path, folder: Path, sandbox: str
) -> list[str]:
    """An archive per image `kubeadm config images list` names for this configuration, each the
    build's program as /usr/local/bin/<name>; pause also under containerd's sandbox name."""
    listed = subprocess.run(
        [kubeadm, "config", "images", "list", "--config", str(config)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    archives = []
    for name in listed:
        program = name.rsplit("/", 1)[1].split(":")[0]
        if program == "pause":
            for pause_name in sorted({name, sandbox}):
                archives.append(str(images.pause_archive(pause_name)))
            continue
        if program in ("kube-proxy", "coredns"):
            continue  # the addons whose phases the test inventory skips
        if program not in binaries:
            raise AssertionError(f"kubeadm asks for {name}, which the build has no program for")
        key = f"{program}-{Path(binaries[program]).stat().st_mtime_ns}"
        archive = folder / f"{key}.tar"
        if not archive.is_file():
            layer = images._layer(
                {f"usr/local/bin/{program}": (Path(binaries[program]).read_bytes(), 0o755)}, {}
            )
            images.write_oci_archive(
                archive, name, layer, {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]}
            )
        archives.append(str(archive))
    return archives


def run(inventory: Path, playbook: str, extra: Path) -> tuple[int, dict[str, Any], float]:
    """ansible-playbook: its exit code, its JSON report and its wall time."""
    started = time.monotonic()
    # From bare nodes the first run installs packages, imports the control-plane images and
    # waits for kubeadm init: more than ansible_json.run's five minutes on two busy cores.
    proc = ansible_json.playbook(
        playbook, "-i", str(inventory), "-e", f"@{extra}", json_report=True, timeout=1500
    )
    return proc.returncode, ansible_json.report(proc), time.monotonic() - started


def failures(report: dict[str, Any]) -> list[str]:
    return [
        f"{host}: {task['task']['name']}: {str(result.get('msg'))[:2000]}"
        f" {str(result.get('stderr', ''))[-2000:]}"
        for play in report.get("plays", [])
        for task in play["tasks"]
        for host, result in task["hosts"].items()
        if result.get("failed") or result.get("unreachable")
    ]


def changed_tasks(report: dict[str, Any]) -> list[str]:
    return [
        f"{host}: {task['task']['name']}"
        for play in report.get("plays", [])
        for task in play["tasks"]
        for host, result in task["hosts"].items()
        if result.get("changed")
    ]


@pytest.fixture(scope="module")
def bootstrapped(bare: TestbedState, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    testbed = bare
    tmp = tmp_path_factory.mktemp("bootstrap")
    timings: dict[str, float] = {}
    built = build.build(
        Path(os.environ.get("KUBEGPU_CLUSTER_CACHE", build.DEFAULT_CACHE)),
        Path(os.environ.get("KUBEGPU_GOMODCACHE", build.DEFAULT_GOMODCACHE)),
    )
    binaries: dict[str, str] = built["bin"]  # type: ignore[assignment]
    version = str(built["kubernetes_version"])

    # The Kubernetes repository, served beside the vendor repository on the bridge.
    started = time.monotonic()
    served = testbed.state_dir / "vendor-repo" / "www"
    repo = kr.publish(served, testbed.state_dir / "kubernetes-repo", binaries, version)
    timings["packages_s"] = time.monotonic() - started
    base_url = testbed.vendor_repo_url.rsplit("/", 1)[0]

    # containerd from Debian (the runtime layer), with what a node here needs besides.
    playbook = tmp / "runtime.yml"
    playbook.write_text(RUNTIME_PLAY)
    empty = tmp / "none.json"
    empty.write_text("{}")
    rc, report, timings["runtime_s"] = run(testbed.inventory, str(playbook), empty)
    assert rc == 0, failures(report)
    for node in testbed.node_names:
        ssh(testbed, node, "cat > /root/restrict-oom.py", RESTRICT_OOM.encode())
        ssh(testbed, node, "python3 /root/restrict-oom.py && systemctl restart containerd")
    dump = ssh(testbed, testbed.node_names[0], "containerd config dump")
    sandbox = next(
        line.split("=", 1)[1].strip().strip('"')
        for line in dump.splitlines()
        if line.strip().startswith(("sandbox_image", "sandbox ="))
    )

    settings: dict[str, Any] = {
        "kubegpu_cluster_bootstrap": "kubeadm",
        "cluster_bootstrap_kubernetes_version": version.lstrip("v"),
        "cluster_bootstrap_repo_url": f"{base_url}/{repo.url_path}",
        "cluster_bootstrap_cgroup_driver": "cgroupfs",
        "cluster_bootstrap_kubelet_settings": {
            "failCgroupV1": False,
            "failSwapOn": False,
            "imageGCHighThresholdPercent": 100,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%"},
        },
        "cluster_bootstrap_ignore_preflight_errors": sorted(TESTBED_PREFLIGHT_EXCEPTIONS),
        # No CoreDNS or kube-proxy image can be built here from the build's programs.
        "cluster_bootstrap_skip_phases": ["addon/coredns", "addon/kube-proxy"],
        "cluster_bootstrap_kubeconfig_path": str(tmp / "admin.conf"),
        # Two shared cores: the API server may answer slower than kubeadm's default minute.
        "cluster_bootstrap_kubeadm_timeouts": {
            "kubernetesAPICall": "5m0s",
            "controlPlaneComponentHealthCheck": "8m0s",
        },
    }
    # The images kubeadm asks for, from its own list for this configuration.
    from ansible_collections.kubegpu.gpu.plugins.module_utils import kubeadm_bootstrap as kb
    from ansible_collections.kubegpu.gpu.plugins.modules.kubeadm_config import render

    rendered = tmp / "kubeadm.yaml"
    rendered.write_text(
        render(
            kb.init_documents(
                {k[len(kb.PREFIX) :]: v for k, v in settings.items() if k.startswith(kb.PREFIX)}
                | {"pod_cidr": "10.244.0.0/16", "service_cidr": "10.96.0.0/12"},
                "cp",
                "192.0.2.10",
                "192.0.2.10:6443",
            )
        )
    )
    image_folder = Path(os.environ.get("KUBEGPU_CLUSTER_CACHE", build.DEFAULT_CACHE)) / "images"
    settings["cluster_bootstrap_image_archives"] = control_plane_images(
        binaries["kubeadm"], binaries, rendered, image_folder, sandbox
    )
    host_vars = {
        name: {"cluster_bootstrap_node_address": address}
        for name, address in testbed.addresses.items()
    }
    extra = tmp / "bootstrap.json"
    extra.write_text(json.dumps(settings))
    # Each node's address as a host variable, in a copy of the testbed's inventory.
    inventory = yaml.safe_load(testbed.inventory.read_text())
    hosts = inventory["all"]["children"]["k8s_cluster"]["children"]["gpu_nodes"]["hosts"]
    for name, values in host_vars.items():
        hosts[name].update(values)
    testbed_inventory = tmp / "inventory.yml"
    testbed_inventory.write_text(yaml.safe_dump(inventory))
    playbook_path = str(REPO / "playbooks" / "bootstrap_cluster.yml")
    rc, first, timings["bootstrap_first_run_s"] = run(testbed_inventory, playbook_path, extra)
    assert rc == 0, failures(first)
    return {
        "testbed": testbed,
        "inventory": testbed_inventory,
        "extra": extra,
        "playbook": playbook_path,
        "first": first,
        "timings": timings,
        "kubeconfig": tmp / "admin.conf",
        "kubectl": binaries["kubectl"],
    }


def kubectl(bootstrapped: dict[str, Any], *args: str) -> str:
    return subprocess.run(
        [bootstrapped["kubectl"], "--kubeconfig", str(bootstrapped["kubeconfig"]), *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout


def ready_nodes(bootstrapped: dict[str, Any]) -> set[str]:
    nodes = json.loads(kubectl(bootstrapped, "get", "nodes", "-o", "json"))["items"]
    return {
        n["metadata"]["name"]
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])
    }


def test_every_node_joins_and_goes_ready(bootstrapped: dict[str, Any]) -> None:
    testbed = bootstrapped["testbed"]
    kubeconfig = bootstrapped["kubeconfig"]
    assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
    started = time.monotonic()
    wait_for(
        "every node Ready",
        lambda: ready_nodes(bootstrapped) == set(testbed.node_names),
        timeout_s=180,
    )
    bootstrapped["timings"]["ready_after_run_s"] = time.monotonic() - started
    for node in testbed.node_names:
        # The packages came from the signed deb822 source, pinned and held.
        held = ssh(testbed, node, "apt-mark showhold").split()
        assert {"kubeadm", "kubelet", "kubectl"} <= set(held)
        policy = ssh(testbed, node, "apt-cache policy kubeadm")
        assert "kubernetes/core:/stable:/v1.37/deb" in policy, policy
        # kubelet_gpu's layout: kubeadm's config file and the package's drop-in.
        ssh(testbed, node, "test -f /var/lib/kubelet/config.yaml")
        ssh(testbed, node, "test -f /usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf")
        # The join configuration with its token is gone.
        ssh(testbed, node, "test ! -e /etc/kubernetes/kubegpu-kubeadm-join.yaml")
    # No token or key in the run's report.
    assert "--token" not in json.dumps(bootstrapped["first"])
    print(f"\nbootstrap timings: {bootstrapped['timings']}")


def test_a_second_run_changes_nothing(bootstrapped: dict[str, Any]) -> None:
    rc, report, seconds = run(
        bootstrapped["inventory"], bootstrapped["playbook"], bootstrapped["extra"]
    )
    assert rc == 0, failures(report)
    assert changed_tasks(report) == []
    assert all(stats["changed"] == 0 for stats in report["stats"].values()), report["stats"]
    print(f"\nsecond run: {seconds:.1f} s, changed=0")
