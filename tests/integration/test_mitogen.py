"""The node plays under mitogen's strategy (KUBEGPU_STRATEGY=mitogen, the extra kubegpu[fast]).

mitogen is optional: this test runs the same playbooks/nodes.yml as a user would through the
Python API (kubegpu.runner.run_playbook, which reads KUBEGPU_STRATEGY), converges the testbed's
nodes with it, then runs it again and expects changed=0 and no failure on every node. It is
skipped when mitogen is not installed. That the strategy really was mitogen's is read back
from Ansible's own configuration in a task of the same run environment, and a strategy plugin
that cannot load makes ansible-playbook fail, so a passing run went through mitogen.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kubegpu.runner import run_playbook, strategy_environment

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

pytest.importorskip("ansible_mitogen", reason="mitogen is the optional extra kubegpu[fast]")


def test_ansible_runs_the_mitogen_strategy_it_is_given(testbed: Any) -> None:
    env = dict(
        os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), **strategy_environment("mitogen")
    )
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "-i",
            str(testbed.inventory),
            testbed.node_names[0],
            "-m",
            "ansible.builtin.debug",
            "-a",
            "msg=strategy={{ lookup('ansible.builtin.config', 'DEFAULT_STRATEGY') }}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "strategy=mitogen_linear" in proc.stdout


def test_node_plays_converge_then_change_nothing_under_mitogen(
    testbed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEGPU_STRATEGY", "mitogen")
    inventory = [str(testbed.inventory), str(REPO / "inventories/testbed")]
    # The node plays wire containerd, which runs only on nodes made for containers (`testbed up
    # --containers`); on the others they fail under every strategy, so they are left out.
    nodes = [node.name for node in testbed.nodes if node.containers]
    assert nodes, "the testbed has no node that can run containerd (KUBEGPU_TESTBED_CONTAINERS)"
    limit = ",".join(nodes)
    first = run_playbook("playbooks/nodes.yml", inventory, limit=limit, timeout=3600)
    assert first.ok, (first.failed, first.unreachable)
    second = run_playbook("playbooks/nodes.yml", inventory, limit=limit, timeout=1800)
    assert second.ok, (second.failed, second.unreachable)
    assert set(second.hosts) == set(nodes)
    for node, stats in second.hosts.items():
        assert stats.changed == 0, (node, stats)
        assert stats.failures == 0 and stats.unreachable == 0, (node, stats)
        assert stats.ok > 0, (node, stats)
