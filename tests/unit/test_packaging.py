"""The package ships its Ansible content; the collection builds; the CLI entry points work."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def unpacked_wheel(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(repo_root)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("kubegpu-*.whl")
    target = out / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


def test_wheel_carries_the_content_and_finds_it_outside_the_checkout(unpacked_wheel: Path) -> None:
    content = unpacked_wheel / "kubegpu" / "_content"
    collection = content / "collections" / "ansible_collections" / "kubegpu" / "gpu"
    for path in ["site.yml", "ansible.cfg", "playbooks/validate.yml", "inventories/sample"]:
        assert (content / path).exists(), path
    assert (collection / "galaxy.yml").is_file()
    accel = collection.parent / "accel"
    assert (accel / "plugins" / "strategy" / "linear.py").is_file()
    assert (collection / "plugins" / "modules").is_dir()
    assert (collection / "roles").is_dir()
    # The data files read on the controller (dashboard, rules, training scripts, the cluster
    # layer's objects).
    names = ("gpu-dashboard.json", "gpu-alert-rules.yaml", "train_pytorch.py")
    for name in (*names, "cluster/device-plugin-daemonset.yaml"):
        assert (collection / "plugins" / "module_utils" / "data" / name).is_file(), name
    # The real captures the SIMULATED GPU replays ship with it.
    captures = unpacked_wheel / "kubegpu" / "captures"
    assert (captures / "SOURCES.md").is_file()
    assert (captures / "nvidia-smi-xml" / "telegraf-tesla-t4-515.xml").is_file()
    env = {**os.environ, "PYTHONPATH": str(unpacked_wheel)}
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kubegpu.content import find_content; print(find_content().root)",
        ],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(found) == content
    # The shipped content is complete enough for Ansible to parse every play.
    check = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "inventories/sample", "site.yml"],
        env={**env, "ANSIBLE_CONFIG": str(content / "ansible.cfg")},
        cwd=content,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_collection_builds_with_every_part(repo_root: Path, tmp_path: Path) -> None:
    subprocess.run(
        [str(repo_root / "scripts" / "build-collection"), str(tmp_path)],
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
        check=True,
        capture_output=True,
    )
    (tarball,) = tmp_path.glob("kubegpu-gpu-*.tar.gz")
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
    assert "plugins/modules/gpu_node_readiness.py" in names
    assert "playbooks/validate.yml" in names
    assert "plugins/module_utils/data/gpu-dashboard.json" in names
    assert any(name.startswith("roles/nvidia_driver/") for name in names)
    # The core carries no strategy or callback; the accelerator's tarball does.
    assert not any(name.startswith(("plugins/strategy", "plugins/callback")) for name in names)
    (accel,) = tmp_path.glob("kubegpu-accel-*.tar.gz")
    with tarfile.open(accel) as archive:
        names = set(archive.getnames())
    assert "plugins/strategy/linear.py" in names
    assert "plugins/plugin_utils/gate.py" in names


def test_cli_help_and_version() -> None:
    out = subprocess.run(
        [str(BIN / "kubegpu"), "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in ["bootstrap", "check", "upgrade-driver", "reset", "version", "testbed"]:
        assert command in out
    version = subprocess.run(
        [sys.executable, "-m", "kubegpu", "version"], capture_output=True, text=True, check=True
    ).stdout
    assert version.strip() == "kubegpu 0.1.0"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["check", "-i", "/nonexistent/inventory"],
            "inventory: /nonexistent/inventory does not exist",
        ),
        (
            ["bootstrap", "-i", "inventories/sample", "-t", "drivers"],
            "tags: unknown tag(s) drivers",
        ),
        (["bootstrap", "-i", "inventories/sample", "-e", "novalue"], "is not NAME=VALUE"),
        (["check"], "the following arguments are required: -i/--inventory"),
        (["reset", "-i", "inventories/sample"], "needs confirm=True"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_4(
    repo_root: Path, argv: list[str], message: str
) -> None:
    proc = subprocess.run(
        [str(BIN / "kubegpu"), *argv], cwd=repo_root, capture_output=True, text=True
    )
    assert proc.returncode == 4, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("kubegpu: error:")]
    assert len(errors) == 1 and message in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
