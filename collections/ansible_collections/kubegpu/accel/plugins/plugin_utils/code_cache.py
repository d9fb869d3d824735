# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""A per-user folder of compiled Python code objects, one marshal file per key, shared by the
controller's main process, the workers it forks and later runs (kubegpu.accel.jinja_code_cache,
kubegpu.accel.ansiballz_bytecode)."""

from __future__ import annotations

import contextlib
import marshal
import os
import shutil
import stat
import tempfile
import time
import types
import typing as t
from pathlib import Path

STALE_AFTER_S = 7 * 24 * 3600
SUFFIX = ".code"


class CodeCache:
    """The code objects by key, in this process, backed by one folder of marshal files."""

    @classmethod
    def for_option(cls, folder_option: str | None, version_tag: str) -> CodeCache:
        """The cache of a callback's cache_dir option: its version's sub-folder of that folder
        (~ expanded), or memory only when the option is empty."""
        if not folder_option:
            return cls(None)
        return cls(Path(os.path.expanduser(folder_option)) / version_tag)

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.code: dict[str, types.CodeType] = {}
        self.seen: set[str] = set()  # file names already loaded or written by this process
        self.hits = self.misses = self.stored = 0

    # -- the folder --------------------------------------------------------------------------

    def open_folder(self, max_entries: int) -> None:
        """Make the folder if needed, check it is ours alone, prune, and load what it holds."""
        if self.folder is None:
            return
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = self.folder.stat()
            if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                self.folder = None  # another user's, or writable by others: memory only
                return
            self._drop_other_versions()
            names = [n for n in os.listdir(self.folder) if n.endswith(SUFFIX)]
            if len(names) > max_entries:
                for name in names:
                    (self.folder / name).unlink(missing_ok=True)
                names = []
        except OSError:
            self.folder = None
            return
        self._load(names)

    def _drop_other_versions(self) -> None:
        assert self.folder is not None
        now = time.time()
        for sibling in self.folder.parent.iterdir():
            if sibling == self.folder or not sibling.is_dir() or sibling.is_symlink():
                continue
            if now - sibling.stat().st_mtime > STALE_AFTER_S:
                shutil.rmtree(sibling, ignore_errors=True)

    def refresh(self) -> None:
        """Load the entries that workers wrote since the last look."""
        if self.folder is None:
            return
        try:
            names = [
                n for n in os.listdir(self.folder) if n.endswith(SUFFIX) and n not in self.seen
            ]
        except OSError:
            return
        self._load(names)

    def _load(self, names: t.Iterable[str]) -> None:
        assert self.folder is not None
        for name in names:
            self.seen.add(name)
            code = self._read(self.folder / name)
            if code is not None:
                self.code[name[: -len(SUFFIX)]] = code

    @staticmethod
    def _read(path: Path) -> types.CodeType | None:
        try:
            code = marshal.loads(path.read_bytes())
        except (OSError, ValueError, EOFError, TypeError):
            return None
        return code if isinstance(code, types.CodeType) else None

    # -- lookups -----------------------------------------------------------------------------

    def get(self, key: str) -> types.CodeType | None:
        code = self.code.get(key)
        if code is None and self.folder is not None and key + SUFFIX not in self.seen:
            # A worker's miss: another worker of this task may have written it meanwhile.
            code = self._read(self.folder / (key + SUFFIX))
            if code is not None:
                self.code[key] = code
        if code is None:
            self.misses += 1
        else:
            self.hits += 1
        return code

    def put(self, key: str, code: types.CodeType) -> None:
        self.code[key] = code
        if self.folder is None:
            return
        name = key + SUFFIX
        self.seen.add(name)
        try:
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".new-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(marshal.dumps(code))
            os.replace(tmp, self.folder / name)
            self.stored += 1
        except (OSError, ValueError):
            with contextlib.suppress(OSError, UnboundLocalError):
                os.unlink(tmp)
