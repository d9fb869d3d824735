"""The piped reads (kubegpu.gpu.read_script, the fact actions, and the containerd_runtime and
kubelet_config answers) over SSH with become, as an operator connects: a user with sudo, not
root.

On a testbed node, a user with passwordless sudo is made for the test (and removed after it).
Through that user, `become` must run the script as root (sudo wraps the piped sh as it wraps a
pipelined module); without become, as the user. nvidia_pci_facts must return over sudo, with no
Python on the node, the facts the module returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration import ansible_json
from tests.unit.test_piped_facts import comparable

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
USER = "kgpiped"


def _ansible(testbed: Any, *args: str) -> tuple[int, dict[str, Any]]:
    rc, report = ansible_json.run(
        "ansible", ["-i", str(testbed.inventory), testbed.node_names[0], *args]
    )
    result: dict[str, Any] = report["plays"][0]["tasks"][0]["hosts"][testbed.node_names[0]]
    return rc, result


@pytest.fixture(scope="module")
def sudo_user(testbed: Any) -> Iterator[str]:
    setup = (
        f"id {USER} >/dev/null 2>&1 || useradd -m -s /bin/sh {USER}; "
        f"install -d -o {USER} -m 0700 /home/{USER}/.ssh; "
        f"install -o {USER} -m 0600 /root/.ssh/authorized_keys /home/{USER}/.ssh/; "
        f"echo '{USER} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/{USER}; "
        f"chmod 0440 /etc/sudoers.d/{USER}"
    )
    rc, result = _ansible(testbed, "-m", "ansible.builtin.raw", "-a", setup)
    assert rc == 0, result
    try:
        yield USER
    finally:
        _ansible(
            testbed,
            "-m",
            "ansible.builtin.raw",
            "-a",
            f"rm -f /etc/sudoers.d/{USER}; userdel -r {USER}",
        )


def test_become_runs_the_piped_script_as_root(testbed: Any, sudo_user: str) -> None:
    script = {
        "script": 'id -un; printf "%s\\n" "$1"; cat /etc/sudoers.d/"$2"',
        "argv": ["a b", sudo_user],
    }
    as_user = ("-e", f"ansible_user={sudo_user}", "-m", "kubegpu.gpu.read_script")
    rc, result = _ansible(testbed, *as_user, "-b", "-a", json.dumps(script))
    assert rc == 0, result
    assert result["stdout_lines"] == ["root", "a b", f"{sudo_user} ALL=(ALL) NOPASSWD: ALL"]
    # Without become the script runs as the user, who may not read sudoers.
    rc, result = _ansible(testbed, *as_user, "-a", json.dumps(script))
    assert rc != 0
    assert result["stdout_lines"] == [sudo_user, "a b"]
    assert "Permission denied" in result["stderr"]


def test_pci_facts_over_sudo_without_python_equal_the_module(testbed: Any, sudo_user: str) -> None:
    args = json.dumps(
        {
            "kernel_module_type": "auto",
            "branch": "580",
            "file_states": [f"/etc/sudoers.d/{sudo_user}"],
        }
    )
    common = (
        "-e",
        f"ansible_user={sudo_user}",
        "-b",
        "-m",
        "kubegpu.gpu.nvidia_pci_facts",
        "-a",
        args,
    )
    rc, piped = _ansible(testbed, *common, "-e", "ansible_python_interpreter=/nonexistent/python3")
    assert rc == 0, piped
    rc, module = _ansible(testbed, *common, "-e", "ansible_pipelining=false")
    assert rc == 0, module
    assert piped["ansible_facts"] == module["ansible_facts"]
    assert piped["file_states"] == module["file_states"]
    state = piped["file_states"][f"/etc/sudoers.d/{sudo_user}"]
    assert (state["type"], state["mode"], state["uid"]) == ("file", "0440", 0)


def _both_ways_over_sudo(
    testbed: Any, user: str, module: str, args: dict[str, Any], piped_python: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One module run that merges (the first converge), then the piped run and the module run
    that must both find nothing to change, through the user with become."""
    common = ("-e", f"ansible_user={user}", "-b", "-m", module, "-a", json.dumps(args))
    rc, first = _ansible(testbed, *common, "-e", "ansible_pipelining=false")
    assert rc == 0 and first["changed"], first
    no_python = ("-e", f"ansible_python_interpreter={piped_python}") if piped_python else ()
    rc, piped = _ansible(testbed, *common, *no_python)
    assert rc == 0, piped
    rc, by_module = _ansible(testbed, *common, "-e", "ansible_pipelining=false")
    assert rc == 0, by_module
    assert piped["changed"] is False and by_module["changed"] is False
    return piped, by_module


def test_containerd_and_kubelet_answers_over_sudo_equal_the_module(
    testbed: Any, sudo_user: str
) -> None:
    """containerd_runtime (its two scripts, the second writing a scratch folder on the node)
    and kubelet_config answer a run with nothing to change over sudo as their modules do. The
    files are under a folder of the node's /tmp, removed after, with a copy of this machine's
    containerd (Debian 12's, as the node's) there: the test does not depend on whether an earlier
    test installed containerd on the node."""
    folder = "/tmp/kgpiped-runtime"
    containerd = {
        "config_path": f"{folder}/containerd/config.toml",
        "drop_in_dir": f"{folder}/containerd/conf.d",
        "record_path": f"{folder}/containerd/record.fact",
        "containerd_binary": f"{folder}/bin/containerd",
        "validate": False,  # the module's validation is tested elsewhere; it needs ctr too
    }
    kubelet = {
        "flavor": "kubeadm",
        "kubelet_version": "1.35",
        "config_path": f"{folder}/kubelet/config.yaml",
        "extra_args_path": f"{folder}/kubelet/kubelet",
        "feature_gates": {"KubeletPodResourcesGet": True},
        "node_labels": {"nvidia.com/gpu.present": "true"},
    }
    try:
        copy = {
            "src": "/usr/bin/containerd",
            "dest": containerd["containerd_binary"],
            "mode": "0755",
        }
        _ansible(testbed, "-m", "ansible.builtin.raw", "-a", f"mkdir -p {folder}/bin")
        rc, copied = _ansible(testbed, "-m", "ansible.builtin.copy", "-a", json.dumps(copy))
        assert rc == 0, copied
        # containerd_runtime's piped run must not need the node's Python at all.
        piped, module = _both_ways_over_sudo(
            testbed, sudo_user, "kubegpu.gpu.containerd_runtime", containerd, "/nonexistent/py"
        )
        assert comparable(piped) == comparable(module)
        # kubelet_config's script asks the node's Python whether it has PyYAML (no module);
        # the module needs it to merge, so a node without it (a fresh testbed) gets it first.
        has_yaml = (
            "python3 -c 'import yaml' 2>/dev/null"
            " || { apt-get update -q && apt-get install -y -q python3-yaml; }"
        )
        rc, installed = _ansible(testbed, "-m", "ansible.builtin.raw", "-a", has_yaml)
        assert rc == 0, installed
        piped, module = _both_ways_over_sudo(
            testbed, sudo_user, "kubegpu.gpu.kubelet_config", kubelet, None
        )
        assert comparable(piped) == comparable(module)
        assert piped["python_yaml"] is True
    finally:
        _ansible(testbed, "-m", "ansible.builtin.raw", "-a", f"rm -rf {folder}")
