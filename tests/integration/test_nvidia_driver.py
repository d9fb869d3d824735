"""The nvidia_driver role for real, on the testbed's Debian 12 nodes (no GPU, no loadable
modules), through Debian's mirror via the testbed's apt-cacher-ng.

What runs for real: the role over SSH, apt with the deb822 source it adds for contrib/non-free,
Debian's nvidia-driver 535 packages (DKMS skips the build: no headers for the node's kernel, and
the role is told not to install them), dpkg holds, systemd units, the local fact. What cannot
exist here: a GPU (nvidia_driver_force stands in for one) and a loaded kernel module, so
nvidia-smi answers with the real "couldn't communicate" message and exit status 9.

Order matters and is kept by the module-scoped fixtures: bad inputs and --check --diff run on
fresh nodes (their file trees must not change), then the converge, the second run (changed=0),
--check on the converged nodes, and the CUDA toolkit's check mode. At the end every package
the tests installed is purged and the role's files removed, so the nodes are left as found.
Timings of the converge and of the no-change run are recorded (record_property) and printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The task that records the driver's state where nothing else on the host differs, before the
# role ends (roles/nvidia_driver/tasks/driver.yml).
SETTLED_RECORD = "Record the driver state where nothing on the host differs"

REPO = Path(__file__).resolve().parents[2]
DRIVER_VARS = {
    "nvidia_driver_source": "distribution",
    "nvidia_driver_branch": "535",
    "nvidia_driver_force": True,
    "nvidia_driver_install_headers": False,
}
ROLE_FILES = (
    "/etc/modprobe.d/blacklist-nouveau.conf",
    "/etc/modprobe.d/nvidia-kubegpu.conf",
    "/etc/ansible/facts.d/kubegpu_driver.fact",
    "/etc/ansible/facts.d/kubegpu_cuda.fact",
    "/etc/profile.d/cuda.sh",
)
# The trees a failed or check-mode run must leave exactly as they were.
WATCHED = "/etc /usr /opt /var/lib/dpkg"


def ssh(
    testbed: Any, node: str, command: str, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        testbed.ssh_argv(node, command),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ssh_ok(testbed: Any, node: str, command: str) -> str:
    proc = ssh(testbed, node, command)
    assert proc.returncode == 0, f"{command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def snapshot(testbed: Any, node: str) -> set[str]:
    proc = ssh(testbed, node, f"find {WATCHED} -xdev -printf '%y %m %s %T@ %p\\n'")
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.splitlines())


def installed(testbed: Any, node: str) -> set[str]:
    proc = ssh(testbed, node, "dpkg-query --show --showformat='${db:Status-Abbrev} ${Package}\\n'")
    return {line.split()[1] for line in proc.stdout.splitlines() if line[1:2] == "i"}


def play(
    testbed: Any,
    tmp_path: Path,
    role: str,
    variables: dict[str, Any],
    *flags: str,
    limit: str = "gpu_nodes",
) -> tuple[int, dict[str, Any], float]:
    """Run one role on the testbed's gpu_nodes; return (rc, JSON report, seconds)."""
    playbook = [
        {
            "name": f"Run {role} on the testbed nodes",
            "hosts": limit,
            "gather_facts": True,
            "gather_subset": ["!all"],
            "roles": [{"role": f"kubegpu.gpu.{role}"}],
        }
    ]
    path = tmp_path / f"{role}-{time.monotonic_ns()}.yml"
    path.write_text(yaml.safe_dump(playbook, sort_keys=False))
    extra = path.with_suffix(".vars.json")
    extra.write_text(json.dumps(variables))
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_CACHE_PLUGIN": "memory",
            "ANSIBLE_FORCE_COLOR": "0",
        }
    )
    started = time.monotonic()
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(testbed.inventory),
            "-e",
            f"@{extra}",
            *flags,
            str(path),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    seconds = time.monotonic() - started
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON from ansible-playbook: {proc.stdout[-3000:]} {proc.stderr[-3000:]}")
    return proc.returncode, report, seconds


def failures(report: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for play_ in report["plays"]:
        for task in play_["tasks"]:
            for host, result in task["hosts"].items():
                if result.get("failed") and host not in found:
                    found[host] = str(result.get("msg", ""))
    return found


def changed_tasks(report: dict[str, Any], host: str) -> list[str]:
    """Names (without the "role : " prefix) of the tasks that changed, or would have."""
    return [
        task["task"]["name"].rpartition(" : ")[2]
        for play_ in report["plays"]
        for task in play_["tasks"]
        if task["hosts"].get(host, {}).get("changed")
    ]


def task_results(report: dict[str, Any], host: str) -> dict[str, dict[str, Any]]:
    """host's result of each task that has one (skipped too), by name without "role : "."""
    return {
        task["task"]["name"].rpartition(" : ")[2]: task["hosts"][host]
        for play_ in report["plays"]
        for task in play_["tasks"]
        if host in task["hosts"]
    }


@pytest.fixture(scope="module")
def nodes(testbed: Any) -> Iterator[list[str]]:
    # The nodes kept for containerd tests are left alone: the driver pulls in a compiler and
    # X11 libraries that those tests do not expect.
    names = [node.name for node in testbed.nodes if not node.containers]
    before = {node: installed(testbed, node) for node in names}
    for node in names:
        assert "nvidia-driver" not in before[node], f"{node} has a driver before the tests"
    yield names
    for node in names:
        added = sorted(installed(testbed, node) - before[node])
        commands = [f"rm -f {' '.join(ROLE_FILES)} /etc/apt/sources.list.d/kubegpu-nvidia-*"]
        if added:
            listed = " ".join(added)
            commands.insert(0, f"apt-mark unhold {listed} >/dev/null")
            commands.insert(
                1, f"apt-get purge -y -q --allow-change-held-packages {listed} >/dev/null"
            )
        commands.append("apt-get update -q >/dev/null")
        proc = ssh(testbed, node, " && ".join(commands), timeout=600)
        assert proc.returncode == 0, (node, proc.stderr[-2000:])


@pytest.fixture(scope="module")
def fresh_trees(testbed: Any, nodes: list[str]) -> dict[str, set[str]]:
    return {node: snapshot(testbed, node) for node in nodes}


@pytest.mark.parametrize(
    ("variables", "fragments"),
    [
        (
            {"nvidia_driver_branch": "580"},
            ["nvidia_driver_branch is '580'", "carries only branch 535"],
        ),
        (
            {"nvidia_driver_kernel_module_type": "open"},
            ["nvidia_driver_kernel_module_type is 'open'", "firmware-nvidia-gsp"],
        ),
        (
            {
                "nvidia_driver_source": "mirror",
                "nvidia_driver_mirror_url": "http://mirror.invalid/none",
            },
            ["nvidia_driver_mirror_key_file", "nvidia_driver_mirror_key_url"],
        ),
    ],
)
def test_bad_input_fails_before_any_change(
    testbed: Any,
    nodes: list[str],
    fresh_trees: dict[str, set[str]],
    tmp_path: Path,
    variables: dict[str, Any],
    fragments: list[str],
) -> None:
    rc, report, _ = play(
        testbed, tmp_path, "nvidia_driver", {**DRIVER_VARS, **variables}, limit=",".join(nodes)
    )
    assert rc != 0
    messages = failures(report)
    assert set(messages) == set(nodes)
    for node in nodes:
        for fragment in fragments:
            assert fragment in messages[node]
        assert snapshot(testbed, node) == fresh_trees[node]


def test_check_mode_on_fresh_nodes_changes_nothing(
    testbed: Any, nodes: list[str], fresh_trees: dict[str, set[str]], tmp_path: Path
) -> None:
    rc, report, _ = play(testbed, tmp_path, "nvidia_driver", DRIVER_VARS, "--check", "--diff")
    assert rc == 0, failures(report)
    for node in nodes:
        # It tells what it would do ...
        assert (
            "Blacklist the nouveau driver, or remove the blacklist when it is not wanted"
            in changed_tasks(report, node)
        )
        assert "Record the driver in the local fact kubegpu_driver" in changed_tasks(report, node)
        # ... and does none of it.
        assert snapshot(testbed, node) == fresh_trees[node]


@pytest.fixture(scope="module")
def converged(
    testbed: Any,
    nodes: list[str],
    fresh_trees: dict[str, set[str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("converge")
    rc, first, first_seconds = play(testbed, tmp, "nvidia_driver", DRIVER_VARS)
    assert rc == 0, failures(first)
    rc, second, second_seconds = play(testbed, tmp, "nvidia_driver", DRIVER_VARS)
    assert rc == 0, failures(second)
    rc, check, _ = play(testbed, tmp, "nvidia_driver", DRIVER_VARS, "--check", "--diff")
    assert rc == 0, failures(check)
    print(
        f"\nnvidia_driver on {len(nodes)} nodes: converge {first_seconds:.1f} s, "
        f"second run {second_seconds:.1f} s"
    )
    return {
        "first": first,
        "second": second,
        "check": check,
        "seconds": (first_seconds, second_seconds),
    }


def test_converge_changes_then_second_run_and_check_change_nothing(
    converged: dict[str, Any], nodes: list[str], record_property: Any
) -> None:
    first_seconds, second_seconds = converged["seconds"]
    record_property("converge_seconds", round(first_seconds, 1))
    record_property("no_change_seconds", round(second_seconds, 1))
    for node in nodes:
        assert converged["first"]["stats"][node]["changed"] > 0
        assert converged["second"]["stats"][node]["changed"] == 0, changed_tasks(
            converged["second"], node
        )
        assert converged["check"]["stats"][node]["changed"] == 0, changed_tasks(
            converged["check"], node
        )
        # Every package at its version and held, nothing else to change: right after its read
        # the role records its state and ends, without evaluating the version, package and
        # configuration steps one by one.
        second = task_results(converged["second"], node)
        assert "Change, install or hold the driver packages" not in second
        assert "Install the driver packages at version" not in " ".join(second)
        assert second["Read the APT state and the driver packages, and decide what moves"][
            "at_target"
        ]
        assert second[SETTLED_RECORD].get("skipped") is not True
        assert "Read the driver version that is installed now" not in second


def test_debian_driver_packages_are_installed_and_held(
    testbed: Any, converged: dict[str, Any], nodes: list[str]
) -> None:
    for node in nodes:
        proc = ssh(
            testbed,
            node,
            "dpkg-query --show --showformat='${Package} ${db:Status-Abbrev}${Version}\\n' "
            "nvidia-driver nvidia-kernel-dkms nvidia-smi libcuda1 nvidia-persistenced",
        )
        rows = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
        assert len(rows) == 5, rows
        for package in ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "libcuda1"):
            # held (h), installed (i), of branch 535
            assert rows.pop(package).startswith("hi 535."), package
        # nvidia-persistenced is a package of its own version, installed but not held.
        assert rows["nvidia-persistenced"].startswith("ii ")


def test_the_archive_components_come_from_a_deb822_source(
    testbed: Any, converged: dict[str, Any], nodes: list[str]
) -> None:
    for node in nodes:
        names = ssh(testbed, node, "ls /etc/apt/sources.list.d/").stdout.split()
        files = [n for n in names if n.startswith("kubegpu-nvidia-distribution-")]
        stanzas = [
            yaml.safe_load(ssh(testbed, node, f"cat /etc/apt/sources.list.d/{name}").stdout)
            for name in files
        ]
        assert {s["Suites"] for s in stanzas} == {"bookworm bookworm-updates", "bookworm-security"}
        for stanza in stanzas:
            assert stanza["Components"] == "contrib non-free non-free-firmware"
            assert stanza["Signed-By"] == "/usr/share/keyrings/debian-archive-keyring.gpg"
        # The URIs are the node's own (what its debian.sources already used).
        own = ssh(testbed, node, "grep -h '^URIs:' /etc/apt/sources.list.d/debian.sources")
        assert {s["URIs"].rstrip("/") for s in stanzas} == {
            line.split()[1].rstrip("/") for line in own.stdout.splitlines()
        }


def test_a_source_and_a_parameters_file_the_role_no_longer_needs_are_removed(
    testbed: Any,
    converged: dict[str, Any],
    nodes: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A source of the role's name that the plan no longer wants (as left by an earlier run with
    other suites) and a module parameters file with no parameters set are removed; the role's
    reads find them, so the no-change run does not ask for either with a module of its own."""
    node = nodes[0]
    stale = "/etc/apt/sources.list.d/kubegpu-nvidia-distribution-0000dead.sources"
    params = "/etc/modprobe.d/nvidia-kubegpu.conf"
    ssh_ok(
        testbed,
        node,
        f"cp $(ls /etc/apt/sources.list.d/kubegpu-nvidia-distribution-* | head -1) {stale}"
        f" && echo 'options nvidia NVreg_X=1' > {params}",
    )
    rc, report, _ = play(
        testbed, tmp_path_factory.mktemp("stale"), "nvidia_driver", DRIVER_VARS, limit=node
    )
    assert rc == 0, failures(report)
    changed = changed_tasks(report, node)
    removals = {
        # One file_set writes the sources the plan wants and removes the stale one.
        "Add the driver's archive components to the host's own archive URIs, remove old ones",
        "Write the NVIDIA kernel module parameters, or remove the file when none are set",
    }
    assert removals <= set(changed), changed
    assert set(changed) <= removals | {"Refresh the package lists after the repository change"}
    assert ssh(testbed, node, f"test -e {stale} || test -e {params}").returncode == 1


def test_module_parameters_are_written_once_then_left_alone(
    testbed: Any,
    converged: dict[str, Any],
    nodes: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Parameters set: one file_set writes them (with the packaging's module names), the next run
    finds the file in place through the first read and runs no file task; set back to none, the
    file goes."""
    node = nodes[0]
    params = "/etc/modprobe.d/nvidia-kubegpu.conf"
    task = "Write the NVIDIA kernel module parameters, or remove the file when none are set"
    variables = {
        **DRIVER_VARS,
        "nvidia_driver_module_parameters": {
            "nvidia": {"NVreg_EnableGpuFirmware": True},
            "nvidia-drm": {"modeset": 1},
        },
    }
    tmp = tmp_path_factory.mktemp("params")
    try:
        rc, report, _ = play(testbed, tmp, "nvidia_driver", variables, limit=node)
        assert rc == 0, failures(report)
        assert changed_tasks(report, node) == [task]
        lines = ssh_ok(testbed, node, f"cat {params}").splitlines()
        assert lines[0].startswith("# ") and "nvidia_driver_module_parameters" in lines[0]
        # Debian's packages name the modules nvidia-current*.
        assert lines[1:] == [
            "options nvidia-current NVreg_EnableGpuFirmware=1",
            "options nvidia-current-drm modeset=1",
        ]
        assert ssh_ok(testbed, node, f"stat -c '%a %U %G' {params}").strip() == "644 root root"
        rc, again, _ = play(testbed, tmp, "nvidia_driver", variables, limit=node)
        assert rc == 0, failures(again)
        assert changed_tasks(again, node) == []
        # The file in place and nothing else to change: the role ends before the step.
        assert task not in task_results(again, node)
        assert task_results(again, node)[SETTLED_RECORD].get("skipped") is not True
    finally:
        rc, back, _ = play(testbed, tmp, "nvidia_driver", DRIVER_VARS, limit=node)
    assert rc == 0, failures(back)
    assert changed_tasks(back, node) == [task]
    assert ssh(testbed, node, f"test -e {params}").returncode == 1


def test_a_released_hold_is_put_back_and_nothing_else_changes(
    testbed: Any,
    converged: dict[str, Any],
    nodes: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The first package read shows nvidia-smi no longer held, so the package steps run again:
    APT has nothing to install, and only the hold changes."""
    node = nodes[-1]
    ssh_ok(testbed, node, "apt-mark unhold nvidia-smi")
    tmp = tmp_path_factory.mktemp("rehold")
    rc, report, _ = play(testbed, tmp, "nvidia_driver", DRIVER_VARS, limit=node)
    assert rc == 0, failures(report)
    assert changed_tasks(report, node) == ["Hold the driver packages at their version"]
    results = task_results(report, node)
    assert results["Change, install or hold the driver packages"].get("skipped") is not True
    held = ssh_ok(testbed, node, "dpkg-query --show --showformat='${db:Status-Want}' nvidia-smi")
    assert held == "hold"
    rc, again, _ = play(testbed, tmp, "nvidia_driver", DRIVER_VARS, limit=node)
    assert rc == 0, failures(again)
    assert changed_tasks(again, node) == []
    settled = task_results(again, node)
    assert "Change, install or hold the driver packages" not in settled
    assert settled[SETTLED_RECORD].get("skipped") is not True


def test_a_loaded_nouveau_is_recorded_as_a_pending_reboot(
    testbed: Any,
    converged: dict[str, Any],
    nodes: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The reboot steps run only when there is a reason. Here nouveau is loaded (a host root whose
    /proc/modules lists it) and reboots are not allowed: the node is marked reboot_pending with
    the reason and nothing reboots. The next normal run takes the mark away again."""
    node = nodes[0]
    fake = "/run/kubegpu-test-host-root"
    ssh_ok(
        testbed,
        node,
        f"mkdir -p {fake}/proc {fake}/sys/bus/pci/devices"
        f" && echo 'nouveau 2465792 0 - Live 0x0000000000000000' > {fake}/proc/modules",
    )
    tmp = tmp_path_factory.mktemp("nouveau")
    fact_path = "/etc/ansible/facts.d/kubegpu_driver.fact"
    try:
        variables = {**DRIVER_VARS, "__nvidia_driver_host_root": fake}
        rc, report, _ = play(testbed, tmp, "nvidia_driver", variables, limit=node)
        assert rc == 0, failures(report)
        results = task_results(report, node)
        assert results["Request a reboot to load the NVIDIA kernel module"]["skipped"]
        assert results["Note that the node needs a reboot"].get("skipped") is not True
        assert changed_tasks(report, node) == ["Record the driver in the local fact kubegpu_driver"]
        fact = json.loads(ssh_ok(testbed, node, f"cat {fact_path}"))
        assert (fact["reboot_pending"], fact["reboot_reasons"]) == (True, ["nouveau is loaded"])
    finally:
        ssh(testbed, node, f"rm -rf {fake}")
    rc, back, _ = play(testbed, tmp, "nvidia_driver", DRIVER_VARS, limit=node)
    assert rc == 0, failures(back)
    assert task_results(back, node)["Reboot, or say that the node needs a reboot"]["skipped"]
    fact = json.loads(ssh_ok(testbed, node, f"cat {fact_path}"))
    assert (fact["reboot_pending"], fact["reboot_reasons"]) == (False, [])


def test_nouveau_blacklisted_persistenced_enabled_and_fact_recorded(
    testbed: Any, converged: dict[str, Any], nodes: list[str]
) -> None:
    for node in nodes:
        blacklist = ssh(testbed, node, "cat /etc/modprobe.d/blacklist-nouveau.conf").stdout
        assert "blacklist nouveau\n" in blacklist and "options nouveau modeset=0\n" in blacklist
        assert ssh(testbed, node, "systemctl is-enabled nvidia-persistenced").stdout.strip() == (
            "enabled"
        )
        fact = json.loads(ssh(testbed, node, "cat /etc/ansible/facts.d/kubegpu_driver.fact").stdout)
        version = ssh(
            testbed, node, "dpkg-query --show --showformat='${Version}' nvidia-driver"
        ).stdout
        assert fact == {
            "branch": "535",
            "build": "dkms",
            "fabricmanager": False,
            "gpu_count": 0,
            "installed_version": version.split("-")[0],
            "kernel_module_type": "proprietary",
            "packages": ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "libcuda1"],
            "persistenced": True,
            "reboot_pending": False,
            "reboot_reasons": [],
            "source": "distribution",
        }


def test_nvidia_smi_reports_the_missing_kernel_module(
    testbed: Any, converged: dict[str, Any], nodes: list[str], fixtures_real: Path
) -> None:
    real = (fixtures_real / "nvidia-smi-errors" / "couldnt-communicate.txt").read_text()
    prefix = real.strip()[:70]
    for node in nodes:
        proc = ssh(testbed, node, "nvidia-smi")
        assert proc.returncode == 9
        assert (proc.stdout + proc.stderr).strip().startswith(prefix)


def test_version_pin_mismatch_fails_with_what_was_found(
    testbed: Any, converged: dict[str, Any], nodes: list[str], tmp_path: Path
) -> None:
    node = nodes[0]
    rc, report, _ = play(
        testbed,
        tmp_path,
        "nvidia_driver",
        {**DRIVER_VARS, "nvidia_driver_version": "535.54.03"},
        limit=node,
    )
    assert rc != 0
    message = failures(report)[node]
    assert "is installed, and the role is asked for 535.54.03" in message
    assert "nvidia_driver_allow_version_change" in message


def test_cuda_toolkit_check_mode_and_driver_compatibility(
    testbed: Any, converged: dict[str, Any], nodes: list[str], tmp_path: Path
) -> None:
    node = nodes[0]
    before = snapshot(testbed, node)
    rc, report, _ = play(
        testbed,
        tmp_path,
        "cuda_toolkit",
        {"cuda_toolkit_enabled": True, "cuda_toolkit_version": "11.8"},
        "--check",
        "--diff",
        limit=node,
    )
    assert rc == 0, failures(report)
    assert any("Install the CUDA toolkit" in name for name in changed_tasks(report, node))
    assert "nvidia-cuda-toolkit" not in installed(testbed, node)
    assert snapshot(testbed, node) == before
    # CUDA 13 needs a 580 driver; the node has 535 (from the local fact): refused before install.
    rc, report, _ = play(
        testbed,
        tmp_path,
        "cuda_toolkit",
        {
            "cuda_toolkit_enabled": True,
            "cuda_toolkit_version": "13.0",
            "cuda_toolkit_source": "cuda_repo",
            "cuda_toolkit_cuda_repo_key_checksum": "sha256:" + "0" * 64,
        },
        limit=node,
    )
    assert rc != 0
    message = failures(report)[node]
    assert "cuda_toolkit_version is '13.0'" in message
    assert "from the local fact kubegpu_driver" in message
    assert snapshot(testbed, node) == before


def _driver_site(testbed: Any, node: str) -> Any:
    """site.yml with the driver tag (preflight, which repairs an interrupted dpkg, then the
    driver role), as `kubegpu bootstrap --tags driver --limit NODE` runs it."""
    import kubegpu

    return kubegpu.bootstrap(
        [str(testbed.inventory), str(REPO / "inventories" / "testbed")],
        limit=node,
        tags=["driver"],
        extra_vars=DRIVER_VARS,
    )


def test_dpkg_killed_during_the_driver_install_is_repaired_by_the_next_run(
    testbed: Any, nodes: list[str]
) -> None:
    """dpkg SIGKILLed the moment it starts to configure the driver's packages (where DKMS
    would build the module: nvidia-kernel-dkms's postinst), as a power cut or an OOM kill
    leaves it. The next run repairs dpkg and converges; the run after changes nothing."""
    from tests.integration.test_faults import KILL_HOOK, KILL_HOOK_CFG, KILL_HOOK_SCRIPT

    # test_faults' one-shot hook, firing only in the dpkg run that configures the driver (the
    # role's first dpkg runs install its helpers and may upgrade a library).
    hook = KILL_HOOK_SCRIPT.replace(
        '[ "$DPKG_HOOK_ACTION" = configure ] || exit 0\n',
        '[ "$DPKG_HOOK_ACTION" = configure ] || exit 0\n'
        "dpkg-query -W -f='${Status}' nvidia-kernel-dkms 2>/dev/null | grep -q unpacked"
        " || exit 0\n",
    )
    assert hook != KILL_HOOK_SCRIPT
    node = nodes[0]
    # After the converge the driver is there: take it away, so that the next run installs it.
    driver = sorted(p for p in installed(testbed, node) if "nvidia" in p or p == "libcuda1")
    if driver:
        ssh_ok(
            testbed,
            node,
            f"apt-mark unhold {' '.join(driver)} >/dev/null && "
            f"apt-get purge -y -q {' '.join(driver)} >/dev/null",
        )
    ssh_ok(
        testbed,
        node,
        f"cat > {KILL_HOOK} <<'EOF'\n{hook}EOF\nchmod 0755 {KILL_HOOK} && "
        f"echo 'pre-invoke={KILL_HOOK}' > {KILL_HOOK_CFG}",
    )
    try:
        killed = _driver_site(testbed, node)
        assert not killed.ok
        assert ssh_ok(testbed, node, f"test ! -e {KILL_HOOK_CFG} && echo gone").strip() == "gone"
        audit = ssh_ok(testbed, node, "dpkg --audit || true")
        assert "nvidia" in audit, audit
        repaired = _driver_site(testbed, node)
        assert repaired.ok, [(f.task, f.message[-500:]) for f in repaired.failed]
    finally:
        ssh(testbed, node, f"rm -f {KILL_HOOK_CFG} {KILL_HOOK}")
    assert ssh_ok(testbed, node, "dpkg --audit") == ""
    assert "nvidia-driver" in installed(testbed, node)
    idle = _driver_site(testbed, node)
    assert idle.ok and idle.hosts[node].changed == 0, [(f.task, f.message) for f in idle.failed]
