"""Roles nvidia_container_toolkit and container_runtime on testbed nodes, end to end.

Real parts: Debian 12 nodes with systemd, real apt through the testbed's proxy, the testbed's
signed vendor repository served on the bridge (an operator-given mirror as far as the role
can tell) holding NVIDIA's toolkit programs built from NVIDIA's Go module (nvidia-ctk,
nvidia-container-runtime, the hooks, and at 1.20.2 NVIDIA's nvidia-cdi-refresh units),
containerd 1.6 and runc from Debian on the node that can run containers, and systemd restarting
it. Test doubles, named as such: libnvidia-container (nvidia-container-cli, which needs a GPU)
and, on the node with a SIMULATED GPU, an nvidia-smi replaying a real capture; NVIDIA's
nvidia-ctk reads GPUs through NVML, finds none there, and the role reports what it said.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubegpu.testbed import TestbedState

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
SIMULATED_SMI = "/usr/local/lib/kubegpu-simulated/nvidia-smi"
NVCT = "/usr/bin/nvidia-container-runtime"
PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
MODULE_TASK = "Wire the nvidia runtime into containerd through a validated drop-in"
# The role's one include: the install steps then the wiring, or docker's or CRI-O's wiring.
RUNTIME_INCLUDE = (
    "Install containerd and give it the nvidia runtime, or give the runtime found the nvidia"
    " runtime"
)

TOOLKIT_PLAY = """
- name: Install the container toolkit from the testbed's mirror
  hosts: "{{ kubegpu_nodes }}"
  gather_facts: true
  roles:
    - role: kubegpu.gpu.nvidia_container_toolkit
      vars:
        nvidia_container_toolkit_repo_url: "{{ kubegpu_testbed_vendor_repo_url }}/stable/deb/$(ARCH)"
        nvidia_container_toolkit_repo_key_file: "{{ kubegpu_testbed_vendor_repo_key }}"
        nvidia_container_toolkit_version: "{{ kubegpu_toolkit_version }}"
        nvidia_container_toolkit_nvidia_smi: "{{ kubegpu_nvidia_smi | default('') }}"
"""

RUNTIME_PLAY = """
- name: Give containerd the nvidia runtime
  hosts: "{{ kubegpu_nodes }}"
  gather_facts: true
  roles:
    - role: kubegpu.gpu.container_runtime
      vars:
        container_runtime_install: true
        container_runtime_type: containerd
"""


def ssh(testbed: TestbedState, node: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        testbed.ssh_argv(node, command), capture_output=True, text=True, timeout=300, check=False
    )


def ssh_ok(testbed: TestbedState, node: str, command: str) -> str:
    proc = ssh(testbed, node, command)
    assert proc.returncode == 0, f"{command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


class Run:
    """One ansible-playbook run read through the json callback."""

    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.rc = proc.returncode
        self.raw = proc.stdout + proc.stderr
        self.data = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}

    def stats(self, node: str) -> dict:
        return self.data["stats"][node]

    def task(self, name: str, node: str) -> dict:
        found = [
            t["hosts"][node]
            for play in self.data["plays"]
            for t in play["tasks"]
            if t["task"]["name"].endswith(name) and node in t["hosts"]
        ]
        assert found, f"task {name!r} did not run on {node}:\n{self.explain()}"
        return found[-1]

    def names(self, node: str) -> list[str]:
        """The names of the tasks that have a result for node (skipped ones too), in order."""
        return [
            t["task"]["name"]
            for play in self.data["plays"]
            for t in play["tasks"]
            if node in t["hosts"]
        ]

    def explain(self) -> str:
        """The failed tasks, per host, or the tail of the output when there is no JSON."""
        lines = [
            f"{host}: {t['task']['name']}: {str(r.get('msg'))[:1500]}"
            for play in self.data.get("plays", [])
            for t in play["tasks"]
            for host, r in t["hosts"].items()
            if r.get("failed") or r.get("unreachable")
        ]
        return "\n".join(lines) or self.raw[-4000:]

    def failures(self, node: str) -> list[str]:
        return [
            str(t["hosts"][node].get("msg"))
            for play in self.data.get("plays", [])
            for t in play["tasks"]
            if node in t["hosts"] and t["hosts"][node].get("failed")
        ]


@pytest.fixture(scope="module")
def play(testbed: TestbedState, ansible_bin: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("container-runtime")
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_FORCE_COLOR="0",
    )

    def run(text: str, nodes: list[str], *extra: str, **extra_vars: str) -> Run:
        path = folder / f"play-{abs(hash(text))}.yml"
        path.write_text(text)
        argv = [
            str(ansible_bin / "ansible-playbook"),
            "-i",
            str(testbed.inventory),
            "-e",
            f"kubegpu_nodes={','.join(nodes)}",
        ]
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
        return Run(proc)

    return run


def nodes_where(testbed: TestbedState, what: str) -> list[str]:
    pick = {
        "containers": lambda n: n.containers,
        "gpu": lambda n: bool(n.simulated_gpu),
        "plain": lambda n: not n.containers and not n.simulated_gpu,
    }[what]
    return [n.name for n in testbed.nodes if pick(n)]


@pytest.fixture(scope="module")
def gpu_node(testbed: TestbedState) -> str:
    nodes = nodes_where(testbed, "gpu")
    if not nodes:
        pytest.skip("no node with a simulated GPU in this testbed (KUBEGPU_TESTBED_SIMULATE_GPU)")
    return nodes[0]


@pytest.fixture(scope="module")
def plain_node(testbed: TestbedState) -> str:
    nodes = nodes_where(testbed, "plain")
    if not nodes:
        pytest.skip("no GPU-less node without containers in this testbed")
    return nodes[0]


@pytest.fixture(scope="module")
def containers_node(testbed: TestbedState) -> str:
    nodes = nodes_where(testbed, "containers")
    if not nodes:
        pytest.skip("no node that can run containerd in this testbed (KUBEGPU_TESTBED_CONTAINERS)")
    return nodes[0]


# --- the toolkit ------------------------------------------------------------------------------------


def installed(testbed: TestbedState, node: str) -> dict[str, str]:
    out = ssh_ok(
        testbed,
        node,
        "dpkg-query -W -f='${Package} ${Version} ${Status}\\n' " + " ".join(PACKAGES) + " || true",
    )
    return {
        line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines() if line.strip()
    }


@pytest.fixture(scope="module")
def toolkit_nodes(
    testbed: TestbedState, play, gpu_node: str, plain_node: str
) -> Iterator[list[str]]:
    nodes = [plain_node, gpu_node]
    for node in nodes:  # another test may have added the same repository by hand: not ours
        ssh_ok(testbed, node, "rm -f /etc/apt/sources.list.d/kubegpu-testbed-vendor.list")
    yield nodes


def test_a_conflicting_source_of_the_repository_is_named(
    testbed: TestbedState, play, toolkit_nodes: list[str]
) -> None:
    node = toolkit_nodes[0]
    conflicting = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
    ssh_ok(
        testbed,
        node,
        f"echo 'deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
        f"{testbed.vendor_repo_url}/stable/deb/$(ARCH) /' > {conflicting}",
    )
    apt_state = (
        "cd /etc/apt && find sources.list.d keyrings preferences.d -type f | sort | xargs -r md5sum"
    )
    try:
        before = ssh_ok(testbed, node, apt_state)
        run = play(TOOLKIT_PLAY, [node], kubegpu_toolkit_version="1.17.8-1")
        assert run.rc != 0
        assert any(
            conflicting in m and "nvidia_container_toolkit_repo_manage" in m
            for m in run.failures(node)
        ), run.explain()
        assert ssh_ok(testbed, node, apt_state) == before  # nothing added or changed
    finally:
        ssh_ok(testbed, node, f"rm -f {conflicting}")


def test_toolkit_is_installed_pinned_and_held(
    testbed: TestbedState, play, toolkit_nodes: list[str], gpu_node: str, plain_node: str
) -> None:
    run = play(
        TOOLKIT_PLAY,
        toolkit_nodes,
        kubegpu_toolkit_version="1.17.8-1",
        kubegpu_nvidia_smi=SIMULATED_SMI,
    )
    assert run.rc == 0, run.explain()
    for node in toolkit_nodes:
        assert installed(testbed, node) == dict.fromkeys(PACKAGES, "1.17.8-1 hold ok installed"), (
            node
        )
        assert "built by the kubegpu testbed from github.com/NVIDIA" in ssh_ok(
            testbed, node, "cat /usr/share/doc/nvidia-container-toolkit/KUBEGPU-TESTBED-BUILD"
        )
        source = ssh_ok(
            testbed, node, "cat /etc/apt/sources.list.d/kubegpu-nvidia-container-toolkit.sources"
        )
        assert "Signed-By: /etc/apt/keyrings/kubegpu-nvidia-container-toolkit.gpg" in source
        assert "Pin: version 1.17.8-1" in ssh_ok(
            testbed, node, "cat /etc/apt/preferences.d/kubegpu-nvidia-container-toolkit"
        )
    # 1.20.2-1 is in the repository too, but neither an upgrade nor a dist-upgrade moves them.
    for command in ("upgrade", "dist-upgrade"):
        simulated = ssh_ok(testbed, toolkit_nodes[0], f"apt-get -s {command}")
        assert not [
            ln
            for ln in simulated.splitlines()
            if ln.startswith("Inst") and any(p in ln for p in PACKAGES)
        ]
    # CDI: 1.17.8 has no refresh units, so the role generates the spec itself. The GPU-less
    # node is skipped with the reason; on the SIMULATED one NVIDIA's nvidia-ctk runs, finds no
    # GPU through NVML, and the role reports what it said: no spec, no change.
    skip = run.task("Skip the CDI spec because the node has no working NVIDIA driver", plain_node)
    assert "CDI spec not generated on" in skip["msg"] and "not_installed" in skip["msg"], skip[
        "msg"
    ]
    assert ssh(testbed, plain_node, "test -e /etc/cdi/nvidia.yaml").returncode == 1
    generated = run.task("Generate the CDI spec with nvidia-ctk", gpu_node)
    assert generated["rc"] == 1 and generated["changed"] is False
    said = run.task("Report what nvidia-ctk said about the simulated GPUs", gpu_node)["msg"]
    assert "SIMULATED" in said and "failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND" in said
    assert ssh(testbed, gpu_node, "test -e /etc/cdi/nvidia.yaml").returncode == 1
    converged_again(play, toolkit_nodes, "1.17.8-1")


def converged_again(play, nodes: list[str], version: str) -> Run:
    """The toolkit play once more at version, with the simulated nvidia-smi: it changes nothing."""
    again = play(
        TOOLKIT_PLAY, nodes, kubegpu_toolkit_version=version, kubegpu_nvidia_smi=SIMULATED_SMI
    )
    assert again.rc == 0, again.explain()
    for node in nodes:
        assert again.stats(node)["changed"] == 0, (node, again.explain())
    return again


REFRESH_DROPIN = "/etc/systemd/system/nvidia-cdi-refresh.service.d/60-kubegpu.conf"


def test_toolkit_upgrade_moves_the_hold_and_hands_cdi_to_nvidias_refresh_units(
    testbed: TestbedState, play, toolkit_nodes: list[str], gpu_node: str, plain_node: str
) -> None:
    run = play(
        TOOLKIT_PLAY,
        toolkit_nodes,
        kubegpu_toolkit_version="1.20.2-1",
        kubegpu_nvidia_smi=SIMULATED_SMI,
    )
    assert run.rc == 0, run.explain()
    for node in toolkit_nodes:
        assert installed(testbed, node) == dict.fromkeys(PACKAGES, "1.20.2-1 hold ok installed"), (
            node
        )
        # 1.20.2 ships nvidia-cdi-refresh.path/.service: the role points the service at its
        # spec path and enables the path unit, and runs no nvidia-ctk of its own.
        assert "Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.yaml" in ssh_ok(
            testbed, node, f"cat {REFRESH_DROPIN}"
        )
        assert ssh_ok(
            testbed,
            node,
            "systemctl is-enabled nvidia-cdi-refresh.path; systemctl is-active"
            " nvidia-cdi-refresh.path; systemctl show -p Environment --value"
            " nvidia-cdi-refresh.service",
        ).split() == ["enabled", "active", "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/etc/cdi/nvidia.yaml"]
        assert not any(n.endswith("Generate the CDI spec with nvidia-ctk") for n in run.names(node))
    said = run.task("Report what NVIDIA's CDI refresh does on this node", gpu_node)["msg"]
    assert "SIMULATED" in said and "nvidia-cdi-refresh.path is enabled" in said
    said = run.task("Report what NVIDIA's CDI refresh does on this node", plain_node)["msg"]
    assert "no usable NVIDIA driver" in said
    for node in toolkit_nodes:
        assert ssh(testbed, node, "test -e /etc/cdi/nvidia.yaml").returncode == 1

    again = converged_again(play, toolkit_nodes, "1.20.2-1")
    # One read told the role the keyring, its folder and the source are as they should be: no
    # file is written.
    evaluated = again.names(gpu_node)
    assert again.task(SETUP_INCLUDE, gpu_node).get("skipped") is True
    # The same read showed the pin and the packages in place: the repository and install
    # steps are skipped as that one include.
    for step in (
        KEYRING_INCLUDE,
        "Copy the repository's signing key from the controller",
        KEYRING_DIR_TASK,
        "Add the repository as a deb822 source signed by that key",
        "Pin the toolkit packages at 1.20.2-1",
        "Read which packages are installed",
        "Move, install or hold the toolkit packages",
    ):
        assert not any(name.endswith(step) for name in evaluated), step


KEYRING = "/etc/apt/keyrings/kubegpu-nvidia-container-toolkit.gpg"
PIN = "/etc/apt/preferences.d/kubegpu-nvidia-container-toolkit"
KEYRING_INCLUDE = (
    "Install the APT helpers, put the signing key and the repository's source in place"
)
SETUP_INCLUDE = "Add the toolkit's package repository and install the pinned packages"
KEYRING_DIR_TASK = (
    "Create the directory for APT keyrings and remove a keyring of the other format left by an"
    " earlier run"
)


def test_a_changed_keyring_pin_and_one_of_the_other_format_are_put_right(
    testbed: TestbedState, play, toolkit_nodes: list[str]
) -> None:
    node = toolkit_nodes[0]
    files = f"{KEYRING} {PIN}"
    good = ssh_ok(testbed, node, f"sha256sum {files}; stat -c '%a %U %G' {files}")
    other = KEYRING.removesuffix(".gpg") + ".asc"
    ssh_ok(
        testbed,
        node,
        f"echo not-a-key > {KEYRING}; chmod 600 {KEYRING}; touch {other}; echo '# local' >> {PIN}"
        f"; apt-mark unhold {PACKAGES[0]}",
    )
    run = play(TOOLKIT_PLAY, [node], kubegpu_toolkit_version="1.20.2-1")
    assert run.rc == 0, run.explain()
    # The released hold brings the package steps back: APT has nothing to do, the hold is set.
    assert run.task("Install the toolkit packages at 1.20.2-1", node).get("skipped") is True
    assert run.task("Hold the toolkit packages at their version", node)["changed"]
    assert installed(testbed, node) == dict.fromkeys(PACKAGES, "1.20.2-1 hold ok installed")
    assert run.task("Copy the repository's signing key from the controller", node)["changed"]
    assert run.task(KEYRING_DIR_TASK, node)["changed"]
    assert run.task("Pin the toolkit packages at 1.20.2-1", node)["changed"]
    assert ssh_ok(testbed, node, f"sha256sum {files}; stat -c '%a %U %G' {files}") == good
    assert ssh(testbed, node, f"test -e {other}").returncode == 1
    again = play(TOOLKIT_PLAY, [node], kubegpu_toolkit_version="1.20.2-1")
    assert again.rc == 0, again.explain()
    assert again.stats(node)["changed"] == 0, again.explain()
    assert again.task(SETUP_INCLUDE, node).get("skipped") is True
    # Without the repository step the role reads the packages and writes the pin itself.
    alone = play(
        TOOLKIT_PLAY,
        [node],
        kubegpu_toolkit_version="1.20.2-1",
        nvidia_container_toolkit_repo_manage="false",
    )
    assert alone.rc == 0, alone.explain()
    assert alone.stats(node)["changed"] == 0, alone.explain()
    assert alone.task("Read which packages are installed", node).get("skipped") is not True
    assert alone.task("Pin the toolkit packages at 1.20.2-1", node).get("skipped") is not True


def _key_fingerprint(path: str) -> str:
    """The primary fingerprint of the testbed's vendor key, as gpg reads it on this machine."""
    with tempfile.TemporaryDirectory() as home:
        listing = subprocess.run(
            ["gpg", "--homedir", home, "--batch", "--show-keys", "--with-colons", path],
            capture_output=True,
            text=True,
            check=True,
            env=dict(os.environ, LC_ALL="C"),
        ).stdout
    return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))


def test_a_fingerprint_pinned_later_is_checked_against_the_keyring_already_there(
    testbed: TestbedState, play, toolkit_nodes: list[str]
) -> None:
    """The keyring is in place from an unpinned run; a pin added later is checked against it
    although the key file does not change: a wrong one stops the run and takes the keyring
    away, the right one passes and is remembered (the next run checks nothing)."""
    node = toolkit_nodes[0]
    real = _key_fingerprint(str(testbed.vendor_repo_key))
    wrong = "0123456789ABCDEF0123456789ABCDEF01234567"
    bad = play(
        TOOLKIT_PLAY,
        [node],
        kubegpu_toolkit_version="1.20.2-1",
        nvidia_container_toolkit_repo_key_fingerprint=wrong,
    )
    assert bad.rc != 0
    # The check's failure, then the rescue's (after it removed the keyring), which stops.
    message = [m for m in bad.failures(node) if "fingerprint" in m][-1]
    assert wrong in message and real in message and "not added" in message
    assert ssh(testbed, node, f"test -e {KEYRING}").returncode == 1
    good = play(
        TOOLKIT_PLAY,
        [node],
        kubegpu_toolkit_version="1.20.2-1",
        nvidia_container_toolkit_repo_key_fingerprint=real,
    )
    assert good.rc == 0, good.explain()
    assert good.task("Remember that this keyring passed the fingerprint check", node)["changed"]
    marker = "/var/lib/kubegpu/keys/" + Path(KEYRING).name + ".verified"
    digest = ssh_ok(testbed, node, f"sha256sum {KEYRING}").split()[0]
    assert ssh_ok(testbed, node, f"cat {marker}").strip() == f"{digest} {real}"
    again = play(
        TOOLKIT_PLAY,
        [node],
        kubegpu_toolkit_version="1.20.2-1",
        nvidia_container_toolkit_repo_key_fingerprint=real,
    )
    assert again.rc == 0, again.explain()
    assert again.stats(node)["changed"] == 0, again.explain()
    assert again.task(SETUP_INCLUDE, node).get("skipped") is True


def test_toolkit_check_mode_changes_nothing(
    testbed: TestbedState, play, toolkit_nodes: list[str]
) -> None:
    node = toolkit_nodes[0]
    before = installed(testbed, node)
    run = play(TOOLKIT_PLAY, [node], "--check", "--diff", kubegpu_toolkit_version="1.17.8-1")
    assert run.rc == 0, run.explain()
    assert run.stats(node)["changed"] > 0
    assert installed(testbed, node) == before


# --- containerd -------------------------------------------------------------------------------------


def main_pid(testbed: TestbedState, node: str) -> str:
    out = ssh_ok(
        testbed,
        node,
        "systemctl is-active containerd; systemctl show -p MainPID --value containerd",
    )
    state, pid = out.split()
    assert state == "active"
    return pid


def effective(testbed: TestbedState, node: str) -> dict:
    import tomllib

    return tomllib.loads(ssh_ok(testbed, node, "containerd config dump"))


def runtimes(testbed: TestbedState, node: str) -> dict:
    return effective(testbed, node)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"][
        "runtimes"
    ]


def test_check_mode_on_a_node_without_containerd(
    testbed: TestbedState, play, containers_node: str
) -> None:
    """Before containerd is installed, check mode reports the installation and changes nothing."""
    node = containers_node
    if ssh(testbed, node, "command -v containerd").returncode == 0:
        pytest.skip("containerd is already on the node (a reused testbed)")
    run = play(RUNTIME_PLAY, [node], "--check", "--diff")
    assert run.rc == 0, run.explain()
    report = run.task("Report the packages check mode would install", node)
    assert report["changed"] is True and "containerd would be installed" in report["msg"]
    assert "drop-in depends on the installed containerd" in report["msg"]
    assert ssh(testbed, node, "command -v containerd").returncode == 1
    assert ssh(testbed, node, "test -e /etc/containerd").returncode == 1


@pytest.fixture(scope="module")
def containerd_node(testbed: TestbedState, play, containers_node: str) -> str:
    run = play(RUNTIME_PLAY, [containers_node])
    assert run.rc == 0, run.explain()
    result = run.task(MODULE_TASK, containers_node)
    assert result["containerd_version"].startswith("1.6.")
    # A node of a reused testbed (KUBEGPU_TESTBED_REUSE=1) may be wired already.
    assert not result["changed"] or result["validation"]["daemon"] == "ok", result
    return containers_node


def cri_of_main_config_alone(testbed: TestbedState, node: str) -> dict:
    """The CRI section containerd makes of the node's main config without any import: what
    the node has without kubegpu's drop-in, whatever config.toml holds now."""
    import tomllib

    from ansible_collections.kubegpu.gpu.plugins.module_utils.containerd import replace_imports

    main = ssh_ok(testbed, node, "cat /etc/containerd/config.toml")
    alone = replace_imports(main, [])
    ssh_ok(testbed, node, f"cat > /tmp/kubegpu-main-alone.toml <<'EOF'\n{alone}EOF")
    dump = ssh_ok(testbed, node, "containerd --config /tmp/kubegpu-main-alone.toml config dump")
    return tomllib.loads(dump)["plugins"]["io.containerd.grpc.v1.cri"]


def test_containerd_runs_with_the_nvidia_runtime(
    testbed: TestbedState, containerd_node: str
) -> None:
    node = containerd_node
    main_pid(testbed, node)
    rts = runtimes(testbed, node)
    assert rts["nvidia"]["runtime_type"] == "io.containerd.runc.v2"
    assert rts["nvidia"]["options"]["BinaryName"] == NVCT
    assert rts["nvidia"]["options"]["SystemdCgroup"] == rts["runc"]["options"].get(
        "SystemdCgroup", False
    )
    # Every other CRI setting is the node's own (on a node fresh from the package, Debian's
    # cni.bin_dir /usr/lib/cni; after another tool's `containerd config default`, /opt/cni/bin):
    # compared with the main config alone, not with a hard-coded value.
    cri = effective(testbed, node)["plugins"]["io.containerd.grpc.v1.cri"]
    del cri["containerd"]["runtimes"]["nvidia"]
    assert cri == cri_of_main_config_alone(testbed, node)
    plugins = ssh_ok(testbed, node, "ctr plugins ls")
    assert [
        ln.split()[-1]
        for ln in plugins.splitlines()
        if ln.split()[:2] == ["io.containerd.grpc.v1", "cri"]
    ] == ["ok"]


def test_second_run_changes_nothing_and_does_not_restart(
    testbed: TestbedState, play, containerd_node: str
) -> None:
    pid = main_pid(testbed, containerd_node)
    run = play(RUNTIME_PLAY, [containerd_node])
    assert run.rc == 0, run.explain()
    assert run.stats(containerd_node)["changed"] == 0
    assert main_pid(testbed, containerd_node) == pid


def test_a_stopped_and_disabled_containerd_is_enabled_and_started_again(
    testbed: TestbedState, play, containerd_node: str
) -> None:
    """The service task runs only when the role's one read shows containerd disabled or stopped."""
    node = containerd_node
    ssh_ok(testbed, node, "systemctl disable --now containerd")
    run = play(RUNTIME_PLAY, [node])
    assert run.rc == 0, run.explain()
    assert run.task("Enable and start containerd", node)["changed"] is True
    state = ssh_ok(testbed, node, "systemctl is-enabled containerd; systemctl is-active containerd")
    assert state.split() == ["enabled", "active"]
    again = play(RUNTIME_PLAY, [node])
    assert again.rc == 0, again.explain()
    assert again.stats(node)["changed"] == 0
    # The same read said the packages are installed and containerd enabled and running: the
    # role wired containerd and ended, evaluating no install step, so neither APT nor systemd
    # is asked.
    names = again.names(node)
    assert again.task(MODULE_TASK, node)["changed"] is False
    assert not [n for n in names if n.endswith(RUNTIME_INCLUDE)], names
    assert not [n for n in names if n.endswith("Enable and start containerd")]


DEFAULT_WITH_SYSTEMD = "containerd config default | sed 's/SystemdCgroup = false/SystemdCgroup = true/' > /etc/containerd/config.toml"


def test_rewritten_main_config_gets_only_its_imports_line_back(
    testbed: TestbedState, play, containerd_node: str
) -> None:
    node = containerd_node
    # Another tool writes a fresh default config (runc with the systemd cgroup driver).
    ssh_ok(testbed, node, DEFAULT_WITH_SYSTEMD)
    pid = main_pid(testbed, node)
    first = play(RUNTIME_PLAY, [node])
    assert first.rc == 0, first.explain()
    assert first.task(MODULE_TASK, node)["drop_in_changed"] is True  # its CRI section changed
    assert main_pid(testbed, node) != pid  # restarted by the handler
    rts = runtimes(testbed, node)
    assert (
        rts["nvidia"]["options"]["SystemdCgroup"] is True
        and rts["runc"]["options"]["SystemdCgroup"] is True
    )

    # The same tool runs again: only the imports line is missing.
    ssh_ok(testbed, node, DEFAULT_WITH_SYSTEMD)
    fresh = ssh_ok(testbed, node, "cat /etc/containerd/config.toml")
    second = play(RUNTIME_PLAY, [node])
    assert second.rc == 0, second.explain()
    result = second.task(MODULE_TASK, node)
    assert (result["changed"], result["config_changed"], result["drop_in_changed"]) == (
        True,
        True,
        False,
    )
    now = ssh_ok(testbed, node, "cat /etc/containerd/config.toml")
    differing = [
        (a, b) for a, b in zip(fresh.splitlines(), now.splitlines(), strict=True) if a != b
    ]
    assert differing == [("imports = []", 'imports = ["/etc/containerd/conf.d/*.toml"]')]

    third = play(RUNTIME_PLAY, [node])
    assert third.rc == 0 and third.stats(node)["changed"] == 0, third.explain()


BREAKERS = {
    "toml error": (
        "printf '[plugins.\"io.containerd.grpc.v1.cri\"\\n' >> /etc/containerd/config.toml",
        "containerd cannot load the configuration",
    ),
    "newer version": (
        "sed -i 's/^version = 2/version = 4/' /etc/containerd/config.toml",
        "has `version = 4`",
    ),
    "drop-in dir is a file": (
        "mv /etc/containerd/conf.d /root/kubegpu-conf.d.saved && echo notes > /etc/containerd/conf.d",
        "is not a directory",
    ),
}


@pytest.mark.parametrize("case", list(BREAKERS))
def test_broken_inputs_stop_with_a_message_and_containerd_keeps_running(
    testbed: TestbedState, play, containerd_node: str, case: str
) -> None:
    node = containerd_node
    command, message = BREAKERS[case]
    ssh_ok(testbed, node, "cp -a /etc/containerd /root/kubegpu-containerd.saved")
    pid = main_pid(testbed, node)
    try:
        ssh_ok(testbed, node, command)
        before = ssh_ok(testbed, node, "find /etc/containerd -type f | sort | xargs md5sum")
        run = play(RUNTIME_PLAY, [node])
        assert run.rc != 0
        assert any(message in m for m in run.failures(node)), run.failures(node) or run.explain()
        assert ssh_ok(testbed, node, "find /etc/containerd -type f | sort | xargs md5sum") == before
        assert main_pid(testbed, node) == pid  # not restarted, still serving its old config
        assert ssh(testbed, node, "ctr plugins ls >/dev/null").returncode == 0
    finally:
        ssh_ok(
            testbed,
            node,
            "rm -rf /etc/containerd /root/kubegpu-conf.d.saved && mv /root/kubegpu-containerd.saved /etc/containerd",
        )
    run = play(RUNTIME_PLAY, [node])
    assert run.rc == 0 and run.stats(node)["changed"] == 0, run.explain()


def test_check_mode_with_default_runtime_changes_nothing(
    testbed: TestbedState, play, containerd_node: str
) -> None:
    node = containerd_node
    before = ssh_ok(testbed, node, "find /etc/containerd -type f | sort | xargs md5sum")
    pid = main_pid(testbed, node)
    run = play(RUNTIME_PLAY, [node], "--check", "--diff", container_runtime_default_runtime="true")
    assert run.rc == 0, run.explain()
    result = run.task(MODULE_TASK, node)
    assert result["changed"] and result["validation"] == {
        "dump": "ok",
        "daemon": "skipped (check mode)",
    }
    assert 'default_runtime_name = "nvidia"' in result["diff"][0]["after"]
    assert ssh_ok(testbed, node, "find /etc/containerd -type f | sort | xargs md5sum") == before
    assert main_pid(testbed, node) == pid
