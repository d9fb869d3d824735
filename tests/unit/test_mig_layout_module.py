"""kubegpu.gpu.mig_layout against the SIMULATED MIG GPU (a stateful replay of a real H100 PCIe):
normal, check and diff modes, idempotence, switching layouts and the error paths."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubegpu.gpu.plugins.modules import mig_layout

from kubegpu import simulate

CAPTURE = "scaleway-h100-pcie-525-mig"


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    script = simulate.write_replay(tmp_path / "bin", CAPTURE, python=sys.executable)
    state = tmp_path / "mig-state.json"
    monkeypatch.setenv("KUBEGPU_SIMULATED_MIG_STATE", str(state))
    return {"smi": script, "state": state}


def run(
    node: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    check: bool = False,
    **args: Any,
) -> dict[str, Any]:
    args = {"nvidia_smi": str(node["smi"]), **args, "_ansible_check_mode": check}
    args["_ansible_diff"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        mig_layout.main()
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def state(node: dict[str, Path]) -> str:
    return node["state"].read_text() if node["state"].exists() else ""


def test_apply_then_nothing_to_do(
    node: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    first = run(node, capsys, layout="all-1g.10gb")
    assert first["changed"] is True and first["simulated"] is True
    assert [s["action"] for s in first["plan"]] == ["mig-mode-on", "create-gpu-instances"]
    assert first["before"] == "GPU 0: MIG disabled\n"
    assert first["after"] == "GPU 0: MIG enabled, 7 x 1g.10gb\n"
    assert first["diff"] == {"before": first["before"], "after": first["after"]}
    second = run(node, capsys, layout="all-1g.10gb")
    assert second["changed"] is False and second["plan"] == []
    assert second["before"] == second["after"] == first["after"]


def test_check_mode_shows_the_plan_and_changes_nothing(
    node: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(node, capsys, layout="all-1g.10gb")
    before = state(node)
    planned = run(node, capsys, check=True, layout="all-balanced")
    assert planned["changed"] is True
    assert [s["command"] for s in planned["plan"]] == [
        "nvidia-smi mig -i 0 -dci",
        "nvidia-smi mig -i 0 -dgi",
        "nvidia-smi mig -i 0 -cgi 9,14,19,19 -C",
    ]
    assert planned["diff"]["after"] == "GPU 0: MIG enabled, 2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb\n"
    assert state(node) == before


def test_switching_layouts(node: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run(node, capsys, layout="all-1g.10gb")
    balanced = run(node, capsys, layout="all-balanced")
    assert balanced["after"] == "GPU 0: MIG enabled, 2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb\n"
    custom = {"halves": [{"devices": "all", "mig_devices": {"3g.40gb": 2}}]}
    halves = run(node, capsys, layout="halves", layouts=custom)
    assert halves["after"] == "GPU 0: MIG enabled, 2 x 3g.40gb\n"
    off = run(node, capsys, layout="all-disabled")
    assert [s["action"] for s in off["plan"]] == [
        "destroy-compute-instances",
        "destroy-gpu-instances",
        "mig-mode-off",
    ]
    assert off["after"] == "GPU 0: MIG disabled\n"
    assert run(node, capsys, layout="all-disabled")["changed"] is False


def test_a_profile_the_gpu_does_not_offer_fails_before_any_change(
    node: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(node, capsys, layout="all-1g.10gb")
    before = state(node)
    failed = run(node, capsys, layout="all-1g.5gb")
    assert failed["failed"] is True
    assert "GPU 0 (NVIDIA H100 PCIe) does not offer the profile 1g.5gb" in failed["msg"]
    assert "1g.10gb (up to 7)" in failed["msg"]
    assert state(node) == before


def test_with_mig_off_the_profiles_are_checked_once_mig_is_on_and_mig_goes_back_off(
    node: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    failed = run(node, capsys, layout="all-1g.5gb")
    assert failed["failed"] is True and "does not offer the profile 1g.5gb" in failed["msg"]
    assert "MIG mode turned back off" in failed["msg"]
    assert json.loads(state(node))["gpus"]["0"] == {"gis": [], "mig": False}


def test_counts_that_do_not_fit_fail(
    node: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(node, capsys, layout="all-enabled")
    custom = {"big": [{"devices": [0], "mig_devices": {"4g.40gb": 1, "3g.40gb": 2}}]}
    failed = run(node, capsys, layout="big", layouts=custom)
    assert "cannot hold 2 x 3g.40gb, 1 x 4g.40gb together" in failed["msg"]


def test_a_busy_gpu_is_refused_unless_drained(
    node: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run(node, capsys, layout="all-1g.10gb")
    data = json.loads(state(node))
    data["processes"] = [{"gpu_bus_id": "00000000:01:00.0", "pid": 4242, "process_name": "python3"}]
    node["state"].write_text(json.dumps(data))
    refused = run(node, capsys, layout="all-balanced")
    assert refused["failed"] is True
    assert "GPU 0 (00000000:01:00.0): pid 4242 python3" in refused["msg"]
    assert json.loads(state(node))["gpus"] == data["gpus"]
    # Nothing to change: processes do not matter.
    assert run(node, capsys, layout="all-1g.10gb")["changed"] is False
    assert run(node, capsys, layout="all-balanced", drained=True)["changed"] is True


@pytest.mark.parametrize(
    ("layout", "layouts", "message"),
    [
        ("all-nothing", {}, "unknown MIG layout 'all-nothing'"),
        ("two", {"two": [{"devices": [1]}]}, "names GPU 1, but this host has GPUs [0]"),
    ],
)
def test_bad_layouts(
    node: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    layout: str,
    layouts: dict[str, Any],
    message: str,
) -> None:
    failed = run(node, capsys, layout=layout, layouts=layouts)
    assert failed["failed"] is True and message in failed["msg"]
    assert state(node) == ""


def test_nvidia_smi_that_is_not_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    failed = run({"smi": tmp_path / "missing"}, capsys, layout="all-disabled")
    assert failed["failed"] is True and "missing" in failed["msg"]
