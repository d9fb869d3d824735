"""module_utils/dpkg_state: interruption detection, and real POSIX locks in a scratch folder."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import dpkg_state as ds

# What `dpkg --audit` (dpkg 1.21, bookworm) prints for a package left unpacked: the header is
# dpkg's own text; tests/integration/test_faults.py makes this state for real on a node.
AUDIT_UNPACKED = """\
The following packages have been unpacked but not yet configured.
They must be configured using dpkg --configure or the configure
menu option in dselect for them to work:
 python3-yaml         YAML parser and emitter for Python3

"""


@pytest.mark.parametrize(
    ("names", "journal"),
    [
        ([], []),
        (["tmp.i"], []),
        (["0003", "tmp.i", "0001"], ["0001", "0003"]),
    ],
)
def test_pending_journal(names: list[str], journal: list[str]) -> None:
    assert ds.pending_journal(names) == journal


@pytest.mark.parametrize(
    ("journal", "audit", "needed", "says"),
    [
        ([], "", False, []),
        (["0001"], "", True, ["1 journal entry left in updates/ (0001)"]),
        (
            [],
            AUDIT_UNPACKED,
            True,
            ["dpkg --audit reports: The following packages", "python3-yaml"],
        ),
        (["0001", "0002"], AUDIT_UNPACKED, True, ["2 journal entries", "dpkg --audit"]),
    ],
)
def test_repair_plan(journal: list[str], audit: str, needed: bool, says: list[str]) -> None:
    got, reasons = ds.repair_plan(journal, ds.audit_lines(audit))
    assert got is needed
    text = " ".join(reasons)
    for part in says:
        assert part in text


def test_holder_descriptions() -> None:
    assert ds.parse_cmdline(b"apt-get\0install\0-y\0x\0") == "apt-get install -y x"
    assert len(ds.parse_cmdline(b"a" * 500)) == 200
    assert ds.describe_holder({"pid": 42, "command": "apt-get install x"}) == (
        "PID 42 (apt-get install x)"
    )
    assert "could not be identified" in ds.describe_holder({"pid": 0, "command": ""})


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A process holding a POSIX write lock on tmp_path/lock-frontend until told to stop."""
    lock = tmp_path / "lock-frontend"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys; f = open(sys.argv[1], 'w'); fcntl.lockf(f, fcntl.LOCK_EX); "
            "print('held', flush=True); sys.stdin.read()",
            str(lock),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield lock, proc
    proc.kill()
    proc.wait()


def test_a_held_lock_times_out_naming_the_holder(
    holder: tuple[Path, subprocess.Popen[str]], tmp_path: Path
) -> None:
    lock, proc = holder
    other = tmp_path / "lock"
    assert [h["pid"] for h in ds.query_locks([str(lock), str(other)])] == [proc.pid]
    locks = ds.LockSet([str(lock), str(other)])
    with pytest.raises(ds.LockTimeout) as caught:
        locks.acquire(0.3, poll=0.05, variable="kubegpu_apt_lock_timeout")
    message = str(caught.value)
    assert f"lock {lock} is held by PID {proc.pid} ({sys.executable} -c import fcntl" in message
    assert "within 0.3 s (kubegpu_apt_lock_timeout)" in message
    assert locks.fds == {}  # nothing kept after the failure


def test_a_lock_released_within_the_timeout_is_taken(
    holder: tuple[Path, subprocess.Popen[str]],
) -> None:
    lock, proc = holder
    locks = ds.LockSet([str(lock)])
    started = time.monotonic()

    def release_later(seconds: float) -> None:
        if time.monotonic() - started > 0.3 and proc.poll() is None:
            proc.kill()
            proc.wait()
        time.sleep(seconds)

    locks.acquire(10, poll=0.05, sleep=release_later)
    assert [h["pid"] for h in locks.waited_for] == [proc.pid]
    assert 0.3 <= locks.waited < 10
    assert ds.query_locks([str(lock)]) == []  # ours now: F_GETLK does not report own locks
    locks.release()
    assert locks.fds == {}


def test_flock_locks_do_not_count(tmp_path: Path) -> None:
    """apt takes fcntl locks; a flock(2) lock on the same file does not keep it out."""
    lock = tmp_path / "lock-frontend"
    lock.touch()
    proc = subprocess.Popen(
        ["flock", str(lock), "sleep", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        time.sleep(0.3)
        locks = ds.LockSet([str(lock)]).acquire(1, poll=0.05)
        assert locks.waited_for == []
        locks.release()
    finally:
        proc.kill()
        proc.wait()
