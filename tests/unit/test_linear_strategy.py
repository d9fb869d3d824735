"""kubegpu.gpu.linear: ansible-core's linear strategy, except that a task whose condition is false
for a host is skipped in the main process instead of a forked worker. Every result must be what
ansible-core's own linear strategy gives, so each test runs the same playbook under both and
compares the results host by host and task by task.

bench/bench_node_plays.py measures what it saves on the testbed's node plays.
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
HOSTS = {"h1": {"level": 9}, "h2": {"level": 1}, "h3": {"level": 6}}

ROLE_VARS = {
    # A role var over a host var: rendered per host, so a value cached for one host and served
    # to another would show in the results.
    "probe_high": "{{ level | int > 5 }}",
}
ROLE_TASKS: list[dict[str, Any]] = [
    {
        "name": "Runs where the role var holds",
        "ansible.builtin.debug": {"msg": "high {{ level }}"},
        "when": "probe_high | bool",
    },
    {
        "name": "Sets a fact where the level is low",
        "ansible.builtin.set_fact": {"probe_low": True},
        "when": "level | int < 5",
    },
    {
        "name": "Registers a skip",
        "ansible.builtin.command": "false",
        "register": "probe_skipped",
        "when": "level | int > 100",
    },
    {"name": "Shows the registered skip", "ansible.builtin.debug": {"var": "probe_skipped"}},
    {
        "name": "A block whose condition its tasks inherit",
        "when": "level | int > 7",
        "block": [
            {"name": "Inside the block", "ansible.builtin.debug": {"msg": "in"}},
            {
                "name": "Inside, with its own condition too",
                "ansible.builtin.debug": {"msg": "in too"},
                "when": "probe_low is defined",
            },
        ],
    },
    {
        "name": "An include skipped everywhere",
        "ansible.builtin.include_tasks": "never.yml",
        "when": "level | int > 100",
    },
    {
        "name": "A loop, each item with the condition",
        "ansible.builtin.debug": {"msg": "{{ item }}"},
        "loop": [1, 7],
        "when": "item < level | int",
    },
    {
        "name": "A condition on a play context value the task sets",
        "ansible.builtin.debug": {"msg": "user"},
        "remote_user": "probe-user",
        "when": "ansible_user | default('') == 'probe-user' and level | int > 5",
    },
    {
        "name": "A condition on a variable no host has",
        "block": [
            {
                "name": "Fails on the undefined variable",
                "ansible.builtin.debug": {"msg": "never"},
                "when": "probe_nowhere | bool",
            }
        ],
        "rescue": [{"name": "Rescued", "ansible.builtin.debug": {"msg": "rescued"}}],
    },
    {
        "name": "Notifies where the level is high",
        "ansible.builtin.command": "true",
        "changed_when": True,
        "notify": "Probe handler",
        "when": "level | int > 5",
    },
    {
        "name": "Records which process evaluates a false condition",
        "ansible.builtin.debug": {"msg": "never"},
        "when": "lookup('ansible.builtin.pipe', 'echo $PPID >> ' ~ pid_log ~ '; echo false') | bool",
    },
]
HANDLERS = [
    {
        "name": "Probe handler",
        "ansible.builtin.debug": {"msg": "handled"},
        "when": "level | int > 8",
    }
]


def run(tmp: Path, strategy: str, *flags: str) -> tuple[dict[str, Any], list[str]]:
    role = tmp / "roles" / "probe"
    for folder, data in (
        ("vars", ROLE_VARS),
        ("tasks", ROLE_TASKS),
        ("handlers", HANDLERS),
    ):
        (role / folder).mkdir(parents=True, exist_ok=True)
        (role / folder / "main.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    (role / "tasks" / "never.yml").write_text(
        yaml.safe_dump([{"ansible.builtin.fail": {"msg": "never"}}])
    )
    inventory = {
        "all": {
            "hosts": HOSTS,
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        }
    }
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inventory))
    pid_log = tmp / f"pids-{strategy}.log"
    pid_log.unlink(missing_ok=True)
    play = [{"hosts": "all", "gather_facts": False, "roles": ["probe"]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_ROLES_PATH=str(tmp / "roles"),
        ANSIBLE_STRATEGY=strategy,
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_NOCOLOR="1",
    )
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            str(tmp / "inventory.yml"),
            "-e",
            f"pid_log={pid_log}",
            *flags,
            str(tmp / "play.yml"),
        ],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout), pid_log.read_text().split()


def results(report: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(task, host, result) in order, without what differs from run to run."""
    varying = {"start", "end", "delta", "_ansible_no_log", "invocation"}
    found = []
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, result in sorted(task["hosts"].items()):
                kept = {k: v for k, v in result.items() if k not in varying}
                found.append((task["task"]["name"].rpartition(" : ")[2], host, kept))
    return found


@pytest.mark.parametrize("flags", [(), ("--check",)], ids=["run", "check"])
def test_every_result_is_linear_s_and_false_conditions_skip_in_the_main_process(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    theirs, their_pids = run(tmp_path, "linear", *flags)
    ours, our_pids = run(tmp_path, "kubegpu.gpu.linear", *flags)
    assert results(ours) == results(theirs)
    assert ours["stats"] == theirs["stats"]
    by_task = {(task, host): result for task, host, result in results(ours)}
    # The results say what the play does, so that the comparison covers each path.
    assert by_task[("Runs where the role var holds", "h1")]["msg"] == "high 9"
    assert by_task[("Runs where the role var holds", "h2")]["skipped"] is True
    assert by_task[("Shows the registered skip", "h1")]["probe_skipped"]["skipped"] is True
    assert by_task[("Inside, with its own condition too", "h2")]["skipped"] is True
    assert by_task[("A condition on a play context value the task sets", "h1")]["msg"] == "user"
    assert by_task[("Rescued", "h2")]["msg"] == "rescued"
    assert by_task[("Fails on the undefined variable", "h2")]["failed"] is True
    assert len(by_task[("A loop, each item with the condition", "h1")]["results"]) == 2
    assert ours["stats"]["h1"]["skipped"] > 0 and ours["stats"]["h2"]["changed"] == 0
    # ansible-core's linear evaluates the false condition in a worker per host; ours in the
    # one main process, for all three hosts.
    assert len(their_pids) == len(our_pids) == len(HOSTS)
    assert len(set(their_pids)) == len(HOSTS)
    assert len(set(our_pids)) == 1 and our_pids[0] not in their_pids


def test_the_repository_ansible_cfg_uses_it() -> None:
    config = configparser.ConfigParser(interpolation=None)
    config.read(REPO / "ansible.cfg")
    assert config.get("defaults", "strategy") == "kubegpu.gpu.linear"
