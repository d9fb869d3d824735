"""The modules as Ansible runs them, against the SIMULATED GPU (a replay of real captures).

A handful of real `ansible localhost -m kubegpu.gpu.<module>` runs (normal, check + diff, a
missing nvidia-smi, a node without a driver) are started together, once per session; error
paths run the module's main() in-process, where they cost milliseconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.kubegpu.gpu.plugins.modules import gpu_node_readiness, nvidia_gpu_facts

SRC = Path(__file__).resolve().parents[2] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from kubegpu.simulate import build_simulated_host_root, write_replay  # noqa: E402

A100 = "netdata-a100-sxm4-40gb-mig-510"
T4 = "telegraf-tesla-t4-515"
CONTAINERD = (
    "runtime-config/containerd-v2-nvidia-ctk-created-set-as-default-nvidia-docker-1788.toml"
)
BIN = Path(sys.executable).parent


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def full_node(root: Path, fixtures: Path) -> Path:
    """The T4 simulated host plus what the toolkit and runtime roles would add."""
    build_simulated_host_root(root, T4)
    for name in ("nvidia-container-runtime", "nvidia-ctk"):
        write(root / "usr/bin" / name, "")
    write(
        root / "etc/cdi/nvidia.yaml",
        'cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: "0"\n- name: all\n',
    )
    shutil.copyfile(fixtures / CONTAINERD, write(root / "etc/containerd/config.toml", ""))
    write(root / "etc/modprobe.d/nvidia-blacklists-nouveau.conf", "blacklist nouveau\n")
    write(root / "var/lib/kubelet/device-plugins/kubelet.sock", "")
    write(root / "var/lib/kubelet/device-plugins/nvidia-gpu.sock", "")
    return root


def ansible_env(repo_root: Path, tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(repo_root / "ansible.cfg"),
            "ANSIBLE_STDOUT_CALLBACK": "json",
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_CACHE_PLUGIN": "memory",
            "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-local"),
            "ANSIBLE_REMOTE_TEMP": str(tmp / "ansible-remote"),
            "ANSIBLE_NOCOLOR": "1",
        }
    )
    return env


def adhoc(module: str, args: dict[str, Any], *flags: str) -> list[str]:
    return [
        str(BIN / "ansible"),
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-m",
        f"kubegpu.gpu.{module}",
        "-a",
        json.dumps(args),
        *flags,
    ]


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, repo_root: Path, fixtures_real: Path
) -> dict[str, Any]:
    """Start every Ansible run at once, wait for all, and parse what each returned."""
    tmp = tmp_path_factory.mktemp("modules")
    a100_smi = write_replay(tmp / "a100", A100, python=sys.executable)
    t4_smi = write_replay(tmp / "t4", T4, python=sys.executable)
    nodriver_smi = write_replay(tmp / "nodriver", "no-driver", python=sys.executable)
    a100_root, t4_root = tmp / "a100-root", full_node(tmp / "t4-root", fixtures_real)
    build_simulated_host_root(a100_root, A100)
    nodriver_root = tmp / "nodriver-root"
    build_simulated_host_root(nodriver_root, "no-driver")
    commands = {
        "facts": adhoc(
            "nvidia_gpu_facts", {"nvidia_smi": str(a100_smi), "host_root": str(a100_root)}
        ),
        "facts_check": adhoc(
            "nvidia_gpu_facts",
            {"nvidia_smi": str(t4_smi), "host_root": str(t4_root)},
            "--check",
            "--diff",
        ),
        "facts_missing": adhoc("nvidia_gpu_facts", {"nvidia_smi": str(tmp / "no/nvidia-smi")}),
        "ready": adhoc(
            "gpu_node_readiness",
            {
                "nvidia_smi": str(t4_smi),
                "host_root": str(t4_root),
                "expected_gpu_count": 1,
                "driver_branch": "515",
                "mig_mode": "disabled",
            },
        ),
        "nodriver_check": adhoc(
            "gpu_node_readiness",
            {
                "nvidia_smi": str(nodriver_smi),
                "host_root": str(nodriver_root),
                "check_kubelet": False,
            },
            "--check",
            "--diff",
        ),
        "doc": [
            str(BIN / "ansible-doc"),
            "--json",
            "kubegpu.gpu.nvidia_gpu_facts",
            "kubegpu.gpu.gpu_node_readiness",
        ],
    }
    env = ansible_env(repo_root, tmp)
    procs = dict(
        (
            name,
            subprocess.Popen(
                cmd,
                cwd=repo_root,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for name, cmd in commands.items()
    )
    results: dict[str, Any] = {"paths": {"a100_smi": a100_smi, "t4_smi": t4_smi}}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        if name == "doc":
            assert proc.returncode == 0, err
            results[name] = json.loads(out)
            continue
        data = json.loads(out)
        results[name] = {
            "rc": proc.returncode,
            "stderr": err,
            "stats": data["stats"]["localhost"],
            "result": data["plays"][0]["tasks"][0]["hosts"]["localhost"],
        }
    return results


def test_facts_from_mig_capture(runs: dict[str, Any]) -> None:
    run = runs["facts"]
    assert run["rc"] == 0 and run["stats"]["ok"] == 1 and run["stats"]["changed"] == 0
    facts = run["result"]["ansible_facts"]["kubegpu_gpus"]
    assert facts["available"] is True and facts["simulated"] is True
    assert facts["nvidia_smi"] == str(runs["paths"]["a100_smi"])
    assert (facts["driver_version"], facts["cuda_version"], facts["count"]) == (
        "510.47.03",
        "11.6",
        1,
    )
    assert facts["mig_enabled"] is True
    gpu = facts["gpus"][0]
    assert gpu["uuid"] == "GPU-27b94a00-ed54-5c24-b1fd-1054085de32a"
    assert [(d["gpu_instance_id"], d["memory_total_mib"]) for d in gpu["mig"]["devices"]] == [
        (1, 19968),
        (2, 19968),
    ]
    assert facts["kernel_module"] == {
        "version": "510.47.03",
        "flavor": "proprietary",
        "arch": "x86_64",
    }
    assert facts["failure"] is None
    # -L ran (MIG is on) and had no MIG lines to give: the capture has no -L of this machine.
    assert any("listed 0 of the 2 MIG devices" in n for n in facts["notes"])
    warnings = " ".join(run["result"].get("warnings", []))
    assert "SIMULATED nvidia-smi" in warnings


def test_facts_check_and_diff_mode(runs: dict[str, Any]) -> None:
    run = runs["facts_check"]
    assert run["rc"] == 0 and run["result"]["changed"] is False
    assert "diff" not in run["result"] or not run["result"]["diff"]
    facts = run["result"]["ansible_facts"]["kubegpu_gpus"]
    assert facts["gpus"][0]["name"] == "Tesla T4"
    assert facts["gpus"][0]["ecc"]["volatile_uncorrected"] == 0
    assert facts["mig_enabled"] is False and facts["notes"] == []  # no -L run without MIG


def test_facts_with_missing_nvidia_smi(runs: dict[str, Any]) -> None:
    run = runs["facts_missing"]
    assert run["rc"] == 0  # a finding about the host, not a task failure
    facts = run["result"]["ansible_facts"]["kubegpu_gpus"]
    assert facts["available"] is False and facts["count"] == 0
    assert facts["failure"]["class"] == "not_installed"
    assert facts["failure"]["rc"] == 127
    assert "No such file or directory" in facts["failure"]["message"]
    assert "nvidia_driver" in facts["failure"]["remedy"]


def test_readiness_on_simulated_node(runs: dict[str, Any]) -> None:
    run = runs["ready"]
    assert run["rc"] == 0, run["result"].get("msg")
    result = run["result"]
    assert result["changed"] is False and result["simulated"] is True
    assert result["verdict"] == "ready_with_warnings"
    statuses = dict((c["name"], c["status"]) for c in result["checks"])
    assert statuses["nvidia_smi_healthy"] == statuses["gpu_count"] == "pass"
    assert statuses["driver_branch"] == statuses["runtime_nvidia_configured"] == "pass"
    assert statuses["persistence_mode"] == "warn"
    # host_root is not /: service states cannot be asked, and the checks say why.
    for name in ("runtime_service", "kubelet_running"):
        assert statuses[name] == "skip"
    skipped = next(c for c in result["checks"] if c["name"] == "kubelet_running")
    assert "systemctl here would answer for this machine" in skipped["observed"]
    assert result["summary"]["fail"] == 0
    assert result["ansible_facts"]["kubegpu_node_readiness"]["verdict"] == "ready_with_warnings"


def test_readiness_without_driver_fails_in_check_mode(runs: dict[str, Any]) -> None:
    run = runs["nodriver_check"]
    assert run["rc"] != 0 and run["stats"]["failures"] == 1
    result = run["result"]
    assert result["changed"] is False and result["verdict"] == "not_ready"
    assert "nvidia_smi_healthy (fail): driver_not_loaded (rc 9)" in result["msg"]
    assert "pci_gpus_present (fail)" in result["msg"]
    smi_check = next(c for c in result["checks"] if c["name"] == "nvidia_smi_healthy")
    assert "modprobe nvidia" in smi_check["remedy"]


@pytest.mark.parametrize("module", [nvidia_gpu_facts, gpu_node_readiness])
def test_documentation_matches_argument_spec(
    runs: dict[str, Any], module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "kubegpu.gpu." + module.__name__.rsplit(".", 1)[1]
    doc = runs["doc"][name]["doc"]  # what ansible-doc renders
    assert doc["attributes"]["check_mode"]["support"] == "full"
    assert doc["attributes"]["diff_mode"]["support"] == "N/A"
    for key in ("EXAMPLES", "RETURN"):
        assert yaml.safe_load(getattr(module, key))
    captured: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def fake(**kwargs: Any) -> None:
        captured.update(kwargs)
        raise Stop

    monkeypatch.setattr(module, "AnsibleModule", fake)
    with pytest.raises(Stop):
        module.main()
    spec = captured["argument_spec"]
    assert captured["supports_check_mode"] is True
    assert set(spec) == set(doc["options"])
    for option, rules in spec.items():
        documented = doc["options"][option]
        assert documented["type"] == rules["type"], option
        assert documented.get("default") == rules.get("default"), option
        assert documented.get("choices") == rules.get("choices"), option


# --- error paths, in-process ----------------------------------------------------------------


def run_main(
    module: Any, args: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "module, args, message",
    [
        (
            nvidia_gpu_facts,
            {"host_root": "/nonexistent/host"},
            "host_root '/nonexistent/host' is not a directory",
        ),
        (nvidia_gpu_facts, {"nvidia_smi": "bin/nvidia-smi"}, "nvidia_smi must be an absolute path"),
        (
            gpu_node_readiness,
            {"expected_gpu_count": -1},
            "expected_gpu_count must be 0 or more, got -1",
        ),
        (
            gpu_node_readiness,
            {"driver_branch": "latest"},
            "driver_branch must be a branch like '580'",
        ),
        (gpu_node_readiness, {"driver_branch": "5"}, "got '5'"),
        (gpu_node_readiness, {"runtime": "podman"}, "value of runtime must be one of"),
        (gpu_node_readiness, {"fail_on": ["error"]}, "fail_on"),
        (gpu_node_readiness, {"host_root": "/nonexistent/host"}, "host_root '/nonexistent/host'"),
        (gpu_node_readiness, {"nvidia_smi": "nvidia-smi"}, "nvidia_smi must be an absolute path"),
    ],
)
def test_bad_input_fails_before_anything_runs(
    module: Any, args: dict[str, Any], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_main(module, args, capsys)
    assert result["failed"] is True
    assert message in result["msg"]
    assert "checks" not in result and "ansible_facts" not in result


def test_unrunnable_nvidia_smi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    smi = write_replay(tmp_path / "bin", T4)
    smi.chmod(0o644)
    result = run_main(
        nvidia_gpu_facts, {"nvidia_smi": str(smi), "host_root": str(tmp_path)}, capsys
    )
    facts = result["ansible_facts"]["kubegpu_gpus"]
    assert facts["available"] is False and facts["failure"]["rc"] == 126
    assert "Permission denied" in facts["failure"]["message"]


def test_fail_on_warn(
    tmp_path: Path, fixtures_real: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = full_node(tmp_path / "host", fixtures_real)
    smi = write_replay(tmp_path / "bin", T4, python=sys.executable)
    args = {"nvidia_smi": str(smi), "host_root": str(root), "check_kubelet": False}
    result = run_main(gpu_node_readiness, dict(args, fail_on=["fail", "warn"]), capsys)
    assert result["failed"] is True
    assert "persistence_mode (warn): disabled on GPU 0 (00000000:00:1E.0)" in result["msg"]
    result = run_main(gpu_node_readiness, dict(args, fail_on=[]), capsys)
    assert "failed" not in result and result["verdict"] == "ready_with_warnings"
    assert result["summary"] == {"pass": 13, "fail": 0, "warn": 1, "skip": 9}
    assert sorted(c["name"] for c in result["checks"] if c["status"] == "skip") == [
        "driver_branch",
        "fabric_manager",
        "kubelet_device_plugin_socket",
        "kubelet_running",
        "mig_mode",
        "nvidia_device_plugin_registered",
        "row_remapping",
        "runtime_config_loaded",
        "runtime_service",
    ]


# --- the simulated GPU itself -------------------------------------------------------------------


def replay(
    script: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(script), *args], capture_output=True, env=env, timeout=30)


def test_replay_answers_from_the_capture(tmp_path: Path, fixtures_real: Path) -> None:
    script = write_replay(tmp_path / "bin", A100, python=sys.executable)
    xml = (fixtures_real / "nvidia-smi-xml" / f"{A100}.xml").read_bytes()
    for args in (["-q", "-x"], ["-x", "-q"], ["--query", "--xml-format"]):
        done = replay(script, *args)
        assert done.returncode == 0 and done.stdout == xml  # byte for byte
        assert done.stderr.startswith(b"KUBEGPU-SIMULATED-NVIDIA-SMI: kubegpu simulation")
    listed = replay(script, "-L")
    assert listed.stdout == (
        b"GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-27b94a00-ed54-5c24-b1fd-1054085de32a)\n"
    )
    assert b"2 MIG device line(s) left out rather than made up" in listed.stderr
    version = replay(script, "--version")
    assert b"NVIDIA-SMI version  : 510.47.03" in version.stdout
    assert b"KUBEGPU-SIMULATED-NVIDIA-SMI" in version.stdout
    assert b"This is not NVIDIA's nvidia-smi" in replay(script, "-h").stdout
    other = replay(script, "-q")
    assert other.returncode == 2 and b"only -q -x, -L" in other.stderr


def test_replay_with_a_real_list_capture(tmp_path: Path, fixtures_real: Path) -> None:
    listing = (
        fixtures_real
        / "nvidia-smi-table/nvidia-docs-a100-sxm4-40gb-450-mig-mixed-legacy-uuid-L.txt"
    )
    script = write_replay(tmp_path / "bin", A100, list_text=listing, python=sys.executable)
    assert replay(script, "--list-gpus").stdout == listing.read_bytes()


@pytest.mark.parametrize(
    "capture, rc, text",
    [
        ("no-driver", 9, b"couldn't communicate with the NVIDIA driver"),
        ("no-devices", 6, b"No devices were found"),
        ("driver-library-mismatch", 18, b"NVML library version: 550.144"),
    ],
)
def test_replay_failure_captures(tmp_path: Path, capture: str, rc: int, text: bytes) -> None:
    script = write_replay(tmp_path / "bin", capture, python=sys.executable)
    for args in (["-q", "-x"], ["-L"]):
        done = replay(script, *args)
        assert done.returncode == rc and text in done.stdout
        assert b"KUBEGPU-SIMULATED-NVIDIA-SMI" in done.stderr


def test_replay_finds_its_capture(tmp_path: Path, fixtures_real: Path) -> None:
    script = write_replay(tmp_path / "bin", T4, python=sys.executable)
    xml = fixtures_real / "nvidia-smi-xml" / f"{A100}.xml"
    # $KUBEGPU_SIMULATED_CAPTURE may name a single XML file and wins over the set beside it.
    done = replay(script, "-q", "-x", env=dict(os.environ, KUBEGPU_SIMULATED_CAPTURE=str(xml)))
    assert done.stdout == xml.read_bytes()
    shutil.rmtree(tmp_path / "bin/nvidia-smi.capture")
    env = dict(os.environ)
    env.pop("KUBEGPU_SIMULATED_CAPTURE", None)
    missing = replay(script, "-q", "-x", env=env)
    assert missing.returncode == 2 and b"no capture set found" in missing.stderr


def test_simulated_host_root_follows_the_capture(tmp_path: Path, fixtures_real: Path) -> None:
    info = build_simulated_host_root(tmp_path, T4, flavor="open")
    assert (info["capture"], info["driver_version"], info["gpu_count"]) == (T4, "515.105.01", 1)
    assert info["pci_bus_ids"] == ["0000:00:1e.0"]  # from <pci_bus_id>00000000:00:1E.0
    device = tmp_path / "sys/bus/pci/devices/0000:00:1e.0"
    # <pci_device_id>1EB810DE and <pci_sub_system_id>12A210DE in the capture
    assert (device / "vendor").read_text() == "0x10de\n"
    assert (device / "device").read_text() == "0x1eb8\n"
    assert (device / "subsystem_device").read_text() == "0x12a2\n"
    assert os.readlink(device / "driver") == "../../drivers/nvidia"
    assert (tmp_path / "sys/module/nvidia/version").read_text() == "515.105.01\n"
    assert sorted(p.name for p in (tmp_path / "dev").iterdir()) == [
        "nvidia-modeset",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia0",
        "nvidiactl",
    ]
    readme = (tmp_path / "SIMULATED-GPU-README").read_text()
    assert readme.startswith("SIMULATED GPU - kubegpu test double. This is not a real host.")
    assert "influxdata/telegraf plugins/inputs/nvidia_smi/testdata/tesla-t4.xml" in readme
    assert "open kernel module" in readme
    # Building again over the same tree gives the same tree.
    assert build_simulated_host_root(tmp_path, T4, flavor="open") == info


def test_simulated_host_root_errors(tmp_path: Path) -> None:
    from kubegpu.simulate import CaptureError, list_captures

    assert list_captures() == [A100, T4, "no-driver", "no-devices", "driver-library-mismatch"]
    with pytest.raises(CaptureError, match="not a real capture; known: " + A100):
        build_simulated_host_root(tmp_path, "tesla-v100-made-up")
    with pytest.raises(ValueError, match="flavor must be"):
        build_simulated_host_root(tmp_path, T4, flavor="nouveau")
    empty = build_simulated_host_root(tmp_path / "none", "no-driver")
    assert empty["gpu_count"] == 0 and not any((tmp_path / "none/dev").iterdir())
    assert "no GPU data" in (tmp_path / "none/SIMULATED-GPU-README").read_text()


# --- service state -----------------------------------------------------------------------------


class StubModule:
    def __init__(self, host_root: str) -> None:
        self.params = {"host_root": host_root}

    def get_bin_path(self, name: str) -> str:
        return "/usr/bin/" + name


def test_service_states(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str, str]:
        calls.append(argv)
        return 3, "active\ninactive\n", ""  # systemctl exits 3 when a unit is not active

    states, reason = gpu_node_readiness.service_states(StubModule(str(tmp_path)), run, ["a"])
    assert (
        states is None and f"host_root (kubegpu_host_root) is {tmp_path}" in reason and calls == []
    )
    real_isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda p: p == "/run/systemd/system" or real_isdir(p))
    states, reason = gpu_node_readiness.service_states(
        StubModule("/"), run, ["kubelet", "containerd", "kubelet"]
    )
    assert calls == [["/usr/bin/systemctl", "is-active", "containerd", "kubelet"]]
    assert states == {"containerd": "active", "kubelet": "inactive"}
    states, reason = gpu_node_readiness.service_states(StubModule("/"), run, ["only-one"])
    assert states is None and "2 answers for 1 units (rc 3)" in reason


def test_readiness_of_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    """host_root / on the machine running the tests: read-only, and a real no-GPU case here."""
    result = run_main(gpu_node_readiness, {"fail_on": [], "check_kubelet": False}, capsys)
    checks = dict((c["name"], c) for c in result["checks"])
    if shutil.which("nvidia-smi") is None and not Path("/usr/local/nvidia/bin/nvidia-smi").exists():
        assert checks["nvidia_smi_healthy"]["status"] == "fail"
        assert checks["nvidia_smi_healthy"]["observed"].startswith("not_installed (rc 127)")
    if not os.path.isdir("/run/systemd/system"):
        assert checks["runtime_service"]["observed"] == (
            "service state unknown: systemd is not running on this host"
        )
    assert result["simulated"] is False
