"""Bad input stops a run on the controller before any host is contacted: kubegpu.gpu.check_inputs
in preflight's first play checks every layer's variables, node and cluster alike, one line per
problem naming the inventory variable, exit code 4.

The inventory's GPU nodes point at a loopback port where nothing listens: a run that contacted
one would report it unreachable (exit 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.plugin_utils import inputs

from tests.unit.test_nvidia_driver_roles import run_playbook

REPO = Path(__file__).resolve().parents[2]
KUBEGPU = Path(sys.executable).with_name("kubegpu")

NODE = {"ansible_host": "127.0.0.1", "ansible_port": 1}


def inventory(tmp_path: Path, **node2: object) -> Path:
    data = {
        "all": {"children": {"gpu_nodes": {"hosts": {"n1": dict(NODE), "n2": {**NODE, **node2}}}}}
    }
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(data))
    return path


# (what is given: extra vars, and node2's inventory variables), the line expected.
CASES = [
    (
        {"nvidia_driver_branch": "banana"},
        {},
        "nvidia_driver_branch is 'banana': a driver branch is three digits, quoted as a string,"
        " 450 or newer",
    ),
    (
        {"nvidia_driver_branch": "570", "nvidia_driver_version": "580.95.05"},
        {},
        "nvidia_driver_version is '580.95.05': it must be an exact driver version such as"
        ' "570.95.05" that belongs to nvidia_driver_branch',
    ),
    (
        {},
        {"cuda_toolkit_version": "12"},
        "cuda_toolkit_version is '12': it is a CUDA release as major.minor",
    ),
    (
        {"nvidia_container_toolkit_version": "1.16.2-1"},
        {},
        "nvidia_container_toolkit_version is '1.16.2-1': give the package version as the"
        " repository names it, 1.17 or newer",
    ),
    (
        {"nvidia_driver_kernel_module_type": "closed"},
        {},
        "value of nvidia_driver_kernel_module_type must be one of: auto, open, proprietary, got: closed",
    ),
    (
        {"nvidia_drivr_branch": "580"},
        {},
        "nvidia_drivr_branch: no role has such a variable (a misspelling?); did you mean"
        " nvidia_driver_branch?",
    ),
    (
        {"nvidia_driver_branchh": "580"},
        {},
        "nvidia_driver_branchh: role nvidia_driver has no such variable (a misspelling?); did you"
        " mean nvidia_driver_branch?",
    ),
    (
        {"gpu_cluster_sharing": "bogus"},
        {},
        "argument 'gpu_cluster_sharing' is of type str and we were unable to convert to dict",
    ),
    (
        {},
        {"kubelet_gpu_node_labels": {"kubernetes.io/bad": "x"}},
        "kubelet_gpu_node_labels: 'kubernetes.io/bad' is in the kubernetes.io namespace",
    ),
    (
        {},
        {"kubelet_gpu_node_taints": [{"key": "gpu", "effect": "Sometimes"}]},
        "kubelet_gpu_node_taints[0]",
    ),
    (
        {},
        {"cuda_toolkit_enabled": "perhaps"},
        "argument 'cuda_toolkit_enabled' is of type str and we were unable to convert to bool",
    ),
    (
        {},
        {"container_runtime_cgroup_driver": "systemd "},
        "container_runtime_cgroup_driver is 'systemd ': one of keep, systemd, cgroupfs",
    ),
    (
        {},
        {"container_runtime_restart": "sometimes"},
        "argument 'container_runtime_restart' is of type str and we were unable to convert to bool",
    ),
    (
        # The device plugin refuses fewer than 2 replicas; gpu_manifests' own check, made on
        # the controller before any node changes.
        {"gpu_cluster_sharing": {"strategy": "time-slicing", "replicas": 1}},
        {},
        "gpu_cluster_sharing.replicas: 1 is not allowed; allowed: an integer of 2 or more",
    ),
    (
        {"gpu_tenancy_tenants": "vision"},
        {},
        "Elements value for option 'gpu_tenancy_tenants' is of type str and we were unable to"
        " convert to dict",
    ),
    (
        # A line break in a module parameter's name would add a line to /etc/modprobe.d.
        {"nvidia_driver_module_parameters": {"nvidia": {"NVreg_X\ninstall nvidia /bin/sh": 1}}},
        {},
        "nvidia_driver_module_parameters: nvidia.'NVreg_X\\ninstall nvidia /bin/sh' (not a"
        " parameter name)",
    ),
    ({"nvidia_driver_branch": "580\n"}, {}, "nvidia_driver_branch is '580\\n': a driver branch"),
    (
        {"kubelet_gpu_settings": {"max_pods": 10}},
        {},
        "kubelet_gpu_settings: 'max_pods' is not a KubeletConfiguration field name",
    ),
]


@pytest.mark.parametrize(("extra", "node2", "expected"), CASES)
def test_bad_input_is_one_line_exit_4_and_no_host_is_contacted(
    tmp_path: Path, extra: dict[str, object], node2: dict[str, object], expected: str
) -> None:
    argv = [str(KUBEGPU), "bootstrap", "-i", str(inventory(tmp_path, **node2)), "--json"]
    for name, value in extra.items():
        # The CLI reads a value as YAML: JSON keeps a string a string ("570", not 570).
        argv += ["-e", f"{name}={json.dumps(value)}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)
    problems = result["input_problems"]
    assert len(problems) == 1, problems
    assert expected in problems[0]
    # Only the controller ran anything; neither node was contacted.
    assert set(result["hosts"]) == {"localhost"}
    assert result["unreachable"] == []
    if node2:
        assert problems[0].endswith("(hosts: n2)")


def test_the_cli_prints_each_problem_on_its_own_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            str(KUBEGPU),
            "bootstrap",
            "-i",
            str(inventory(tmp_path)),
            "--quiet",
            "-e",
            "nvidia_driver_kernel_module_type=closed",
            "-e",
            "nvidia_drivr_branch=580",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 4
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr
    assert all(line.startswith("kubegpu: error: ") for line in lines)
    assert done.stdout == ""


def test_good_input_passes_the_controller_check() -> None:
    roles = REPO / "roles"
    for role, given in (
        ("nvidia_driver", {"nvidia_driver_branch": "580", "nvidia_driver_version": "580.95.05"}),
        ("cuda_toolkit", {"cuda_toolkit_version": "12.8"}),
        ("nvidia_container_toolkit", {"nvidia_container_toolkit_version": "1.18.*"}),
        ("container_runtime", {"container_runtime_cgroup_driver": "systemd"}),
        ("gpu_cluster", {}),
        ("gpu_cluster", {"gpu_cluster_sharing": {"strategy": "time-slicing", "replicas": 4}}),
    ):
        options, rules = inputs.load_options(roles, role), inputs.load_rules(roles, role)
        assert inputs.role_problems(role, options, given, rules) == [], role


def test_a_problem_of_every_node_names_no_host() -> None:
    assert inputs.merge({"a": ["x", "y"], "b": ["x"]}) == ["x", "y (hosts: a)"]


def test_every_role_checked_has_argument_specs() -> None:
    for role in inputs.NODE_ROLES + inputs.CLUSTER_ROLES:
        assert inputs.load_options(REPO / "roles", role)


def test_the_node_play_checks_every_node_once_before_any_role(tmp_path: Path) -> None:
    """playbooks/nodes.yml on its own (the roles imported without ansible-core's per-role,
    per-host argument-spec tasks): one check_inputs task for all nodes after gathering, and a
    bad value on one node stops every node before any role's task."""
    rc, report, stderr = run_playbook(
        tmp_path,
        [{"ansible.builtin.import_playbook": str(REPO / "playbooks" / "nodes.yml")}],
        {"n1": {}, "n2": {"cuda_toolkit_enabled": "perhaps"}},
        group="gpu_nodes",
    )
    assert rc == 2, stderr[-2000:]
    tasks = [
        task
        for play in report["plays"]
        for task in play["tasks"]
        if task["task"]["name"] != "Gathering Facts"
    ]
    assert [task["task"]["name"] for task in tasks] == [
        "Check the variables of every node layer against the roles' argument specs",
        "Stop before any node changes when a variable is wrong",
    ]
    checked, stopped = tasks
    assert list(checked["hosts"]) == ["n1"]  # once, for every node
    [problem] = checked["hosts"]["n1"]["problems"]
    assert problem.startswith(
        "argument 'cuda_toolkit_enabled' is of type str and we were unable to convert to bool"
    )
    assert problem.endswith("(hosts: n2)")
    assert stopped["hosts"]["n1"]["failed"] is True
    assert "cuda_toolkit_enabled" in stopped["hosts"]["n1"]["msg"]
    # A failed run_once task stops every node of the play: n2 ran nothing after gathering.
    assert report["stats"]["n1"]["failures"] == 1
    assert report["stats"]["n2"]["ok"] == 1
    assert report["stats"]["n2"]["changed"] == 0


def test_a_limit_without_localhost_is_named_and_the_offline_check_still_runs(
    tmp_path: Path,
) -> None:
    """Plain ansible-playbook with --limit n1 leaves out the controller's plays. The node play's
    check says so, and with kubegpu_offline asks the mirrors itself (here a loopback port where
    nothing listens), so an air-gapped run stops before any role's task."""
    closed = f"127.0.0.1:{NODE['ansible_port']}"
    # Every registry a role pulls from points at the closed port, so that nothing leaves it.
    registries = {
        name: closed
        for defaults in REPO.glob("roles/*/defaults/main.yml")
        for name in yaml.safe_load(defaults.read_text()) or {}
        if name.endswith("_image_registry")
    }
    assert len(registries) >= 3, registries
    offline = {
        "kubegpu_offline": True,
        **registries,
        "kubegpu_artifacts_plain_http_registries": [closed],
        "nvidia_container_toolkit_repo_url": f"http://{closed}/apt",
    }
    play = [{"ansible.builtin.import_playbook": str(REPO / "playbooks" / "nodes.yml")}]
    for variables, rc in (({}, 0), (offline, 2)):
        hosts = {"n1": dict(variables), "n2": dict(variables)}
        done = run_playbook(
            tmp_path, play, hosts, "--limit", "n1", "--tags", "none", group="gpu_nodes"
        )
        assert done[0] == rc, done[2][-2000:]
        checked = done[1]["plays"][0]["tasks"][1]["hosts"]["n1"]
        [warning] = checked["warnings"]
        assert warning.startswith("--limit n1 leaves out localhost: the controller's plays")
        missing = [p for p in checked["problems"] if p.startswith("missing image ")]
        assert bool(missing) == bool(variables), checked["problems"]
        # Every image is asked of the loopback mirror, and nothing else is asked.
        assert all(closed in p for p in missing), missing
