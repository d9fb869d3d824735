"""node_readiness on fake host roots built in tmp_path, one failing layer at a time.

Each node starts as the SIMULATED GPU host root of a real capture (kubegpu.simulate), with the
container stack a role would add: the containerd config nvidia-ctk wrote in a real issue
(runtime-config/), toolkit binaries, a CDI spec, the kubelet's sockets. Each case breaks one
layer and checks the status and remedy of the check that owns it. GPU faults that no real
capture shows are made by changing one value of a real capture, and say so.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import node_readiness as nr
from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_smi as smi

SRC = Path(__file__).resolve().parents[2] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from kubegpu.simulate import build_simulated_host_root  # noqa: E402

T4 = "telegraf-tesla-t4-515"
A100 = "netdata-a100-sxm4-40gb-mig-510"
T4_UUID = "GPU-d37e67a5-91dd-3774-a5cb-99096249601a"
CONTAINERD = (
    "runtime-config/containerd-v2-nvidia-ctk-created-set-as-default-nvidia-docker-1788.toml"
)
DOCKER = "runtime-config/docker-daemon-nvidia-ctk-generated-nvct-378.json"
CTK_LOG = "runtime-config/nvidia-ctk-1.18.0-configure-containerd-log-nvct-1404.txt"
ALL_UNITS = dict(
    (u, "active")
    for u in (*nr.KUBELET_UNITS, "containerd", "docker", "crio", nr.FABRIC_MANAGER_UNIT)
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


CDI = Path(__file__).parent / "data" / "cdi"


def cdi_spec(names: list[str], form: str = "yaml") -> str:
    """A CDI spec in nvidia-ctk's layout and key order, assembled from real pieces
    (tests/unit/data/cdi/SOURCES.md): the shared containerEdits of a 575.57.08 spec, then for
    each name the device entry of GPU 0 of an 8-GPU machine, named, then the kind."""
    head = (CDI / "docker-buildx-3295-nvidia-ctk-575.57.08-spec-head.yaml").read_text()
    entry = (CDI / "nvidia-container-toolkit-314-device-entry-gpu0.yaml").read_text()
    devices = "".join(f'{entry}  name: "{n}"\n' for n in names)
    text = f"{head}devices:\n{devices}kind: nvidia.com/gpu\n"
    return json.dumps(yaml.safe_load(text), indent=2) if form == "json" else text


def build_node(root: Path, fixtures: Path, capture: str = T4) -> Path:
    build_simulated_host_root(root, capture)
    for name in ("nvidia-container-runtime", "nvidia-ctk", "nvidia-container-cli"):
        write(root / "usr/bin" / name, "")
    write(root / "etc/cdi/nvidia.yaml", cdi_spec(["0", T4_UUID, "all"]))
    shutil.copyfile(fixtures / CONTAINERD, write(root / "etc/containerd/config.toml", ""))
    write(
        root / "etc/modprobe.d/blacklist-nouveau.conf",
        "blacklist nouveau\noptions nouveau modeset=0\n",
    )
    for sock in ("kubelet.sock", "nvidia-gpu.sock"):
        write(root / "var/lib/kubelet/device-plugins" / sock, "")
    return root


def run_smi(
    fixtures: Path, xml: str | None = None, text: str | None = None, rc: int = 0
) -> dict[str, Any]:
    """nvidia_smi.query() answered from a real capture (or the given text)."""
    if text is None:
        text = (fixtures / "nvidia-smi-xml" / f"{xml}.xml").read_text()
    answer = text

    def run(argv: list[str]) -> tuple[int, str, str]:
        return (rc, answer, "") if argv[1:] == ["-q", "-x"] else (0, "", "")

    return smi.query(run, "/usr/bin/nvidia-smi")


def evaluate(
    root: Path, result: dict[str, Any], runtime: str = "containerd", **options: Any
) -> dict[str, dict[str, Any]]:
    opts: dict[str, Any] = {
        "runtime": runtime,
        "services": dict(ALL_UNITS),
        "services_reason": "test",
        # Every active unit started after the node's files were written.
        "started": {u: time.time() + 5 for u, state in ALL_UNITS.items() if state == "active"},
        "started_reason": "test",
    }
    opts.update(options)
    checks = nr.evaluate(nr.read_host_view(str(root), runtime), result, opts)
    assert len({c["name"] for c in checks}) == len(checks)
    for check in checks:
        assert check["status"] in nr.STATUSES and check["layer"] in nr.LAYERS
        assert (check["remedy"] is not None) == (check["status"] in ("fail", "warn")), check
    return dict((c["name"], c) for c in checks)


@pytest.fixture
def node(tmp_path: Path, fixtures_real: Path) -> Path:
    return build_node(tmp_path / "host", fixtures_real)


@pytest.fixture
def t4(fixtures_real: Path) -> dict[str, Any]:
    return run_smi(fixtures_real, T4)


def test_healthy_node(node: Path, t4: dict[str, Any]) -> None:
    checks = evaluate(node, t4, expected_gpu_count=1, driver_branch="515", mig_mode="disabled")
    statuses = dict((n, c["status"]) for n, c in checks.items())
    assert statuses == {
        "pci_gpus_present": "pass",
        "nouveau_not_loaded": "pass",
        "nouveau_blacklisted": "pass",
        "nvidia_modules_loaded": "pass",
        "kernel_module_matches_userspace": "pass",
        "device_nodes": "pass",
        "nvidia_smi_healthy": "pass",
        "gpu_count": "pass",
        "driver_branch": "pass",
        "persistence_mode": "warn",  # the T4 capture has persistence mode Disabled
        "fabric_manager": "skip",
        "ecc_errors": "pass",
        "retired_pages": "pass",
        "row_remapping": "skip",  # <remapped_rows>N/A in the capture
        "mig_mode": "pass",
        "container_toolkit_installed": "pass",
        "cdi_spec": "pass",
        "runtime_nvidia_configured": "pass",
        "runtime_service": "pass",
        "runtime_config_loaded": "pass",
        "kubelet_running": "pass",
        "kubelet_device_plugin_socket": "pass",
        "nvidia_device_plugin_registered": "pass",
        "kubelet_config_loaded": "pass",
    }
    assert (
        checks["pci_gpus_present"]["observed"] == "1 NVIDIA GPU(s): 0000:00:1e.0 [10de:1eb8] nvidia"
    )
    assert checks["kernel_module_matches_userspace"]["observed"] == (
        "kernel module 515.105.01, nvidia-smi 515.105.01"
    )
    assert checks["nvidia_smi_healthy"]["observed"] == "driver 515.105.01, CUDA 11.7, 1 GPU(s)"
    assert "default runtime nvidia" in checks["runtime_nvidia_configured"]["observed"]
    assert (
        "BinaryName /usr/bin/nvidia-container-runtime"
        in checks["runtime_nvidia_configured"]["observed"]
    )
    assert "nvidia-persistenced" in checks["persistence_mode"]["remedy"]
    assert nr.verdict(list(checks.values())) == "ready_with_warnings"
    assert nr.read_host_view(str(node))["simulated"] is True


def test_node_without_gpu_or_driver(tmp_path: Path, fixtures_real: Path) -> None:
    """What a testbed node is: no GPU, nvidia-smi exits 9 with the real message."""
    root = tmp_path / "host"
    build_simulated_host_root(root, "no-driver")
    text = (fixtures_real / "nvidia-smi-errors/couldnt-communicate.txt").read_text()
    checks = evaluate(root, run_smi(fixtures_real, text=text, rc=9))
    assert checks["pci_gpus_present"]["status"] == "fail"
    assert "lspci" in checks["pci_gpus_present"]["remedy"]
    assert checks["nvidia_modules_loaded"]["status"] == "fail"
    assert checks["nvidia_smi_healthy"]["status"] == "fail"
    assert checks["nvidia_smi_healthy"]["observed"].startswith("driver_not_loaded (rc 9)")
    assert checks["nvidia_smi_healthy"]["remedy"] == smi.REMEDIES["driver_not_loaded"]
    assert checks["device_nodes"]["status"] == "skip"
    assert checks["kernel_module_matches_userspace"]["status"] == "skip"
    for name in ("ecc_errors", "retired_pages", "row_remapping", "persistence_mode"):
        assert checks[name]["status"] == "skip"
        assert "driver_not_loaded" in checks[name]["observed"]
    assert nr.verdict(list(checks.values())) == "not_ready"


# --- one broken layer at a time -----------------------------------------------------------------


def steps(*changes: Callable[[Path], object]) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        for one in changes:
            one(root)

    return change


def remove(path: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        target = root / path
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()

    return change


def append(path: str, text: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        with open(root / path, "a", encoding="utf-8") as handle:
            handle.write(text)

    return change


def replace(path: str, old: str, new: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        content = (root / path).read_text()
        assert old in content, old
        (root / path).write_text(content.replace(old, new))

    return change


HOST_CASES = [
    # (id, change, check, status, words in observed, words in remedy)
    (
        "no-pci-gpu",
        remove("sys/bus/pci/devices/0000:00:1e.0"),
        "pci_gpus_present",
        "fail",
        "no NVIDIA GPU",
        "lspci",
    ),
    (
        "smi-sees-more-than-pci",
        remove("sys/bus/pci/devices/0000:00:1e.0"),
        "gpu_count",
        "fail",
        "nvidia-smi sees 1 of 0 PCI GPUs",
        "dmesg",
    ),
    (
        "nouveau-loaded",
        append("proc/modules", "nouveau 2801664 0 - Live 0x0 \n"),
        "nouveau_not_loaded",
        "fail",
        "nouveau is loaded",
        "Blacklist nouveau",
    ),
    (
        "nouveau-not-blacklisted",
        remove("etc/modprobe.d/blacklist-nouveau.conf"),
        "nouveau_blacklisted",
        "warn",
        "no blacklist entry",
        "blacklist nouveau",
    ),
    (
        "nvidia-not-loaded",
        replace("proc/modules", "nvidia 0 0", "i915 0 0"),
        "nvidia_modules_loaded",
        "fail",
        "loaded: nvidia_drm, nvidia_modeset, nvidia_uvm",
        "modprobe nvidia",
    ),
    (
        "uvm-not-loaded",
        replace("proc/modules", "nvidia_uvm 0 0", "snd_hda 0 0"),
        "nvidia_modules_loaded",
        "warn",
        "loaded: nvidia, nvidia_drm, nvidia_modeset",
        "nvidia_uvm",
    ),
    (
        "kernel-module-older",
        replace("proc/driver/nvidia/version", "515.105.01", "515.86.01"),
        "kernel_module_matches_userspace",
        "fail",
        "kernel module 515.86.01, nvidia-smi 515.105.01",
        "reboot",
    ),
    (
        "sys-module-version-only",
        remove("proc/driver/nvidia/version"),
        "kernel_module_matches_userspace",
        "pass",
        "kernel module 515.105.01",
        None,
    ),
    (
        "no-dev-nvidia0",
        remove("dev/nvidia0"),
        "device_nodes",
        "fail",
        "missing: nvidia0",
        "nvidia-modprobe",
    ),
    (
        "no-dev-uvm",
        remove("dev/nvidia-uvm"),
        "device_nodes",
        "warn",
        "missing: nvidia-uvm",
        "nvidia-modprobe",
    ),
    (
        "nvswitch-without-fm",
        steps(
            *(
                lambda r, f=f, v=v: write(r / "sys/bus/pci/devices/0000:c3:00.0" / f, v)
                for f, v in (
                    ("vendor", "0x10de\n"),
                    ("class", "0x068000\n"),
                    ("device", "0x22a3\n"),
                )
            )
        ),
        "fabric_manager",
        "fail",
        "1 NVSwitch PCI function(s); nvidia-fabricmanager is inactive",
        "systemctl enable --now nvidia-fabricmanager",
    ),
    (
        "dgx-without-fm",
        lambda r: write(r / "sys/class/dmi/id/product_name", "DGX A100\n"),
        "fabric_manager",
        "fail",
        "system 'DGX A100'",
        "nvidia-fabricmanager",
    ),
    (
        "no-toolkit",
        steps(remove("usr/bin/nvidia-container-runtime"), remove("usr/bin/nvidia-ctk")),
        "container_toolkit_installed",
        "fail",
        "/usr/bin/nvidia-container-cli",
        "nvidia_container_toolkit",
    ),
    (
        "no-cdi-spec",
        remove("etc/cdi/nvidia.yaml"),
        "cdi_spec",
        "fail",
        "no CDI spec of kind nvidia.com/gpu in /etc/cdi, /var/run/cdi",
        "nvidia-ctk cdi generate",
    ),
    (
        "cdi-spec-stale",
        steps(
            lambda r: write(r / "var/run/cdi/nvidia.yaml", cdi_spec(["all"])),
            remove("etc/cdi/nvidia.yaml"),
        ),
        "cdi_spec",
        "fail",
        "not in the spec: GPU 0",
        "nvidia-ctk cdi generate",
    ),
    (
        "no-containerd-config",
        remove("etc/containerd/config.toml"),
        "runtime_nvidia_configured",
        "fail",
        "built-in defaults",
        "container_runtime",
    ),
    (
        "containerd-without-nvidia",
        lambda r: write(r / "etc/containerd/config.toml", "version = 2\n"),
        "runtime_nvidia_configured",
        "fail",
        "no nvidia runtime",
        "drop-in",
    ),
    (
        "binaryname-missing",
        remove("usr/bin/nvidia-container-runtime"),
        "runtime_nvidia_configured",
        "fail",
        "missing: /usr/bin/nvidia-container-runtime",
        "BinaryName",
    ),
    (
        "no-kubelet-socket",
        remove("var/lib/kubelet/device-plugins/kubelet.sock"),
        "kubelet_device_plugin_socket",
        "fail",
        "kubelet.sock missing",
        "start the kubelet",
    ),
    (
        "no-device-plugin",
        remove("var/lib/kubelet/device-plugins/nvidia-gpu.sock"),
        "nvidia_device_plugin_registered",
        "warn",
        "no nvidia device plugin socket",
        "gpu_cluster",
    ),
]


@pytest.mark.parametrize("case", HOST_CASES, ids=[c[0] for c in HOST_CASES])
def test_broken_host_layer(node: Path, t4: dict[str, Any], case: tuple[Any, ...]) -> None:
    _, change, name, status, observed, remedy = case
    change(node)
    services = dict(ALL_UNITS)
    services[nr.FABRIC_MANAGER_UNIT] = "inactive"
    check = evaluate(node, t4, services=services)[name]
    assert check["status"] == status, check
    assert observed in check["observed"], check
    if remedy is None:
        assert check["remedy"] is None
    else:
        assert remedy in check["remedy"], check


def test_gpu_bound_to_vfio_is_counted_and_named(node: Path, t4: dict[str, Any]) -> None:
    link = node / "sys/bus/pci/devices/0000:00:1e.0/driver"
    link.unlink()
    (node / "sys/bus/pci/drivers/vfio-pci").mkdir()
    link.symlink_to("../../drivers/vfio-pci")
    result = run_smi(Path("/nonexistent"), text="No devices were found\n", rc=6)
    checks = evaluate(node, result, expected_gpu_count=1)
    assert checks["pci_gpus_present"]["observed"].endswith("vfio-pci")
    assert checks["gpu_count"]["status"] == "pass"  # PCI still holds the one expected GPU
    assert checks["nvidia_smi_healthy"]["remedy"] == smi.REMEDIES["no_devices"]
    assert "vfio-pci" in smi.REMEDIES["no_devices"]


# --- GPU data: real captures, one value changed --------------------------------------------------

GPU_CASES = [
    # (id, capture, old, new, options, check, status, words in observed, words in remedy)
    (
        "volatile-uncorrectable",
        T4,
        "<dram_uncorrectable>0</dram_uncorrectable>\n            </volatile>",
        "<dram_uncorrectable>2</dram_uncorrectable>\n            </volatile>",
        {},
        "ecc_errors",
        "fail",
        "uncorrectable errors since boot: GPU 0 (00000000:00:1E.0): 2",
        "nvidia-smi -r",
    ),
    (
        "aggregate-uncorrectable",
        T4,
        "<dram_uncorrectable>0</dram_uncorrectable>\n            </aggregate>",
        "<dram_uncorrectable>5</dram_uncorrectable>\n            </aggregate>",
        {},
        "ecc_errors",
        "warn",
        "in the GPU's lifetime: GPU 0 (00000000:00:1E.0): 5",
        "DCGM",
    ),
    (
        "ecc-change-pending",
        T4,
        "<pending_ecc>Enabled</pending_ecc>",
        "<pending_ecc>Disabled</pending_ecc>",
        {},
        "ecc_errors",
        "warn",
        "ECC change pending",
        "reboot",
    ),
    (
        "retirement-pending",
        T4,
        "<pending_retirement>No</pending_retirement>",
        "<pending_retirement>Yes</pending_retirement>",
        {},
        "retired_pages",
        "fail",
        "retirement pending on GPU 0",
        "reset",
    ),
    (
        "row-remap-pending",
        A100,
        "<remapped_rows>N/A</remapped_rows>",
        "<remapped_rows><remapped_row_corr>0</remapped_row_corr><remapped_row_unc>1</remapped_row_unc>"
        "<remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No"
        "</remapped_row_failure></remapped_rows>",
        {},
        "row_remapping",
        "fail",
        "row remap pending on GPU 0",
        "reset the GPU",
    ),
    (
        "row-remap-failure",
        A100,
        "<remapped_rows>N/A</remapped_rows>",
        "<remapped_rows><remapped_row_pending>No</remapped_row_pending><remapped_row_failure>Yes"
        "</remapped_row_failure></remapped_rows>",
        {},
        "row_remapping",
        "fail",
        "row remap failure on GPU 0",
        "replaced",
    ),
    (
        "persistence-on",
        T4,
        "<persistence_mode>Disabled</persistence_mode>",
        "<persistence_mode>Enabled</persistence_mode>",
        {},
        "persistence_mode",
        "pass",
        "enabled on all GPUs",
        None,
    ),
    (
        "mig-wanted-off",
        A100,
        "",
        "",
        {"mig_mode": "disabled"},
        "mig_mode",
        "fail",
        "GPU 0 (00000000:00:04.0) MIG enabled",
        "-mig 0",
    ),
    (
        "mig-not-supported",
        T4,
        "",
        "",
        {"mig_mode": "enabled"},
        "mig_mode",
        "fail",
        "no MIG support: GPU 0",
        "mig_mode to disabled",
    ),
    (
        "mig-change-pending",
        A100,
        "<pending_mig>Enabled</pending_mig>",
        "<pending_mig>Disabled</pending_mig>",
        {"mig_mode": "enabled"},
        "mig_mode",
        "warn",
        "change pending on GPU 0",
        "reboot",
    ),
    (
        "wrong-branch",
        T4,
        "",
        "",
        {"driver_branch": "535"},
        "driver_branch",
        "fail",
        "nvidia-smi 515.105.01",
        "upgrade_driver.yml",
    ),
    (
        "exact-version",
        T4,
        "",
        "",
        {"driver_branch": "515.105.01"},
        "driver_branch",
        "pass",
        "nvidia-smi 515.105.01",
        None,
    ),
    (
        "expected-two-gpus",
        T4,
        "",
        "",
        {"expected_gpu_count": 2},
        "gpu_count",
        "fail",
        "1 GPU(s) where 2 are expected",
        "expected_gpu_count",
    ),
    (
        "services-unknown",
        T4,
        "",
        "",
        {"services": None, "services_reason": "host_root is /x"},
        "kubelet_running",
        "skip",
        "service state unknown: host_root is /x",
        None,
    ),
]


@pytest.mark.parametrize("case", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_gpu_faults(tmp_path: Path, fixtures_real: Path, case: tuple[Any, ...]) -> None:
    _, capture, old, new, options, name, status, observed, remedy = case
    root = build_node(tmp_path / "host", fixtures_real, capture)
    text = (fixtures_real / "nvidia-smi-xml" / f"{capture}.xml").read_text()
    if old:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    check = evaluate(root, run_smi(fixtures_real, text=text), **options)[name]
    assert check["status"] == status, check
    assert observed in check["observed"], check
    if remedy is None:
        assert check["remedy"] is None
    else:
        assert remedy in check["remedy"], check


def test_library_mismatch_compares_nvml_version(node: Path, fixtures_real: Path) -> None:
    text = (
        fixtures_real / "nvidia-smi-errors/nvml-mismatch-550.144-intel-llvm-17614.txt"
    ).read_text()
    checks = evaluate(node, run_smi(fixtures_real, text=text, rc=18), driver_branch="550")
    mismatch = checks["kernel_module_matches_userspace"]
    assert mismatch["status"] == "fail"
    assert mismatch["observed"] == "kernel module 515.105.01, NVML library 550.144"
    assert mismatch["remedy"] == smi.REMEDIES["driver_library_mismatch"]
    assert checks["driver_branch"]["status"] == "pass"  # the userspace is on 550
    assert checks["nvidia_smi_healthy"]["observed"].startswith("driver_library_mismatch (rc 18)")


def test_fabric_manager_from_gpu_fabric_state(node: Path, fixtures_real: Path) -> None:
    write(node / "sys/class/dmi/id/product_name", "NVIDIA DGX H100\n")
    text = (fixtures_real / "nvidia-smi-xml" / f"{T4}.xml").read_text()
    # R550+ XML carries <fabric><state>/<status>; added to the real capture here.
    for state, status in (("Completed", "Success"), ("In Progress", "N/A")):
        edited = text.replace(
            "<processes>",
            f"<fabric><state>{state}</state><status>{status}"
            "</status></fabric>\n        <processes>",
            1,
        )
        check = evaluate(
            node,
            run_smi(fixtures_real, text=edited),
            services=None,
            services_reason="host_root is /host",
        )["fabric_manager"]
        assert check["status"] == ("pass" if state == "Completed" else "fail"), check
        assert f"GPU fabric state: {state}/" in check["observed"]
    check = evaluate(
        node, run_smi(fixtures_real, T4), services=None, services_reason="host_root is /host"
    )["fabric_manager"]
    assert check["status"] == "skip" and "host_root is /host" in check["observed"]


# --- container runtimes, from the real configuration captures ------------------------------------


def test_scan_real_containerd_config(fixtures_real: Path) -> None:
    entries = nr.scan_toml((fixtures_real / CONTAINERD).read_text())
    cri = ("plugins", "io.containerd.grpc.v1.cri", "containerd")
    assert nr.toml_get(entries, ("version",)) == 2
    assert nr.toml_get(entries, (*cri, "default_runtime_name")) == "nvidia"
    nvidia = (*cri, "runtimes", "nvidia")
    assert nr.toml_get(entries, (*nvidia, "runtime_type")) == "io.containerd.runc.v2"
    assert nr.toml_get(entries, (*nvidia, "privileged_without_host_devices")) is False
    assert nr.toml_get(entries, (*nvidia, "runtime_engine")) == ""
    # The last line, added by hand in the issue, lands in the options table.
    assert nr.toml_get(entries, (*nvidia, "options", "SystemdCgroup")) is True
    assert nr.toml_get(entries, (*nvidia, "options", "BinaryName")) == (
        "/usr/bin/nvidia-container-runtime"
    )


def test_scan_toml_forms() -> None:
    text = (
        "imports = [\n  \"/etc/containerd/conf.d/*.toml\", # drop-ins\n  'x.toml',\n]\n"
        '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes."nvidia"]\n'
        'runtime_type = "io.containerd.runc.v2" # comment\nnum = 3\nname = "a#b"\n'
    )
    entries = nr.scan_toml(text)
    assert nr.toml_get(entries, ("imports",)) == ["/etc/containerd/conf.d/*.toml", "x.toml"]
    table = ("plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes", "nvidia")
    assert nr.toml_get(entries, (*table, "runtime_type")) == "io.containerd.runc.v2"
    assert nr.toml_get(entries, (*table, "num")) == 3
    assert nr.toml_get(entries, (*table, "name")) == "a#b"


def ctk_dropin_path(fixtures: Path) -> str:
    """Where nvidia-ctk 1.18.0 wrote its drop-in, read from its real log."""
    for line in (fixtures / CTK_LOG).read_text().splitlines():
        if "Wrote updated config to " in line:
            return line.split("Wrote updated config to ", 1)[1].strip()
    raise AssertionError("no drop-in path in the log")


def test_ctk_dropin_not_imported(node: Path, fixtures_real: Path, t4: dict[str, Any]) -> None:
    dropin = ctk_dropin_path(fixtures_real)
    assert dropin == "/etc/containerd/config.d/99-nvidia.toml"
    shutil.copyfile(fixtures_real / CONTAINERD, write(node / dropin.lstrip("/"), ""))
    write(
        node / "etc/containerd/config.toml",
        'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
    )
    check = evaluate(node, t4)["runtime_nvidia_configured"]
    assert check["status"] == "fail"
    assert "only in files containerd does not import: " + dropin in check["observed"]
    assert "imports" in check["remedy"] and "config.d" in check["remedy"]
    # Importing where the file really is fixes it; a relative import resolves against the
    # main config's directory.
    write(node / "etc/containerd/config.toml", 'version = 2\nimports = ["config.d/*.toml"]\n')
    check = evaluate(node, t4)["runtime_nvidia_configured"]
    assert check["status"] == "pass", check
    assert "nvidia runtime in " + dropin in check["observed"]


def test_dropin_newer_than_main_config(node: Path, t4: dict[str, Any]) -> None:
    write(
        node / "etc/containerd/conf.d/99-nvidia.toml",
        'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]\n'
        'runtime_type = "io.containerd.runc.v2"\n',
    )
    write(
        node / "etc/containerd/config.toml",
        'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
    )
    check = evaluate(node, t4)["runtime_nvidia_configured"]
    assert check["status"] == "fail"
    assert "(version 3 > 2)" in check["observed"]
    assert "containerd exits" in check["remedy"]


@pytest.mark.parametrize(
    ("dropin", "status", "observed"),
    [
        # A duplicate key: containerd refuses the file, so the node is not ready.
        (
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
            'runtime_type = "a"\nruntime_type = "b"\n',
            "fail",
            "not valid TOML: /etc/containerd/conf.d/99-nvidia.toml: TOML error",
        ),
        # An inline table defines the runtime as well as a table header does.
        (
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
            'nvidia = { runtime_type = "io.containerd.runc.v2" }\n',
            "pass",
            "nvidia runtime in /etc/containerd/conf.d/99-nvidia.toml",
        ),
    ],
)
def test_dropin_read_as_containerd_reads_it(
    node: Path, t4: dict[str, Any], dropin: str, status: str, observed: str
) -> None:
    write(node / "etc/containerd/conf.d/99-nvidia.toml", "version = 2\n" + dropin)
    write(
        node / "etc/containerd/config.toml",
        'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n',
    )
    check = evaluate(node, t4)["runtime_nvidia_configured"]
    assert check["status"] == status, check
    assert observed in check["observed"]


def test_k3s_containerd_config(node: Path, fixtures_real: Path, t4: dict[str, Any]) -> None:
    remove("etc/containerd/config.toml")(node)
    k3s = node / "var/lib/rancher/k3s/agent/etc/containerd/config.toml"
    shutil.copyfile(fixtures_real / CONTAINERD, write(k3s, ""))
    check = evaluate(node, t4)["runtime_nvidia_configured"]
    assert check["status"] == "pass"
    assert check["observed"].startswith("/var/lib/rancher/k3s/agent/etc/containerd/config.toml")


def test_docker_daemon_json(node: Path, fixtures_real: Path, t4: dict[str, Any]) -> None:
    shutil.copyfile(fixtures_real / DOCKER, write(node / "etc/docker/daemon.json", ""))
    check = evaluate(node, t4, runtime="docker")["runtime_nvidia_configured"]
    assert check["status"] == "pass", check
    # The real file names the runtime by a bare name, found on PATH.
    assert check["observed"] == (
        "runtimes.nvidia.path nvidia-container-runtime; default-runtime runc (unset)"
    )
    remove("usr/bin/nvidia-container-runtime")(node)
    check = evaluate(node, t4, runtime="docker")["runtime_nvidia_configured"]
    assert check["status"] == "fail" and "binary not found" in check["observed"]
    write(node / "etc/docker/daemon.json", (fixtures_real / DOCKER).read_text()[:-3])
    check = evaluate(node, t4, runtime="docker")["runtime_nvidia_configured"]
    assert check["status"] == "fail" and "not valid JSON" in check["observed"]
    remove("etc/docker/daemon.json")(node)
    check = evaluate(node, t4, runtime="docker")["runtime_nvidia_configured"]
    assert check["status"] == "fail" and "not found" in check["observed"]
    assert "--runtime=docker" in check["remedy"]


def test_crio_dropin(node: Path, t4: dict[str, Any]) -> None:
    check = evaluate(node, t4, runtime="crio")["runtime_nvidia_configured"]
    assert check["status"] == "fail" and "no CRI-O config" in check["observed"]
    write(
        node / "etc/crio/crio.conf.d/99-nvidia.toml",
        "[crio]\n[crio.runtime]\n[crio.runtime.runtimes.nvidia]\n"
        'runtime_path = "/usr/bin/nvidia-container-runtime"\nruntime_type = "oci"\n',
    )
    check = evaluate(node, t4, runtime="crio")["runtime_nvidia_configured"]
    assert check["status"] == "pass"
    assert check["observed"] == "nvidia runtime in /etc/crio/crio.conf.d/99-nvidia.toml"


def test_a_daemon_started_before_its_configuration_changed_is_named(
    node: Path, t4: dict[str, Any]
) -> None:
    """containerd and the kubelet must run the configuration on disk: a file changed after the
    daemon started, or a restart a cut-off kubegpu run left pending, fails with the remedy."""
    before = time.time() - 3600
    started = {u: before for u, state in ALL_UNITS.items() if state == "active"}
    write(node / "var/lib/kubelet/config.yaml", "kind: KubeletConfiguration\n")
    checks = evaluate(node, t4, started=started)
    runtime = checks["runtime_config_loaded"]
    assert runtime["status"] == "fail"
    assert "before /etc/containerd/config.toml changed" in runtime["observed"]
    assert runtime["remedy"] == "Restart it so that it loads them: `systemctl restart containerd`."
    kubelet = checks["kubelet_config_loaded"]
    assert kubelet["status"] == "fail" and "/var/lib/kubelet/config.yaml" in kubelet["observed"]
    # Started after the files, but a kubegpu run was cut off between its write and the restart.
    write(node / "var/lib/kubegpu/restart-pending/containerd.json", '{"files": []}\n')
    checks = evaluate(node, t4)
    assert checks["runtime_config_loaded"]["status"] == "fail"
    assert "cut off before restarting it" in checks["runtime_config_loaded"]["observed"]
    assert checks["kubelet_config_loaded"]["status"] == "pass"
    # Unknown start times, or the daemon not running: not judged here.
    checks = evaluate(node, t4, started=None, started_reason="systemd is not running")
    assert checks["runtime_config_loaded"]["status"] == "skip"
    assert "systemd is not running" in checks["runtime_config_loaded"]["observed"]
    services = dict(ALL_UNITS)
    services.update((u, "inactive") for u in nr.RUNTIME_UNITS["containerd"])
    checks = evaluate(node, t4, services=services)
    assert checks["runtime_config_loaded"]["observed"] == "containerd is not running"


def test_runtime_none_and_services(node: Path, t4: dict[str, Any]) -> None:
    checks = evaluate(node, t4, runtime="none", check_kubelet=False)
    for name in (
        "container_toolkit_installed",
        "cdi_spec",
        "runtime_nvidia_configured",
        "runtime_service",
        "kubelet_running",
        "kubelet_device_plugin_socket",
        "nvidia_device_plugin_registered",
    ):
        assert checks[name]["status"] == "skip", name
    services = dict(ALL_UNITS)
    services.update((u, "inactive") for u in nr.RUNTIME_UNITS["containerd"] + nr.KUBELET_UNITS)
    services["containerd"] = "failed"
    checks = evaluate(node, t4, services=services)
    assert checks["runtime_service"]["status"] == "fail"
    assert "containerd failed" in checks["runtime_service"]["observed"]
    assert "journalctl -u containerd" in checks["runtime_service"]["remedy"]
    assert checks["kubelet_running"]["status"] == "fail"
    assert "kubelet inactive" in checks["kubelet_running"]["observed"]
    # k3s runs its own containerd and kubelet: its unit being active satisfies both.
    services["k3s"] = "active"
    checks = evaluate(node, t4, services=services)
    assert checks["runtime_service"]["status"] == checks["kubelet_running"]["status"] == "pass"


def test_verdict_and_failing() -> None:
    make = nr.make_check
    checks = [make("a", "driver", "pass", "o", "e"), make("b", "gpu", "warn", "o", "e", "r")]
    assert nr.verdict(checks) == "ready_with_warnings"
    assert nr.verdict(checks[:1]) == "ready"
    checks.append(make("c", "kubelet", "fail", "o", "e", "r"))
    assert nr.verdict(checks) == "not_ready"
    assert [c["name"] for c in nr.failing(checks, ["fail", "warn"])] == ["b", "c"]
    assert nr.summarize(checks) == {"pass": 1, "fail": 1, "warn": 1, "skip": 0}
    assert make("d", "gpu", "pass", "o", "e", "ignored")["remedy"] is None
    with pytest.raises(ValueError, match="unknown check status"):
        make("e", "gpu", "ok", "o", "e")


def test_cdi_spec_under_var_run_link_counted_once(node: Path, t4: dict[str, Any]) -> None:
    remove("etc/cdi/nvidia.yaml")(node)
    write(node / "run/cdi/nvidia.yaml", cdi_spec(["0", "all"]))
    (node / "var").mkdir(exist_ok=True)
    (node / "var/run").symlink_to("../run")
    check = evaluate(node, t4)["cdi_spec"]
    assert check["status"] == "pass"
    assert check["observed"] == "/var/run/cdi/nvidia.yaml; devices: 0, all"


# --- the CDI spec against the node's GPUs and MIG devices ---------------------------------------

PR314_NAMES = [
    line.split(":", 1)[1].strip().strip('"')
    for line in (CDI / "nvidia-container-toolkit-314-device-names-8gpu.txt")
    .read_text()
    .splitlines()
]
OTHER_UUID = PR314_NAMES[1]  # GPU 0 of the 8-GPU machine


@pytest.mark.parametrize(
    ("names", "form"),
    [
        (["0", T4_UUID, "all"], "yaml"),  # nvidia-ctk's default names: index and UUID
        (["0", T4_UUID, "all"], "json"),  # --format=json
        ([T4_UUID], "yaml"),  # --device-name-strategy=uuid
        (["gpu0", "all"], "yaml"),  # --device-name-strategy=type-index
    ],
)
def test_cdi_spec_naming_every_gpu_passes(
    node: Path, t4: dict[str, Any], names: list[str], form: str
) -> None:
    remove("etc/cdi/nvidia.yaml")(node)
    path = "etc/cdi/nvidia." + form
    write(node / path, cdi_spec(names, form))
    check = evaluate(node, t4)["cdi_spec"]
    assert check["status"] == "pass", check
    assert check["observed"] == f"/{path}; devices: {', '.join(sorted(names))}"


@pytest.mark.parametrize(
    ("names", "status", "observed"),
    [
        # The real names of an 8-GPU machine on this 1-GPU node: index 0 matches, the rest are
        # another machine's GPUs.
        (PR314_NAMES, "fail", "not on this node: 1, 2, 3, 4, 5, 6, 7, GPU-"),
        # Another machine's UUID only: GPU 0 is not named, and the UUID is foreign.
        (
            [OTHER_UUID, "all"],
            "fail",
            f"not in the spec: GPU 0 (00000000:00:1E.0) {T4_UUID}; not on this node: {OTHER_UUID}",
        ),
        (["all"], "fail", "not in the spec: GPU 0"),  # "all" alone names no GPU
        ([], "fail", "devices: none"),  # an empty device list
        (["0", "1", "all"], "fail", "not on this node: 1"),
        (["0:0", "0", "all"], "fail", "not on this node: 0:0"),  # MIG is off on the T4
    ],
)
def test_cdi_spec_cannot_pass_vacuously(
    node: Path, t4: dict[str, Any], names: list[str], status: str, observed: str
) -> None:
    write(node / "etc/cdi/nvidia.yaml", cdi_spec(names))
    check = evaluate(node, t4)["cdi_spec"]
    assert check["status"] == status and observed in check["observed"], check
    assert "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in check["remedy"]
    assert "nvidia-cdi-refresh" in check["remedy"]


def test_cdi_spec_problems_that_stop_the_runtime(node: Path, t4: dict[str, Any]) -> None:
    # The same device in two specs: containerd's CDI registry refuses the conflict.
    write(node / "var/run/cdi/nvidia.json", cdi_spec(["0", "all"], "json"))
    check = evaluate(node, t4)["cdi_spec"]
    assert check["status"] == "fail"
    assert "defined in more than one spec: 0, all" in check["observed"]
    assert "remove the stale file" in check["remedy"]
    remove("var/run/cdi/nvidia.json")(node)
    # A spec that does not read: the file and the place are named.
    write(node / "etc/cdi/nvidia.yaml", cdi_spec(["0"]).replace("  env:\n", "  env:\n\t- x\n"))
    check = evaluate(node, t4)["cdi_spec"]
    assert check["status"] == "fail", check
    assert check["observed"].startswith("/etc/cdi/nvidia.yaml: ") and "line 10" in check["observed"]
    # Only a spec of another NVIDIA kind: no nvidia.com/gpu spec.
    write(
        node / "etc/cdi/nvidia.yaml",
        cdi_spec(["all"]).replace("kind: nvidia.com/gpu", "kind: management.nvidia.com/gpu"),
    )
    check = evaluate(node, t4)["cdi_spec"]
    assert check["status"] == "fail" and "no CDI spec of kind nvidia.com/gpu" in check["observed"]


def test_cdi_spec_without_gpu_data_is_not_passed(node: Path, fixtures_real: Path) -> None:
    text = (fixtures_real / "nvidia-smi-errors/couldnt-communicate.txt").read_text()
    check = evaluate(node, run_smi(fixtures_real, text=text, rc=9))["cdi_spec"]
    assert check["status"] == "skip" and "nvidia-smi gave no GPU data" in check["observed"]


@pytest.mark.parametrize(
    ("names", "status", "observed"),
    [
        (["0:0", "0:1", "all"], "pass", "devices: 0:0, 0:1, all"),
        (["mig0:0", "mig0:1"], "pass", "devices: mig0:0, mig0:1"),
        (["0", "all"], "fail", "not in the spec: MIG device 0:0 of GPU 0"),
        (["0:0", "0:1", "0:2"], "fail", "not on this node: 0:2"),
        # The MIG devices' UUIDs are not in the capture (driver 510 -q -x; -L not captured).
        (["0:0", "0:1", "MIG-GPU-27b94a00-ed54-5c24-b1fd-1054085de32a/1/0"], "warn", "not checked"),
    ],
)
def test_cdi_spec_names_every_mig_device(
    tmp_path: Path, fixtures_real: Path, names: list[str], status: str, observed: str
) -> None:
    root = build_node(tmp_path / "host", fixtures_real, A100)
    write(root / "etc/cdi/nvidia.yaml", cdi_spec(names))
    check = evaluate(root, run_smi(fixtures_real, A100))["cdi_spec"]
    assert check["status"] == status and observed in check["observed"], check
