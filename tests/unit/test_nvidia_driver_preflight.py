"""The preflight role rejects bad inputs, each with a message that names the variable, what was
wrong and what is allowed, before any change.

One play runs the preflight role on localhost (connection local) as many pretend hosts, each
with one bad input; two hosts with good inputs must pass. Every host carries the OS facts of
the release it pretends to run (in-memory fact cache only; Debian 12 unless the case says
otherwise) instead of gathering this machine's, which keeps the run short; hosts that need GPUs
read a sysfs tree built from a real capture or from a PCI device id. The service manager is
systemd (a real GPU node's; this machine's PID 1 is not) except on the host that tests that
check. Nothing on this machine is changed: every task result is
checked for changed=false.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_nvidia_driver_roles import (
    OS_FACTS,
    failure_message,
    h100_root,
    host_results,
    pci_function,
    pretend_os_task,
    run_playbook,
)

SHA = "sha256:" + "0" * 64
SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def _gpu_roots(base: Path, fixtures: Path) -> dict[str, Path]:
    roots = {"h100": h100_root(base / "h100", fixtures)}
    # Device id 0x1db1 (V100): constructed, no capture holds a pre-Turing GPU.
    roots["v100"] = base / "v100"
    pci_function(roots["v100"], "0000:00:1e.0", "0x1db1", "0x030000")
    # The RTX 5090 of the real capture no-devices-rtx5090-rebar-disabled-ogkm-862 (10de:2b85).
    sources = (fixtures / "SOURCES.md").read_text()
    assert "RTX 5090 (10de:2b85)" in sources
    roots["rtx5090"] = base / "rtx5090"
    pci_function(roots["rtx5090"], "0000:01:00.0", "0x2b85", "0x030000")
    # The H100 on a machine whose firmware has Secure Boot on (SecureBoot EFI variable = 1).
    roots["h100_secure_boot"] = h100_root(base / "h100sb", fixtures)
    var = roots["h100_secure_boot"] / "sys/firmware/efi/efivars" / SECURE_BOOT_VAR
    var.parent.mkdir(parents=True)
    var.write_bytes(b"\x06\x00\x00\x00\x01")
    return roots


# host -> (inventory vars, fragments the failure message must hold; None = must pass)
CASES: dict[str, tuple[dict[str, Any], list[str] | None]] = {
    "good_debian12_535": ({"nvidia_driver_branch": "535"}, None),
    "good_ubuntu2404_h100_cuda13": (
        {
            "fake_os": OS_FACTS["ubuntu2404"],
            "test_gpus": "h100",
            "nvidia_driver_source": "cuda_repo",
            "cuda_toolkit_enabled": True,
            "cuda_toolkit_source": "cuda_repo",
            "cuda_toolkit_version": "13.0",
        },
        None,
    ),
    "bad_branch_two_digits": (
        {"nvidia_driver_branch": "58"},
        ["nvidia_driver_branch is '58'", "three digits", '"580"'],
    ),
    "bad_branch_prefixed": (
        {"nvidia_driver_branch": "r580"},
        ["nvidia_driver_branch is 'r580'", "three digits"],
    ),
    "bad_branch_unquoted": (
        {"nvidia_driver_branch": 580},
        ["nvidia_driver_branch is '580'", "quoted as a string"],
    ),
    "bad_module_type": (
        {"nvidia_driver_kernel_module_type": "closed"},
        ["nvidia_driver_kernel_module_type", "auto, open, proprietary", "closed"],
    ),
    "bad_source": (
        {"nvidia_driver_source": "ppa"},
        ["nvidia_driver_source", "distribution, cuda_repo, mirror", "ppa"],
    ),
    "bad_build": (
        {"nvidia_driver_build": "runfile"},
        ["nvidia_driver_build", "dkms, precompiled", "runfile"],
    ),
    "bad_version_not_in_branch": (
        {"nvidia_driver_branch": "535", "nvidia_driver_version": "550.54.14"},
        ["nvidia_driver_version is '550.54.14'", "belongs to nvidia_driver_branch ('535')"],
    ),
    "bad_version_format": (
        {"nvidia_driver_branch": "535", "nvidia_driver_version": "latest"},
        ["nvidia_driver_version is 'latest'", "exact driver version", "or empty"],
    ),
    "bad_branch_not_in_debian12": (
        {"nvidia_driver_branch": "580"},
        ["nvidia_driver_branch is '580'", "carries only branch 535", "'cuda_repo' or 'mirror'"],
    ),
    "bad_open_from_debian12": (
        {"nvidia_driver_branch": "535", "nvidia_driver_kernel_module_type": "open"},
        ["nvidia_driver_kernel_module_type is 'open'", "firmware-nvidia-gsp", "'proprietary'"],
    ),
    "bad_precompiled_from_debian": (
        {"nvidia_driver_branch": "535", "nvidia_driver_build": "precompiled"},
        ["nvidia_driver_build is 'precompiled'", "no precompiled", "'dkms'"],
    ),
    "bad_mirror_without_url": (
        {"nvidia_driver_source": "mirror"},
        ["nvidia_driver_mirror_url", "https://", "nvidia_driver_mirror_key_file"],
    ),
    "bad_mirror_without_key": (
        {
            "nvidia_driver_source": "mirror",
            "nvidia_driver_mirror_url": "https://mirror.invalid/cuda/",
        },
        ["signing key", "nvidia_driver_mirror_key_file", "nvidia_driver_mirror_key_url"],
    ),
    "bad_mirror_key_url_without_checksum": (
        {
            "nvidia_driver_source": "mirror",
            "nvidia_driver_mirror_url": "https://mirror.invalid/cuda/",
            "nvidia_driver_mirror_key_url": "https://mirror.invalid/cuda/key.asc",
        },
        ["nvidia_driver_mirror_key_checksum", '"sha256:<64 hex>"'],
    ),
    "bad_mirror_key_file_missing": (
        {
            "nvidia_driver_source": "mirror",
            "nvidia_driver_mirror_url": "https://mirror.invalid/cuda/",
            "nvidia_driver_mirror_key_file": "/nonexistent/kubegpu-mirror.asc",
        },
        ["nvidia_driver_mirror_key_file is '/nonexistent/kubegpu-mirror.asc'", "not a file"],
    ),
    "bad_cuda_repo_key_unverifiable_debian13": (
        {"fake_os": OS_FACTS["debian13"], "nvidia_driver_source": "cuda_repo"},
        ["nvidia_driver_cuda_repo_key_fingerprint", "nvidia_driver_cuda_repo_key_checksum"],
    ),
    "bad_distribution_on_rhel": (
        {"fake_os": OS_FACTS["rhel9"]},
        ["nvidia_driver_source is 'distribution'", "carry no NVIDIA driver", "'cuda_repo'"],
    ),
    "bad_unsupported_os": (
        {
            "fake_os": {
                **OS_FACTS["debian12"],
                "distribution": "Gentoo",
                "os_family": "Gentoo",
                "distribution_version": "2.17",
                "distribution_major_version": "2",
            }
        },
        ["Gentoo 2.17", "kubegpu supports", "Debian 12/13", "Ubuntu 22.04/24.04"],
    ),
    "bad_service_manager": (
        {"test_service_mgr": "sysvinit", "nvidia_driver_branch": "535"},
        ["ansible_facts['service_mgr']", "'sysvinit'", "systemd"],
    ),
    "bad_module_parameters_type": (
        {"nvidia_driver_branch": "535", "nvidia_driver_module_parameters": ["NVreg_X=1"]},
        ["nvidia_driver_module_parameters", "dict"],
    ),
    "bad_module_parameter_value": (
        {
            "nvidia_driver_branch": "535",
            "nvidia_driver_module_parameters": {"nvidia": {"NVreg_RegistryDwords": "a b"}},
        },
        ["nvidia_driver_module_parameters", "without spaces", "nvidia.NVreg_RegistryDwords"],
    ),
    # A name with a line break would write a second line into /etc/modprobe.d: an install
    # command that modprobe runs as root at the next load of the module.
    "bad_module_parameter_name_injects_a_line": (
        {
            "nvidia_driver_branch": "535",
            "nvidia_driver_module_parameters": {
                "nvidia": {"NVreg_X\ninstall nvidia /bin/sh -c id #": 1}
            },
        },
        ["nvidia_driver_module_parameters", "(not a parameter name)", "letters, digits and '_'"],
    ),
    "bad_module_parameter_name_trailing_newline": (
        {
            "nvidia_driver_branch": "535",
            "nvidia_driver_module_parameters": {"nvidia": {"NVreg_X\n": 1}},
        },
        ["nvidia_driver_module_parameters", "(not a parameter name)"],
    ),
    "bad_module_parameter_module": (
        {
            "nvidia_driver_branch": "535",
            "nvidia_driver_module_parameters": {"nouveau": {"modeset": 0}},
        },
        ["nvidia_driver_module_parameters", "nouveau (unknown module)", "nvidia_drm"],
    ),
    "bad_misspelt_variable": (
        {"nvidia_driver_branch": "535", "nvidia_driver_brnach": "580"},
        ["Unknown variable(s) nvidia_driver_brnach", "nvidia_driver_branch"],
    ),
    "bad_reboot_timeout": (
        {"nvidia_driver_branch": "535", "nvidia_driver_reboot_timeout": -5},
        ["nvidia_driver_reboot_timeout is -5", "greater than 0"],
    ),
    "bad_open_on_pre_turing_gpu": (
        {
            "fake_os": OS_FACTS["ubuntu2404"],
            "test_gpus": "v100",
            "nvidia_driver_kernel_module_type": "open",
        },
        ["nvidia_driver_kernel_module_type is 'open'", "older than Turing", "0x1db1 volta"],
    ),
    "bad_proprietary_on_blackwell": (
        {
            "fake_os": OS_FACTS["ubuntu2404"],
            "test_gpus": "rtx5090",
            "nvidia_driver_kernel_module_type": "proprietary",
        },
        ["nvidia_driver_kernel_module_type is 'proprietary'", "open kernel modules", "0x2b85"],
    ),
    "bad_branch_too_old_for_blackwell": (
        {"fake_os": OS_FACTS["ubuntu2404"], "test_gpus": "rtx5090", "nvidia_driver_branch": "550"},
        ["nvidia_driver_branch 550 is too old for Blackwell", "570 or newer"],
    ),
    "bad_secure_boot_with_dkms": (
        {"fake_os": OS_FACTS["ubuntu2404"], "test_gpus": "h100_secure_boot"},
        ["Secure Boot is enabled", "mokutil --import", "nvidia_driver_build 'precompiled'"],
    ),
    "bad_cuda_for_driver_branch": (
        {
            "nvidia_driver_branch": "535",
            "cuda_toolkit_enabled": True,
            "cuda_toolkit_source": "cuda_repo",
            "cuda_toolkit_cuda_repo_key_checksum": SHA,
            "cuda_toolkit_version": "13.0",
        },
        ["cuda_toolkit_version is '13.0'", "branch 580 or newer", "the driver is 535"],
    ),
    "bad_cuda_version_format": (
        {"nvidia_driver_branch": "535", "cuda_toolkit_enabled": True, "cuda_toolkit_version": "12"},
        ["cuda_toolkit_version is '12'", "major.minor"],
    ),
    "bad_cuda_not_in_debian12": (
        {
            "nvidia_driver_branch": "535",
            "cuda_toolkit_enabled": True,
            "cuda_toolkit_version": "12.4",
        },
        ["cuda_toolkit_version is '12.4'", "carries only CUDA 11.8", "'cuda_repo' or 'mirror'"],
    ),
    "bad_cuda_source": (
        {"nvidia_driver_branch": "535", "cuda_toolkit_enabled": True, "cuda_toolkit_source": "pip"},
        ["cuda_toolkit_source", "distribution, cuda_repo, mirror", "pip"],
    ),
}


@pytest.fixture(scope="module")
def preflight(tmp_path_factory: pytest.TempPathFactory, fixtures_real: Path) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("preflight")
    roots = _gpu_roots(tmp / "roots", fixtures_real)
    (tmp / "roots" / "none").mkdir()
    hosts = {}
    for name, (variables, _expected) in CASES.items():
        host = dict(variables)
        host["test_host_root"] = str(roots.get(host.pop("test_gpus", ""), tmp / "roots" / "none"))
        host.setdefault("fake_os", OS_FACTS["debian12"])
        hosts[name] = host
    play = [
        {
            "name": "Run the preflight checks for pretend hosts",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                pretend_os_task(),
                {
                    "name": "Pretend the service manager and Python of a GPU node",
                    "ansible.builtin.set_fact": {
                        "ansible_service_mgr": "{{ test_service_mgr | default('systemd') }}",
                        # The interpreter that runs these tests, as the setup module reports it.
                        "ansible_python": {
                            "executable": sys.executable,
                            "version": {
                                "major": sys.version_info.major,
                                "minor": sys.version_info.minor,
                            },
                        },
                        "cacheable": True,
                    },
                },
                {
                    "name": "Read the GPUs of the host under test",
                    "ansible.builtin.set_fact": {
                        "__nvidia_driver_host_root": "{{ test_host_root }}"
                    },
                },
                {
                    "name": "Preflight",
                    "ansible.builtin.include_role": {"name": "kubegpu.gpu.preflight"},
                },
            ],
        }
    ]
    _rc, report, _stderr = run_playbook(tmp, play, hosts)
    return report


@pytest.mark.parametrize("host", sorted(CASES))
def test_preflight_message(host: str, preflight: dict[str, Any]) -> None:
    expected = CASES[host][1]
    message = failure_message(preflight, host)
    if expected is None:
        assert message is None
        assert preflight["stats"][host]["failures"] == 0
        return
    assert message is not None, f"{host} passed the preflight checks"
    for fragment in expected:
        assert fragment in message, (fragment, message)


def test_there_are_at_least_ten_distinct_bad_inputs() -> None:
    bad = [name for name, (_v, expected) in CASES.items() if expected is not None]
    assert len(bad) >= 10


@pytest.mark.parametrize("host", sorted(CASES))
def test_preflight_changes_nothing(host: str, preflight: dict[str, Any]) -> None:
    for name, result in host_results(preflight, host):
        assert not result.get("changed"), (host, name)


def test_h100_capture_is_what_the_good_host_reads(fixtures_real: Path) -> None:
    path = fixtures_real / "nvidia-smi-csv" / "utkuozdemir-h100-80gb-hbm3-590-query-gpu.csv"
    with path.open(newline="") as handle:
        header, row = list(csv.reader(handle))[:2]
    values = dict(zip([h.strip() for h in header], [v.strip() for v in row], strict=False))
    assert values["pci.device_id"] == "0x233010DE"
