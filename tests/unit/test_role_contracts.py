"""Every role's public interface is in step: defaults, argument specs, the sample inventory."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
ROLES = sorted(p.parent.parent.name for p in ROOT.glob("roles/*/defaults/main.yml"))


def _sync_module() -> ModuleType:
    """scripts/sync-sample-inventory, loaded as a module (it has no .py suffix)."""
    path = ROOT / "scripts" / "sync-sample-inventory"
    loader = SourceFileLoader("sync_sample_inventory", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_there_are_roles() -> None:
    assert {"nvidia_driver", "container_runtime", "kubelet_gpu", "gpu_cluster"} <= set(ROLES)


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_match_defaults(role: str) -> None:
    defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text()) or {}
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    # A role may also declare the kubegpu_* globals it reads (documented in the sample
    # inventory's kubegpu.yml); those have no role default.
    own = {name for name in options if not name.startswith("kubegpu_")}
    assert set(defaults) == own, (
        f"in defaults only: {sorted(set(defaults) - set(options))}; "
        f"in specs only: {sorted(own - set(defaults))}"
    )
    for name in defaults:
        assert name.startswith(role + "_"), f"{name} does not carry the role's prefix"
        assert options[name].get("description"), f"{name} has no description"
        assert options[name].get("type"), f"{name} has no type"


@pytest.mark.parametrize("role", ROLES)
def test_sample_inventory_documents_every_default(role: str) -> None:
    sync = _sync_module()
    defaults = (ROOT / "roles" / role / "defaults" / "main.yml").read_text()
    sample = ROOT / "inventories" / "sample" / "group_vars" / "all" / f"{role}.yml"
    assert sample.is_file(), f"run scripts/sync-sample-inventory: {sample} is missing"
    assert sample.read_text() == sync.render(role, defaults), (
        f"{sample} is out of step with roles/{role}/defaults/main.yml: "
        "run scripts/sync-sample-inventory"
    )


def test_sample_inventory_parses_with_the_right_groups() -> None:
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-inventory"),
            "-i",
            "inventories/sample",
            "--list",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(out)
    assert data["gpu_nodes"]["hosts"] == ["gpu1.example.internal", "gpu2.example.internal"]
    assert data["kube_control_plane"]["hosts"] == ["cp1.example.internal"]
    assert sorted(data["k8s_cluster"]["children"]) == ["gpu_nodes", "kube_control_plane"]
    hostvars = data["_meta"]["hostvars"]["gpu1.example.internal"]
    assert hostvars["kubegpu_container_runtime"] == "containerd"
    assert hostvars["kubegpu_expected_gpu_count"] == 8
