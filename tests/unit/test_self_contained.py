"""The checkout needs nothing beside it: a copy of the tree in an empty folder runs the tests
that read the real captures and replays a capture through the SIMULATED nvidia-smi, and no
file of the project names a path outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# What a path outside the checkout looks like in the project's files.
OUTSIDE = ("../shared", "shared/fixtures", "KUBEGPU_FIXTURES_REAL")
SUFFIXES = {".py", ".yml", ".yaml", ".cfg", ".toml", ".j2", ".sh", ".ini", ".json"}


def tracked_files() -> list[str]:
    done = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    return [name for name in done.stdout.decode().split("\0") if name]


def test_no_project_file_names_a_path_outside_the_checkout() -> None:
    offenders = []
    for name in tracked_files():
        path = REPO / name
        is_script = name.startswith(("scripts/", ".ci/")) and "." not in path.name
        if path.suffix not in SUFFIXES and not is_script:
            continue
        if name == "tests/unit/test_self_contained.py" or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        offenders += [f"{name}: {word}" for word in OUTSIDE if word in text]
    assert offenders == []


@pytest.fixture(scope="module")
def lone_copy() -> Path:
    """The working tree (tracked and untracked files, not the ignored ones) in an empty folder."""
    top = Path(tempfile.mkdtemp(prefix="kubegpu-alone-"))
    dest = top / "kubegpu"
    for name in tracked_files():
        source = REPO / name
        if source.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(source), dest / name)
        elif source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    yield dest
    shutil.rmtree(top)


def run_in(copy: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(copy / "src"), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, *argv], cwd=copy, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_copy_replays_a_capture_from_its_own_tree(lone_copy: Path) -> None:
    script = (
        "import subprocess, sys, tempfile, pathlib, kubegpu\n"
        "from kubegpu import simulate\n"
        "print(kubegpu.__file__)\n"
        "d = pathlib.Path(tempfile.mkdtemp())\n"
        "smi = simulate.write_replay(d, 'telegraf-tesla-t4-515')\n"
        "out = subprocess.run([str(smi), '-L'], capture_output=True, text=True)\n"
        "print(out.stdout, out.returncode)\n"
    )
    done = run_in(lone_copy, "-c", script)
    assert done.returncode == 0, done.stderr
    first, rest = done.stdout.split("\n", 1)
    assert first.startswith(str(lone_copy / "src" / "kubegpu"))
    assert "GPU 0: Tesla T4" in rest
    assert rest.rstrip().endswith(" 0")


def test_the_copy_passes_the_tests_that_read_captures(lone_copy: Path) -> None:
    done = run_in(
        lone_copy,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/unit/test_captures.py",
        "tests/unit/test_simulate.py",
        "tests/unit/test_nvidia_smi.py",
        "tests/unit/test_containerd.py",
        "tests/unit/test_tenancy.py",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout.splitlines()[-1]
    assert "failed" not in done.stdout.splitlines()[-1]
