"""The hashed locks of the runtime dependencies (requirements/py*.lock, scripts/lock): every
dependency of pyproject.toml pinned within its range, with hashes, for each controller Python."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCKS = sorted((ROOT / "requirements").glob("py*.lock"))
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^ ;\\]+)")


def pins(path: Path) -> dict[str, tuple[str, list[str]]]:
    """{name: (version, hashes)} of a lock file."""
    out: dict[str, tuple[str, list[str]]] = {}
    name = ""
    for line in path.read_text().splitlines():
        match = PIN.match(line)
        if match:
            name = canonicalize_name(match.group(1))
            out[name] = (match.group(2), [])
        elif line.strip().startswith("--hash=sha256:") and name:
            out[name][1].append(line.strip().removeprefix("--hash=").rstrip(" \\"))
    return out


def test_there_is_a_lock_for_each_controller_python() -> None:
    assert [p.name for p in LOCKS] == ["py3.11.lock", "py3.13.lock"]


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_each_dependency_is_pinned_in_its_range_with_hashes(lock: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pinned = pins(lock)
    assert pinned, lock
    for text in project["dependencies"]:
        requirement = Requirement(text)
        version, _ = pinned[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(version), (text, version)
    for name, (_version, hashes) in pinned.items():
        assert hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name
    # The ansible-core each Python runs: 2.19 on 3.11, the newest supported on 3.13.
    core = pinned["ansible-core"][0]
    assert core.startswith("2.19.") if lock.name == "py3.11.lock" else core.startswith("2.21.")
