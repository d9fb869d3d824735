"""The cluster_bootstrap layer from bare testbed nodes: containerd from Debian by the
container_runtime role (on the node added later, by the bootstrap play's own runtime layer), then
playbooks/bootstrap_cluster.yml installs kubeadm, kubelet and
kubectl from the testbed's signed Kubernetes repository (the build's binaries, packaged as the
Kubernetes project does: kubegpu.testbed.kubernetes_repo), runs kubeadm init on the first
control-plane node with the control-plane images imported from archives (the images are built
here from the same build: no registry), joins the other node with a short-lived token, gives
both the CNI bridge plugin with routes between their pod CIDRs, and hands the controller a 0600
kubeconfig. Both nodes go Ready; a second run changes nothing. A third node added to k8s_cluster
joins on the next run, which changes nothing on the other two; reset.yml --limit takes it out
again (drained, kubeadm reset, its Node object deleted) and refuses the only control-plane host
alone. Last, the whole cluster is reset, an init that fails (a kubeadm timeout too short for
the control plane to come up, which passes kubegpu's checks) is undone and named, and the next
run initialises the cluster again.

The testbed is three trixie nodes that can run containers (the third outside k8s_cluster until
it is added), on a bridge, subnet, prefix and state
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
# runtime suites set it; the runtime layer's next run carries it into kubegpu's drop-in.
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
# The node added later gets containerd from the bootstrap play; before that, its main config
# holds only restrict_oom_score_adj (containerd 1.7's version 2 schema), which the package's
# installation keeps and kubegpu's drop-in carries.
ADDED_NODE_CONTAINERD = """version = 2

[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
"""
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
    """Three container nodes on the session's bridge/subnet/prefix/state plus a suffix: bridge
    kgtb8 -> kgtb83, subnet 10.213.8.0/24 -> 10.213.83.0/24, prefix e -> ebs."""
    bridge = os.environ.get("KUBEGPU_TESTBED_BRIDGE", DEFAULT_BRIDGE) + "3"
    base = ipaddress.ip_network(os.environ.get("KUBEGPU_TESTBED_SUBNET", DEFAULT_SUBNET))
    octets = str(base.network_address).split(".")
    third = int(octets[2]) * 10 + 3
    if base.prefixlen != 24 or third > 255 or len(bridge) > 15:
        pytest.skip(f"cannot derive a testbed from bridge {bridge[:-1]} and subnet {base}")
    prefix = os.environ.get("KUBEGPU_TESTBED_PREFIX", DEFAULT_PREFIX) + "bs"
    return TestbedConfig(
        nodes=3,
        name_prefix=prefix,
        subnet=".".join([*octets[:2], str(third), "0"]) + "/24",
        bridge=bridge,
        suite="trixie",
        state_dir=Path(str(default_state_dir()) + "-bootstrap"),
        containers=(f"{prefix}1", f"{prefix}2", f"{prefix}3"),
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


def published_repo(
    testbed: TestbedState, served: Path, binaries: dict[str, str], version: str
) -> kr.KubernetesRepo:
    """The testbed's Kubernetes repository, packaged again only when the build's programs or
    the version changed since it was last published on this testbed (a reused testbed)."""
    key = json.dumps(
        [version, sorted((name, Path(path).stat().st_mtime_ns) for name, path in binaries.items())]
    )
    stamp = testbed.state_dir / "kubernetes-repo.json"
    if stamp.is_file():
        kept = json.loads(stamp.read_text())
        if kept["key"] == key and (served / kept["url_path"] / "InRelease").is_file():
            return kr.KubernetesRepo(
                url_path=kept["url_path"],
                flat=Path(kept["flat"]),
                keyring=Path(kept["keyring"]),
                version=kept["version"],
            )
    repo = kr.publish(served, testbed.state_dir / "kubernetes-repo", binaries, version)
    record = {
        "key": key,
        "url_path": repo.url_path,
        "flat": str(repo.flat),
        "keyring": str(repo.keyring),
        "version": repo.version,
    }
    stamp.write_text(json.dumps(record))
    return repo


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


def run(
    inventory: Path, playbook: str, extra: Path, *args: str
) -> tuple[int, dict[str, Any], float]:
    """ansible-playbook: its exit code, its JSON report and its wall time."""
    started = time.monotonic()
    # From bare nodes the first run installs packages, imports the control-plane images and
    # waits for kubeadm init: more than ansible_json.run's five minutes on two busy cores.
    proc = ansible_json.playbook(
        playbook, "-i", str(inventory), "-e", f"@{extra}", *args, json_report=True, timeout=1500
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
    repo = published_repo(testbed, served, binaries, version)
    timings["packages_s"] = time.monotonic() - started
    base_url = testbed.vendor_repo_url.rsplit("/", 1)[0]

    # containerd from Debian (the runtime layer) on the two first nodes, with what a node here
    # needs besides. The node added later is bare: the bootstrap play installs its containerd,
    # over a main config that has only what this machine needs (ADDED_NODE_CONTAINERD).
    added = testbed.node_names[-1]
    ssh(testbed, added, "! command -v containerd")
    ssh(
        testbed,
        added,
        "mkdir -p /etc/containerd && cat > /etc/containerd/config.toml",
        ADDED_NODE_CONTAINERD.encode(),
    )
    playbook = tmp / "runtime.yml"
    playbook.write_text(RUNTIME_PLAY)
    empty = tmp / "none.json"
    empty.write_text("{}")
    members = [n for n in testbed.node_names if n != added]
    limit = ("--limit", ",".join(members))
    rc, report, timings["runtime_s"] = run(testbed.inventory, str(playbook), empty, *limit)
    assert rc == 0, failures(report)
    for node in members:
        ssh(testbed, node, "cat > /root/restrict-oom.py", RESTRICT_OOM.encode())
        ssh(testbed, node, "python3 /root/restrict-oom.py && systemctl restart containerd")
    # containerd 1.7 replaces the whole CRI section with the drop-in's, which kubegpu derives
    # from the main config on its next run: without it the drop-in's restrict_oom_score_adj =
    # false stands, and runc cannot give the control plane's static pods (oom_score_adj -998)
    # their sandboxes ("can't get final child's PID from pipe").
    rc, report, timings["runtime_again_s"] = run(testbed.inventory, str(playbook), empty, *limit)
    assert rc == 0, failures(report)
    for node in members:
        dump_text = ssh(testbed, node, "containerd config dump")
        assert "restrict_oom_score_adj = true" in dump_text, node
        assert "restrict_oom_score_adj = false" not in dump_text, node
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
    # Each node's address as a host variable, in copies of the testbed's inventory: one with
    # every node in k8s_cluster, one with the last node outside it (not yet added).
    inventory = yaml.safe_load(testbed.inventory.read_text())
    hosts = inventory["all"]["children"]["k8s_cluster"]["children"]["gpu_nodes"]["hosts"]
    for name, values in host_vars.items():
        hosts[name].update(values)
    added_inventory = tmp / "inventory-added.yml"
    added_inventory.write_text(yaml.safe_dump(inventory))
    inventory["all"]["hosts"] = {added: hosts.pop(added)}
    testbed_inventory = tmp / "inventory.yml"
    testbed_inventory.write_text(yaml.safe_dump(inventory))
    playbook_path = str(REPO / "playbooks" / "bootstrap_cluster.yml")
    rc, first, timings["bootstrap_first_run_s"] = run(testbed_inventory, playbook_path, extra)
    assert rc == 0, failures(first)
    return {
        "testbed": testbed,
        "inventory": testbed_inventory,
        "added_inventory": added_inventory,
        "added": added,
        "members": set(testbed.node_names) - {added},
        "settings": settings,
        "tmp": tmp,
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
        lambda: ready_nodes(bootstrapped) == bootstrapped["members"],
        timeout_s=180,
    )
    bootstrapped["timings"]["ready_after_run_s"] = time.monotonic() - started
    for node in sorted(bootstrapped["members"]):
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


def host_stats(report: dict[str, Any], host: str) -> dict[str, int]:
    stats: dict[str, int] = report["stats"][host]
    return stats


def reset(bootstrapped: dict[str, Any], inventory: Path, *args: str) -> tuple[int, dict[str, Any]]:
    rc, report, _ = run(
        inventory,
        str(REPO / "playbooks" / "reset.yml"),
        bootstrapped["extra"],
        "-e",
        "kubegpu_reset_confirm=true",
        *args,
    )
    return rc, report


def node_objects(bootstrapped: dict[str, Any]) -> set[str]:
    nodes = json.loads(kubectl(bootstrapped, "get", "nodes", "-o", "json"))["items"]
    return {n["metadata"]["name"] for n in nodes}


def test_check_mode_says_a_node_would_join_and_changes_nothing(
    bootstrapped: dict[str, Any],
) -> None:
    """Check mode makes no token and joins nothing: it says the node would join, and the node
    keeps what it had (no kubeadm installed, no kubelet.conf, no join configuration)."""
    testbed, added = bootstrapped["testbed"], bootstrapped["added"]
    rc, report, _ = run(
        bootstrapped["added_inventory"], bootstrapped["playbook"], bootstrapped["extra"], "--check"
    )
    assert rc == 0, failures(report)
    done = changed_tasks(report)
    assert (
        f"{added}: kubegpu.gpu.cluster_bootstrap : Say that a run would join the host (check mode"
        " makes no token)" in done
    ), done
    for member in sorted(bootstrapped["members"]):
        assert not [line for line in done if line.startswith(f"{member}: ")], done
    ssh(testbed, added, "test ! -e /etc/kubernetes/kubelet.conf")
    ssh(testbed, added, "test ! -e /etc/kubernetes/kubegpu-kubeadm-join.yaml")
    ssh(testbed, added, "! command -v kubeadm")
    # Nor containerd, which the runtime layer says it would install first.
    ssh(testbed, added, "! command -v containerd")
    assert (
        f"{added}: kubegpu.gpu.container_runtime : Report the packages check mode would install"
        in done
    ), done
    # No bootstrap token was made for it.
    tokens = ssh(
        testbed, testbed.node_names[0], "kubeadm token list --kubeconfig /etc/kubernetes/admin.conf"
    )
    assert f"join {added}" not in tokens, tokens


def test_an_added_node_joins_alone(bootstrapped: dict[str, Any]) -> None:
    testbed, added = bootstrapped["testbed"], bootstrapped["added"]
    ssh(testbed, added, "test ! -e /etc/kubernetes/kubelet.conf")
    rc, report, seconds = run(
        bootstrapped["added_inventory"], bootstrapped["playbook"], bootstrapped["extra"]
    )
    assert rc == 0, failures(report)
    # The nodes already in the cluster are not joined again; all that changes on them is their
    # route to the added node's pod CIDR (the routes' unit, and its restart).
    routes = {
        "kubegpu.gpu.cluster_bootstrap : Route every other node's pod CIDR through that node, at every boot",
        "kubegpu.gpu.cluster_bootstrap : Start the routes' unit, again when the routes changed",
    }
    done = changed_tasks(report)
    for member in sorted(bootstrapped["members"]):
        assert {line.split(": ", 1)[1] for line in done if line.startswith(f"{member}: ")} <= routes
        assert host_stats(report, member)["changed"] <= len(routes), (member, done)
    assert host_stats(report, added)["changed"] > 0
    # A bare host: the play installed containerd and wired it (nvidia runtime and all, since
    # the node is in gpu_nodes), kept the main config's setting, then joined.
    for task in (
        "kubegpu.gpu.container_runtime : Install containerd from the distribution",
        "kubegpu.gpu.container_runtime : Wire the nvidia runtime into containerd through a validated drop-in",
        "kubegpu.gpu.cluster_bootstrap : Join the node with kubeadm join",
    ):
        assert f"{added}: {task}" in done, done
    dump_text = ssh(testbed, added, "containerd config dump")
    assert "restrict_oom_score_adj = true" in dump_text
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump_text
    wait_for(
        "the added node Ready",
        lambda: ready_nodes(bootstrapped) == set(testbed.node_names),
        timeout_s=180,
    )
    ssh(testbed, added, "test -f /etc/kubernetes/kubelet.conf")
    cidr = kubectl(bootstrapped, "get", "node", added, "-o", "jsonpath={.spec.podCIDR}")
    for member in sorted(bootstrapped["members"]):
        assert f"{cidr} via {testbed.addresses[added]}" in ssh(testbed, member, "ip route"), member
    others = {m: host_stats(report, m)["changed"] for m in sorted(bootstrapped["members"])}
    print(f"\nadding {added}: {seconds:.1f} s; changed on the others (their routes): {others}")


def test_the_only_control_plane_host_is_not_removed_alone(bootstrapped: dict[str, Any]) -> None:
    testbed = bootstrapped["testbed"]
    first = testbed.node_names[0]
    rc, report = reset(bootstrapped, bootstrapped["added_inventory"], "--limit", first)
    assert rc != 0
    refused = failures(report)
    assert any(
        "only control-plane host" in line and "Nothing was changed" in line for line in refused
    ), refused
    assert changed_tasks(report) == []
    ssh(testbed, first, "test -f /etc/kubernetes/admin.conf")
    assert first in ready_nodes(bootstrapped)


def failed_and_undone(
    bootstrapped: dict[str, Any],
    inventory: Path,
    timeouts: dict[str, str],
    host: str,
    step: str,
) -> str:
    """A run with kubeadm timeouts that kubegpu's checks accept and ``step`` (init or join)
    cannot meet on ``host``: the run fails, the step is undone with kubeadm reset and named with
    kubeadm's last lines, and no token reaches the report. Returns the failure's line."""
    failing = dict(bootstrapped["settings"], cluster_bootstrap_kubeadm_timeouts=timeouts)
    extra = bootstrapped["tmp"] / f"failing-{step}.json"
    extra.write_text(json.dumps(failing))
    rc, report, _ = run(inventory, bootstrapped["playbook"], extra)
    assert rc != 0
    named = [
        line
        for line in failures(report)
        if line.startswith(f"{host}: kubegpu.gpu.cluster_bootstrap : Fail with kubeadm's")
    ]
    assert named, failures(report)
    assert f"{host}: kubeadm {step} failed and was undone with kubeadm reset --force" in named[0]
    assert "--token" not in json.dumps(report)
    print(f"\nthe failed {step}, as the run reports it: {named[0]}")
    return named[0]


def run_and_see(bootstrapped: dict[str, Any], inventory: Path, host: str, task: str) -> float:
    """The layer run again after a failure: it passes, the role's ``task`` changed ``host``,
    and no token reaches the report (kubeadm init prints a join command with one). Returns the
    run's wall time."""
    rc, report, seconds = run(inventory, bootstrapped["playbook"], bootstrapped["extra"])
    assert rc == 0, failures(report)
    assert f"{host}: kubegpu.gpu.cluster_bootstrap : {task}" in changed_tasks(report)
    assert "--token" not in json.dumps(report)
    return seconds


def test_a_failed_join_is_undone_and_the_next_run_joins(bootstrapped: dict[str, Any]) -> None:
    """The added node leaves (its cluster layer only), then joins with its kubelet masked: the
    join fails after it changed the node, is undone with kubeadm reset and named; the next run
    joins."""
    testbed, added = bootstrapped["testbed"], bootstrapped["added"]
    rc, report = reset(
        bootstrapped, bootstrapped["added_inventory"], "--limit", added, "--tags", "bootstrap"
    )
    assert rc == 0, failures(report)
    assert added not in node_objects(bootstrapped)
    ssh(testbed, added, "systemctl mask kubelet")
    try:
        failed_and_undone(
            bootstrapped,
            bootstrapped["added_inventory"],
            {"kubeletHealthCheck": "20s"},
            added,
            "join",
        )
    finally:
        ssh(testbed, added, "systemctl unmask kubelet")
    for path in (
        "/etc/kubernetes/kubelet.conf",
        "/etc/kubernetes/bootstrap-kubelet.conf",
        "/etc/kubernetes/kubegpu-kubeadm-join.yaml",
    ):
        ssh(testbed, added, f"test ! -e {path}")
    seconds = run_and_see(
        bootstrapped, bootstrapped["added_inventory"], added, "Join the node with kubeadm join"
    )
    wait_for(
        "the added node Ready again",
        lambda: ready_nodes(bootstrapped) == set(testbed.node_names),
        timeout_s=180,
    )
    print(f"\njoin after the failed one: {seconds:.1f} s")


def test_reset_limit_removes_a_joined_node(bootstrapped: dict[str, Any]) -> None:
    testbed, added = bootstrapped["testbed"], bootstrapped["added"]
    rc, report = reset(bootstrapped, bootstrapped["added_inventory"], "--limit", added)
    assert rc == 0, failures(report)
    done = changed_tasks(report)
    assert (
        f"{added}: kubegpu.gpu.cluster_bootstrap : Cordon and drain the node through the Eviction API"
        in done
    ), done
    assert (
        f"{added}: kubegpu.gpu.cluster_bootstrap : Take the node out of the cluster with kubeadm reset (the joined nodes first)"
        in done
    ), done
    assert node_objects(bootstrapped) == bootstrapped["members"]
    for path in ("/etc/kubernetes/kubelet.conf", "/etc/cni/net.d/10-kubegpu-bridge.conflist"):
        ssh(testbed, added, f"test ! -e {path}")
    assert ssh(testbed, added, "systemctl is-active kubelet || true").strip() != "active"
    assert ready_nodes(bootstrapped) == bootstrapped["members"]


def control_plane_inventory(bootstrapped: dict[str, Any]) -> Path:
    """The inventory with every node in k8s_cluster and the added node a second host of
    kube_control_plane."""
    inventory = yaml.safe_load(bootstrapped["added_inventory"].read_text())
    groups = inventory["all"]["children"]["k8s_cluster"]["children"]
    added = bootstrapped["added"]
    groups["kube_control_plane"]["hosts"][added] = dict(groups["gpu_nodes"]["hosts"][added])
    path = bootstrapped["tmp"] / "inventory-control-planes.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def test_a_further_control_plane_host_needs_an_endpoint_then_joins_as_one(
    bootstrapped: dict[str, Any],
) -> None:
    """The added node (reset before, its runtime layer set up again) put in kube_control_plane:
    refused without cluster_bootstrap_control_plane_endpoint before anything changes; with the
    endpoint the cluster already has, it joins as a second control-plane host with stacked
    etcd (its own API server answers on its address), a second run changes nothing, and
    reset.yml --limit takes it out while the API keeps answering through the first host."""
    testbed, added = bootstrapped["testbed"], bootstrapped["added"]
    first = testbed.node_names[0]
    runtime = bootstrapped["tmp"] / "runtime.yml"
    empty = bootstrapped["tmp"] / "none.json"
    for _ in range(2):  # as the fixture: the second run carries restrict_oom into the drop-in
        rc, report, _ = run(testbed.inventory, str(runtime), empty, "--limit", added)
        assert rc == 0, failures(report)
    inventory = control_plane_inventory(bootstrapped)

    rc, report, _ = run(inventory, bootstrapped["playbook"], bootstrapped["extra"])
    assert rc != 0
    refused = failures(report)
    assert any(
        "cluster_bootstrap_control_plane_endpoint is empty but kube_control_plane has 2 hosts"
        in line
        for line in refused
    ), refused
    assert changed_tasks(report) == []

    settings = dict(
        bootstrapped["settings"],
        cluster_bootstrap_control_plane_endpoint=f"{testbed.addresses[first]}:6443",
    )
    extra = bootstrapped["tmp"] / "control-planes.json"
    extra.write_text(json.dumps(settings))
    rc, report, seconds = run(inventory, bootstrapped["playbook"], extra)
    assert rc == 0, failures(report)
    done = changed_tasks(report)
    assert (
        f"{added}: kubegpu.gpu.cluster_bootstrap : Join the control-plane host with kubeadm join,"
        " one host at a time" in done
    ), done
    assert (
        f"{added}: kubegpu.gpu.cluster_bootstrap : Upload the control-plane certificates with"
        " kubeadm init phase upload-certs" in done
    ), done
    dumped = json.dumps(report)
    assert "--token" not in dumped
    ssh(testbed, first, "test ! -e /etc/kubernetes/kubegpu-kubeadm-upload-certs.yaml")
    wait_for(
        "the second control-plane host Ready",
        lambda: ready_nodes(bootstrapped) == set(testbed.node_names),
        timeout_s=180,
    )
    node = json.loads(kubectl(bootstrapped, "get", "node", added, "-o", "json"))
    assert "node-role.kubernetes.io/control-plane" in node["metadata"]["labels"]
    for component in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        ssh(testbed, added, f"test -f /etc/kubernetes/manifests/{component}.yaml")
    # Its own API server answers on its address (its serving certificate names it).
    server = f"https://{testbed.addresses[added]}:6443"
    wait_for(
        f"the API server on {added}",
        lambda: subprocess.run(
            [bootstrapped["kubectl"], "--kubeconfig", str(bootstrapped["kubeconfig"]),
             "--server", server, "get", "--raw", "/readyz"],
            capture_output=True, text=True, timeout=60, check=False,
        ).stdout.strip() == "ok",
        timeout_s=180,
    )  # fmt: skip
    print(f"\na second control-plane host joined in {seconds:.1f} s")

    rc, report, _ = run(inventory, bootstrapped["playbook"], extra)
    assert rc == 0, failures(report)
    assert changed_tasks(report) == []

    rc, report = reset(bootstrapped, inventory, "--limit", added, "--tags", "bootstrap")
    assert rc == 0, failures(report)
    assert node_objects(bootstrapped) == bootstrapped["members"]
    ssh(testbed, added, "test ! -e /etc/kubernetes/manifests/etcd.yaml")
    assert ready_nodes(bootstrapped) == bootstrapped["members"]


def test_a_failed_init_is_undone_and_the_next_run_initialises(
    bootstrapped: dict[str, Any],
) -> None:
    testbed = bootstrapped["testbed"]
    first = testbed.node_names[0]
    # The whole cluster: its cluster layer only, so that containerd stays for the next init.
    rc, report = reset(bootstrapped, bootstrapped["inventory"], "--tags", "bootstrap")
    assert rc == 0, failures(report)
    for node in sorted(bootstrapped["members"]):
        ssh(
            testbed,
            node,
            "test ! -e /etc/kubernetes/kubelet.conf -a ! -e /etc/kubernetes/admin.conf",
        )
    # A timeout kubegpu's checks accept and the control plane cannot meet: kubeadm init fails
    # after it wrote admin.conf.
    named = failed_and_undone(
        bootstrapped,
        bootstrapped["inventory"],
        {"controlPlaneComponentHealthCheck": "1s"},
        first,
        "init",
    )
    assert "wait-control-plane" in named, named
    for path in ("/etc/kubernetes/admin.conf", "/etc/kubernetes/manifests/kube-apiserver.yaml"):
        ssh(testbed, first, f"test ! -e {path}")
    # The next run initialises again.
    seconds = run_and_see(
        bootstrapped,
        bootstrapped["inventory"],
        first,
        "Initialise the control plane with kubeadm init",
    )
    wait_for(
        "every node Ready again",
        lambda: ready_nodes(bootstrapped) == bootstrapped["members"],
        timeout_s=180,
    )
    print(f"\ninit after the failed one: {seconds:.1f} s")
