"""kubegpu.accel.linear opens the hosts' SSH masters while a play's first tasks run on the
controller (plugin_utils/preconnect.py), on real testbed nodes over ansible's ssh plugin.

Each play gets a control path folder of its own, so that no master of an earlier command is
found. A play of controller-only tasks leaves one master per host behind (it never connects
otherwise); with KUBEGPU_PRECONNECT=0 it leaves none. A host that cannot be reached (a port
nothing listens on) still fails at its first remote task with ansible's own unreachable
result, and the play ends as it would without the pre-connection."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration import ansible_json

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]


def _run(
    testbed: Any, tmp_path: Path, tasks: list[dict[str, Any]], extra_env: dict[str, str]
) -> tuple[int, dict[str, Any], list[str]]:
    """Run the tasks on the first two nodes and on `closed`; return the exit code, the JSON
    report and the names of the master sockets the run left behind."""
    first, second = testbed.node_names[:2]
    # The second node once more, under another name, on a port nothing listens on.
    closed = {"all": {"hosts": {"closed": {"ansible_host": "", "ansible_port": 9}}}}
    inventory = yaml.safe_load(Path(testbed.inventory).read_text())
    for group in inventory["all"]["children"]["k8s_cluster"]["children"].values():
        if second in (group.get("hosts") or {}):
            closed["all"]["hosts"]["closed"]["ansible_host"] = (group["hosts"][second] or {}).get(
                "ansible_host", second
            )
    (tmp_path / "closed.yml").write_text(yaml.safe_dump(closed))
    play = [
        {"name": "Pre-connection", "hosts": "preconnect", "gather_facts": False, "tasks": tasks}
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    hosts = {
        "all": {"children": {"preconnect": {"hosts": {first: None, second: None, "closed": None}}}}
    }
    (tmp_path / "group.yml").write_text(yaml.safe_dump(hosts))
    control = tmp_path / "cp"
    control.mkdir()
    rc, report = ansible_json.run(
        "ansible-playbook",
        [
            "-i",
            str(testbed.inventory),
            "-i",
            str(tmp_path / "group.yml"),
            "-i",
            str(tmp_path / "closed.yml"),
            "--limit",
            "preconnect",
            str(tmp_path / "play.yml"),
        ],
        {"ANSIBLE_SSH_CONTROL_PATH_DIR": str(control), **extra_env},
    )
    masters = sorted(p for p in control.iterdir() if p.is_socket())
    # Stop the masters this test made (ssh -O exit through each socket).
    for socket in masters:
        subprocess.run(
            ["ssh", "-o", f"ControlPath={socket}", "-O", "exit", "x"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    return rc, report, [p.name for p in masters]


CONTROLLER_ONLY = [
    {
        "name": "Work on the controller",
        "ansible.builtin.debug": {"msg": "{{ inventory_hostname }}"},
    },
    {"name": "Still on the controller", "ansible.builtin.set_fact": {"x": 1}},
]


def _results(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for task in report["plays"][0]["tasks"]:
        for host, result in task["hosts"].items():
            out.setdefault(host, []).append(result)
    return out


def test_a_play_of_controller_tasks_leaves_a_master_per_reachable_host(
    testbed: Any, tmp_path: Path
) -> None:
    masters = {}
    for side, env in (("on", {}), ("off", {"KUBEGPU_PRECONNECT": "0"})):
        (tmp_path / side).mkdir()
        # The play ends (and stops the children still connecting) only when both masters are
        # there or 10 s have passed: on a loaded machine two quick tasks may end before the
        # handshakes do. The wait runs on the controller (a pipe lookup), so it connects nothing.
        wait = (
            f"for i in $(seq 40); do [ $(ls -A {tmp_path / side / 'cp'} | wc -l) -ge 2 ] && break;"
            " sleep 0.25; done"
        )
        tasks = [
            *CONTROLLER_ONLY,
            {
                "name": "Wait on the controller for the masters",
                "ansible.builtin.debug": {"msg": "{{ lookup('ansible.builtin.pipe', wait) }}"},
                "vars": {"wait": wait},
                "when": "inventory_hostname == 'closed'",
            },
        ]
        rc, report, masters[side] = _run(testbed, tmp_path / side, tasks, env)
        assert rc == 0, report
        results = _results(report)
        assert set(results) == {*testbed.node_names[:2], "closed"}
        assert all(
            not r.get("failed") and not r.get("unreachable") for rs in results.values() for r in rs
        )
    # On: the play never connected, so the two masters are the pre-connection's; `closed`
    # has none (nothing listens on its port). Off: nothing connected at all.
    assert len(masters["on"]) == 2, masters
    assert masters["off"] == []


def test_an_unreachable_host_fails_at_its_first_remote_task_as_without_it(
    testbed: Any, tmp_path: Path
) -> None:
    tasks = [
        *CONTROLLER_ONLY,
        {"name": "Connect", "ansible.builtin.ping": {}},
        {"name": "After", "ansible.builtin.debug": {"msg": "done"}},
    ]
    outcome = {}
    for side, env in (("on", {}), ("off", {"KUBEGPU_PRECONNECT": "0"})):
        (tmp_path / side).mkdir()
        rc, report, masters = _run(testbed, tmp_path / side, tasks, env)
        results = _results(report)
        closed = results["closed"]
        assert [bool(r.get("unreachable")) for r in closed] == [False, False, True], closed
        assert "port 9" in closed[-1]["msg"] or "refused" in closed[-1]["msg"], closed[-1]
        for node in testbed.node_names[:2]:
            assert [r.get("ping") for r in results[node]][2] == "pong"
            assert len(results[node]) == 4
        assert len(masters) == 2
        outcome[side] = (rc, {h: len(rs) for h, rs in results.items()})
    assert outcome["on"] == outcome["off"]
