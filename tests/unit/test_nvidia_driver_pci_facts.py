"""The nvidia_pci_facts module, on host roots built from real captures and on this machine.

The GPU host roots come from kubegpu.simulate.build_simulated_host_root (a SIMULATED GPU:
sysfs PCI functions, /proc/modules and /proc/driver/nvidia/version laid out from a real
nvidia-smi capture). The module runs through Ansible in one play (normal, check and diff mode, and its
error paths) and its functions are also called directly.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_pci as pci
from ansible_collections.kubegpu.gpu.plugins.modules import nvidia_pci_facts as mod

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from kubegpu.simulate import build_simulated_host_root  # noqa: E402
from tests.unit.test_nvidia_driver_roles import host_results, run_playbook  # noqa: E402

SECURE_BOOT = "sys/firmware/efi/efivars/" + mod.SECURE_BOOT_VAR


@pytest.fixture(scope="module")
def t4_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("t4")
    build_simulated_host_root(root, "telegraf-tesla-t4-515")
    return root


@pytest.fixture(scope="module")
def a100_open_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("a100")
    build_simulated_host_root(root, "netdata-a100-sxm4-40gb-mig-510", flavor="open")
    return root


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, t4_root: Path, a100_open_root: Path
) -> dict[str, dict[str, Any]]:
    """One playbook run of the module in every mode; results by task name."""
    tmp = tmp_path_factory.mktemp("pci-facts")
    a100 = {"host_root": str(a100_open_root), "kernel_module_type": "proprietary", "branch": "580"}
    tasks: list[dict[str, Any]] = [
        {
            "name": "normal",
            "kubegpu.gpu.nvidia_pci_facts": {
                "host_root": str(t4_root),
                "kernel_module_type": "auto",
                "branch": "535",
            },
        },
        {"name": "check", "kubegpu.gpu.nvidia_pci_facts": a100, "check_mode": True},
        {"name": "diff", "kubegpu.gpu.nvidia_pci_facts": a100, "diff": True},
        {
            "name": "check and diff",
            "kubegpu.gpu.nvidia_pci_facts": a100,
            "check_mode": True,
            "diff": True,
        },
        {
            "name": "missing root",
            "kubegpu.gpu.nvidia_pci_facts": {"host_root": str(tmp / "nowhere")},
            "ignore_errors": True,
        },
        {
            "name": "unknown flavour",
            "kubegpu.gpu.nvidia_pci_facts": {
                "host_root": str(t4_root),
                "kernel_module_type": "closed",
                "branch": "580",
            },
            "ignore_errors": True,
        },
        {"name": "this machine", "kubegpu.gpu.nvidia_pci_facts": {}},
    ]
    play = [{"name": "Run nvidia_pci_facts", "hosts": "all", "gather_facts": False, "tasks": tasks}]
    rc, report, stderr = run_playbook(tmp, play, {"localhost": {}})
    assert rc == 0, stderr[-3000:]
    results = dict(host_results(report, "localhost"))
    results["__tmp__"] = {"path": str(tmp)}
    return results


def test_t4_host_in_normal_mode(runs: dict[str, dict[str, Any]]) -> None:
    result = runs["normal"]
    assert result["changed"] is False
    facts = result["ansible_facts"]["nvidia_pci"]
    assert facts["gpu_count"] == 1
    # The T4 capture's bus id 00000000:00:1E.0 and device id 1EB810DE.
    assert facts["gpus"] == [
        {
            "address": "0000:00:1e.0",
            "device_id": "0x1eb8",
            "driver": "nvidia",
            "generation": "turing",
            "open_supported": True,
            "requires_open": False,
        }
    ]
    assert facts["generations"] == ["turing"]
    assert facts["kernel_module_type"] == {
        "requested": "auto",
        "effective": "open",
        "reason": "every GPU is Turing or newer",
    }
    assert facts["problems"] == []
    assert facts["modules"] == {"readable": True, "nouveau": False, "nvidia": True}
    assert facts["loaded_driver"] == {"version": "515.105.01", "flavor": "proprietary"}
    assert facts["secure_boot"]["state"] == "unsupported"
    assert facts["fabricmanager_needed"] is False


@pytest.mark.parametrize("mode", ["check", "diff", "check and diff"])
def test_check_and_diff_mode_report_the_same_facts(
    runs: dict[str, dict[str, Any]], mode: str
) -> None:
    result = runs[mode]
    assert result["changed"] is False
    facts = result["ansible_facts"]["nvidia_pci"]
    assert [g["generation"] for g in facts["gpus"]] == ["ampere"]
    assert facts["gpus"][0]["device_id"] == "0x20b0"
    assert facts["loaded_driver"] == {"version": "510.47.03", "flavor": "open"}
    assert facts["kernel_module_type"]["effective"] == "proprietary"


def test_error_path_names_the_bad_host_root(runs: dict[str, dict[str, Any]]) -> None:
    missing = Path(runs["__tmp__"]["path"]) / "nowhere"
    result = runs["missing root"]
    assert result["failed"] is True
    assert str(missing) in result["msg"] and "not a directory" in result["msg"]


def test_error_path_rejects_an_unknown_flavour(runs: dict[str, dict[str, Any]]) -> None:
    result = runs["unknown flavour"]
    assert result["failed"] is True
    assert "kernel_module_type" in result["msg"] and "auto, open, proprietary" in result["msg"]


def test_the_module_counts_the_gpus_of_this_machine(runs: dict[str, dict[str, Any]]) -> None:
    devices = Path("/sys/bus/pci/devices")
    nvidia_gpus = 0
    if devices.is_dir():
        for device in devices.iterdir():
            vendor = (device / "vendor").read_text().strip()
            pci_class = (device / "class").read_text().strip()
            if vendor == "0x10de" and pci_class[:6] in ("0x0300", "0x0302"):
                nvidia_gpus += 1
    result = runs["this machine"]
    assert result["changed"] is False
    assert result["ansible_facts"]["nvidia_pci"]["gpu_count"] == nvidia_gpus


def _function(root: Path, address: str, vendor: str, device: str, pci_class: str) -> None:
    path = root / "sys/bus/pci/devices" / address
    path.mkdir(parents=True)
    (path / "vendor").write_text(vendor + "\n")
    (path / "device").write_text(device + "\n")
    (path / "class").write_text(pci_class + "\n")


def test_read_functions_sorts_nvidia_functions_by_kind(t4_root: Path, tmp_path: Path) -> None:
    # The simulated T4 plus functions a real board carries beside a GPU (ids are PCI facts:
    # the GPU's HDMI audio and USB-C functions, an NVSwitch, and a virtio NIC of another vendor).
    root = tmp_path / "root"
    subprocess.run(["cp", "-a", str(t4_root), str(root)], check=True)
    _function(root, "0000:00:1e.1", "0x10de", "0x10f8", "0x040300")
    _function(root, "0000:00:1e.2", "0x10de", "0x1ad8", "0x0c0330")
    _function(root, "0000:05:00.0", "0x10de", "0x22a3", "0x068000")
    _function(root, "0000:00:03.0", "0x1af4", "0x1041", "0x020000")
    functions = mod.read_functions(str(root))
    assert [(f["address"], f["kind"]) for f in functions] == [
        ("0000:00:1e.0", "gpu"),
        ("0000:00:1e.1", "audio"),
        ("0000:00:1e.2", "usb"),
        ("0000:05:00.0", "nvswitch"),
    ]
    facts = mod.summarise(functions, "", "auto", "580")
    assert facts["gpu_count"] == 1 and facts["nvswitch_count"] == 1
    assert facts["fabricmanager_needed"] is True


def test_summarise_reports_problems_instead_of_failing(tmp_path: Path) -> None:
    _function(tmp_path, "0000:00:1e.0", "0x10de", "0x1db1", "0x030200")  # V100
    _function(tmp_path, "0000:00:1f.0", "0x10de", "0x2901", "0x030200")  # B200
    facts = mod.summarise(mod.read_functions(str(tmp_path)), "", "auto", "580")
    assert facts["kernel_module_type"]["effective"] is None
    assert any("no single driver flavour" in p for p in facts["problems"])
    facts = mod.summarise(mod.read_functions(str(tmp_path)), "", None, "550")
    assert any("too old for Blackwell" in p for p in facts["problems"])


@pytest.mark.parametrize(
    ("value", "state"),
    [(b"\x06\x00\x00\x00\x01", "enabled"), (b"\x06\x00\x00\x00\x00", "disabled")],
)
def test_secure_boot_from_the_efi_variable(tmp_path: Path, value: bytes, state: str) -> None:
    var = tmp_path / SECURE_BOOT
    var.parent.mkdir(parents=True)
    var.write_bytes(value)
    # With a readable EFI variable the module object (for mokutil) is never needed.
    assert mod.read_secure_boot(None, str(tmp_path)) == {"state": state, "source": "efivars"}


def test_secure_boot_without_efi_firmware(tmp_path: Path) -> None:
    assert mod.read_secure_boot(None, str(tmp_path))["state"] == "unsupported"


def test_nouveau_loaded_is_reported(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/modules").write_text(
        "nouveau 2445312 0 - Live 0x0000000000000000\ndrm 614400 1 nouveau, Live 0x0\n"
    )
    modules = mod.read_modules(str(tmp_path))
    assert modules == {"readable": True, "nouveau": True, "nvidia": False}


def test_file_states_report_type_digest_mode_and_owner(tmp_path: Path, t4_root: Path) -> None:
    """What the driver role reads to leave out its file tasks for files already in place."""
    area = tmp_path / "area"
    area.mkdir()
    conf = area / "blacklist.conf"
    conf.write_text("blacklist nouveau\n")
    conf.chmod(0o640)
    (area / "facts.d").mkdir(mode=0o755)
    (area / "link").symlink_to(conf)
    paths = [str(conf), str(area / "facts.d"), str(area / "link"), str(area / "missing")]
    play = [
        {
            "name": "file states",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "read",
                    "kubegpu.gpu.nvidia_pci_facts": {
                        "host_root": str(t4_root),
                        "file_states": paths,
                    },
                },
                {
                    "name": "relative",
                    "kubegpu.gpu.nvidia_pci_facts": {"file_states": ["etc/x.conf"]},
                    "ignore_errors": True,
                },
            ],
        }
    ]
    rc, report, stderr = run_playbook(tmp_path, play, {"h1": {}})
    assert rc == 0, stderr
    results = dict(host_results(report, "h1"))
    states = results["read"]["file_states"]
    uid, gid = os.getuid(), os.getgid()
    assert states[str(conf)] == {
        "type": "file",
        "mode": "0640",
        "uid": uid,
        "gid": gid,
        "sha256": hashlib.sha256(b"blacklist nouveau\n").hexdigest(),
    }
    assert states[str(area / "facts.d")]["type"] == "directory"
    assert states[str(area / "facts.d")]["mode"] == "%04o" % (
        (area / "facts.d").stat().st_mode & 0o7777
    )
    assert states[str(area / "link")]["type"] == "link"
    assert "sha256" not in states[str(area / "link")]
    assert states[str(area / "missing")] is None
    # The facts are what they were without file_states.
    assert results["read"]["ansible_facts"]["nvidia_pci"]["gpu_count"] == 1
    assert results["relative"]["failed"] is True
    assert "absolute paths" in results["relative"]["msg"]
    assert "etc/x.conf" in results["relative"]["msg"]


@pytest.mark.parametrize(
    ("output", "enrolled"),
    [
        ("SHA1 Fingerprint: 0a:1b\n/var/lib/dkms/mok.pub is already enrolled\n", True),
        ("/var/lib/dkms/mok.pub is not enrolled\n", False),
        (None, False),
    ],
    ids=["enrolled", "not-enrolled", "no-mokutil"],
)
def test_the_key_test_says_whether_shim_has_the_key(output: str | None, enrolled: bool) -> None:
    answer = pci.key_test(output)
    assert answer["enrolled"] is enrolled
    assert answer["output"] == (output.strip() if output else "mokutil is not installed")


def test_the_key_is_only_tested_on_the_host_itself_under_secure_boot(tmp_path: Path) -> None:
    var = tmp_path / SECURE_BOOT
    var.parent.mkdir(parents=True)
    var.write_bytes(b"\x06\x00\x00\x00\x01")
    asked = []

    def mok_test() -> str:
        asked.append(1)
        return "is already enrolled"

    facts, _ = pci.gather(str(tmp_path), pci.LocalReader(), None, None, [], None, mok_test)
    # An image or chroot (host_root other than /): shim's keys are not that root's.
    assert facts["secure_boot"]["state"] == "enabled"
    assert "key_test" not in facts["secure_boot"]
    assert asked == []


def test_checks_after_the_read_see_its_facts_and_result(tmp_path: Path, t4_root: Path) -> None:
    checks = [
        {"name": "a GPU", "that": ["ansible_facts['nvidia_pci']['gpu_count'] == 1"], "msg": "x"},
        {
            "name": "no GPU",
            "that": ["pci.ansible_facts.nvidia_pci.gpu_count == 0"],
            "msg": "{{ ansible_facts['nvidia_pci']['gpu_count'] }} GPU(s): {{ generations }}",
        },
    ]
    play = [
        {
            "name": "checks",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "read",
                    "kubegpu.gpu.nvidia_pci_facts": {"host_root": str(t4_root), "checks": checks},
                    "vars": {"generations": "{{ ansible_facts['nvidia_pci']['generations'] }}"},
                    "register": "pci",
                },
            ],
        }
    ]
    rc, report, stderr = run_playbook(tmp_path, play, {"h1": {}})
    assert rc != 0, stderr
    result = dict(host_results(report, "h1"))["read"]
    assert result["failed"] is True
    assert result["check"] == "no GPU"
    assert result["msg"] == "1 GPU(s): ['turing']"
