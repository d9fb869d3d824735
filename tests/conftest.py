"""Shared pytest fixtures: where the repository, its collection and the real captures live."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
COLLECTIONS = REPO_ROOT / "collections"
# The real captures ship inside the package (src/kubegpu/captures, with SOURCES.md).
FIXTURES_REAL = REPO_ROOT / "src" / "kubegpu" / "captures"

if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

# The session fixture `kube_cluster`: a real control plane built from Kubernetes' module
# (tests/cluster).
pytest_plugins = ["tests.cluster.controlplane"]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def fixtures_real() -> Path:
    if not FIXTURES_REAL.is_dir():
        pytest.fail(f"real captures not found at {FIXTURES_REAL}")
    return FIXTURES_REAL
