"""The fact modules' action plugins: with pipelining they read the node with one sh script and
run the module's code on the controller; without it, the module runs. Both must return the same.

Real `ansible localhost -c local` runs against the SIMULATED GPU (kubegpu's test double that
replays real captures): each case runs once with `ansible_pipelining=true` and once with
false, and the results must be equal. The piped runs get a host whose Python interpreter does
not exist, so a piped run that fell back to the module would fail.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kubegpu.simulate import build_simulated_host_root, write_replay
from tests.unit.test_gpu_modules import A100, T4, ansible_env, write
from tests.unit.test_gpu_modules import adhoc as adhoc_command

REPO = Path(__file__).resolve().parents[2]


def adhoc(
    tmp: Path,
    module: str,
    args: dict[str, Any],
    pipelining: bool,
    *extra: str,
    path_bin: Path | None = None,
) -> dict[str, Any]:
    env = ansible_env(REPO, tmp)
    if path_bin is not None:
        # PATH with an empty entry, and a folder with a trailing slash in front.
        env["PATH"] = f"{path_bin}/::{os.environ['PATH']}"
    command = adhoc_command(module, args, "-e", f"ansible_pipelining={pipelining}", *extra)
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    data = json.loads(done.stdout)
    result: dict[str, Any] = data["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return {"rc": done.returncode, "result": result, "stderr": done.stderr}


def both_ways(
    tmp: Path,
    module: str,
    cases: dict[str, dict[str, Any]],
    path_bin: Path | None = None,
    *,
    module_runs: tuple[str, ...] = ("home",),
    flags: dict[str, tuple[str, ...]] | None = None,
) -> dict[str, dict[bool, dict[str, Any]]]:
    """Each case piped (True) and through the module (False), four runs at a time, with the
    case's `flags` (--check, --diff). The piped runs get a host without Python, so that a piped
    run that fell back to the module fails instead of passing unseen; only the cases named in
    module_runs (where the module must run: a path the node must expand, say) keep it."""
    runs = [(name, args, piped) for name, args in cases.items() for piped in (True, False)]
    no_python = ("-e", f"ansible_python_interpreter={tmp / 'no-such-python'}")

    def one(run: tuple[str, dict[str, Any], bool]) -> dict[str, Any]:
        name, args, piped = run
        extra = no_python if piped and name not in module_runs else ()
        extra += (flags or {}).get(name, ())
        return adhoc(tmp / f"{name}-{piped}", module, args, piped, *extra, path_bin=path_bin)

    with ThreadPoolExecutor(max_workers=4) as pool:
        done = list(pool.map(one, runs))
    out: dict[str, dict[bool, dict[str, Any]]] = {}
    for (name, _args, piped), result in zip(runs, done, strict=True):
        out.setdefault(name, {})[piped] = result
    return out


def comparable(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k not in ("invocation", "_ansible_no_log")}


@pytest.fixture(scope="module")
def gpu_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], ...]]:
    tmp = tmp_path_factory.mktemp("piped-gpu")
    a100_smi = write_replay(tmp / "a100", A100, python=sys.executable)
    t4_smi = write_replay(tmp / "t4", T4, python=sys.executable)
    a100_root, t4_root = tmp / "a100-root", tmp / "t4-root"
    build_simulated_host_root(a100_root, A100)
    build_simulated_host_root(t4_root, T4)
    # The T4 replay, found through PATH (no nvidia_smi option).
    path_bin = tmp / "path-bin"
    path_bin.mkdir()
    write(path_bin / "nvidia-smi", f'#!/bin/sh\nexec {t4_smi} "$@"\n').chmod(0o755)
    unrunnable = write(tmp / "unrunnable/nvidia-smi", "#!/bin/sh\necho never\n")
    unrunnable.chmod(stat.S_IRUSR | stat.S_IWUSR)
    cases = {
        "mig": {"nvidia_smi": str(a100_smi), "host_root": str(a100_root)},
        "from-path": {"host_root": str(t4_root)},
        "missing": {"nvidia_smi": str(tmp / "no/nvidia-smi")},
        "unrunnable": {"nvidia_smi": str(unrunnable)},
        "relative": {"nvidia_smi": "bin/nvidia-smi"},
        "bad-root": {"nvidia_smi": str(t4_smi), "host_root": str(tmp / "no-root")},
        "home": {"nvidia_smi": "~/no/nvidia-smi"},
    }
    return both_ways(tmp, "nvidia_gpu_facts", cases, path_bin=path_bin)


@pytest.mark.parametrize(
    "case", ["mig", "from-path", "missing", "unrunnable", "relative", "bad-root", "home"]
)
def test_gpu_facts_piped_equals_the_module(gpu_cases: dict[str, Any], case: str) -> None:
    piped, module = gpu_cases[case][True], gpu_cases[case][False]
    assert piped["rc"] == module["rc"], (piped, module)
    assert comparable(piped["result"]) == comparable(module["result"])


def test_gpu_facts_cases_say_what_they_should(gpu_cases: dict[str, Any]) -> None:
    mig = gpu_cases["mig"][True]["result"]["ansible_facts"]["kubegpu_gpus"]
    assert mig["available"] is True and mig["mig_enabled"] is True
    # nvidia-smi -L ran on the node (a second piped read): the replay has no -L capture of
    # this machine, so it listed none of the MIG devices, which the note says.
    assert len(mig["gpus"][0]["mig"]["devices"]) == 2
    assert any("listed 0 of the 2 MIG devices" in n for n in mig["notes"])
    assert mig["kernel_module"] is not None
    found = gpu_cases["from-path"][True]["result"]["ansible_facts"]["kubegpu_gpus"]
    assert found["available"] is True and found["nvidia_smi"].endswith("path-bin/nvidia-smi")
    missing = gpu_cases["missing"][True]["result"]["ansible_facts"]["kubegpu_gpus"]
    assert missing["available"] is False and missing["failure"]["class"] == "not_installed"
    unrunnable = gpu_cases["unrunnable"][True]["result"]["ansible_facts"]["kubegpu_gpus"]
    assert unrunnable["available"] is False and "Permission denied" in json.dumps(unrunnable)
    assert "absolute path" in gpu_cases["relative"][True]["result"]["msg"]
    assert "not a directory" in gpu_cases["bad-root"][True]["result"]["msg"]
    assert any("SIMULATED" in str(w) for w in gpu_cases["mig"][True]["result"]["warnings"])
    # Without pipelining the module runs, so a host without Python fails it: the piped runs
    # above had no Python.
    assert "no-such-python" not in json.dumps(gpu_cases["mig"][True])


def _function(root: Path, address: str, vendor: str, device: str, pci_class: str) -> Path:
    path = root / "sys/bus/pci/devices" / address
    path.mkdir(parents=True)
    for name, value in (("vendor", vendor), ("device", device), ("class", pci_class)):
        (path / name).write_text(value + "\n")
    return path


@pytest.fixture(scope="module")
def pci_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("piped-pci")
    t4_root, a100_root, board = tmp / "t4-root", tmp / "a100-root", tmp / "board"
    build_simulated_host_root(t4_root, T4)
    build_simulated_host_root(a100_root, A100, flavor="open")
    build_simulated_host_root(board, T4)
    # Functions a real board carries beside a GPU: its audio and USB-C functions (one with a
    # driver link and subsystem ids), an NVSwitch, another vendor's NIC, and a function whose
    # class cannot be read; a product name; nouveau's module folder; Secure Boot on.
    audio = _function(board, "0000:00:1e.1", "0x10de", "0x10f8", "0x040300")
    (audio / "subsystem_vendor").write_text("0x10de\n")
    (audio / "subsystem_device").write_text("0x1234\n")
    drivers = board / "sys/bus/pci/drivers/snd_hda_intel"
    drivers.mkdir(parents=True)
    (audio / "driver").symlink_to("../../../bus/pci/drivers/snd_hda_intel")
    _function(board, "0000:00:1e.2", "0x10de", "0x1ad8", "0x0c0330")
    _function(board, "0000:05:00.0", "0x10de", "0x22a3", "0x068000")
    _function(board, "0000:00:03.0", "0x1af4", "0x1041", "0x020000")
    # Root reads any file, so the unreadable class is a folder: reading it fails either way.
    odd = _function(board, "0000:00:04.0", "0x10de", "0x1db1", "0x030200")
    (odd / "class").unlink()
    (odd / "class").mkdir()
    write(board / "sys/class/dmi/id/product_name", "NVIDIA DGX H100\n")
    (board / "sys/module/nouveau").mkdir(parents=True)
    var = board / "sys/firmware/efi/efivars" / pci_var()
    var.parent.mkdir(parents=True)
    var.write_bytes(b"\x06\x00\x00\x00\x01")
    # File states: a file, a folder, a link, nothing, and a file nobody may read.
    area = tmp / "area"
    area.mkdir()
    conf = write(area / "blacklist.conf", "blacklist nouveau\n")
    conf.chmod(0o640)
    (area / "facts.d").mkdir(mode=0o1755)
    (area / "link").symlink_to(conf)
    states = [str(conf), str(area / "facts.d"), str(area / "link"), str(area / "missing")]
    cases = {
        "t4": {"host_root": str(t4_root), "kernel_module_type": "auto", "branch": "535"},
        "a100": {"host_root": str(a100_root), "kernel_module_type": "proprietary", "branch": "580"},
        "board": {"host_root": f"{board}/", "branch": "550", "file_states": states},
        "this-machine": {"file_states": ["/etc/hostname"]},
        "relative-state": {"host_root": str(t4_root), "file_states": ["etc/x"]},
        "bad-root": {"host_root": str(tmp / "none")},
        "no-branch": {"kernel_module_type": "auto"},
        "home": {"file_states": ["~/x"]},
    }
    return both_ways(tmp, "nvidia_pci_facts", cases)


def pci_var() -> str:
    from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_pci import SECURE_BOOT_VAR

    return SECURE_BOOT_VAR


PCI_CASES = [
    "t4",
    "a100",
    "board",
    "this-machine",
    "relative-state",
    "bad-root",
    "no-branch",
    "home",
]


@pytest.mark.parametrize("case", PCI_CASES)
def test_pci_facts_piped_equals_the_module(pci_cases: dict[str, Any], case: str) -> None:
    piped, module = pci_cases[case][True], pci_cases[case][False]
    assert piped["rc"] == module["rc"], (piped, module)
    assert comparable(piped["result"]) == comparable(module["result"])


def test_pci_facts_cases_say_what_they_should(pci_cases: dict[str, Any]) -> None:
    board = pci_cases["board"][True]["result"]
    facts = board["ansible_facts"]["nvidia_pci"]
    assert [(f["address"], f["kind"]) for f in facts["functions"]] == [
        ("0000:00:1e.0", "gpu"),
        ("0000:00:1e.1", "audio"),
        ("0000:00:1e.2", "usb"),
        ("0000:05:00.0", "nvswitch"),
    ]
    assert facts["functions"][1]["driver"] == "snd_hda_intel"
    assert facts["functions"][1]["subsystem_device"] == "0x1234"
    assert facts["fabricmanager_needed"] is True and facts["product_name"] == "NVIDIA DGX H100"
    assert facts["modules"]["nouveau"] is True
    assert facts["secure_boot"] == {"state": "enabled", "source": "efivars"}
    states = board["file_states"]
    kinds = {Path(p).name: (s["type"] if s else None) for p, s in states.items()}
    assert kinds == {
        "blacklist.conf": "file",
        "facts.d": "directory",
        "link": "link",
        "missing": None,
    }
    conf = next(s for p, s in states.items() if p.endswith("blacklist.conf"))
    assert conf["mode"] == "0640" and len(conf["sha256"]) == 64
    assert next(s for p, s in states.items() if p.endswith("facts.d"))["mode"] == "1755"
    assert pci_cases["t4"][True]["result"]["ansible_facts"]["nvidia_pci"]["gpu_count"] == 1
    assert "not a directory" in pci_cases["bad-root"][True]["result"]["msg"]
    assert "absolute paths" in pci_cases["relative-state"][True]["result"]["msg"]
    assert "branch" in pci_cases["no-branch"][True]["result"]["msg"]
