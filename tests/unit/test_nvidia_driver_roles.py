"""The nvidia_driver and cuda_toolkit roles, rendered for every OS they support.

No Ubuntu or RHEL machine exists here, so a throwaway play runs on localhost (connection
local, --check) as several pretend hosts: each overrides its OS facts (set_fact cacheable, with
an in-memory fact cache) and points the role's PCI reader at a sysfs tree built from a real
capture, then runs the roles' read-only parts (tasks_from validate.yml, its vars public) and
reports what the install steps would use. Templates are rendered in check mode and read from
the diff. Nothing on this machine is changed.

Also here: the specs and defaults of the three roles agree, vars/ files hold only internal
names, and every OS family the roles accept has its install task file.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
SRC = REPO / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from kubegpu.simulate import build_simulated_host_root  # noqa: E402

MY_ROLES = ("nvidia_driver", "cuda_toolkit", "preflight")
FINGERPRINT = "EB693B3035CD5710E231E123A4B469963BF863CC"

# OS facts as the setup module reports them on each release.
OS_FACTS: dict[str, dict[str, str]] = {
    "debian12": {
        "distribution": "Debian",
        "os_family": "Debian",
        "distribution_version": "12.11",
        "distribution_major_version": "12",
        "distribution_release": "bookworm",
        "architecture": "x86_64",
        "kernel": "6.1.0-37-amd64",
    },
    "debian13": {
        "distribution": "Debian",
        "os_family": "Debian",
        "distribution_version": "13.1",
        "distribution_major_version": "13",
        "distribution_release": "trixie",
        "architecture": "x86_64",
        "kernel": "6.12.48+deb13-amd64",
    },
    "ubuntu2204": {
        "distribution": "Ubuntu",
        "os_family": "Debian",
        "distribution_version": "22.04",
        "distribution_major_version": "22",
        "distribution_release": "jammy",
        "architecture": "x86_64",
        "kernel": "5.15.0-91-generic",
    },
    "ubuntu2404": {
        "distribution": "Ubuntu",
        "os_family": "Debian",
        "distribution_version": "24.04",
        "distribution_major_version": "24",
        "distribution_release": "noble",
        "architecture": "x86_64",
        "kernel": "6.8.0-45-generic",
    },
    "rhel9": {
        "distribution": "RedHat",
        "os_family": "RedHat",
        "distribution_version": "9.4",
        "distribution_major_version": "9",
        "distribution_release": "Plow",
        "architecture": "x86_64",
        "kernel": "5.14.0-427.13.1.el9_4.x86_64",
    },
    "rocky8_arm": {
        "distribution": "Rocky",
        "os_family": "RedHat",
        "distribution_version": "8.9",
        "distribution_major_version": "8",
        "distribution_release": "Green Obsidian",
        "architecture": "aarch64",
        "kernel": "4.18.0-513.5.1.el8_9.aarch64",
    },
}


# --- running a throwaway play ------------------------------------------------------------------


def run_playbook(
    tmp_path: Path,
    play: list[dict[str, Any]],
    hosts: dict[str, dict[str, Any]],
    *args: str,
    group: str | None = None,
) -> tuple[int, dict[str, Any], str]:
    """Run a play on localhost-only hosts (in `group` when given); return (rc, the JSON
    callback's report, stderr)."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory: dict[str, Any] = {
        "all": {"children": {group: {"hosts": hosts, "vars": local}}}
        if group
        else {"hosts": hosts, "vars": local}
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            # Pretend facts must never reach the persistent fact cache.
            "ANSIBLE_CACHE_PLUGIN": "memory",
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        }
    )
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(tmp_path / "inventory.yml"),
            str(tmp_path / "play.yml"),
            *args,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(
            f"ansible-playbook printed no JSON: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
        )
    return proc.returncode, report, proc.stderr


def host_results(report: dict[str, Any], host: str) -> list[tuple[str, dict[str, Any]]]:
    """(task name, result) for every task that ran on the host, in order."""
    out = []
    for play in report["plays"]:
        for task in play["tasks"]:
            if host in task["hosts"]:
                out.append((task["task"]["name"], task["hosts"][host]))
    return out


def failure_message(report: dict[str, Any], host: str) -> str | None:
    """The message of the task that stopped the host (rescued failures do not count)."""
    for _name, result in host_results(report, host):
        if result.get("failed") and not result.get("ignore_errors"):
            return str(result.get("msg", ""))
    return None


def pretend_os_task() -> dict[str, Any]:
    return {
        "name": "Pretend to be the host under test",
        "ansible.builtin.set_fact": {
            **{f"ansible_{k}": f"{{{{ fake_os.{k} }}}}" for k in OS_FACTS["debian12"]},
            "cacheable": True,
        },
        "when": "fake_os is defined",
    }


# --- GPU trees built from real captures --------------------------------------------------------


def pci_function(root: Path, address: str, device: str, pci_class: str, product: str = "") -> None:
    path = root / "sys" / "bus" / "pci" / "devices" / address
    path.mkdir(parents=True, exist_ok=True)
    (path / "vendor").write_text("0x10de\n")
    (path / "device").write_text(device + "\n")
    (path / "class").write_text(pci_class + "\n")
    if product:
        dmi = root / "sys" / "class" / "dmi" / "id"
        dmi.mkdir(parents=True, exist_ok=True)
        (dmi / "product_name").write_text(product + "\n")


def h100_root(root: Path, fixtures: Path) -> Path:
    """An H100 from the real query-gpu capture: its bus id, device id and PCI class columns."""
    path = fixtures / "nvidia-smi-csv" / "utkuozdemir-h100-80gb-hbm3-590-query-gpu.csv"
    with path.open(newline="") as handle:
        header, row = list(csv.reader(handle))[:2]
    values = {h.strip(): v.strip() for h, v in zip(header, row, strict=False)}
    bus = values["pci.bus_id"].lower()[4:]  # 00000000:00:09.0 -> 0000:00:09.0
    base, sub = int(values["pci.baseClass"], 16), int(values["pci.subClass"], 16)
    pci_class = f"0x{base:02x}{sub:02x}00"
    device = "0x" + values["pci.device_id"][2:6].lower()
    pci_function(root, bus, device, pci_class)
    return root


@pytest.fixture(scope="module")
def gpu_roots(tmp_path_factory: pytest.TempPathFactory, fixtures_real: Path) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("gpu-roots")
    roots = {"none": base / "none"}
    roots["none"].mkdir()
    roots["t4"] = base / "t4"
    build_simulated_host_root(roots["t4"], "telegraf-tesla-t4-515")
    roots["a100"] = base / "a100"
    build_simulated_host_root(roots["a100"], "netdata-a100-sxm4-40gb-mig-510")
    roots["h100"] = h100_root(base / "h100", fixtures_real)
    # An HGX board: the real H100 plus NVSwitch functions (class 0x0680, device 0x22a3, the
    # H100-generation NVSwitch) and the DGX product name; constructed, not captured.
    roots["hgx"] = h100_root(base / "hgx", fixtures_real)
    for index in range(4):
        pci_function(roots["hgx"], f"0000:0{index + 5}:00.0", "0x22a3", "0x068000")
    pci_function(roots["hgx"], "0000:05:00.0", "0x22a3", "0x068000", product="NVIDIA DGX H100")
    # A V100 (pre-Turing) by its device id 0x1db1; constructed, no capture holds one.
    roots["v100"] = base / "v100"
    pci_function(roots["v100"], "0000:00:1e.0", "0x1db1", "0x030200")
    return roots


# --- specs, defaults, vars files -----------------------------------------------------------------


@pytest.mark.parametrize("role", MY_ROLES)
def test_specs_and_defaults_agree(role: str) -> None:
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    # kubegpu_* names are the toolkit's globals: checked by the spec, documented in the sample
    # inventory's kubegpu.yml, defaulted where they are used (see test_role_contracts.py).
    options = {k: v for k, v in options.items() if not k.startswith("kubegpu_")}
    assert set(defaults) == set(options)
    for name, spec in options.items():
        assert name.startswith(role + "_"), name
        assert spec.get("description"), name
        assert spec.get("default") == defaults[name], name
        if "choices" in spec:
            assert defaults[name] in spec["choices"], name


@pytest.mark.parametrize("role", MY_ROLES)
def test_vars_files_hold_only_internal_names(role: str) -> None:
    for path in (ROLES / role / "vars").glob("*.yml"):
        data = yaml.safe_load(path.read_text()) or {}
        assert all(key.startswith(f"__{role}_") for key in data), path


@pytest.mark.parametrize("role", ["nvidia_driver", "cuda_toolkit"])
def test_every_supported_os_family_has_its_install_tasks(role: str) -> None:
    supported = yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text())[
        f"__{role}_supported_os"
    ]
    families = {OS_FACTS[key]["os_family"] for key in OS_FACTS}
    assert {OS_FACTS[k]["distribution"] for k in OS_FACTS} <= set(supported) | {"Rocky"}
    for family in families:
        assert (ROLES / role / "tasks" / f"install-{family}.yml").is_file()
        assert (ROLES / role / "vars" / f"{family}.yml").is_file()


# --- the driver plan on every OS ---------------------------------------------------------------

DRIVER_CASES: dict[str, dict[str, Any]] = {
    "u2404_none_dist": {
        "os": "ubuntu2404",
        "gpus": "none",
        "vars": {},
        "expect": {
            "module_type": "open",
            "pin": [],
            "versioned": [
                "nvidia-headless-580-server-open",
                "nvidia-utils-580-server",
                "nvidia-compute-utils-580-server",
                "libnvidia-compute-580-server",
            ],
            "extra": [],
            "version_package": "libnvidia-compute-580-server",
            "fm": [],
            "names": {"nvidia": "nvidia", "nvidia_drm": "nvidia-drm"},
            "stream": "",
            "headers": True,
        },
    },
    "u2204_h100_precompiled": {
        "os": "ubuntu2204",
        "gpus": "h100",
        "vars": {"nvidia_driver_build": "precompiled"},
        "expect": {
            "module_type": "open",
            "versioned": [
                "nvidia-headless-no-dkms-580-server-open",
                "nvidia-utils-580-server",
                "nvidia-compute-utils-580-server",
                "libnvidia-compute-580-server",
            ],
            "extra": [
                "linux-modules-nvidia-580-server-open-5.15.0-91-generic",
                "linux-modules-nvidia-580-server-open-generic",
            ],
            "headers": False,
        },
    },
    "u2404_hgx_570": {
        "os": "ubuntu2404",
        "gpus": "hgx",
        "vars": {"nvidia_driver_branch": "570", "nvidia_driver_kernel_module_type": "proprietary"},
        "expect": {
            "module_type": "proprietary",
            "versioned": [
                "nvidia-headless-570-server",
                "nvidia-utils-570-server",
                "nvidia-compute-utils-570-server",
                "libnvidia-compute-570-server",
            ],
            "fm": ["nvidia-fabricmanager-570"],
        },
    },
    "u2404_cuda_repo_580": {
        "os": "ubuntu2404",
        "gpus": "t4",
        "vars": {
            "nvidia_driver_source": "cuda_repo",
            "nvidia_driver_kernel_module_type": "proprietary",
        },
        "expect": {
            "module_type": "proprietary",
            "pin": ["nvidia-driver-pinning-580"],
            "versioned": ["cuda-drivers"],
            "repo_url": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/",
            "key_url": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/3bf863cc.pub",
            "fingerprint": FINGERPRINT,
            "keyring": "/etc/apt/keyrings/kubegpu-nvidia-cuda.asc",
            "names": {"nvidia": "nvidia"},
        },
    },
    "rhel9_a100": {
        "os": "rhel9",
        "gpus": "a100",
        "vars": {
            "nvidia_driver_source": "cuda_repo",
            "nvidia_driver_kernel_module_type": "proprietary",
            "nvidia_driver_cuda_repo_key_fingerprint": FINGERPRINT,
        },
        "expect": {
            "module_type": "proprietary",
            "pin": [],
            "versioned": ["cuda-drivers"],
            "extra": ["python3-dnf-plugin-versionlock"],
            "version_package": "nvidia-driver",
            "stream": "580-dkms",
            "repo_url": "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/",
            "key_url": "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/D42D0685.pub",
            "fm": [],
            "fm_package": "nvidia-fabric-manager",
            "headers_packages": [
                "kernel-devel-5.14.0-427.13.1.el9_4.x86_64",
                "kernel-headers-5.14.0-427.13.1.el9_4.x86_64",
            ],
        },
    },
    "rhel9_a100_open": {
        "os": "rhel9",
        "gpus": "a100",
        "vars": {
            "nvidia_driver_source": "cuda_repo",
            "nvidia_driver_cuda_repo_key_checksum": "sha256:" + "0" * 64,
        },
        "expect": {"module_type": "open", "versioned": ["nvidia-open"], "stream": "580-open"},
    },
    "rocky8_arm_v100_precompiled": {
        "os": "rocky8_arm",
        "gpus": "v100",
        "vars": {
            "nvidia_driver_source": "cuda_repo",
            "nvidia_driver_branch": "570",
            "nvidia_driver_build": "precompiled",
            "nvidia_driver_cuda_repo_key_checksum": "sha256:" + "a" * 64,
        },
        "expect": {
            "module_type": "proprietary",
            "versioned": ["cuda-drivers"],
            "stream": "570",
            "repo_url": "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/sbsa/",
            "headers": False,
        },
    },
    "debian12_t4_dist": {
        "os": "debian12",
        "gpus": "t4",
        "vars": {"nvidia_driver_branch": "535"},
        "expect": {
            # The T4 could take the open module, but Debian 12's cannot be installed.
            "module_type": "proprietary",
            "reason_contains": "firmware-nvidia-gsp",
            "pin": [],
            "versioned": ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "libcuda1"],
            "extra": ["firmware-misc-nonfree", "nvidia-persistenced"],
            "version_package": "nvidia-driver",
            "names": {
                "nvidia": "nvidia-current",
                "nvidia_drm": "nvidia-current-drm",
                "nvidia_uvm": "nvidia-current-uvm",
            },
            "headers_packages": ["linux-headers-6.1.0-37-amd64"],
        },
    },
    "debian13_t4_dist": {
        "os": "debian13",
        "gpus": "t4",
        "vars": {"nvidia_driver_branch": "550", "nvidia_driver_persistenced_enabled": False},
        "expect": {
            "module_type": "open",
            "versioned": ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-smi", "libcuda1"],
            "extra": ["firmware-misc-nonfree"],
        },
    },
    "debian12_cuda_repo_570_open": {
        "os": "debian12",
        "gpus": "none",
        "vars": {
            "nvidia_driver_source": "cuda_repo",
            "nvidia_driver_branch": "570",
            "nvidia_driver_kernel_module_type": "open",
        },
        "expect": {
            "module_type": "open",
            "pin": [],
            "versioned": ["nvidia-open-570"],
            "version_package": "nvidia-open-570",
            "repo_url": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/",
            "fm_package": "nvidia-fabricmanager-570",
        },
    },
    "debian12_mirror": {
        "os": "debian12",
        "gpus": "none",
        "vars": {
            "nvidia_driver_source": "mirror",
            "nvidia_driver_mirror_url": "http://mirror.example.internal/cuda/debian12/x86_64/",
            "nvidia_driver_mirror_key_url": "http://mirror.example.internal/cuda/keyring.gpg",
            "nvidia_driver_mirror_key_checksum": "sha256:" + "b" * 64,
            "nvidia_driver_packages": ["nvidia-driver-bundle"],
        },
        "expect": {
            "module_type": "open",
            "pin": [],
            "versioned": ["nvidia-driver-bundle"],
            "extra": [],
            "version_package": "nvidia-driver-bundle",
            "repo_url": "http://mirror.example.internal/cuda/debian12/x86_64/",
            "key_url": "http://mirror.example.internal/cuda/keyring.gpg",
            "keyring": "/etc/apt/keyrings/kubegpu-nvidia-mirror.gpg",
        },
    },
}

REPORT_MSG = {
    "module_type": "{{ __nvidia_driver_module_type }}",
    "reason": "{{ __nvidia_driver_module_type_reason }}",
    "pin": "{{ __nvidia_driver_pin_packages }}",
    "versioned": "{{ __nvidia_driver_versioned_packages }}",
    "extra": "{{ __nvidia_driver_extra_packages }}",
    "version_package": "{{ __nvidia_driver_version_package }}",
    "fm": "{{ __nvidia_driver_fm_packages }}",
    "fm_package": "{{ __nvidia_driver_fabricmanager_package }}",
    "names": "{{ __nvidia_driver_module_name_map }}",
    "stream": "{{ __nvidia_driver_dnf_stream | default('') }}",
    "headers": "{{ __nvidia_driver_needs_headers }}",
    "headers_packages": "{{ __nvidia_driver_headers_packages }}",
    "repo_url": "{{ __nvidia_driver_repo_url if nvidia_driver_source != 'distribution' else '' }}",
    "key_url": "{{ __nvidia_driver_repo_key_url if nvidia_driver_source != 'distribution' else '' }}",
    "fingerprint": "{{ __nvidia_driver_repo_key_fingerprint if nvidia_driver_source != 'distribution' else '' }}",
    "keyring": "{{ __nvidia_driver_keyring if nvidia_driver_source != 'distribution' else '' }}",
}


@pytest.fixture(scope="module")
def driver_plans(
    tmp_path_factory: pytest.TempPathFactory, gpu_roots: dict[str, Path]
) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("driver-plans")
    hosts = {
        name: {
            "fake_os": OS_FACTS[case["os"]],
            "test_host_root": str(gpu_roots[case["gpus"]]),
            **case["vars"],
        }
        for name, case in DRIVER_CASES.items()
    }
    # Module parameters for the template check, on two OS with different module names.
    params = {"nvidia": {"NVreg_EnableGpuFirmware": 1}, "nvidia-drm": {"modeset": True}}
    for name in ("debian12_t4_dist", "u2404_none_dist"):
        hosts[name]["nvidia_driver_module_parameters"] = params
    play = [
        {
            "name": "Render the driver role for pretend hosts",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                pretend_os_task(),
                {
                    "name": "Read the GPUs of the host under test",
                    "ansible.builtin.set_fact": {
                        "__nvidia_driver_host_root": "{{ test_host_root }}"
                    },
                },
                {
                    # public: the role's vars, the plan among them, serve the report below.
                    "name": "Validate",
                    "ansible.builtin.include_role": {
                        "name": "kubegpu.gpu.nvidia_driver",
                        "tasks_from": "validate.yml",
                        "public": True,
                    },
                },
                {"name": "Report the plan", "ansible.builtin.debug": {"msg": REPORT_MSG}},
                {
                    "name": "Render the module parameters",
                    "ansible.builtin.template": {
                        "src": str(
                            ROLES / "nvidia_driver" / "templates" / "nvidia-kubegpu.conf.j2"
                        ),
                        "dest": str(tmp / "{{ inventory_hostname }}.conf"),
                        "mode": "0644",
                    },
                    "when": "nvidia_driver_module_parameters | default({}) | length > 0",
                },
            ],
        }
    ]
    rc, report, stderr = run_playbook(tmp, play, hosts, "--check", "--diff")
    assert rc == 0, {h: failure_message(report, h) for h in hosts} or stderr[-3000:]
    assert not any((tmp / f"{h}.conf").exists() for h in hosts), "check mode wrote a file"
    return report


@pytest.mark.parametrize("case", sorted(DRIVER_CASES))
def test_driver_plan(case: str, driver_plans: dict[str, Any]) -> None:
    results = dict(host_results(driver_plans, case))
    plan = results["Report the plan"]["msg"]
    expect = dict(DRIVER_CASES[case]["expect"])
    reason = expect.pop("reason_contains", None)
    names = expect.pop("names", None)
    for key, value in expect.items():
        assert plan[key] == value, (key, plan[key])
    if reason:
        assert reason in plan["reason"]
    if names:
        assert {k: plan["names"][k] for k in names} == names


def test_the_plan_run_changed_nothing(driver_plans: dict[str, Any]) -> None:
    for case in DRIVER_CASES:
        for name, result in host_results(driver_plans, case):
            if name != "Render the module parameters":
                assert not result.get("changed"), (case, name)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            "debian12_t4_dist",
            "options nvidia-current NVreg_EnableGpuFirmware=1\noptions nvidia-current-drm modeset=1\n",
        ),
        (
            "u2404_none_dist",
            "options nvidia NVreg_EnableGpuFirmware=1\noptions nvidia-drm modeset=1\n",
        ),
    ],
)
def test_module_parameters_use_the_packaging_module_names(
    case: str, expected: str, driver_plans: dict[str, Any]
) -> None:
    result = dict(host_results(driver_plans, case))["Render the module parameters"]
    after = result["diff"][0]["after"]
    lines = after.splitlines(keepends=True)
    assert lines[0].startswith("# ") and "nvidia_driver_module_parameters" in lines[0]
    assert "".join(lines[1:]) == expected


# --- the CUDA toolkit on every OS --------------------------------------------------------------

CUDA_CASES: dict[str, dict[str, Any]] = {
    "ubuntu2404_repo": {
        "os": "ubuntu2404",
        "vars": {
            "cuda_toolkit_source": "cuda_repo",
            "cuda_toolkit_version": "12.8",
            "nvidia_driver_source": "cuda_repo",
            "nvidia_driver_branch": "580",
        },
        "expect": {
            "packages": ["cuda-toolkit-12-8"],
            "prefix": "/usr/local/cuda-12.8",
            "libdir": "/usr/local/cuda-12.8/lib64",
            "repo_url": "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/",
        },
    },
    "debian12_dist": {
        "os": "debian12",
        "vars": {"cuda_toolkit_version": "11.8", "nvidia_driver_branch": "535"},
        "expect": {
            "packages": ["nvidia-cuda-toolkit"],
            "prefix": "/usr/lib/nvidia-cuda-toolkit",
            "libdir": "",
        },
    },
    "rhel9_repo": {
        "os": "rhel9",
        "vars": {
            "cuda_toolkit_source": "cuda_repo",
            "cuda_toolkit_version": "13.0",
            "cuda_toolkit_cuda_repo_key_checksum": "sha256:" + "c" * 64,
            "nvidia_driver_branch": "580",
        },
        "expect": {
            "packages": ["cuda-toolkit-13-0"],
            "prefix": "/usr/local/cuda-13.0",
            "repo_url": "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/",
        },
    },
}


@pytest.fixture(scope="module")
def cuda_plans(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    tmp = tmp_path_factory.mktemp("cuda-plans")
    hosts = {
        name: {"fake_os": OS_FACTS[case["os"]], "cuda_toolkit_enabled": True, **case["vars"]}
        for name, case in CUDA_CASES.items()
    }
    play = [
        {
            "name": "Render the CUDA toolkit role for pretend hosts",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                pretend_os_task(),
                {
                    "name": "Validate",
                    "ansible.builtin.include_role": {
                        "name": "kubegpu.gpu.cuda_toolkit",
                        "tasks_from": "validate.yml",
                        "public": True,
                    },
                },
                {
                    "name": "Report the plan",
                    "ansible.builtin.debug": {
                        "msg": {
                            "packages": "{{ __cuda_toolkit_install_packages }}",
                            "prefix": "{{ __cuda_toolkit_prefix }}",
                            "libdir": "{{ __cuda_toolkit_libdir }}",
                            "repo_url": "{{ __cuda_toolkit_repo_url if cuda_toolkit_source != 'distribution' else '' }}",
                            "driver": "{{ __cuda_toolkit_driver }}",
                        }
                    },
                },
                {
                    "name": "Render the login-shell script",
                    "ansible.builtin.template": {
                        "src": str(ROLES / "cuda_toolkit" / "templates" / "cuda.sh.j2"),
                        "dest": str(tmp / "{{ inventory_hostname }}.sh"),
                        "mode": "0644",
                    },
                },
            ],
        }
    ]
    rc, report, stderr = run_playbook(tmp, play, hosts, "--check", "--diff")
    assert rc == 0, {h: failure_message(report, h) for h in hosts} or stderr[-3000:]
    return report, tmp


@pytest.mark.parametrize("case", sorted(CUDA_CASES))
def test_cuda_plan_and_login_script(case: str, cuda_plans: tuple[dict[str, Any], Path]) -> None:
    report, tmp = cuda_plans
    results = dict(host_results(report, case))
    plan = results["Report the plan"]["msg"]
    for key, value in CUDA_CASES[case]["expect"].items():
        assert plan[key] == value, (key, plan[key])
    assert plan["driver"] == CUDA_CASES[case]["vars"]["nvidia_driver_branch"]
    script = results["Render the login-shell script"]["diff"][0]["after"]
    path = tmp / f"{case}.sh"
    path.write_text(script)
    subprocess.run(["sh", "-n", str(path)], check=True)
    # Sourced twice by a login shell: the toolkit is on PATH once, first.
    shown = subprocess.run(
        [
            "env",
            "-i",
            "PATH=/usr/bin:/bin",
            "sh",
            "-c",
            f". {path}; . {path}; echo $PATH; echo $CUDA_HOME; echo ${{LD_LIBRARY_PATH:-}}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    prefix = CUDA_CASES[case]["expect"]["prefix"]
    assert shown[0] == f"{prefix}/bin:/usr/bin:/bin"
    assert shown[1] == prefix
    assert shown[2] == CUDA_CASES[case]["expect"].get("libdir", f"{prefix}/lib64")
