"""containerd 1.7 (Debian trixie) and 2.1 (Debian sid's package), and docker.io, on testbed nodes
through the container_runtime role.

Each suite gets a one-node testbed of its own (a node that can run containers), on a bridge,
subnet, name prefix and state folder derived from the session testbed's settings (the
KUBEGPU_TESTBED_* variables, or their defaults) plus a per-suite suffix, so it never collides
with the session testbed; it is taken down when the suite's tests end, also after failures.
Packages come from Debian through the testbed's apt proxy. Real parts: systemd, apt, containerd,
runc, dockerd.

containerd 2.1 comes from sid, installed on a trixie node the way an operator takes one newer
package from another suite: sid as an extra apt source pinned below everything (priority 50) and
containerd alone pinned to it (990); its dependencies (runc, libc6 >= 2.34) come from trixie.
A node of sid's own userspace cannot boot here: sid's systemd (262) no longer supports the
hybrid cgroup v1 layout of this host (cgroup v1 support went in systemd 258), so its PID 1
exits at once inside systemd-nspawn. Nothing here is a test double (the nvidia runtime binary is not installed; only
configuration that names it is checked, which is what containerd and dockerd load).

On each suite's node, once wired, a real kubelet (Kubernetes 1.37, tests/cluster) joins a real
control plane listening on the suite's bridge: the node goes Ready on the containerd kubegpu
configured, and a pod (Debian's busybox, imported as an image built here; the sandbox is
Kubernetes' pause compiled here) runs under runc with a pod address from the bridge CNI plugin,
its log and exec reached through the API server and the kubelet.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import ipaddress
import json
import os
import re
import subprocess
import tarfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_manifests as cm
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_settings as cs
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubelet as kubelet_rules
from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import read_templates

from kubegpu.testbed import TestbedConfig, TestbedState, down, up
from kubegpu.testbed.config import DEFAULT_BRIDGE, DEFAULT_SUBNET
from kubegpu.testbed.nodes import FAKED_SYSCTLS as FAKED
from tests import registry
from tests.cluster import controlplane, images, kubelet
from tests.integration.conftest import derived_testbed_config
from tests.integration.test_container_runtime import TOOLKIT_PLAY
from tests.processes import wait_for

pytestmark = [pytest.mark.integration]

REPO_ROOT = Path(__file__).resolve().parents[2]
NVCT = "/usr/bin/nvidia-container-runtime"
SHELL_IMAGE = "registry.kubegpu.test/shell:1"
MODULE_TASK = "Wire the nvidia runtime into containerd through a validated drop-in"
# name -> (its number in the derived names, the node's suite, the suite containerd comes from,
# the containerd minor Debian ships there)
SUITES = {"trixie": (1, "trixie", "trixie", "1.7"), "sid": (2, "trixie", "sid", "2.1")}

RUNTIME_PLAY = """
- name: Give the node's runtime the nvidia runtime
  hosts: all
  gather_facts: true
  roles:
    - role: kubegpu.gpu.container_runtime
      vars:
        container_runtime_install: "{{ kubegpu_install | default(true) }}"
        container_runtime_type: "{{ kubegpu_type | default('containerd') }}"
"""


def suite_config(suite: str) -> TestbedConfig:
    """The suite's testbed: the session's bridge, subnet, prefix and state plus a suffix.

    Bridge kgtb1 -> kgtb11 (suite 1), kgtb12 (suite 2); subnet 10.213.1.0/24 -> 10.213.11.0/24,
    10.213.12.0/24 (third octet times ten plus the suite's number, which never equals the
    session's own); prefix rt -> rttrixie, rtsid; state /run/x -> /run/x-trixie.
    """
    number, node_suite, _, _ = SUITES[suite]
    return derived_testbed_config(number, suite, node_suite)


def test_suite_testbeds_are_derived_from_the_session_and_never_collide_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBEGPU_TESTBED_BRIDGE", "kgtb1")
    monkeypatch.setenv("KUBEGPU_TESTBED_SUBNET", "10.213.1.0/24")
    monkeypatch.setenv("KUBEGPU_TESTBED_PREFIX", "rt")
    monkeypatch.setenv("KUBEGPU_TESTBED_STATE", "/run/kubegpu-testbed-rt")
    got = [
        (c.bridge, c.subnet, c.name_prefix, str(c.state_dir))
        for c in map(suite_config, ("trixie", "sid"))
    ]
    assert got == [
        ("kgtb11", "10.213.11.0/24", "rttrixie", "/run/kubegpu-testbed-rt-trixie"),
        ("kgtb12", "10.213.12.0/24", "rtsid", "/run/kubegpu-testbed-rt-sid"),
    ]
    for name in ("KUBEGPU_TESTBED_BRIDGE", "KUBEGPU_TESTBED_SUBNET", "KUBEGPU_TESTBED_STATE"):
        monkeypatch.delenv(name)
    defaults = suite_config("sid")
    assert (defaults.bridge, defaults.subnet) == ("kgtb02", "10.213.2.0/24")
    assert defaults.bridge != DEFAULT_BRIDGE and defaults.subnet != DEFAULT_SUBNET


class Node:
    """The suite testbed's node, with ssh and ansible-playbook runs against it."""

    def __init__(self, suite: str, testbed: TestbedState, ansible_bin: Path, folder: Path):
        self.suite = suite
        self.testbed = testbed
        self.name = testbed.node_names[0]
        self.ansible_bin = ansible_bin
        self.folder = folder

    def ssh(self, command: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.testbed.ssh_argv(self.name, command),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to ``path`` on the node (parents made), with ``mode``."""
        command = f"mkdir -p $(dirname {path}) && cat > {path} && chmod {mode:o} {path}"
        proc = subprocess.run(
            self.testbed.ssh_argv(self.name, command), input=data, capture_output=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")

    def ok(self, command: str, timeout: int = 600) -> str:
        proc = self.ssh(command, timeout)
        assert proc.returncode == 0, f"{command}: {proc.stdout}{proc.stderr}"
        return proc.stdout

    def play(
        self, *extra: str, text: str = RUNTIME_PLAY, ok: bool = True, **extra_vars: str
    ) -> dict[str, Any]:
        path = self.folder / "play.yml"
        path.write_text(text)
        env = dict(
            os.environ,
            ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
            ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
            ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        )
        argv = [str(self.ansible_bin / "ansible-playbook"), "-i", str(self.testbed.inventory)]
        for key, value in extra_vars.items():
            argv += ["-e", f"{key}={value}"]
        proc = subprocess.run(
            [*argv, *extra, str(path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
            check=False,
        )
        data = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
        failed = [
            f"{t['task']['name']}: {str(r.get('msg'))[:1500]}"
            for play in data.get("plays", [])
            for t in play["tasks"]
            for r in t["hosts"].values()
            if r.get("failed") or r.get("unreachable")
        ]
        if ok:
            assert proc.returncode == 0, "\n".join(failed) or (proc.stdout + proc.stderr)[-3000:]
        return data

    def task(self, data: dict[str, Any], name: str) -> dict[str, Any]:
        found = [
            t["hosts"][self.name]
            for play in data["plays"]
            for t in play["tasks"]
            if t["task"]["name"].endswith(name) and self.name in t["hosts"]
        ]
        assert found, f"task {name!r} did not run"
        return found[-1]

    def changed(self, data: dict[str, Any]) -> int:
        return int(data["stats"][self.name]["changed"])

    def pid(self, unit: str = "containerd") -> str:
        state, pid = self.ok(
            f"systemctl is-active {unit}; systemctl show -p MainPID --value {unit}"
        ).split()
        assert state == "active"
        return pid

    def dump(self, config: str | None = None) -> dict[str, Any]:
        flag = f"--config {config} " if config else ""
        return tomllib.loads(self.ok(f"containerd {flag}config dump"))


@pytest.fixture(scope="module", params=list(SUITES))
def suite_node(
    request: pytest.FixtureRequest, ansible_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Node]:
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (mounts, a bridge, systemd-nspawn)")
    suite = request.param
    config = suite_config(suite)
    request.addfinalizer(lambda: down(config.state_dir))
    testbed = up(config)
    yield Node(suite, testbed, ansible_bin, tmp_path_factory.mktemp(f"suite-{suite}"))


# The node's own mirror URL (the testbed's, through the proxy) is reused for sid.
PIN_SID_CONTAINERD = """set -e
uri=$(sed -n 's/^URIs: //p' /etc/apt/sources.list.d/debian.sources | head -1)
printf 'Types: deb\\nURIs: %s\\nSuites: sid\\nComponents: main\\nSigned-By: %s\\n' \\
  "$uri" /usr/share/keyrings/debian-archive-keyring.gpg > /etc/apt/sources.list.d/sid.sources
printf 'Package: *\\nPin: release n=sid\\nPin-Priority: 50\\n\\n%s\\n' \\
  'Package: containerd
Pin: release n=sid
Pin-Priority: 990' > /etc/apt/preferences.d/containerd-from-sid
"""


@pytest.fixture(scope="module")
def wired(suite_node: Node) -> dict[str, Any]:
    """containerd installed from the suite by the role, and wired; the module's result."""
    node = suite_node
    assert node.ssh("command -v containerd").returncode == 1  # a fresh node
    if SUITES[node.suite][2] != SUITES[node.suite][1]:
        node.ok(PIN_SID_CONTAINERD)
    data = node.play()
    result = node.task(data, MODULE_TASK)
    assert result["changed"] and result["validation"]["daemon"] == "ok", result
    return result


def cri_plugin(node: Node, effective: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return effective["plugins"][result["schema"]["effective_plugin"]]


def test_role_installs_the_suites_containerd(suite_node: Node, wired: dict[str, Any]) -> None:
    node = suite_node
    package = node.ok("dpkg-query -W -f='${Version}' containerd")
    upstream = re.match(r"^(?:\d+:)?(\d+\.\d+\.\d+)", package)
    assert upstream and wired["containerd_version"] == upstream.group(1)
    assert wired["containerd_version"].startswith(SUITES[node.suite][3] + "."), package
    origin = node.ok("apt-cache policy containerd | sed -n '/\\*\\*\\*/,+1p'")
    source = SUITES[node.suite][2]
    assert f" {source}/main " in origin or f" {source}-" in origin, origin
    if source != SUITES[node.suite][1]:  # its dependency runc stays the node's own suite's
        runc = node.ok("apt-cache policy runc | sed -n '/\\*\\*\\*/,+1p'")
        own = SUITES[node.suite][1]
        assert f" {own}/main " in runc or f" {own}-" in runc, runc
    major = int(wired["containerd_version"].split(".")[0])
    schema = wired["schema"]
    assert schema["merge"] == ("replace" if major == 1 else "deep")
    assert schema["effective_plugin"] == (
        "io.containerd.grpc.v1.cri" if major == 1 else "io.containerd.cri.v1.runtime"
    )
    # The drop-in has the main config's version (a main config the module created has the
    # version of this containerd).
    main = node.ok("cat /etc/containerd/config.toml")
    version = tomllib.loads(main).get("version")
    assert wired["config_version"] == version == schema["config_version"]
    drop_in = tomllib.loads(node.ok("cat /etc/containerd/conf.d/99-nvidia.toml"))
    assert drop_in["version"] == version and list(drop_in["plugins"]) == [schema["plugin"]]


def test_containerd_runs_with_the_nvidia_runtime(suite_node: Node, wired: dict[str, Any]) -> None:
    node = suite_node
    node.pid()
    cri = cri_plugin(node, node.dump(), wired)
    runtimes = cri["containerd"]["runtimes"]
    nvidia = runtimes["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == NVCT
    assert nvidia["options"]["SystemdCgroup"] == runtimes["runc"]["options"].get(
        "SystemdCgroup", False
    )
    rows = [ln.split() for ln in node.ok("ctr plugins ls").splitlines()[1:]]
    status = {(r[0], r[1]): r[-1] for r in rows if len(r) >= 4}
    assert status[("io.containerd.grpc.v1", "cri")] == "ok"
    if wired["containerd_version"].startswith("2."):
        assert status[("io.containerd.cri.v1", "runtime")] == "ok"
        assert status[("io.containerd.cri.v1", "images")] == "ok"


def test_every_other_cri_setting_is_what_the_node_had_before(
    suite_node: Node, wired: dict[str, Any]
) -> None:
    """Compared with the node's own configuration before the run (the module's backup of the
    main config, or containerd's defaults when there was none), not with hard-coded values."""
    node = suite_node
    backups = node.ok("ls /etc/containerd/ | grep '^config.toml\\..*~$' || true").split()
    before_file = "/etc/containerd/" + sorted(backups)[0] if backups else "/dev/null"
    node.ok(f"cp {before_file} /tmp/kubegpu-before.toml")
    before = cri_plugin(node, node.dump("/tmp/kubegpu-before.toml"), wired)
    after = cri_plugin(node, node.dump(), wired)
    del after["containerd"]["runtimes"]["nvidia"]
    if wired["cdi"]["source"] == "drop-in":  # containerd 1.7: CDI is off in its own config
        assert before["enable_cdi"] is False and after.pop("enable_cdi") is True
        del before["enable_cdi"]
    assert after == before


def cdi_of(node: Node, result: dict[str, Any]) -> tuple[bool, list[str]]:
    cri = cri_plugin(node, node.dump(), result)
    return cri["enable_cdi"], cri["cdi_spec_dirs"]


def started_with_cdi(node: Node) -> bool:
    """Whether the running containerd's CRI plugin logged its config with CDI on at its latest
    start (1.7 prints the Go struct, 2.x JSON)."""
    pid = node.pid()
    log = node.ok(f"journalctl -o cat _PID={pid} | grep -iE 'cri.*config|config.*cdi' || true")
    if re.search(r"(?i)enableCDI\W{0,3}:true", log):
        return True
    assert re.search(r"(?i)enableCDI\W{0,3}:false", log), log[-3000:]
    return False


def test_containerd_runs_with_cdi_on_and_the_toolkits_spec_dirs(
    suite_node: Node, wired: dict[str, Any]
) -> None:
    node = suite_node
    enabled, dirs = cdi_of(node, wired)
    assert enabled is True and dirs[-2:] == ["/etc/cdi", "/var/run/cdi"], dirs
    major = int(wired["containerd_version"].split(".")[0])
    # 1.7 has CDI off by default: kubegpu's drop-in turns it on; 2.1's own default has it.
    source = "drop-in" if major == 1 else "containerd default"
    assert wired["cdi"] == {"enabled": True, "spec_dirs": dirs, "source": source}
    drop_in = tomllib.loads(node.ok("cat /etc/containerd/conf.d/99-nvidia.toml"))
    section = drop_in["plugins"][wired["schema"]["plugin"]]
    assert ("enable_cdi" in section) is (major == 1)
    assert started_with_cdi(node)


def test_second_run_changes_nothing_and_does_not_restart(
    suite_node: Node, wired: dict[str, Any]
) -> None:
    pid = suite_node.pid()
    data = suite_node.play()
    assert suite_node.changed(data) == 0
    assert suite_node.pid() == pid


def test_rewritten_main_config_gets_only_its_imports_line_back(
    suite_node: Node, wired: dict[str, Any]
) -> None:
    node = suite_node
    node.ok("containerd config default > /etc/containerd/config.toml")
    fresh = node.ok("cat /etc/containerd/config.toml")
    pid = node.pid()
    data = node.play()
    result = node.task(data, MODULE_TASK)
    assert result["changed"] and result["config_changed"], result
    now = node.ok("cat /etc/containerd/config.toml")
    differing = [
        (a, b) for a, b in zip(fresh.splitlines(), now.splitlines(), strict=True) if a != b
    ]
    assert differing == [("imports = []", "imports = ['/etc/containerd/conf.d/*.toml']")] or (
        differing == [("imports = []", 'imports = ["/etc/containerd/conf.d/*.toml"]')]
    ), differing
    assert node.pid() != pid  # restarted by the handler, on the restored config
    assert "nvidia" in cri_plugin(node, node.dump(), result)["containerd"]["runtimes"]
    again = node.play()
    assert node.changed(again) == 0
    record = json.loads(node.ok("cat /etc/ansible/facts.d/kubegpu_containerd.fact"))
    assert (record["import_added"], record["imports_line_added"]) == (True, False)


# The run stops for the host after the role, before the handlers run at the end of the play's
# tasks: what a run cut off between the configuration's write and the restart leaves.
CUT_OFF_PLAY = (
    RUNTIME_PLAY
    + """  tasks:
    - name: Stop the run for this host before the handlers run
      ansible.builtin.fail:
        msg: cut off before the handlers
"""
)


def test_a_restart_cut_off_by_an_interrupted_run_is_made_by_the_next(
    suite_node: Node, wired: dict[str, Any]
) -> None:
    node = suite_node
    pid = node.pid()
    cut = node.play(text=CUT_OFF_PLAY, ok=False, container_runtime_default_runtime="true")
    assert node.task(cut, MODULE_TASK)["changed"]
    assert node.pid() == pid  # containerd still runs the configuration from before
    assert node.ssh("test -e /var/lib/kubegpu/restart-pending/containerd.json").returncode == 0
    # The same settings again: nothing left to write, and the restart is made.
    again = node.play(container_runtime_default_runtime="true")
    result = node.task(again, MODULE_TASK)
    assert result["restart_pending"] and not result["drop_in_changed"], result
    assert node.pid() != pid
    assert node.ssh("test -e /var/lib/kubegpu/restart-pending/containerd.json").returncode == 1
    assert node.changed(node.play(container_runtime_default_runtime="true")) == 0
    # Back to the module's default for what follows.
    node.play()
    assert node.changed(node.play()) == 0


def test_cdi_turned_off_in_the_main_config_is_turned_back_on_by_the_drop_in(
    suite_node: Node, wired: dict[str, Any]
) -> None:
    """containerd 2.x: the main config (containerd's own default, written by the test above)
    turns CDI off; the drop-in sets enable_cdi back, and drops it again once the main config no
    longer needs it."""
    node = suite_node
    if not wired["containerd_version"].startswith("2."):
        pytest.skip("containerd 1.7's drop-in always sets enable_cdi (tested above)")
    main = node.ok("cat /etc/containerd/config.toml")
    assert main.count("enable_cdi = true") == 1, main
    node.ok("sed -i 's/enable_cdi = true/enable_cdi = false/' /etc/containerd/config.toml")
    pid = node.pid()
    drop_in_before = node.ok("cat /etc/containerd/conf.d/99-nvidia.toml")
    check = node.play("--check", "--diff")
    assert node.task(check, MODULE_TASK)["changed"]
    # Check mode changed nothing: the drop-in, and the containerd that runs.
    assert node.ok("cat /etc/containerd/conf.d/99-nvidia.toml") == drop_in_before
    assert node.pid() == pid
    assert cdi_of(node, wired)[0] is False  # what the files alone say now
    result = node.task(node.play(), MODULE_TASK)
    assert result["drop_in_changed"] and not result["config_changed"], result
    assert result["cdi"]["source"] == "drop-in"
    drop_in = tomllib.loads(node.ok("cat /etc/containerd/conf.d/99-nvidia.toml"))
    assert drop_in["plugins"][result["schema"]["plugin"]]["enable_cdi"] is True
    assert node.pid() != pid
    assert cdi_of(node, wired)[0] is True and started_with_cdi(node)
    assert node.changed(node.play()) == 0
    node.ok("sed -i 's/enable_cdi = false/enable_cdi = true/' /etc/containerd/config.toml")
    result = node.task(node.play(), MODULE_TASK)
    assert result["drop_in_changed"] and result["cdi"]["source"] == "containerd default"
    assert "enable_cdi" not in node.ok("cat /etc/containerd/conf.d/99-nvidia.toml")
    assert node.changed(node.play()) == 0


def test_cdi_false_keeps_the_configs_own_setting(suite_node: Node, wired: dict[str, Any]) -> None:
    node = suite_node
    one = wired["containerd_version"].startswith("1.")
    pid = node.pid()
    data = node.play(container_runtime_cdi="false")
    result = node.task(data, MODULE_TASK)
    assert result["cdi"]["source"] == "not managed (cdi false)"
    # 1.7: the drop-in no longer turns CDI on (a change and a restart); 2.1: it never set it.
    assert result["changed"] is one, result
    assert cdi_of(node, wired)[0] is not one and started_with_cdi(node) is not one
    assert (node.pid() != pid) is one
    assert node.changed(node.play(container_runtime_cdi="false")) == 0
    result = node.task(node.play(), MODULE_TASK)
    assert result["changed"] is one and cdi_of(node, wired)[0] is True
    assert node.changed(node.play()) == 0


def test_a_cgroup_driver_sets_systemd_cgroup_where_the_config_has_another(
    suite_node: Node, wired: dict[str, Any]
) -> None:
    """container_runtime_cgroup_driver systemd (what a cluster kubegpu bootstraps has by default):
    the drop-in carries runc as containerd dumps it with SystemdCgroup = true, and the real
    containerd loads it with nothing else of runc's lost; without the nvidia runtime (a
    control-plane host) only runc is there; keep takes it out again."""
    node = suite_node
    plugin = wired["schema"]["effective_plugin"]

    def runtimes() -> dict[str, Any]:
        return node.dump()["plugins"][plugin]["containerd"]["runtimes"]

    before = runtimes()
    assert before["runc"]["options"]["SystemdCgroup"] is False  # Debian's containerd
    pid = node.pid()
    result = node.task(node.play(container_runtime_cgroup_driver="systemd"), MODULE_TASK)
    assert result["drop_in_changed"] and not result["config_changed"], result
    assert result["cgroup_runtimes"] == ["runc"] and result["systemd_cgroup"] is True, result
    assert result["validation"]["daemon"] == "ok", result
    assert node.pid() != pid
    after = runtimes()
    expected_runc = copy.deepcopy(before["runc"])
    expected_runc["options"]["SystemdCgroup"] = True
    assert after["runc"] == expected_runc
    assert after["nvidia"]["options"]["SystemdCgroup"] is True
    assert node.changed(node.play(container_runtime_cgroup_driver="systemd")) == 0

    # A host without a GPU: the same drop-in without the nvidia runtime.
    result = node.task(
        node.play(container_runtime_cgroup_driver="systemd", container_runtime_nvidia="false"),
        MODULE_TASK,
    )
    assert result["drop_in_changed"] and result["cgroup_runtimes"] == ["runc"], result
    assert result["validation"]["daemon"] == "ok", result
    without = runtimes()
    assert "nvidia" not in without and without["runc"] == expected_runc
    assert (
        node.changed(
            node.play(container_runtime_cgroup_driver="systemd", container_runtime_nvidia="false")
        )
        == 0
    )

    # keep: containerd's own value again, and the drop-in as before.
    result = node.task(node.play(), MODULE_TASK)
    assert result["drop_in_changed"] and result["cgroup_runtimes"] == [], result
    assert runtimes() == before
    assert node.changed(node.play()) == 0


UNDO_PLAY = """
- name: Undo what kubegpu did to the runtime's config, as playbooks/reset.yml does
  hosts: all
  gather_facts: false
  tasks:
    - name: Undo it
      kubegpu.gpu.%s:
        state: absent
"""


def test_undo_takes_out_exactly_our_imports_entry(suite_node: Node, wired: dict[str, Any]) -> None:
    """After the re-render, the operator changes something else; undoing kubegpu's wiring gives
    back the installer's file with the operator's change, byte for byte (no old backup over it)."""
    node = suite_node
    node.ok("sed -i 's/^oom_score = 0$/oom_score = -100/' /etc/containerd/config.toml")
    expected = node.ok("containerd config default | sed 's/^oom_score = 0$/oom_score = -100/'")
    assert "oom_score = -100" in expected
    data = node.play(text=UNDO_PLAY % "containerd_runtime")
    result = node.task(data, "Undo it")
    assert result["changed"] and result["removal"]["main_config"] == "edit", result
    assert node.ok("cat /etc/containerd/config.toml") == expected
    assert node.ssh("test -e /etc/containerd/conf.d/99-nvidia.toml").returncode == 1
    assert node.ssh("test -e /etc/ansible/facts.d/kubegpu_containerd.fact").returncode == 1
    assert "nvidia" not in cri_plugin(node, node.dump(), wired)["containerd"]["runtimes"]
    # CDI as containerd's own config has it: off on 1.7, on on 2.1.
    assert cdi_of(node, wired)[0] is wired["containerd_version"].startswith("2.")
    again = node.play(text=UNDO_PLAY % "containerd_runtime")
    assert node.changed(again) == 0
    # Wired again for what follows.
    node.play()


# --- a real kubelet on the runtime kubegpu wired ---------------------------------------------------


# Sets restrict_oom_score_adj in the main config's CRI table: the line when the file has it
# (`containerd config default` writes it), else right under the table's header (Debian's file).
RESTRICT_OOM = r"""
import pathlib, re
path = pathlib.Path("/etc/containerd/config.toml")
text = path.read_text()
if "restrict_oom_score_adj" in text:
    text = text.replace("restrict_oom_score_adj = false", "restrict_oom_score_adj = true")
else:
    header = re.search(
        r"^( *)\[plugins\.[\"'](io\.containerd\.grpc\.v1\.cri|io\.containerd\.cri\.v1\.runtime)[\"']\] *$",
        text, re.M)
    text = text[:header.end()] + "\n" + header.group(1) + "  restrict_oom_score_adj = true" + text[header.end():]
path.write_text(text)
"""


def sandbox_image(dump: dict[str, Any]) -> str:
    """The pause image the node's containerd starts every pod with (1.7: v2 config; 2.x: v3)."""
    plugins = dump["plugins"]
    if "io.containerd.cri.v1.images" in plugins:
        return str(plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"])
    return str(plugins["io.containerd.grpc.v1.cri"]["sandbox_image"])


def cni_bin_dirs(dump: dict[str, Any]) -> list[str]:
    plugins = dump["plugins"]
    if "io.containerd.cri.v1.runtime" in plugins:
        cni = plugins["io.containerd.cri.v1.runtime"]["cni"]
        return list(cni.get("bin_dirs") or [cni.get("bin_dir")])
    return [plugins["io.containerd.grpc.v1.cri"]["cni"]["bin_dir"]]


@contextlib.contextmanager
def kubelet_joined(node: Node, workdir: Path) -> Iterator[dict[str, Any]]:
    """``node`` (its containerd wired by the role) joined, by a real kubelet, to a real control
    plane listening on its bridge; the node Ready. Yields the cluster, a CoreV1Api, timings and
    the host's sysctls as they were; stops the kubelet and the control plane at the end."""
    host_sysctls = {name: Path("/proc/sys", name.replace(".", "/")).read_text() for name in FAKED}
    # The operator's own setting this machine needs (no CAP_SYS_RESOURCE in a node), in the
    # main config, and a restart; kubegpu's next run keeps it (containerd 1.7: carried into
    # kubegpu's drop-in, which holds the whole CRI section; 2.x merges the two files).
    node.put("/root/restrict-oom.py", RESTRICT_OOM.encode())
    node.ok("python3 /root/restrict-oom.py && systemctl restart containerd")
    node.play()
    dump = node.dump()
    runtime = dump["plugins"].get("io.containerd.cri.v1.runtime") or dump["plugins"].get(
        "io.containerd.grpc.v1.cri"
    )
    assert runtime["restrict_oom_score_adj"] is True
    assert "nvidia" in runtime["containerd"]["runtimes"]
    node.ok(
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends"
        " containernetworking-plugins >/dev/null"
    )
    for folder in cni_bin_dirs(dump):
        if folder != "/usr/lib/cni":
            node.ok(f"mkdir -p {folder} && ln -sf /usr/lib/cni/* {folder}/")
    kubelet.import_images(
        node, [images.pause_archive(sandbox_image(dump)), images.shell_archive(SHELL_IMAGE)]
    )
    started = time.monotonic()
    cluster = controlplane.start(workdir, address=node.testbed.bridge_address)
    try:
        timings = {"control_plane_s": time.monotonic() - started}
        timings.update(kubelet.join(node, cluster))
        from kubernetes import client

        core = client.CoreV1Api(cluster.client())
        yield {"cluster": cluster, "core": core, "timings": timings, "host": host_sysctls}
    finally:
        node.ssh("systemctl disable --now kubelet")
        cluster.stop()


@pytest.fixture(scope="module")
def joined(
    suite_node: Node, wired: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The suite's node joined to a control plane of its own (kubelet_joined)."""
    with kubelet_joined(
        suite_node, tmp_path_factory.mktemp(f"cluster-{suite_node.suite}")
    ) as found:
        yield found


def test_a_real_kubelet_joins_on_the_wired_runtime_and_the_node_is_ready(
    suite_node: Node, joined: dict[str, Any]
) -> None:
    info = joined["core"].read_node(suite_node.name).status.node_info
    assert info.kubelet_version == joined["cluster"].version
    minor = SUITES[suite_node.suite][3]
    assert info.container_runtime_version.startswith(f"containerd://{minor}."), info
    # kubelet set nothing on the host: the node's sysctls are its own copies.
    for name, value in joined["host"].items():
        assert Path("/proc/sys", name.replace(".", "/")).read_text() == value
    print(f"\n{suite_node.suite}: {joined['timings']}")


def run_shell_pod(core: Any, name: str, image: str, pull: str, script: str) -> None:
    """Create a one-container pod running `script` in `image`, and wait until it runs."""
    container = {"name": "sh", "image": image, "imagePullPolicy": pull}
    container["command"] = ["sh", "-c", script]
    pod = {"metadata": {"name": name}, "spec": {"containers": [container]}}
    core.create_namespaced_pod("default", pod)
    wait_for(
        f"the pod {name} Running",
        lambda: core.read_namespaced_pod(name, "default").status.phase == "Running",
        timeout_s=120,
    )


def test_a_pod_runs_and_its_log_and_exec_go_through_the_api_server(
    suite_node: Node, joined: dict[str, Any]
) -> None:
    cluster, core = joined["cluster"], joined["core"]
    run_shell_pod(core, "hello", SHELL_IMAGE, "Never", "echo hello from $(hostname); sleep 600")
    pod = core.read_namespaced_pod("hello", "default")
    assert pod.spec.node_name == suite_node.name
    pod_cidr = core.read_node(suite_node.name).spec.pod_cidr
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(pod_cidr)
    log = wait_for("the pod's log", lambda: cluster.kubectl("logs", "hello").stdout)
    assert log == "hello from hello\n"
    proc = cluster.kubectl("exec", "hello", "--", "hostname")
    assert (proc.returncode, proc.stdout) == (0, "hello\n"), proc.stderr
    # The pod's containers are the node's containerd's, under runc.
    containers = suite_node.ok("ctr -n k8s.io containers ls").splitlines()
    assert any(SHELL_IMAGE in c and "io.containerd.runc.v2" in c for c in containers), containers
    core.delete_namespaced_pod("hello", "default", grace_period_seconds=1)
    wait_for("the pod gone", lambda: not core.list_namespaced_pod("default").items)


NVIDIA_RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
NVIDIA_RUNTIME_LOG = "/var/log/kubegpu-test-nvidia-container-runtime.log"


def test_a_pod_of_runtime_class_nvidia_runs_through_nvidias_runtime(
    suite_node: Node, joined: dict[str, Any]
) -> None:
    """kubegpu's RuntimeClass nvidia -> containerd's nvidia runtime, as kubegpu's role wired it
    -> NVIDIA's nvidia-container-runtime (built from NVIDIA's module, installed by kubegpu's
    toolkit role) -> runc. The pod asks for no GPU (none exists here): NVIDIA's runtime runs
    its modifiers over the OCI spec and hands the container to runc, which its log (turned on
    by the test in the runtime's own config, restored afterwards) shows."""
    from kubernetes import client

    node, core = suite_node, joined["core"]
    # NVIDIA's programs built from NVIDIA's Go module (kubegpu.testbed.toolkit_build), from the
    # testbed's signed repository, installed by kubegpu's toolkit role.
    node.play(text=TOOLKIT_PLAY, kubegpu_nodes="all", kubegpu_toolkit_version="1.20.2-1")
    assert "NVIDIA Container Runtime version 1.20.2" in node.ok(f"{NVCT} --version")
    node.ok(
        f"cp -p {NVIDIA_RUNTIME_CONFIG} /root/nvidia-runtime-config.toml && "
        f"nvidia-ctk config --in-place --config={NVIDIA_RUNTIME_CONFIG} "
        f"--set nvidia-container-runtime.debug={NVIDIA_RUNTIME_LOG} "
        "--set nvidia-container-runtime.log-level=trace"
    )
    config, errors = cs.validate_config({})
    assert not errors
    manifests = cm.render_manifests(config, read_templates(cm.TEMPLATE_FOLDER))
    runtime_class = next(m for m in manifests if m["kind"] == "RuntimeClass")
    nodes = client.NodeV1Api(joined["cluster"].client())
    nodes.create_runtime_class(runtime_class)
    try:
        pod = {
            "metadata": {"name": "through-nvidia"},
            "spec": {
                "runtimeClassName": runtime_class["metadata"]["name"],
                "containers": [
                    {
                        "name": "sh",
                        "image": SHELL_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["sh", "-c", "echo ran under $(cat /proc/1/comm); sleep 600"],
                    }
                ],
            },
        }
        core.create_namespaced_pod("default", pod)
        wait_for(
            "the pod through-nvidia Running",
            lambda: core.read_namespaced_pod("through-nvidia", "default").status.phase == "Running",
            timeout_s=120,
        )
        log = wait_for(
            "the pod's log",
            lambda: joined["cluster"].kubectl("logs", "through-nvidia").stdout,
        )
        assert log == "ran under sh\n"
        status = core.read_namespaced_pod("through-nvidia", "default").status
        container_id = status.container_statuses[0].container_id.split("//", 1)[1]
        info = json.loads(node.ok(f"ctr -n k8s.io containers info {container_id}"))
        assert info["Runtime"]["Name"] == "io.containerd.runc.v2", info["Runtime"]
        # ctr prints the runc shim's options as they are stored: decoded, or as the protobuf
        # Any (containerd's runc Options, whose binary_name is a plain string field).
        options = info["Runtime"]["Options"]
        binary = options.get("BinaryName") or options.get("binary_name")
        if binary is None:
            binary = NVCT if NVCT.encode() in base64.b64decode(options["value"]) else options
        assert binary == NVCT, info["Runtime"]
        runtime_log = node.ok(f"cat {NVIDIA_RUNTIME_LOG}")
        assert "Using low-level runtime" in runtime_log and "runc" in runtime_log, runtime_log
        assert container_id in runtime_log, runtime_log[-2000:]
        core.delete_namespaced_pod("through-nvidia", "default", grace_period_seconds=1)
        wait_for("the pod gone", lambda: not core.list_namespaced_pod("default").items)
    finally:
        nodes.delete_runtime_class(runtime_class["metadata"]["name"])
        node.ok(f"cp -p /root/nvidia-runtime-config.toml {NVIDIA_RUNTIME_CONFIG}")


MIRRORED = "mirror-test.kubegpu.test"  # resolves nowhere: only the mirror can serve it


def mirror_vars(registry_address: str, **settings: Any) -> str:
    endpoints = [f"http://{registry_address}"]
    return json.dumps(
        {"container_runtime_registry_mirrors": {MIRRORED: dict(endpoints=endpoints, **settings)}}
    )


def test_a_pods_image_is_pulled_through_the_registry_mirror_kubegpu_wrote(
    suite_node: Node, joined: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A real registry on the suite's bridge holds the shell image; the role writes
    certs.d/<host>/hosts.toml for a registry host that resolves nowhere and points containerd's
    CRI registry config_path there; the kubelet's pull goes through the mirror."""
    missing = registry.available()
    if missing:
        pytest.skip(f"the test registry is {missing}")
    node, core = suite_node, joined["core"]
    workdir = tmp_path_factory.mktemp(f"registry-{node.suite}")
    layout = workdir / "layout"
    with tarfile.open(images.shell_archive(SHELL_IMAGE)) as archive:
        archive.extractall(layout, filter="data")
    served = registry.start(workdir / "registry", address=node.testbed.bridge_address)
    try:
        served.push(layout, "kubegpu/shell", "mirrored")
        pid = node.pid()
        data = node.play("-e", mirror_vars(served.address))
        result = node.task(data, MODULE_TASK)
        hosts_toml = f"/etc/containerd/certs.d/{MIRRORED}/hosts.toml"
        assert result["registry_hosts"] == {"written": [hosts_toml], "removed": []}, result
        assert result["drop_in_changed"] and node.pid() != pid  # config_path: a restart
        hosts = tomllib.loads(node.ok(f"cat {hosts_toml}"))
        assert hosts["host"] == {f"http://{served.address}": {"capabilities": ["pull", "resolve"]}}
        dump = node.dump()
        images_plugin = "io.containerd.cri.v1.images"
        plugin = images_plugin if images_plugin in dump["plugins"] else "io.containerd.grpc.v1.cri"
        assert dump["plugins"][plugin]["registry"]["config_path"] == "/etc/containerd/certs.d"
        assert node.changed(node.play("-e", mirror_vars(served.address))) == 0
        # Only the hosts file changes: containerd reads it on each pull, no restart.
        pid = node.pid()
        again = node.task(
            node.play("-e", mirror_vars(served.address, skip_verify=True)), MODULE_TASK
        )
        assert again["changed"] and not again["drop_in_changed"] and node.pid() == pid, again
        image = f"{MIRRORED}/kubegpu/shell:mirrored"
        run_shell_pod(core, "mirrored", image, "Always", "sleep 600")
        assert image in node.ok("ctr -n k8s.io images ls -q")
        log = (workdir / "registry" / "registry.log").read_text()
        assert "/v2/kubegpu/shell/manifests/mirrored" in log
        core.delete_namespaced_pod("mirrored", "default", grace_period_seconds=1)
        wait_for("the pod gone", lambda: not core.list_namespaced_pod("default").items)
    finally:
        served.stop()
    # No mirrors: the drop-in loses config_path and kubegpu's hosts.toml goes.
    result = node.task(node.play(), MODULE_TASK)
    assert result["registry_hosts"] == {"written": [], "removed": [hosts_toml]}, result
    assert node.ssh(f"test -e /etc/containerd/certs.d/{MIRRORED}").returncode == 1
    assert node.changed(node.play()) == 0


# What the oracle runs on the node for each case: kubelet with the case's gates in its config file
# and no credentials, so that a kubelet that accepts the gates logs its version and then stops
# (it starts nothing without a kubeconfig); prints one JSON line per case.
ORACLE = r"""
import json, subprocess
cases = json.load(open("/root/oracle/cases.json"))
for name, gates in cases.items():
    config = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
              "featureGates": gates, "failCgroupV1": False}
    with open("/root/oracle/config.yaml", "w") as out:
        json.dump(config, out)
    proc = subprocess.run(["timeout", "30", "/root/oracle/kubelet", "--config=/root/oracle/config.yaml",
                           "--root-dir=/root/oracle/root", "--kubeconfig=/root/oracle/none"],
                          capture_output=True, text=True)
    # Less the warning each release prints for every GA or deprecated gate that is set.
    errors = [l for l in proc.stderr.splitlines()
              if "feature gate" in l and "It will be removed in a future release" not in l
              or l.startswith("panic:")]
    # Past the gates, every release logs its version, then stops for want of a kubeconfig.
    print(json.dumps({"case": name, "rc": proc.returncode, "errors": errors[:3],
                      "accepted": '"Kubelet version"' in proc.stderr}), flush=True)
"""


def oracle_cases(release: tuple[int, int]) -> dict[str, dict[str, bool]]:
    """Cases by name: every gate of the release at its default (one case), each locked gate set
    against its lock, each gate removed by the release set to true."""
    states = {name: kubelet_rules.gate_state(name, release) for name in kubelet_rules.FEATURE_GATES}
    present = {n: st for n, st in states.items() if st["status"] == "present"}
    # AllAlpha and AllBeta set every gate of their stage that is not set itself (AllBeta=false
    # turns off the beta gates that others depend on): they are cases of their own.
    cases = {
        "all-at-default": {
            n: st["default"] for n, st in present.items() if n not in ("AllAlpha", "AllBeta")
        }
    }
    for name, st in present.items():
        if st["locked"]:
            cases[f"locked:{name}"] = {name: not st["default"]}
    for name, st in states.items():
        if st["status"] == "removed":
            cases[f"removed:{name}"] = {name: True}
    return cases


def oracle_disagreements(node: Node, version: str, kubelet: str) -> tuple[list[str], str]:
    """Run the oracle's cases with the kubelet of ``version``; what it disagrees on, and a line
    of figures."""
    release = kubelet_rules.parse_kubernetes_version(version)
    assert release is not None
    cases = oracle_cases(release)
    # kubegpu's own verdict on each case.
    for name, gates in cases.items():
        problems = kubelet_rules.validate_feature_gates(gates, version)
        assert (problems == []) == (name == "all-at-default"), (version, name, problems)
    node.put("/root/oracle/kubelet", Path(kubelet).read_bytes(), 0o755)
    node.put("/root/oracle/cases.json", json.dumps(cases).encode())
    node.put("/root/oracle/run.py", ORACLE.encode())
    verdicts = [json.loads(line) for line in node.ok("python3 /root/oracle/run.py").splitlines()]
    assert [v["case"] for v in verdicts] == list(cases)
    disagreements = []
    for verdict in verdicts:
        name, errors = verdict["case"], "\n".join(verdict["errors"])
        gate = name.split(":", 1)[-1]
        if name == "all-at-default":
            agrees = verdict["accepted"] and not errors
        elif name.startswith("locked:"):
            agrees = f"cannot set feature gate {gate} to" in errors and "locked" in errors
        else:
            agrees = f"unrecognized feature gate: {gate}" in errors
        if not agrees or (name != "all-at-default" and verdict["accepted"]):
            disagreements.append(f"{version} {name}: exit {verdict['rc']}: {errors[:600]}")
    locked = sum(n.startswith("locked:") for n in cases)
    removed = sum(n.startswith("removed:") for n in cases)
    figures = (
        f"{version}: {len(cases['all-at-default'])} gates accepted at their defaults, "
        f"{locked} locked gates and {removed} removed gates refused"
    )
    return disagreements, figures


@pytest.mark.parametrize("suite_node", ["trixie"], indirect=True)
def test_the_real_kubelet_of_each_supported_release_agrees_with_kubegpus_gate_table(
    suite_node: Node, wired: dict[str, Any]
) -> None:
    """The oracle: kubegpu's table against the kubelet of every release kubegpu supports (1.33 to
    1.37, built by tests/cluster/build.py from k8s.io/kubernetes at each release)."""
    kubelets = controlplane.build(kubelets=True)["kubelets"]
    low, high = kubelet_rules.SUPPORTED_RELEASES
    assert sorted(kubelets, key=lambda m: tuple(map(int, m.split(".")))) == [
        f"1.{minor}" for minor in range(low[1], high[1] + 1)
    ]
    disagreements, figures = [], []
    for version, binary in kubelets.values():
        found, line = oracle_disagreements(suite_node, version, binary)
        disagreements += found
        figures.append(line)
    assert disagreements == [], "\n".join(disagreements)
    print("\noracle, as kubegpu says:\n" + "\n".join(figures))


# --- docker ------------------------------------------------------------------------------------------

# What dockerd needs inside a testbed node (no iptables modules, no overlay on the node's
# overlay root), plus settings of the operator's own that the merge must keep.
DAEMON_JSON = {
    "iptables": False,
    "ip6tables": False,
    "bridge": "none",
    "storage-driver": "vfs",
    "log-level": "warn",
    "labels": ["team=infra"],
}


@pytest.mark.parametrize("suite_node", ["trixie"], indirect=True)
def test_docker_gets_the_nvidia_runtime_and_keeps_its_settings(
    suite_node: Node, wired: dict[str, Any]
) -> None:
    node = suite_node
    node.ok(
        "mkdir -p /etc/docker && cat > /etc/docker/daemon.json <<'EOF'\n"
        + json.dumps(DAEMON_JSON, indent=2)
        + "\nEOF\n"
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends"
        " docker.io docker-cli >/dev/null",
        timeout=900,
    )
    node.pid("docker")
    data = node.play(kubegpu_type="docker", kubegpu_install="false")
    result = node.task(data, "Merge the nvidia runtime into Docker's daemon.json")
    # Docker 26 (trixie) checks the merged file with dockerd --validate before it goes in place.
    assert result["changed"] and result["validation"] == "ok", result
    merged = json.loads(node.ok("cat /etc/docker/daemon.json"))
    assert {k: v for k, v in merged.items() if k not in ("runtimes", "features")} == DAEMON_JSON
    assert merged["runtimes"] == {"nvidia": {"path": NVCT}}
    # Docker 26.1 has CDI behind the cdi feature (on by default from 28.2).
    assert merged["features"] == {"cdi": True}
    package = node.ok("dpkg-query -W -f='${Version}' docker.io")
    assert result["cdi"]["source"] == "daemon.json (kubegpu)", result
    assert package.startswith(result["cdi"]["docker_version"] + "+"), (package, result)
    pid = node.pid("docker")
    info = json.loads(node.ok("docker info --format '{{json .}}'"))
    assert info["Runtimes"]["nvidia"]["path"] == NVCT and "runc" in info["Runtimes"]
    assert info["CDISpecDirs"] == ["/etc/cdi", "/var/run/cdi"], info.get("CDISpecDirs")
    again = node.play(kubegpu_type="docker", kubegpu_install="false")
    assert node.changed(again) == 0
    assert node.pid("docker") == pid
    # The operator adds a setting; undoing kubegpu's merge keeps it and every earlier one.
    node.ok('sed -i \'s/"log-level": "warn"/"log-level": "info"/\' /etc/docker/daemon.json')
    undo = node.play(text=UNDO_PLAY % "docker_runtime")
    assert node.task(undo, "Undo it")["undone"] == [
        "removed runtimes.nvidia",
        "removed features.cdi",
    ]
    assert json.loads(node.ok("cat /etc/docker/daemon.json")) == dict(
        DAEMON_JSON, **{"log-level": "info"}
    )
