"""validate.yml through the API and the CLI, on localhost with a SIMULATED GPU.

The simulated host root and nvidia-smi replay a real capture (Tesla T4, driver 515); the
container toolkit and runtime layers are really absent here, so they must fail.
"""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kubegpu
from kubegpu import simulate


@pytest.fixture(scope="module")
def simulated_inventory(tmp_path_factory: pytest.TempPathFactory, fixtures_real: Path) -> Path:
    base = tmp_path_factory.mktemp("sim")
    simulate.build_simulated_host_root(
        base / "root", "telegraf-tesla-t4-515", fixtures=fixtures_real
    )
    smi = simulate.write_replay(base / "bin", "telegraf-tesla-t4-515", fixtures=fixtures_real)
    inventory: dict[str, Any] = {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": {
                        "simnode": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "kubegpu_host_root": str(base / "root"),
                            "kubegpu_nvidia_smi": str(smi),
                            "kubegpu_expected_gpu_count": 1,
                            "kubegpu_check_kubelet": False,
                            "nvidia_driver_branch": "515",
                        }
                    }
                }
            }
        }
    }
    path = base / "inventory.json"
    path.write_text(json.dumps(inventory))
    return path


def test_check_reports_every_layer_from_the_simulated_gpu(simulated_inventory: Path) -> None:
    result = kubegpu.check(simulated_inventory)
    assert result.failed_hosts == ["simnode"]
    assert result.failed[0].task == "Fail the node when a check failed"
    report = result.readiness["simnode"]
    assert report["verdict"] == "not_ready"
    assert report["simulated"] is True
    status = {c["name"]: c["status"] for c in report["checks"]}
    for name in ["pci_gpus_present", "nvidia_smi_healthy", "gpu_count", "driver_branch"]:
        assert status[name] == "pass", name
    # Really absent on this machine: reported as failures, each with a remedy.
    for name in ["container_toolkit_installed", "cdi_spec", "runtime_nvidia_configured"]:
        assert status[name] == "fail", name
    failing = [c for c in report["checks"] if c["status"] == "fail"]
    assert all(c["remedy"] for c in failing)


def test_check_expectation_mismatch_fails_the_gpu_layer(simulated_inventory: Path) -> None:
    result = kubegpu.check(
        simulated_inventory,
        extra_vars={"kubegpu_expected_gpu_count": 8, "nvidia_driver_branch": "580"},
    )
    status = {c["name"]: c for c in result.readiness["simnode"]["checks"]}
    assert status["gpu_count"]["status"] == "fail"
    assert status["driver_branch"]["status"] == "fail"
    assert "580" in str(status["driver_branch"]["expected"])


@pytest.mark.parametrize(
    ("record", "status", "expected"),
    [
        # What role nvidia_driver recorded on the node is the expectation...
        ({"branch": "580", "installed_version": "580.95.05"}, "fail", "driver branch 580"),
        ({"branch": "515"}, "pass", "driver branch 515"),
        # ...and without a record or an inventory value, any driver passes.
        (None, "skip", "any driver branch"),
    ],
)
def test_without_nvidia_driver_branch_the_driver_role_s_record_is_expected(
    simulated_inventory: Path,
    tmp_path: Path,
    record: dict[str, str] | None,
    status: str,
    expected: str,
) -> None:
    inventory = json.loads(simulated_inventory.read_text())
    host = inventory["all"]["children"]["gpu_nodes"]["hosts"]["simnode"]
    del host["nvidia_driver_branch"]
    root = tmp_path / "root"
    shutil.copytree(host["kubegpu_host_root"], root, symlinks=True)
    host["kubegpu_host_root"] = str(root)
    if record is not None:
        facts = root / "etc/ansible/facts.d"
        facts.mkdir(parents=True, exist_ok=True)
        (facts / "kubegpu_driver.fact").write_text(json.dumps(record))
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(inventory))
    check = {c["name"]: c for c in kubegpu.check(path).readiness["simnode"]["checks"]}
    assert check["driver_branch"]["status"] == status
    assert expected in str(check["driver_branch"]["expected"])


def kubegpu_check(inventory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubegpu check -i INVENTORY ARGS...` through the CLI of this environment."""
    command = [str(Path(sys.executable).parent / "kubegpu"), "check", "-i", str(inventory)]
    return subprocess.run([*command, *args], capture_output=True, text=True)


def test_cli_check_prints_the_report_and_exits_2(simulated_inventory: Path) -> None:
    proc = kubegpu_check(simulated_inventory)
    assert proc.returncode == 2
    assert "Readiness: simnode: not_ready (SIMULATED GPU)" in proc.stdout
    assert "runtime_nvidia_configured" in proc.stdout
    data = json.loads(kubegpu_check(simulated_inventory, "--json").stdout)
    assert data["readiness"]["simnode"]["verdict"] == "not_ready"
    assert data["failed"][0]["host"] == "simnode"


CHROMIUM = shutil.which("chromium")


def test_cli_writes_a_report_to_share_that_a_browser_renders(
    simulated_inventory: Path, tmp_path: Path
) -> None:
    page, markdown = tmp_path / "report.html", tmp_path / "report.md"
    proc = kubegpu_check(simulated_inventory, "--html", str(page), "--markdown", str(markdown))
    assert proc.returncode == 2
    text = markdown.read_text()
    assert "| simnode | not_ready (SIMULATED GPU) |" in text
    assert "`runtime_nvidia_configured`" in text and "  - remedy: " in text
    if CHROMIUM is None:
        pytest.fail("chromium is missing: scripts/setup installs it")
    # Debian's Chromium, headless: the page parses into the matrix and the failures, whole.
    browser = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run(
        [*browser, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    assert dom.count('<td class="fail">') >= 1 and dom.count('<td class="pass">') >= 1
    assert '<span class="simulated">SIMULATED GPU</span>' in dom
    data = json.loads(kubegpu_check(simulated_inventory, "--json").stdout)
    for check in data["readiness"]["simnode"]["checks"]:
        if check["status"] == "fail":
            # A text node: the browser writes quotes as they are, only &, < and > escaped.
            assert html.escape(check["remedy"], quote=False) in dom
    # A screenshot, kept for a person to look at (KUBEGPU_REPORT_SCREENSHOT names where).
    shot = Path(os.environ.get("KUBEGPU_REPORT_SCREENSHOT") or tmp_path / "report.png")
    subprocess.run(
        [*browser, "--window-size=1200,1400", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
