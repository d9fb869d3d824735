# -*- coding: utf-8 -*-
# kubegpu: files the modules write on a host (configs, their records), written atomically.
"""Atomic writes and the JSON records (Ansible local facts) that the config modules keep of
what they changed, so that a reset can undo exactly that."""

from __future__ import absolute_import, division, print_function

import json
import os
import re
import shutil
import tempfile

__metaclass__ = type


def _fsync_directory(directory):
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(module, path, text, mode=0o644):
    """Write `text` to a hidden temporary file beside `path` (a name no import glob matches),
    then rename it over `path`; a new file gets `mode`, an existing one keeps its own."""
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, tmp = tempfile.mkstemp(
        dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            # On disk before the rename, and the rename on disk after it: a power cut leaves
            # the old file or the new one, never an empty or partly written one.
            handle.flush()
            os.fsync(handle.fileno())
        existed = os.path.exists(path)
        module.atomic_move(tmp, path, unsafe_writes=False)
        if not existed:
            os.chmod(path, mode)
        _fsync_directory(directory)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# An absolute path of plain names (letters, digits, '.', '_', '-'; at most 255 each), matched
# against the whole value (fullmatch): what may go into a command line, an environment file or a
# pod's hostPath without quoting. "/" alone does not match.
PLAIN_ABSOLUTE_PATH = re.compile(r"(/[A-Za-z0-9._-]{1,255})+/?")


# Written before a module changes a daemon's configuration, removed by the role's handler once
# the daemon has restarted: a run interrupted in between leaves it, and the next run restarts.
RESTART_PENDING_NOTE = (
    "a restart that an interrupted earlier run left pending (%s): the daemon may still run the "
    "configuration from before that run"
)


def mark_restart_pending(module, path, files):
    """Record, before writing ``files``, that the daemon must restart (no-op for an empty path)."""
    if path:
        write_atomic(module, path, json.dumps({"files": list(files)}, sort_keys=True) + "\n")


def read_record(module, path):
    """The module's record (a dict), or None when there is none or it cannot be read."""
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path, "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except (IOError, OSError, ValueError) as exc:
        module.warn("ignoring the unreadable record %s: %s" % (path, exc))
        return None
    return data if isinstance(data, dict) else None


def write_record(module, path, record):
    write_atomic(module, path, json.dumps(record, indent=2, sort_keys=True) + "\n", 0o644)


# --- file_set ------------------------------------------------------------------------------------


def _file_args(module, entry):
    params = dict(
        path=entry["path"],
        owner=entry.get("owner"),
        group=entry.get("group"),
        mode=entry.get("mode"),
        seuser=None,
        serole=None,
        setype=None,
        selevel=None,
        unsafe_writes=False,
        attributes=None,
    )
    return module.load_file_common_arguments(params)


def _read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def apply_file_entry(module, entry, backups):
    """Put one file_set entry in place (module.check_mode: only tell); return (changed,
    before, after), before/after being the diff texts or None. Backups go into `backups`."""
    path = entry["path"]
    state = entry["state"]
    if not os.path.isabs(path):
        module.fail_json(msg="file_set: path %r is not absolute" % path)
    changed = False
    before = after = None
    if state == "absent":
        if os.path.lexists(path):
            changed = True
            before = "(%s)" % ("directory" if os.path.isdir(path) else "file")
            after = "(absent)"
            if not module.check_mode:
                if entry["backup"] and os.path.isfile(path):
                    backups[path] = module.backup_local(path)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.unlink(path)
        return changed, before, after
    if state == "directory":
        if os.path.lexists(path) and not os.path.isdir(path):
            module.fail_json(msg="file_set: %s exists and is not a directory" % path)
        if not os.path.isdir(path):
            changed = True
            before, after = "(absent)", "(directory)"
            if not module.check_mode:
                os.makedirs(path)
    else:
        if entry["content"] is None:
            module.fail_json(msg="file_set: %s has state=file but no content" % path)
        if os.path.lexists(path) and not os.path.isfile(path):
            module.fail_json(msg="file_set: %s exists and is not a regular file" % path)
        data = entry["content"].encode("utf-8")
        existing = _read_bytes(path) if os.path.exists(path) else None
        if existing != data:
            changed = True
            before = "" if existing is None else existing.decode("utf-8", "replace")
            after = entry["content"]
            if not module.check_mode:
                if entry["backup"] and existing is not None:
                    backups[path] = module.backup_local(path)
                write_atomic(module, path, entry["content"], 0o644)
    if module.check_mode and changed:
        # Not there yet: its attributes cannot be compared, the real run sets them.
        return changed, before, after
    attrs_changed = module.set_fs_attributes_if_different(_file_args(module, entry), False)
    return changed or attrs_changed, before, after
