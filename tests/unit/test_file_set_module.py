"""kubegpu.gpu.file_set: several files and directories in one module run, run for real on this
machine (connection local) under a temporary directory: written only when different, owner
and mode set as the file module sets them, removals, check mode and diff, backups, bad input."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from tests.unit.test_nvidia_driver_roles import host_results, run_playbook


def _run(tmp_path: Path, files: list[dict[str, Any]], *args: str) -> dict[str, Any]:
    play = [
        {
            "name": "file_set",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [{"name": "The files", "kubegpu.gpu.file_set": {"files": files}}],
        }
    ]
    work = tmp_path / "run"
    work.mkdir(exist_ok=True)
    _, report, stderr = run_playbook(work, play, {"h1": {}}, *args)
    results = host_results(report, "h1")
    assert len(results) == 1, (results, stderr)
    return results[0][1]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_makes_removes_then_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "host"
    root.mkdir()
    (root / "old.conf").write_text("left by an earlier run\n")
    (root / "olddir").mkdir()
    (root / "olddir" / "x").write_text("x")
    files = [
        {"path": str(root / "facts.d"), "state": "directory", "mode": "0750"},
        {"path": str(root / "facts.d" / "a.fact"), "content": '{"a": 1}\n', "mode": "0640"},
        {"path": str(root / "old.conf"), "state": "absent"},
        {"path": str(root / "olddir"), "state": "absent"},
        {"path": str(root / "never-there"), "state": "absent"},
    ]
    first = _run(tmp_path, files)
    assert first["changed"] is True
    assert first["changed_paths"] == [
        str(root / "facts.d"),
        str(root / "facts.d" / "a.fact"),
        str(root / "old.conf"),
        str(root / "olddir"),
    ]
    assert (root / "facts.d" / "a.fact").read_text() == '{"a": 1}\n'
    assert _mode(root / "facts.d") == 0o750
    assert _mode(root / "facts.d" / "a.fact") == 0o640
    assert not (root / "old.conf").exists()
    assert not (root / "olddir").exists()
    inode = (root / "facts.d" / "a.fact").stat().st_ino

    second = _run(tmp_path, files)
    assert second["changed"] is False
    assert second["changed_paths"] == []
    # Not rewritten: the same file, not a new one renamed over it.
    assert (root / "facts.d" / "a.fact").stat().st_ino == inode


def test_a_mode_change_alone_is_a_change(tmp_path: Path) -> None:
    target = tmp_path / "pin"
    target.write_text("Pin: version 1\n")
    os.chmod(target, 0o600)
    result = _run(tmp_path, [{"path": str(target), "content": "Pin: version 1\n", "mode": "0644"}])
    assert result["changed"] is True
    assert _mode(target) == 0o644


def test_check_mode_reports_and_changes_nothing_with_a_diff(tmp_path: Path) -> None:
    target = tmp_path / "blacklist.conf"
    target.write_text("blacklist nouveau\n")
    gone = tmp_path / "keep-me"
    gone.write_text("still here\n")
    files = [
        {"path": str(target), "content": "blacklist nouveau\noptions nouveau modeset=0\n"},
        {"path": str(tmp_path / "new" / "f.fact"), "content": "{}\n"},
        {"path": str(gone), "state": "absent"},
    ]
    result = _run(tmp_path, files, "--check", "--diff")
    assert result["changed"] is True
    assert len(result["changed_paths"]) == 3
    assert target.read_text() == "blacklist nouveau\n"
    assert not (tmp_path / "new").exists()
    assert gone.read_text() == "still here\n"
    diff = {d["after_header"]: d for d in result["diff"]}
    assert diff[str(target)]["before"] == "blacklist nouveau\n"
    assert diff[str(target)]["after"].endswith("modeset=0\n")
    assert diff[str(gone)]["after"] == "(absent)"


def test_backup_keeps_the_old_content(tmp_path: Path) -> None:
    target = tmp_path / "conf"
    target.write_text("theirs\n")
    result = _run(tmp_path, [{"path": str(target), "content": "ours\n", "backup": True}])
    backup = Path(result["backup_files"][str(target)])
    assert backup.read_text() == "theirs\n"
    assert target.read_text() == "ours\n"


def test_bad_input_is_named(tmp_path: Path) -> None:
    no_content = _run(tmp_path, [{"path": str(tmp_path / "f")}])
    assert no_content["failed"] is True
    assert "has state=file but no content" in no_content["msg"]
    (tmp_path / "d").mkdir()
    on_a_dir = _run(tmp_path, [{"path": str(tmp_path / "d"), "content": "x"}])
    assert on_a_dir["failed"] is True
    assert "is not a regular file" in on_a_dir["msg"]
    bad_state = _run(tmp_path, [{"path": str(tmp_path / "f"), "state": "link"}])
    assert bad_state["failed"] is True
    assert "state" in bad_state["msg"] and "absent" in bad_state["msg"]
