"""Role kubelet_gpu on a testbed node: real files, real SSH, real apt, real systemd.

The node has no kubelet (none can be installed here), which is itself a case the role handles:
the version comes from kubelet_gpu_kubernetes_version and the restart handler reports that
there is no unit to restart. Realistic kubelet files are put in place first: a kubeadm
KubeletConfiguration and /etc/default/kubelet with other flags, and a k3s config.yaml with
other keys. After converging, every file holds our settings and all the old ones, and a second
run reports changed=0. Bad inputs fail in the first task, before the host changes.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")

# A kubelet configuration of the shape kubeadm writes at join time, the extra-args file an
# operator keeps beside it, and a k3s agent's configuration (tests/data/kubelet).
KUBELET_DATA = Path(__file__).resolve().parents[1] / "data" / "kubelet"
KUBEADM_CONFIG = (KUBELET_DATA / "kubeadm-config.yaml").read_text()
DEFAULT_KUBELET = (KUBELET_DATA / "default-kubelet").read_text()
K3S_CONFIG = (KUBELET_DATA / "k3s-config.yaml").read_text()

FILES = {
    "/var/lib/kubelet/config.yaml": KUBEADM_CONFIG,
    "/etc/default/kubelet": DEFAULT_KUBELET,
    "/etc/rancher/k3s/config.yaml": K3S_CONFIG,
}

SETUP = """\
- name: Put realistic kubelet files on the node
  hosts: "{node}"
  gather_facts: false
  tasks:
    - name: Create the directories of the kubelet files
      ansible.builtin.file:
        path: "{{{{ item | dirname }}}}"
        state: directory
        owner: root
        group: root
        mode: "0755"
      loop: "{{{{ files.keys() | list }}}}"
    - name: Write the file {{{{ item.key }}}}
      ansible.builtin.copy:
        dest: "{{{{ item.key }}}}"
        content: "{{{{ item.value }}}}"
        owner: root
        group: root
        mode: "0644"
      loop: "{{{{ files | dict2items }}}}"
"""

CONVERGE = """\
- name: Apply the kubelet_gpu role for the kubeadm and the k3s layouts
  hosts: "{node}"
  gather_facts: true
  tasks:
    - name: Apply kubelet_gpu to the kubeadm layout
      ansible.builtin.include_role:
        name: kubegpu.gpu.kubelet_gpu
      vars:
        kubelet_gpu_flavor: kubeadm
        kubelet_gpu_settings:
          maxPods: 200
          evictionHard:
            memory.available: "5%"
    - name: Run the restart handler for the kubeadm layout before the next one
      ansible.builtin.meta: flush_handlers
    - name: Apply kubelet_gpu to the k3s layout
      ansible.builtin.include_role:
        name: kubegpu.gpu.kubelet_gpu
      vars:
        kubelet_gpu_flavor: k3s
"""

CLEANUP = """\
- name: Remove what the kubelet_gpu test left on the node
  hosts: "{node}"
  gather_facts: false
  tasks:
    - name: Find the files and backups the test made
      ansible.builtin.find:
        paths: [/var/lib/kubelet, /etc/default, /etc/rancher/k3s]
        patterns: ["config.yaml*", "kubelet*"]
      register: found
    - name: Remove them
      ansible.builtin.file:
        path: "{{{{ item.path }}}}"
        state: absent
      loop: "{{{{ found.files }}}}"
    - name: Remove the directories the test created, and kubelet_config's record
      ansible.builtin.file:
        path: "{{{{ item }}}}"
        state: absent
      loop: [/etc/rancher, /var/lib/kubelet, /etc/ansible/facts.d/kubegpu_kubelet.fact]
"""

EDIT = """\
- name: Change the kubelet files as another tool or an admin would, after kubegpu
  hosts: "{node}"
  gather_facts: false
  tasks:
    - name: Change one of kubegpu's settings and add one of their own
      ansible.builtin.shell: |
        set -e
        sed -i 's/^maxPods: 200$/maxPods: 110/' /var/lib/kubelet/config.yaml
        echo 'serializeImagePulls: false' >> /var/lib/kubelet/config.yaml
        sed -i 's/--max-pods 180/--max-pods 180 --v=4/' /etc/default/kubelet
        sed -i 's/- max-pods=180/- max-pods=180\\n- v=4/' /etc/rancher/k3s/config.yaml
      changed_when: true
"""

GOOD_VARS = {
    "kubelet_gpu_kubernetes_version": "1.35",
    "kubelet_gpu_feature_gates": {"KubeletPodResourcesGet": True},
    "kubelet_gpu_node_labels": {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "Tesla-T4",
    },
    "kubelet_gpu_node_taints": [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ],
}


def _env(repo_root: Path) -> dict:
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(repo_root / "ansible.cfg"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_DEPRECATION_WARNINGS="0",
    )


def _node(inventory: Path) -> str:
    data = yaml.safe_load(inventory.read_text())
    hosts = data["all"]["children"]["k8s_cluster"]["children"]["gpu_nodes"]["hosts"]
    return sorted(hosts)[0]


def _inventory(testbed) -> Path:
    return Path(getattr(testbed, "inventory", None) or testbed.inventory_path)


def play(
    repo_root: Path, inventory: Path, tmp_path: Path, text: str, extra_vars: dict, *flags: str
) -> dict:
    path = tmp_path / f"play-{len(list(tmp_path.glob('play-*')))}.yml"
    path.write_text(text)
    return run_playbook(repo_root, inventory, tmp_path, path, extra_vars, *flags)


def run_playbook(
    repo_root: Path, inventory: Path, tmp_path: Path, path: Path, extra_vars: dict, *flags: str
) -> dict:
    """ansible-playbook PATH with extra_vars (written to a file in tmp_path): its JSON report,
    with its exit code as "rc"."""
    vars_file = tmp_path / f"vars-{len(list(tmp_path.glob('vars-*')))}.json"
    vars_file.write_text(json.dumps(extra_vars))
    proc = subprocess.run(
        [PLAYBOOK, "-i", str(inventory), str(path), "-e", f"@{vars_file}", *flags],
        cwd=repo_root,
        env=_env(repo_root),
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"ansible-playbook printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    report["rc"] = proc.returncode
    return report


READ = """\
- name: Read the kubelet files back
  hosts: "{node}"
  gather_facts: false
  tasks:
    - name: Read {{{{ item }}}}
      ansible.builtin.slurp:
        src: "{{{{ item }}}}"
      loop: "{{{{ paths }}}}"
      failed_when: false
"""


def read_files(
    repo_root: Path, inventory: Path, tmp_path: Path, node: str, paths: list[str]
) -> dict:
    """The files' contents on the node (None when absent), read in one ansible run."""
    report = play(repo_root, inventory, tmp_path, READ.format(node=node), {"paths": paths})
    results = report["plays"][0]["tasks"][0]["hosts"][node]["results"]
    return {
        r["item"]: base64.b64decode(r["content"]).decode() if "content" in r else None
        for r in results
    }


def problem_tasks(report: dict) -> str:
    """The tasks that failed or found a host unreachable, for an assertion message."""
    return json.dumps(
        [
            (task["task"]["name"], task["hosts"])
            for p in report["plays"]
            for task in p["tasks"]
            if any(h.get("unreachable") or h.get("failed") for h in task["hosts"].values())
        ]
    )[-4000:]


def task_results(report: dict, node: str, name_part: str) -> list[dict]:
    return [
        task["hosts"][node]
        for p in report["plays"]
        for task in p["tasks"]
        if name_part in task["task"]["name"] and node in task["hosts"]
    ]


def merges(report: dict, node: str) -> list[dict]:
    """The kubelet_config results that read the files, in play order: the role's first call, or
    its second when the first found no PyYAML (the role installed it in between)."""
    return [
        r
        for r in task_results(report, node, "")
        if r.get("action") == "kubegpu.gpu.kubelet_config" and r.get("python_yaml") is True
    ]


@contextlib.contextmanager
def put_on_node(
    repo_root: Path, inventory: Path, tmp_path: Path, node: str, setup: str, cleanup: str, **values
) -> Iterator[None]:
    """Run the setup play on the node, then, whatever happens, the cleanup play."""
    report = play(repo_root, inventory, tmp_path, setup.format(node=node), values)
    try:
        assert report["rc"] == 0, problem_tasks(report)
        yield
    finally:
        play(repo_root, inventory, tmp_path, cleanup.format(node=node), {})


@pytest.fixture
def node_files(testbed, repo_root: Path, tmp_path: Path):
    inventory = _inventory(testbed)
    node = _node(inventory)
    with put_on_node(repo_root, inventory, tmp_path, node, SETUP, CLEANUP, files=FILES):
        yield inventory, node


def test_converge_keeps_old_settings_and_is_idempotent(
    node_files, repo_root: Path, tmp_path: Path
) -> None:
    inventory, node = node_files
    first = play(repo_root, inventory, tmp_path, CONVERGE.format(node=node), GOOD_VARS)
    assert first["rc"] == 0, problem_tasks(first)
    assert first["stats"][node]["failures"] == 0
    merged = merges(first, node)
    assert [r["changed"] for r in merged] == [True, True]
    assert merged[0]["files"] == ["/var/lib/kubelet/config.yaml", "/etc/default/kubelet"]
    assert merged[1]["files"] == ["/etc/rancher/k3s/config.yaml"]
    assert all(r["kubelet_found"] is False for r in merged)
    # No kubelet unit on the node: the handler says so instead of restarting.
    reports = [r["msg"] for r in task_results(first, node, "could not be restarted")]
    assert len(reports) == 2
    assert "has no kubelet.service unit to restart" in reports[0]
    assert "has no k3s.service or k3s-agent.service unit to restart" in reports[1]

    files = read_files(repo_root, inventory, tmp_path, node, list(FILES))
    kubelet_config = yaml.safe_load(files["/var/lib/kubelet/config.yaml"])
    expected = yaml.safe_load(KUBEADM_CONFIG)
    expected["featureGates"]["KubeletPodResourcesGet"] = True
    expected["evictionHard"]["memory.available"] = "5%"
    expected["maxPods"] = 200
    assert kubelet_config == expected

    extra = files["/etc/default/kubelet"].splitlines(True)
    assert extra[:2] == DEFAULT_KUBELET.splitlines(True)[:2]
    assert extra[2] == (
        'KUBELET_EXTRA_ARGS="--node-ip=10.20.0.15 --node-labels=team=ml,nvidia.com/gpu.present=true,'
        "nvidia.com/gpu.product=Tesla-T4 --max-pods 180 "
        '--register-with-taints=nvidia.com/gpu=present:NoSchedule"\n'
    )

    assert yaml.safe_load(files["/etc/rancher/k3s/config.yaml"]) == {
        "server": "https://10.20.0.2:6443",
        "token-file": "/etc/rancher/k3s/token",
        "node-label": ["team=ml", "nvidia.com/gpu.present=true", "nvidia.com/gpu.product=Tesla-T4"],
        "kubelet-arg": ["max-pods=180", "feature-gates=KubeletPodResourcesGet=true"],
        "node-taint": ["nvidia.com/gpu=present:NoSchedule"],
    }

    second = play(repo_root, inventory, tmp_path, CONVERGE.format(node=node), GOOD_VARS)
    assert second["rc"] == 0, problem_tasks(second)
    assert second["stats"][node]["changed"] == 0
    assert read_files(repo_root, inventory, tmp_path, node, list(FILES)) == files

    # Back to the original files: --check --diff shows the same changes and makes none.
    reset = play(repo_root, inventory, tmp_path, SETUP.format(node=node), {"files": FILES})
    assert reset["rc"] == 0
    check = play(
        repo_root, inventory, tmp_path, CONVERGE.format(node=node), GOOD_VARS, "--check", "--diff"
    )
    assert check["rc"] == 0, problem_tasks(check)
    planned = merges(check, node)
    assert [r["files"] for r in planned] == [r["files"] for r in merged]
    assert [d["after"] for r in planned for d in r["diff"]] == [
        files[path] for r in merged for path in r["files"]
    ]
    assert read_files(repo_root, inventory, tmp_path, node, list(FILES)) == FILES


def test_bad_inputs_fail_before_the_host_changes(
    node_files, repo_root: Path, tmp_path: Path
) -> None:
    inventory, node = node_files
    bad = dict(
        GOOD_VARS,
        kubelet_gpu_feature_gates={"DevicePlugins": True},
        kubelet_gpu_node_labels={
            "alpha.kubernetes.io/nvidia-gpu-name": "Tesla-K80",
            "nvidia.com/gpu.product": "Tesla K80",
        },
        kubelet_gpu_node_taints=[{"key": "nvidia.com/gpu", "effect": "NoScheduel"}],
    )
    report = play(repo_root, inventory, tmp_path, CONVERGE.format(node=node), bad)
    assert report["rc"] != 0
    assert report["stats"][node]["changed"] == 0
    failed = [
        r for r in task_results(report, node, "Check kubelet feature gates") if r.get("failed")
    ]
    assert len(failed) == 1
    assert failed[0]["problems"] == [
        "node_labels: 'alpha.kubernetes.io/nvidia-gpu-name' is in the kubernetes.io namespace, where "
        "a kubelet may not label its own node (NodeRestriction): the kubelet refuses to start with "
        "it. In the kubernetes.io and k8s.io namespaces a kubelet may only set keys under "
        "kubelet.kubernetes.io/ or node.kubernetes.io/ (or their subdomains) and "
        "beta.kubernetes.io/arch, beta.kubernetes.io/instance-type, beta.kubernetes.io/os, "
        "failure-domain.beta.kubernetes.io/region, failure-domain.beta.kubernetes.io/zone, "
        "kubernetes.io/arch, kubernetes.io/hostname, kubernetes.io/os, "
        "node.kubernetes.io/instance-type, topology.kubernetes.io/region, "
        "topology.kubernetes.io/zone. Use a prefix of your own (for example nvidia.com/ or "
        "example.com/), or set the label through the API (role gpu_cluster).",
        "node_labels: the value of 'nvidia.com/gpu.product' is 'Tesla K80', which is not a valid "
        "label value: it must be empty or 63 characters or fewer, start and end with a letter or "
        "digit, and contain only letters, digits, '-', '_' and '.'; for example 'Tesla-K80'",
        "node_taints[0]: effect 'NoScheduel' is not one of NoSchedule, PreferNoSchedule, NoExecute",
        "feature_gates: 'DevicePlugins' was removed from Kubernetes in 1.28; the kubelet of 1.35 "
        "does not have it and would refuse to start. Remove it.",
    ]
    assert read_files(repo_root, inventory, tmp_path, node, list(FILES)) == FILES


# A stand-in for the k3s agent (the real one cannot run here): a unit named as k3s's agent that
# only sleeps. k3s's first candidate, k3s.service, stays absent, so the handler must pick the
# second one the node has.
STAND_IN_UNIT = """\
[Unit]
Description=Stand-in for the k3s agent (kubegpu test double: sleeps)

[Service]
ExecStart=/bin/sleep infinity
"""

UNIT_SETUP = """\
- name: Put a stand-in k3s agent unit on the node, started
  hosts: "{node}"
  gather_facts: false
  tasks:
    - name: Write the unit
      ansible.builtin.copy:
        dest: /etc/systemd/system/k3s-agent.service
        content: "{{{{ unit }}}}"
        mode: "0644"
    - name: Start it
      ansible.builtin.systemd_service:
        name: k3s-agent.service
        state: started
        daemon_reload: true
"""

UNIT_CLEANUP = """\
- name: Remove the stand-in k3s agent unit
  hosts: "{node}"
  gather_facts: false
  tasks:
    - name: Stop it
      ansible.builtin.systemd_service:
        name: k3s-agent.service
        state: stopped
      failed_when: false
    - name: Remove its file
      ansible.builtin.file:
        path: /etc/systemd/system/k3s-agent.service
        state: absent
    - name: Reload systemd
      ansible.builtin.systemd_service:
        daemon_reload: true
"""

UNIT_READ = """\
- name: Read the stand-in unit's state
  hosts: "{node}"
  gather_facts: false
  tasks:
    - name: Show its properties
      ansible.builtin.command: systemctl show --property=ActiveState,MainPID k3s-agent.service
      changed_when: false
"""


def unit_state(repo_root: Path, inventory: Path, tmp_path: Path, node: str) -> dict:
    report = play(repo_root, inventory, tmp_path, UNIT_READ.format(node=node), {})
    out = report["plays"][0]["tasks"][0]["hosts"][node]["stdout"]
    return dict(line.split("=", 1) for line in out.splitlines())


@pytest.fixture
def stand_in_unit(node_files, repo_root: Path, tmp_path: Path):
    inventory, node = node_files
    with put_on_node(
        repo_root, inventory, tmp_path, node, UNIT_SETUP, UNIT_CLEANUP, unit=STAND_IN_UNIT
    ):
        yield inventory, node


def test_the_handler_restarts_the_unit_the_node_has(
    stand_in_unit, repo_root: Path, tmp_path: Path
) -> None:
    inventory, node = stand_in_unit
    before = unit_state(repo_root, inventory, tmp_path, node)
    assert before["ActiveState"] == "active"
    first = play(repo_root, inventory, tmp_path, CONVERGE.format(node=node), GOOD_VARS)
    assert first["rc"] == 0, problem_tasks(first)
    # kubeadm's kubelet.service is absent: reported. k3s's second candidate is there: restarted.
    reports = [
        r["msg"]
        for r in task_results(first, node, "could not be restarted")
        if not r.get("skipped")
    ]
    assert len(reports) == 1 and "has no kubelet.service unit to restart" in reports[0]
    restarts = [
        r for r in task_results(first, node, "Restart the kubelet's unit") if not r.get("skipped")
    ]
    assert [(r["name"], r["changed"]) for r in restarts] == [("k3s-agent.service", True)]
    after = unit_state(repo_root, inventory, tmp_path, node)
    assert after["ActiveState"] == "active" and after["MainPID"] != before["MainPID"]
    second = play(repo_root, inventory, tmp_path, CONVERGE.format(node=node), GOOD_VARS)
    assert second["rc"] == 0 and second["stats"][node]["changed"] == 0
    assert unit_state(repo_root, inventory, tmp_path, node)["MainPID"] == after["MainPID"]
    # The reset's undo restarts the same unit: the kubelet of k3s, not a kubelet.service.
    reset = _reset(repo_root, inventory, tmp_path, node)
    assert reset["rc"] == 0, problem_tasks(reset)
    (restarted,) = task_results(reset, node, "Restart the kubelet after the reset")
    assert [(r["item"], r["changed"]) for r in restarted["results"]] == [("k3s-agent", True)]
    assert unit_state(repo_root, inventory, tmp_path, node)["MainPID"] != after["MainPID"]


def test_reset_undoes_only_kubegpus_part_and_keeps_later_edits(
    node_files, repo_root: Path, tmp_path: Path
) -> None:
    """reset.yml --tags kubelet after a converge and someone's later edits: each gate, setting,
    label, taint and flag kubegpu set goes back to its value before, a setting someone changed
    since keeps their value (named in a warning), their own additions stay; a second reset
    changes nothing. The *.~ backups are not used."""
    inventory, node = node_files
    first = play(repo_root, inventory, tmp_path, CONVERGE.format(node=node), GOOD_VARS)
    assert first["rc"] == 0, problem_tasks(first)
    edited = play(repo_root, inventory, tmp_path, EDIT.format(node=node), {})
    assert edited["rc"] == 0, problem_tasks(edited)
    reset = _reset(repo_root, inventory, tmp_path, node)
    assert reset["rc"] == 0, problem_tasks(reset)
    (undone,) = task_results(reset, node, "Undo, entry by entry")
    assert undone["changed"] is True
    assert undone["kept"] == ["/var/lib/kubelet/config.yaml: maxPods"]
    assert sorted(undone["files"]) == sorted(FILES)

    files = read_files(repo_root, inventory, tmp_path, node, list(FILES))
    expected = yaml.safe_load(KUBEADM_CONFIG)
    expected.update(maxPods=110, serializeImagePulls=False)
    assert yaml.safe_load(files["/var/lib/kubelet/config.yaml"]) == expected
    assert files["/etc/default/kubelet"] == DEFAULT_KUBELET.replace(
        "--max-pods 180", "--max-pods 180 --v=4"
    )
    k3s = yaml.safe_load(K3S_CONFIG)
    k3s["kubelet-arg"] = [*k3s["kubelet-arg"], "v=4"]
    assert yaml.safe_load(files["/etc/rancher/k3s/config.yaml"]) == k3s

    again = _reset(repo_root, inventory, tmp_path, node)
    assert again["rc"] == 0, problem_tasks(again)
    (second,) = task_results(again, node, "Undo, entry by entry")
    assert second["changed"] is False and "no record" in second["msg"]
    assert read_files(repo_root, inventory, tmp_path, node, list(FILES)) == files


def _reset(repo_root: Path, inventory: Path, tmp_path: Path, node: str) -> dict:
    """playbooks/reset.yml, its kubelet layer only, on one node."""
    return run_playbook(
        repo_root,
        inventory,
        tmp_path,
        repo_root / "playbooks/reset.yml",
        {"kubegpu_reset_confirm": True},
        "--tags",
        "kubelet",
        "--limit",
        node,
    )
