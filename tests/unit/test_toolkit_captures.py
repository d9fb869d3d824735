"""What NVIDIA's container toolkit 1.20.2 really printed on a testbed node (tests/unit/data/toolkit,
SOURCES.md there), held against what the toolkit role and the testbed assume."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import jinja2
import yaml

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "unit" / "data" / "toolkit"
ROLE = ROOT / "roles" / "nvidia_container_toolkit"


def test_the_pinned_release_is_the_one_captured() -> None:
    from kubegpu.testbed import aptrepo

    manifest = yaml.safe_load((ROOT / "plugins/module_utils/data/artifacts.yaml").read_text())
    pin = next(p for p in manifest["packages"] if p["name"] == "nvidia-container-toolkit")
    assert pin["version"] == aptrepo.DEFAULT_VERSION == "1.20.2-1"
    version = (DATA / "nvidia-ctk-1.20.2-version.txt").read_text()
    assert version == "NVIDIA Container Toolkit CLI version 1.20.2\n"


def test_runtime_configure_writes_a_drop_in_that_containerds_imports_read() -> None:
    """1.20.2's dry run: the drop-in with the nvidia runtime, then the top-level config, which
    imports conf.d (1.18.0 wrote its drop-in to config.d, which containerd's imports never read)."""
    out = (DATA / "nvidia-ctk-1.20.2-runtime-configure-containerd-dry-run.stdout.toml").read_text()
    log = (DATA / "nvidia-ctk-1.20.2-runtime-configure-containerd-dry-run.stderr.txt").read_text()
    messages = [re.findall(r'msg="((?:[^"\\]|\\.)*)"', line)[0] for line in log.splitlines()]
    assert messages == [
        "Using config version 2",
        'Using CRI runtime plugin name \\"io.containerd.grpc.v1.cri\\"',
        "Drop-in config:",
        "Top-level config:",
    ]
    # The top-level config begins where a key stands at column 0 again after the drop-in's
    # tables (TOML puts top-level keys before any table).
    first_table = re.search(r"^\[", out, re.M).start()  # type: ignore[union-attr]
    split = re.compile(r"^[a-z_]+ = ", re.M).search(out, first_table).start()  # type: ignore[union-attr]
    dropin = tomllib.loads(out[:split])
    top = tomllib.loads(out[split:])
    assert dropin["version"] == top["version"] == 2
    assert set(dropin) == {"version", "plugins"}
    cri = dropin["plugins"]["io.containerd.grpc.v1.cri"]
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert cri["containerd"]["default_runtime_name"] == "runc"
    assert cri["enable_cdi"] is False  # the toolkit leaves CDI off unless told (--cdi.enabled)
    assert top["imports"] == ["/etc/containerd/conf.d/*.toml"]
    original = tomllib.loads(
        (
            ROOT / "tests/unit/data/containerd/config-default-containerd-1.7.24-debian13.toml"
        ).read_text()
    )
    assert "imports" not in original or original["imports"] == []


def _render(expression: str, **values: object) -> str:
    env = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    env.tests["search"] = lambda value, pattern: re.search(pattern, value) is not None
    env.tests["skipped"] = lambda value: bool(value.get("skipped"))
    return env.from_string(expression).render(**values)


def test_the_role_reports_the_error_line_nvidia_ctk_printed_on_a_simulated_gpu() -> None:
    """The role's report on a node whose GPUs are simulated picks nvidia-ctk's error line out of
    its real stderr (warnings and info lines before it)."""
    tasks = yaml.safe_load((ROLE / "tasks" / "cdi-generate.yml").read_text())[0]["block"]
    report = next(
        t for t in tasks if t["name"] == "Report what nvidia-ctk said about the simulated GPUs"
    )
    stderr = (DATA / "nvidia-ctk-1.20.2-cdi-generate-no-driver.stderr.txt").read_text()
    message = _render(
        report["ansible.builtin.debug"]["msg"],
        inventory_hostname="node2",
        __nvidia_container_toolkit_cdi_generated={"rc": 1, "stderr": stderr.rstrip("\n")},
    )
    assert "SIMULATED" in message and "node2" in message
    assert message.rstrip().endswith(
        'level=error msg="failed to generate CDI spec: failed to create device CDI specs: failed'
        ' to construct device spec generators: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND"'
    )


def test_the_roles_spec_path_is_one_nvidias_runtime_reads() -> None:
    config = tomllib.loads((DATA / "nvidia-container-runtime-1.20.2-config.toml").read_text())
    cdi = config["nvidia-container-runtime"]["modes"]["cdi"]
    assert cdi["default-kind"] == "nvidia.com/gpu"
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert str(Path(defaults["nvidia_container_toolkit_cdi_output"]).parent) in cdi["spec-dirs"]
    assert config["nvidia-container-runtime"]["mode"] == "auto"
