"""The SIMULATED MIG GPU: a stateful nvidia-smi double replaying a real H100 PCIe capture.

What it prints is held against the real outputs of the same machine where they exist
(src/kubegpu/captures/nvidia-smi-mig, tests/unit/data/mig), and its tables are read back with the
parsers the module uses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import mig_layout as mig

from kubegpu import simulate

CAPTURE = "scaleway-h100-pcie-525-mig"
ROOT = Path(__file__).resolve().parents[2]
PACKAGED = ROOT / "src" / "kubegpu" / "captures" / "nvidia-smi-mig"
DATA = ROOT / "tests" / "unit" / "data" / "mig"


class Smi:
    def __init__(self, tmp_path: Path) -> None:
        self.script = simulate.write_replay(tmp_path / "bin", CAPTURE, python=sys.executable)
        self.state = tmp_path / "mig-state.json"

    def __call__(self, *args: str) -> tuple[int, str, str]:
        env = dict(os.environ, KUBEGPU_SIMULATED_MIG_STATE=str(self.state))
        done = subprocess.run(
            [str(self.script), *args], capture_output=True, text=True, env=env, check=False
        )
        return done.returncode, done.stdout, done.stderr


@pytest.fixture
def smi(tmp_path: Path) -> Smi:
    return Smi(tmp_path)


def ids_out(text: str) -> str:
    """Output with instance ids blanked: they are the simulation's own."""
    return re.sub(r"instance ID\s+\d+", "instance ID N", text)


def test_mode_switch_prints_what_the_real_gpu_printed(smi: Smi) -> None:
    rc, out, err = smi("mig", "-lgip")
    assert rc == 6 and "No MIG-enabled devices found." in out
    assert simulate.MARKER in err and CAPTURE in err  # every call says it is a simulation
    assert smi("--query-gpu=pci.bus_id,mig.mode.current", "--format=csv")[1] == (
        "pci.bus_id, mig.mode.current\n00000000:01:00.0, Disabled\n"
    )
    rc, out, _ = smi("-i", "0", "-mig", "1")
    assert rc == 0 and out == (DATA / "h100-pcie-525-mig-1.txt").read_text()
    # Now the same CSV as captured on the machine after `-mig 1`.
    query = smi("-i", "0", "--query-gpu=pci.bus_id,mig.mode.current", "--format=csv")[1]
    assert query == (PACKAGED / "scaleway-h100-pcie-525-query-mig-mode-current.csv").read_text()
    assert smi("mig", "-lgip")[1] == (PACKAGED / "scaleway-h100-pcie-525-lgip.txt").read_text()
    assert smi("mig", "-lgipp")[1] == (PACKAGED / "scaleway-h100-pcie-525-lgipp.txt").read_text()
    rc, out, _ = smi("-mig", "0")
    assert rc == 0 and out == (DATA / "h100-pcie-525-mig-0.txt").read_text()
    assert json.loads(smi.state.read_text())["gpus"]["0"]["mig"] is False


def test_create_list_destroy_like_the_captured_session(smi: Smi) -> None:
    smi("-i", "0", "-mig", "1")
    rc, out, _ = smi("mig", "-cgi", "9,19,19,19", "-C")
    captured = (DATA / "h100-pcie-525-cgi-C-3g40gb-3x1g10gb.txt").read_text()
    assert rc == 0 and ids_out(out) == ids_out(captured)
    rows = mig.parse_gpu_instances(smi("mig", "-lgi")[1])
    real = mig.parse_gpu_instances((DATA / "h100-pcie-525-lgi-3g40gb-3x1g10gb.txt").read_text())
    # The same placements as on the real machine (3g.40gb at 4:4, the 1g.10gb at 0, 1, 2).
    assert sorted((r["name"], r["profile_id"], r["start"], r["size"]) for r in rows) == sorted(
        (r["name"], r["profile_id"], r["start"], r["size"]) for r in real
    )
    cis = mig.parse_compute_instances(smi("mig", "-lci")[1])
    assert sorted(c["gi"] for c in cis) == sorted(r["gi"] for r in rows)
    # Free counts follow the state: one 3g and three 1g leave one 1g and no 3g.
    free = {p["name"]: p["free"] for p in mig.parse_gi_profiles(smi("mig", "-lgip")[1])[0]}
    assert free["3g.40gb"] == 0 and free["1g.10gb"] == 1 and free["7g.80gb"] == 0
    listed = smi("-L")[1].splitlines()
    assert listed[0] == "GPU 0: NVIDIA H100 PCIe (UUID: GPU-7cd6d4d6-9fa8-13be-3c42-09a1b2280a02)"
    assert [ln.split()[1] for ln in listed[1:]] == ["3g.40gb", "1g.10gb", "1g.10gb", "1g.10gb"]
    # MIG off is refused while instances exist.
    rc, _, err = smi("-i", "0", "-mig", "0")
    assert rc == 1 and "not captured" not in err and "the simulation's own wording" in err
    rc, out, _ = smi("mig", "-dci")
    rc2, out2, _ = smi("mig", "-dgi")
    assert rc == rc2 == 0
    assert ids_out(out + out2).count("\n") == (
        DATA / "h100-pcie-525-dci-dgi.txt"
    ).read_text().count("\n")
    assert smi("mig", "-lgi")[0] == 6


def test_the_slices_run_out_and_a_foreign_profile_is_refused(smi: Smi) -> None:
    smi("-i", "0", "-mig", "1")
    assert smi("mig", "-cgi", "0", "-C")[0] == 0  # 7g.80gb takes the whole GPU
    rc, _, err = smi("mig", "-cgi", "19", "-C")
    assert rc != 0 and "Insufficient Resources" in err
    rc, _, err = smi("mig", "-cgi", "1g.5gb", "-C")
    assert rc != 0 and "1g.5gb" in err


def test_destroying_a_gpu_instance_with_compute_instances_fails(smi: Smi) -> None:
    smi("-i", "0", "-mig", "1")
    smi("mig", "-cgi", "19", "-C")
    rc, _, err = smi("mig", "-dgi")
    assert rc != 0 and "In use" in err


def test_processes_come_from_the_state_file(smi: Smi) -> None:
    smi("-i", "0", "-mig", "1")
    state = json.loads(smi.state.read_text())
    state["processes"] = [
        {"pid": 4242, "process_name": "python3", "gpu_bus_id": "00000000:01:00.0"}
    ]
    smi.state.write_text(json.dumps(state))
    out = smi("--query-compute-apps=pid,process_name,gpu_bus_id", "--format=csv,noheader")[1]
    assert out == "4242, python3, 00000000:01:00.0\n"


def test_host_root_of_the_mig_capture(tmp_path: Path) -> None:
    info = simulate.build_simulated_host_root(tmp_path / "root", CAPTURE)
    assert info["pci_bus_ids"] == ["0000:01:00.0"] and info["driver_version"] == "525.125.06"
    device = tmp_path / "root/sys/bus/pci/devices/0000:01:00.0"
    assert (device / "device").read_text() == "0x2331\n"
    assert "SIMULATED GPU" in (tmp_path / "root" / simulate.README_NAME).read_text()


def test_unknown_capture_names_the_mig_ones() -> None:
    with pytest.raises(simulate.CaptureError, match=CAPTURE):
        simulate.resolve_capture("nope")
