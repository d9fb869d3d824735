"""The node play's MIG layer (role gpu_mig, tag mig) on a testbed node whose GPU is the SIMULATED
MIG GPU: a stateful nvidia-smi replaying a real H100 PCIe capture, its MIG state in a file on the
node. The node is a one-node testbed of its own beside the session's (derived number 5).

Asserts on the node's state as nvidia-smi (the double) reports it after each run: a layout
applied, the second run changing nothing, check mode with diff changing nothing, a profile the
GPU does not offer failing before any change, switching layouts, and a GPU with processes left
alone.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import mig_layout as mig

from kubegpu.testbed import TestbedState
from tests.integration.conftest import MIG_CAPTURE

from .ansible_json import playbook, report

pytestmark = pytest.mark.integration

CAPTURE = MIG_CAPTURE
SMI = "/usr/local/lib/kubegpu-simulated/nvidia-smi"
STATE = SMI + ".capture/mig-state.json"
APPLY = "Apply the MIG layout"


@pytest.fixture(scope="module")
def testbed(mig_testbed: TestbedState) -> TestbedState:
    """This module's nodes: the SIMULATED MIG GPU's own testbed (tests/integration/conftest.py)."""
    return mig_testbed


def mig_node(testbed: TestbedState) -> str:
    """The testbed node with the SIMULATED MIG GPU."""
    found = [n.name for n in testbed.nodes if n.simulated_gpu == CAPTURE]
    assert found, f"no node of {testbed.state_dir} simulates {CAPTURE}"
    return found[0]


@pytest.fixture(scope="module")
def node(testbed: TestbedState) -> str:
    return mig_node(testbed)


def ssh(testbed: TestbedState, node: str, command: str) -> str:
    done = subprocess.run(
        testbed.ssh_argv(node, command), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode in (0, 6), f"{command}: {done.stdout}{done.stderr}"
    return done.stdout


def layout_on(testbed: TestbedState, node: str) -> dict[str, int] | None:
    """The node's MIG devices as nvidia-smi reports them; None when MIG is off."""
    mode = ssh(testbed, node, f"{SMI} --query-gpu=mig.mode.current --format=csv,noheader")
    if mode.strip() != "Enabled":
        return None
    rows = mig.parse_gpu_instances(ssh(testbed, node, f"{SMI} mig -lgi"))
    devices: dict[str, int] = {}
    for row in rows:
        devices[row["name"]] = devices.get(row["name"], 0) + 1
    return devices


def state_file(testbed: TestbedState, node: str) -> str:
    return ssh(testbed, node, f"cat {STATE} 2>/dev/null || true")


def run_mig(
    testbed: TestbedState, node: str, tmp_path: Path, config: str, *args: str, **extra: Any
) -> tuple[int, dict[str, Any]]:
    variables = {"gpu_mig_config": config, "gpu_mig_nvidia_smi": SMI, **extra}
    done = playbook(
        "playbooks/nodes.yml",
        "-i",
        str(testbed.inventory),
        "--limit",
        node,
        "--tags",
        "mig",
        *args,
        extra_vars=variables,
        vars_dir=tmp_path,
        json_report=True,
    )
    return done.returncode, report(done)


def apply_result(data: dict[str, Any], node: str) -> dict[str, Any]:
    found = [
        t["hosts"][node]
        for play in data["plays"]
        for t in play["tasks"]
        if APPLY in t["task"]["name"] and node in t["hosts"]
    ]
    assert found, "the MIG layout task did not run"
    return found[-1]


def test_a_layout_is_applied_and_a_second_run_changes_nothing(
    testbed: TestbedState, node: str, tmp_path: Path
) -> None:
    rc, _ = run_mig(testbed, node, tmp_path, "all-disabled")
    assert rc == 0 and layout_on(testbed, node) is None
    rc, data = run_mig(testbed, node, tmp_path, "all-1g.10gb")
    result = apply_result(data, node)
    assert rc == 0, result.get("msg")
    assert result["changed"] is True and result["simulated"] is True
    assert layout_on(testbed, node) == {"1g.10gb": 7}
    rc, again = run_mig(testbed, node, tmp_path, "all-1g.10gb")
    assert rc == 0 and again["stats"][node]["changed"] == 0
    assert apply_result(again, node)["plan"] == []


def test_check_and_diff_show_the_plan_and_change_nothing(
    testbed: TestbedState, node: str, tmp_path: Path
) -> None:
    run_mig(testbed, node, tmp_path, "all-1g.10gb")
    before = state_file(testbed, node)
    rc, data = run_mig(testbed, node, tmp_path, "all-balanced", "--check", "--diff")
    result = apply_result(data, node)
    assert rc == 0 and result["changed"] is True
    assert [step["command"] for step in result["plan"]] == [
        "nvidia-smi mig -i 0 -dci",
        "nvidia-smi mig -i 0 -dgi",
        "nvidia-smi mig -i 0 -cgi 9,14,19,19 -C",
    ]
    assert result["diff"]["before"] == "GPU 0: MIG enabled, 7 x 1g.10gb\n"
    assert result["diff"]["after"] == "GPU 0: MIG enabled, 2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb\n"
    assert state_file(testbed, node) == before
    assert layout_on(testbed, node) == {"1g.10gb": 7}


def test_a_profile_the_gpu_does_not_offer_fails_before_any_change(
    testbed: TestbedState, node: str, tmp_path: Path
) -> None:
    run_mig(testbed, node, tmp_path, "all-1g.10gb")
    before = state_file(testbed, node)
    rc, data = run_mig(testbed, node, tmp_path, "all-1g.5gb")
    result = apply_result(data, node)
    assert rc != 0 and result["failed"] is True
    assert "GPU 0 (NVIDIA H100 PCIe) does not offer the profile 1g.5gb" in result["msg"]
    assert "1g.10gb (up to 7)" in result["msg"]
    assert state_file(testbed, node) == before


def test_switching_layouts(testbed: TestbedState, node: str, tmp_path: Path) -> None:
    run_mig(testbed, node, tmp_path, "all-1g.10gb")
    rc, _ = run_mig(testbed, node, tmp_path, "all-balanced")
    assert rc == 0
    assert layout_on(testbed, node) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    custom = {"halves": [{"devices": "all", "mig_enabled": True, "mig_devices": {"3g.40gb": 2}}]}
    rc, _ = run_mig(testbed, node, tmp_path, "halves", gpu_mig_configs=custom)
    assert rc == 0 and layout_on(testbed, node) == {"3g.40gb": 2}
    rc, data = run_mig(testbed, node, tmp_path, "all-disabled")
    assert rc == 0 and apply_result(data, node)["changed"] is True
    assert layout_on(testbed, node) is None
    rc, data = run_mig(testbed, node, tmp_path, "all-disabled")
    assert rc == 0 and data["stats"][node]["changed"] == 0


def test_a_gpu_with_processes_is_left_alone(
    testbed: TestbedState, node: str, tmp_path: Path
) -> None:
    run_mig(testbed, node, tmp_path, "all-1g.10gb")
    state = json.loads(state_file(testbed, node))
    state["processes"] = [
        {"gpu_bus_id": "00000000:01:00.0", "pid": 4242, "process_name": "python3"}
    ]
    ssh(testbed, node, f"cat > {STATE} <<'EOF'\n{json.dumps(state)}\nEOF")
    try:
        rc, data = run_mig(testbed, node, tmp_path, "all-balanced")
        result = apply_result(data, node)
        assert rc != 0 and "GPU 0 (00000000:01:00.0): pid 4242 python3" in result["msg"]
        assert layout_on(testbed, node) == {"1g.10gb": 7}
        rc, _ = run_mig(testbed, node, tmp_path, "all-balanced", gpu_mig_drained=True)
        assert rc == 0 and layout_on(testbed, node) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    finally:
        state = json.loads(state_file(testbed, node))
        state["processes"] = []
        ssh(testbed, node, f"cat > {STATE} <<'EOF'\n{json.dumps(state)}\nEOF")
