"""module_utils/files.write_atomic: the new text is on disk before it replaces the old file, and
the rename is on disk after (fsync of the file, then of its folder)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.kubegpu.gpu.plugins.module_utils import files


class _Module:
    """The one AnsibleModule method write_atomic uses, with the same effect (a rename)."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def atomic_move(self, src: str, dest: str, unsafe_writes: bool = False) -> None:
        self.events.append(f"rename {Path(dest).name}")
        shutil.move(src, dest)


def test_the_file_is_synced_before_the_rename_and_the_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> Any:
        kind = "folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        events.append(f"fsync {kind}")
        return real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)
    target = tmp_path / "config.toml"
    target.write_text("old\n")
    files.write_atomic(_Module(events), str(target), "new\n")
    assert events == ["fsync file", "rename config.toml", "fsync folder"]
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["config.toml"]  # no temporary file left
