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

# The test Kubernetes API server (etcd + a server built from Debian's Kubernetes libraries):
# the session fixture `kube_apiserver` yields its kubeconfig.
pytest_plugins = ["tests.apiserver.fixture"]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def fixtures_real() -> Path:
    if not FIXTURES_REAL.is_dir():
        pytest.fail(f"real captures not found at {FIXTURES_REAL}")
    return FIXTURES_REAL
