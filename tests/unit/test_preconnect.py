"""kubegpu.accel.linear's pre-connection (plugin_utils/preconnect.py) without a node, on every
ansible-core minor the accelerator runs on: ansible's ssh connection plugin runs a test double
of the ssh client (its ssh_executable, a script that records its arguments and succeeds), so
what the pre-connection hands to ssh is seen. A play of controller-only tasks runs `true` once
per host through the task's own connection options, with ControlPersist and BatchMode=yes;
with KUBEGPU_PRECONNECT=0 it runs nothing. Real SSH masters on testbed nodes:
tests/integration/test_preconnect.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.accel import only_where_it_runs

pytestmark = only_where_it_runs

REPO = Path(__file__).resolve().parents[2]
HOSTS = ("h1", "h2")
# The test double of the ssh client: one line of arguments per call, and success.
FAKE_SSH = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/ssh-calls.log"
exit 0
"""


def _play(tmp_path: Path, env: dict[str, str]) -> list[str]:
    """Run a play of controller-only tasks on HOSTS over the ssh connection; the ssh calls."""
    ssh = tmp_path / "fake-ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    calls = tmp_path / "ssh-calls.log"
    inventory = {
        "all": {
            "hosts": dict.fromkeys(HOSTS),
            "vars": {
                "ansible_connection": "ssh",
                "ansible_host": "127.0.0.1",
                "ansible_ssh_executable": str(ssh),
                "ansible_python_interpreter": sys.executable,
            },
        }
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    # The play ends (and stops the children still connecting) once every host's call is in,
    # or after 10 s; the wait is a pipe lookup on the controller, which connects nothing.
    wait = (
        f"for i in $(seq 40); do [ $(cat {calls} 2>/dev/null | wc -l) -ge {len(HOSTS)} ] && break;"
        " sleep 0.25; done"
    )
    tasks = [
        {"name": "Work on the controller", "ansible.builtin.set_fact": {"probe": 1}},
        {
            "name": "Wait on the controller for the connections",
            "ansible.builtin.debug": {"msg": "{{ lookup('ansible.builtin.pipe', wait) }}"},
            "vars": {"wait": wait},
            "when": "inventory_hostname == 'h2' and lookup('env', 'KUBEGPU_PRECONNECT') != '0'",
        },
    ]
    play = [{"hosts": "all", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    environment = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"),
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp_path / "cp"),
        **env,
    )
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            str(tmp_path / "inventory.yml"),
            str(tmp_path / "play.yml"),
        ],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["stats"].keys() == set(HOSTS)
    assert all(stats["failures"] == 0 for stats in report["stats"].values())
    return calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize(
    ("env", "expected"), [({}, len(HOSTS)), ({"KUBEGPU_PRECONNECT": "0"}, 0)], ids=["on", "off"]
)
def test_a_play_of_controller_tasks_connects_each_host_once_in_the_background(
    tmp_path: Path, env: dict[str, str], expected: int
) -> None:
    calls = _play(tmp_path, env)
    assert len(calls) == expected, calls
    for call in calls:
        # ansible.cfg's ssh_args (ControlPersist: the master outlives the call), no prompt
        # (BatchMode), and the one command it runs.
        assert "ControlPersist=120s" in call and "BatchMode=yes" in call, call
        assert call.split()[-1] == "true" or " true" in call, call
