"""The testbed itself, end to end: real nodes reached over SSH by Ansible, real apt through the
proxy, real systemd units, a reboot, the signed vendor repository of test doubles, and a `down`
that leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kubegpu.testbed import TestbedConfig, TestbedState, down, load_state, up
from kubegpu.testbed._proc import mounts, read_cmdline
from kubegpu.testbed.nodes import cgroup_name
from tests.integration.conftest import (
    derived_testbed_config,
    toolkit_purge_script,
    worker_environment,
)
from tests.integration.conftest import testbed_config as session_testbed_config

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


def _ansible(ansible_bin: Path, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_FORCE_COLOR": "0",
        }
    )
    return subprocess.run(
        [str(ansible_bin / tool), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )


def _playbook(ansible_bin: Path, testbed: TestbedState, path: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    proc = _ansible(
        ansible_bin, "ansible-playbook", "-i", str(testbed.inventory), *extra, str(path)
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result: dict = json.loads(proc.stdout)  # type: ignore[type-arg]
    return result


def _ssh(testbed: TestbedState, node: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        testbed.ssh_argv(node, command), capture_output=True, text=True, timeout=300, check=False
    )


def test_every_node_answers_ansible_ping(testbed: TestbedState, ansible_bin: Path) -> None:
    proc = _ansible(ansible_bin, "ansible", "all", "-i", str(testbed.inventory), "-m", "ping")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # One task entry, or one per host: ansible.posix.json groups results by host under any
    # strategy but ansible-core's linear and debug (ansible.cfg's is kubegpu.accel.linear).
    tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    hosts = {name: r for task in tasks for name, r in task["hosts"].items()}
    assert {name: r.get("ping") for name, r in hosts.items()} == dict.fromkeys(
        testbed.node_names, "pong"
    )


def test_each_node_is_its_own_systemd_machine(testbed: TestbedState) -> None:
    seen_ids = set()
    for node in testbed.nodes:
        proc = _ssh(testbed, node.name, "cat /etc/machine-id; hostname; ps -p 1 -o comm=")
        machine_id, hostname, init = proc.stdout.split()
        assert (hostname, init) == (node.name, "systemd")
        seen_ids.add(machine_id)
    assert len(seen_ids) == len(testbed.nodes)


PLAY_SETUP = """
- name: Use a testbed node like a real server
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Install a package from Debian through the proxy
      ansible.builtin.apt:
        name: tree
        state: present
        update_cache: true
        cache_valid_time: 3600
    - name: Install a unit
      ansible.builtin.copy:
        dest: /etc/systemd/system/kubegpu-probe.service
        owner: root
        group: root
        mode: "0644"
        content: |
          [Unit]
          Description=kubegpu testbed probe
          [Service]
          ExecStart=/usr/bin/sleep infinity
          [Install]
          WantedBy=multi-user.target
    - name: Start and enable the unit
      ansible.builtin.systemd_service:
        name: kubegpu-probe.service
        state: started
        enabled: true
        daemon_reload: true
"""

PLAY_REBOOT = """
- name: Reboot one node
  hosts: "{{ kubegpu_reboot_node }}"
  gather_facts: false
  tasks:
    - name: Reboot it
      ansible.builtin.reboot:
        reboot_timeout: 120
"""


def test_playbook_installs_starts_a_unit_and_reboots(
    testbed: TestbedState, ansible_bin: Path, tmp_path: Path
) -> None:
    setup = tmp_path / "setup.yml"
    setup.write_text(PLAY_SETUP)
    first = _playbook(ansible_bin, testbed, setup)
    assert set(first["stats"]) == set(testbed.node_names)
    second = _playbook(ansible_bin, testbed, setup)
    assert all(s["changed"] == 0 for s in second["stats"].values()), second["stats"]

    node = testbed.node_names[0]
    boot_id = _ssh(testbed, node, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    reboot = tmp_path / "reboot.yml"
    reboot.write_text(PLAY_REBOOT)
    result = _playbook(ansible_bin, testbed, reboot, "-e", f"kubegpu_reboot_node={node}")
    assert result["stats"][node]["changed"] == 1
    after = _ssh(testbed, node, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
    assert after and after != boot_id
    for name in testbed.node_names:
        state = _ssh(
            testbed,
            name,
            "dpkg-query -W -f='${Status}' tree; echo; systemctl is-active kubegpu-probe.service",
        )
        assert state.stdout.split("\n") == ["install ok installed", "active", ""], name
    # The launcher started the node again; nothing else was restarted.
    current = load_state(testbed.state_dir)
    assert current is not None and current.running


TOOLKIT_PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)

PLAY_VENDOR = """
- name: Install the container toolkit from the testbed's vendor repository
  hosts: "{{ kubegpu_nodes }}"
  gather_facts: false
  vars:
    version: "{{ kubegpu_toolkit_version }}"
  tasks:
    - name: Install the repository key
      ansible.builtin.copy:
        src: "{{ kubegpu_testbed_vendor_repo_key }}"
        dest: /usr/share/keyrings/kubegpu-testbed-vendor.gpg
        owner: root
        group: root
        mode: "0644"
    - name: Add the repository
      ansible.builtin.apt_repository:
        repo: >-
          deb [signed-by=/usr/share/keyrings/kubegpu-testbed-vendor.gpg]
          {{ kubegpu_testbed_vendor_repo_url }}/stable/deb/amd64 /
        filename: kubegpu-testbed-vendor
        state: present
    - name: Install the pinned version
      ansible.builtin.apt:
        name:
          - "nvidia-container-toolkit={{ version }}"
          - "nvidia-container-toolkit-base={{ version }}"
          - "libnvidia-container-tools={{ version }}"
          - "libnvidia-container1={{ version }}"
        state: present
"""


@pytest.fixture(scope="module")
def toolkit_installed(
    testbed: TestbedState, ansible_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """Install the toolkit from the testbed's repository: 1.17.8-1 on the first node, 1.20.2-1
    (the pin) on the others."""
    play = tmp_path_factory.mktemp("vendor") / "vendor.yml"
    play.write_text(PLAY_VENDOR)
    # The nodes are shared by the session: an earlier test may have installed (and held) the
    # toolkit through the role, with a source for the same repository under another keyring,
    # which apt refuses next to this one. Start from nodes without either.
    clean = toolkit_purge_script(testbed.vendor_repo_url, TOOLKIT_PACKAGES)
    for node in testbed.node_names:
        proc = _ssh(testbed, node, clean)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    first, rest = testbed.node_names[0], list(testbed.node_names[1:])
    versions = {first: "1.17.8-1", **dict.fromkeys(rest, "1.20.2-1")}
    for version in ("1.17.8-1", "1.20.2-1"):
        hosts = [n for n, v in versions.items() if v == version]
        if hosts:
            _playbook(
                ansible_bin,
                testbed,
                play,
                "-e",
                f"kubegpu_nodes={','.join(hosts)}",
                "-e",
                f"kubegpu_toolkit_version={version}",
            )
    return versions


def test_vendor_repo_installs_nvidias_programs_built_from_source(
    testbed: TestbedState, toolkit_installed: dict[str, str]
) -> None:
    for node, version in toolkit_installed.items():
        upstream = version.split("-")[0]
        proc = _ssh(
            testbed,
            node,
            "nvidia-ctk --version; nvidia-container-runtime --version | head -1;"
            " nvidia-cdi-hook --version; nvidia-container-toolkit --version;"
            " dpkg-query -W nvidia-container-toolkit;"
            " cat /usr/share/doc/nvidia-container-toolkit/KUBEGPU-TESTBED-BUILD"
            " /usr/share/doc/libnvidia-container-tools/TEST-DOUBLE;"
            " nvidia-container-cli --version | head -1",
        )
        lines = proc.stdout.splitlines()
        assert lines[:4] == [
            f"NVIDIA Container Toolkit CLI version {upstream}",
            f"NVIDIA Container Runtime version {upstream}",
            f"NVIDIA CDI Hook version {upstream}",
            f"NVIDIA Container Runtime Hook version {upstream}",
        ], proc.stdout + proc.stderr
        assert lines[4] == f"nvidia-container-toolkit\t{version}"
        built = f"built by the kubegpu testbed from github.com/NVIDIA/nvidia-container-toolkit@v{upstream}"
        assert built in lines[5]
        assert "kubegpu TEST DOUBLE" in lines[6]
        assert lines[7] == f"cli-version: {upstream}"
        # NVIDIA's postinst wrote the runtime's configuration with nvidia-ctk.
        config = _ssh(testbed, node, "cat /etc/nvidia-container-runtime/config.toml").stdout
        assert "[nvidia-container-runtime]" in config and "[nvidia-container-cli]" in config


def test_nvidias_cdi_refresh_units_come_with_the_release_that_ships_them(
    testbed: TestbedState, toolkit_installed: dict[str, str]
) -> None:
    """1.20.2 ships nvidia-cdi-refresh.path/.service, enabled on install as debhelper does for
    NVIDIA's package; on a node without a driver the service's conditions skip it. 1.17.8 has
    none."""
    for node, version in toolkit_installed.items():
        proc = _ssh(
            testbed,
            node,
            "systemctl is-enabled nvidia-cdi-refresh.path nvidia-cdi-refresh.service;"
            " systemctl is-active nvidia-cdi-refresh.path;"
            " systemctl show -p ConditionResult --value nvidia-cdi-refresh.service",
        )
        if version.startswith("1.17."):
            assert "enabled" not in proc.stdout, proc.stdout
            continue
        assert proc.stdout.split() == ["enabled", "enabled", "active", "no"], proc.stdout


def test_gpu_less_node_fails_cdi_generation_like_the_real_tool(
    testbed: TestbedState, toolkit_installed: dict[str, str]
) -> None:
    plain = [n.name for n in testbed.nodes if not n.simulated_gpu]
    proc = _ssh(
        testbed,
        plain[0],
        "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml; "
        "echo rc=$?; test -e /etc/cdi/nvidia.yaml; echo file=$?",
    )
    assert "failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND" in proc.stderr
    assert "rc=1" in proc.stdout and "file=1" in proc.stdout


def _capture_uuids(capture: str) -> list[str]:
    from kubegpu import simulate

    path = simulate.resolve_capture(capture).path
    return [g.findtext("uuid", "").strip() for g in ET.parse(path).getroot().findall("gpu")]


def test_simulated_gpu_node_replays_its_capture(
    testbed: TestbedState, toolkit_installed: dict[str, str]
) -> None:
    """The replaying nvidia-smi and the nvidia-container-cli double show the capture's GPUs;
    NVIDIA's nvidia-ctk reads GPUs through NVML, which the simulation does not provide, and
    says so."""
    simulated = [n for n in testbed.nodes if n.simulated_gpu]
    if not simulated:
        pytest.skip("no node with a simulated GPU in this testbed")
    node = simulated[0]
    assert node.simulated_gpu is not None
    uuids = _capture_uuids(node.simulated_gpu)
    proc = _ssh(
        testbed,
        node.name,
        "command -v nvidia-smi || echo no-real-nvidia-smi; "
        "/usr/local/lib/kubegpu-simulated/nvidia-smi -L; nvidia-container-cli info; "
        "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml; echo rc=$?; "
        "test -e /etc/cdi/nvidia.yaml; echo file=$?",
    )
    assert proc.stdout.startswith("no-real-nvidia-smi\n")
    for uuid in uuids:
        assert f"(UUID: {uuid})" in proc.stdout
        assert f"GPU UUID:       {uuid}" in proc.stdout
    assert "SIMULATED" in proc.stdout
    assert "failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND" in proc.stderr
    assert "rc=1" in proc.stdout and "file=1" in proc.stdout


def test_containers_node_has_what_containerd_needs(testbed: TestbedState) -> None:
    nodes = [n.name for n in testbed.nodes if n.containers]
    if not nodes:
        pytest.skip("no node in containers mode in this testbed")
    proc = _ssh(
        testbed,
        nodes[0],
        "findmnt -no FSTYPE /var/lib/containerd; "
        "findmnt -no OPTIONS /sys/fs/cgroup/memory | cut -d, -f1; "
        "systemctl is-active kubegpu-testbed-cgroups-rw.service",
    )
    assert proc.stdout.split() == ["ext4", "rw", "active"]


@pytest.mark.slow
def test_containers_node_runs_a_container_with_containerd(testbed: TestbedState) -> None:
    nodes = [n.name for n in testbed.nodes if n.containers]
    if not nodes:
        pytest.skip("no node in containers mode in this testbed")
    proc = _ssh(
        testbed,
        nodes[0],
        "set -e; apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends containerd busybox-static >/dev/null; "
        "mkdir -p /tmp/rootfs/bin; cp /bin/busybox /tmp/rootfs/bin/; "
        "ctr run --rm --rootfs /tmp/rootfs kubegpu-probe /bin/busybox echo hello-from-runc",
    )
    assert proc.stdout.strip().splitlines()[-1:] == ["hello-from-runc"], proc.stderr


def _netns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _node_netns(state: TestbedState) -> set[str]:
    """The network namespaces of the nodes' init processes (children of systemd-nspawn)."""
    found = set()
    for node in state.nodes:
        assert node.nspawn_pid is not None
        children = Path(f"/proc/{node.nspawn_pid}/task/{node.nspawn_pid}/children")
        for child in children.read_text().split():
            ns = _netns(int(child))
            if ns and ns != _netns(1):
                found.add(ns)
    return found


def _in_another_testbed(pid: int, own: str) -> bool:
    """Whether the process runs in a node of another testbed (its cgroup says so). The kernel
    hands a freed namespace's inode number to the next namespace made, so another testbed
    coming up at the same time (another pytest-xdist worker's) can own a netns of that number."""
    try:
        cgroups = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False
    return "kubegpu-testbed-" in cgroups and own not in cgroups


def _leftovers(state_dir: Path, bridge: str, names: tuple[str, ...], netns: set[str]) -> list[str]:
    found = []
    marker = str(state_dir)
    prefix = cgroup_name(state_dir, "")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if any(marker in a for a in read_cmdline(pid)) and pid != os.getpid():
            found.append(f"process {pid} {read_cmdline(pid)[:3]}")
        if _netns(pid) in netns and not _in_another_testbed(pid, prefix):
            found.append(f"process {pid} {read_cmdline(pid)[:3]} in a node's network namespace")
    found += [f"mount {p}" for _s, p, _t in mounts() if p.startswith(marker)]
    links = os.listdir("/sys/class/net")
    found += [
        f"link {link}" for link in links if link == bridge or link in {f"vb-{n}" for n in names}
    ]
    for top in ("systemd", "unified", "memory", "pids"):
        root = Path("/sys/fs/cgroup", top)
        if root.is_dir():
            found += [f"cgroup {p}" for p in root.rglob(prefix + "*")]
    if state_dir.exists():
        found.append(f"folder {state_dir}")
    return found


def _own_testbed(name: str, offset: int) -> TestbedConfig:
    """A small testbed beside the session's, on a subnet derived from the session's (third
    octet + 100 + offset), so that it never takes the session's or a parallel session's."""
    session = session_testbed_config().subnet.split(".")
    third = (int(session[2]) + 100 + offset) % 256
    return TestbedConfig(
        nodes=2,
        name_prefix=name,
        subnet=f"{session[0]}.{session[1]}.{third}.0/24",
        bridge=f"kgtb{name}0",
        state_dir=Path(f"/run/kubegpu-testbed-{name}"),
    )


def test_each_xdist_worker_brings_up_testbeds_no_other_worker_touches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Worker gw0 keeps the session's settings, gwN moves them; no bridge, subnet, node name or
    state folder of one worker's testbeds (the session's, the nine derived ones and
    test_testbed's own) is another's."""
    assert worker_environment({}) == worker_environment({"PYTEST_XDIST_WORKER": "gw0"}) == {}
    assert worker_environment({"PYTEST_XDIST_WORKER": "gw1"}) == {
        "KUBEGPU_TESTBED_BRIDGE": "kgtb0w1",
        "KUBEGPU_TESTBED_SUBNET": "10.214.0.0/24",
        "KUBEGPU_TESTBED_PREFIX": "w1node",
        "KUBEGPU_TESTBED_STATE": "/run/kubegpu-testbed-w1",
    }
    given = {
        "KUBEGPU_TESTBED_BRIDGE": "kgmy",
        "KUBEGPU_TESTBED_SUBNET": "10.77.1.0/24",
        "KUBEGPU_TESTBED_PREFIX": "m",
        "KUBEGPU_TESTBED_STATE": "/run/kubegpu-my",
    }
    assert worker_environment({**given, "PYTEST_XDIST_WORKER": "gw2"}) == {
        "KUBEGPU_TESTBED_BRIDGE": "kgmyw2",
        "KUBEGPU_TESTBED_SUBNET": "10.79.1.0/24",
        "KUBEGPU_TESTBED_PREFIX": "w2m",
        "KUBEGPU_TESTBED_STATE": "/run/kubegpu-my-w2",
    }
    taken: dict[str, set[str]] = {}
    for worker in ("gw0", "gw1", "gw2"):
        for name in given:
            monkeypatch.delenv(name, raising=False)
        for name, value in worker_environment({"PYTEST_XDIST_WORKER": worker}).items():
            monkeypatch.setenv(name, value)
        configs = [session_testbed_config()]
        configs += [derived_testbed_config(n, f"d{n}", "trixie") for n in range(1, 10)]
        parts = [p for c in configs for p in (c.bridge, c.subnet, str(c.state_dir), *c.node_names)]
        # test_testbed's own (bridge, state and names fixed, its file on one worker): the subnet.
        parts += [_own_testbed("dn", 1).subnet, _own_testbed("cr", 2).subnet]
        mine = set(parts)
        assert len(mine) == len(parts), sorted(parts)
        for other, theirs in taken.items():
            assert not mine & theirs, (worker, other, sorted(mine & theirs))
        taken[worker] = mine


def test_down_leaves_no_process_mount_link_or_namespace(testbed: TestbedState) -> None:
    # Its own small testbed beside the session's, so the session's nodes stay up.
    config = _own_testbed("dn", 1)
    started = time.monotonic()
    state = up(config)
    up_seconds = time.monotonic() - started
    try:
        assert state.running
        netns = _node_netns(state)
        assert len(netns) == 2
    finally:
        report = down(config.state_dir)
    assert report.remaining == ()
    assert report.killed == ()  # every node halted when asked
    print(f"up {up_seconds:.1f} s, down {report.seconds:.1f} s")
    assert _leftovers(config.state_dir, config.bridge, config.node_names, netns) == []
    # The session's testbed is untouched.
    assert load_state(testbed.state_dir) is not None


def test_down_cleans_up_after_a_crash(testbed: TestbedState) -> None:
    """Nodes killed with SIGKILL and the state file lost: down still finds and removes it all."""
    config = _own_testbed("cr", 2)
    state = up(config)
    netns = _node_netns(state)
    for node in state.nodes:
        for pid in (node.launcher_pid, node.nspawn_pid):
            if pid:
                os.kill(pid, 9)
    (config.state_dir / "state.json").unlink()
    report = down(config.state_dir)
    assert report.remaining == ()
    assert _leftovers(config.state_dir, config.bridge, config.node_names, netns) == []


def test_a_failure_half_way_leaves_nothing_half_built(
    testbed: TestbedState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bridge and the apt proxy are up when the repository server fails to start: up()
    raises, and what it had made is gone."""
    from kubegpu.testbed import services
    from kubegpu.testbed.errors import TestbedError

    def broken(*_args: object, **_kwargs: object) -> int:
        raise TestbedError("the vendor repository server failed (injected by the test)")

    monkeypatch.setattr(services, "start_repo_server", broken)
    config = _own_testbed("hf", 3)
    with pytest.raises(TestbedError, match="injected by the test"):
        up(config)
    assert _leftovers(config.state_dir, config.bridge, config.node_names, set()) == []
