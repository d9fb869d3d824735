"""The feature-gate table is data apart from its validators, and covers the supported releases."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubelet, kubelet_gates

ROOT = Path(__file__).resolve().parent.parent.parent
DATA = Path(__file__).resolve().parent / "data" / "feature-gates"
TOKEN_RE = re.compile(r"^\d+\.\d+ [ABGD][+-]!?$")
REMOVAL_RE = re.compile(r"^\d+\.\d+(\.\.\d+\.\d+)?$")


def test_table_module_holds_only_literals() -> None:
    """No functions, classes or imports: every statement assigns a literal."""
    tree = ast.parse(inspect.getsource(kubelet_gates))
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        assert isinstance(node, ast.Assign), ast.dump(node)[:80]
        if [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__metaclass__"]:
            continue  # the Ansible module_utils boilerplate
        ast.literal_eval(node.value)


def test_validators_read_the_table_module() -> None:
    assert kubelet.SUPPORTED_RELEASES is kubelet_gates.SUPPORTED_RELEASES
    present, removed = kubelet_gates.GATES_PRESENT, kubelet_gates.GATES_REMOVED
    assert not set(present) & set(removed)
    assert set(kubelet.FEATURE_GATES) == set(present) | set(removed)


def test_table_entries_are_well_formed() -> None:
    specs = list(kubelet_gates.GATES_PRESENT.items())
    specs += [(n, spec) for n, (spec, _) in kubelet_gates.GATES_REMOVED.items()]
    for name, spec in specs:
        assert all(TOKEN_RE.match(t.strip()) for t in spec.split(",")), name
    for name, (_, removal) in kubelet_gates.GATES_REMOVED.items():
        assert REMOVAL_RE.match(removal), name


def test_table_covers_every_supported_release() -> None:
    """Each release from the first to the last supported one has gates, and GPU gates."""
    (major, lo), (top_major, hi) = kubelet_gates.SUPPORTED_RELEASES
    assert major == top_major and lo < hi
    for minor in range(lo, hi + 1):
        release = (major, minor)
        present = [
            n
            for n in kubelet.FEATURE_GATES
            if kubelet.gate_state(n, release)["status"] in ("present", "maybe_removed")
        ]
        assert len(present) > 100, release
        assert "DynamicResourceAllocation" in present and "AllAlpha" in present, release


def _script() -> ModuleType:
    """scripts/feature-gates, loaded as a module (it has no .py suffix)."""
    loader = SourceFileLoader("feature_gates", str(ROOT / "scripts" / "feature-gates"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "kubernetes-v1.29.0-pkg-features-kube_features.go.txt",
            {
                "AnyVolumeDataSource": [((0, 0), ("B", True, False))],
                "APIResponseCompression": [((0, 0), ("B", True, False))],
            },
        ),
        (
            "kubernetes-v1.35.0-pkg-features-kube_features.go.txt",
            {
                "AnyVolumeDataSource": [
                    ((1, 18), ("A", False, False)),
                    ((1, 24), ("B", True, False)),
                    ((1, 33), ("G", True, True)),
                ]
            },
        ),
        (
            "component-base-v0.32.0-logs-api-v1-kube_features.go.txt",
            {"ContextualLogging": [((0, 0), ("B", True, False))]},
        ),
        (
            "component-base-v0.35.0-featuregate-feature_gate.go.txt",
            {
                "AllAlpha": [((0, 0), ("A", False, False))],
                "AllBeta": [((0, 0), ("B", False, False))],
            },
        ),
    ],
)
def test_regeneration_script_reads_upstream_go_sources(source: str, expected: dict) -> None:
    """Real upstream lines (tests/unit/data/feature-gates/SOURCES.md), both spec forms."""
    assert _script().parse_go([(DATA / source).read_text()]) == expected


def test_the_table_covers_the_newest_release_the_schema_package_knows() -> None:
    """kubernetes-validate ships the schemas of each release the day it lands: a newer minor
    there than in the gate table means a Kubernetes release kubegpu refuses."""
    import kubernetes_validate.utils
    from ansible_collections.kubegpu.gpu.plugins.module_utils.kubelet_gates import (
        SUPPORTED_RELEASES,
    )

    newest = tuple(int(part) for part in kubernetes_validate.utils.latest_version().split(".")[:2])
    assert newest <= SUPPORTED_RELEASES[1], (
        f"kubernetes-validate knows Kubernetes {newest[0]}.{newest[1]}, the gate table ends at "
        f"{SUPPORTED_RELEASES[1][0]}.{SUPPORTED_RELEASES[1][1]}: set SUPPORTED_RELEASES in "
        "plugins/module_utils/kubelet_gates.py and run scripts/feature-gates --write "
        "plugins/module_utils/kubelet_gates.py"
    )
