# -*- coding: utf-8 -*-
# kubegpu: files the modules write on a host (configs, their records), written atomically.
"""Atomic writes and the JSON records (Ansible local facts) that the config modules keep of
what they changed, so that a reset can undo exactly that."""

from __future__ import absolute_import, division, print_function

import json
import os
import tempfile

__metaclass__ = type


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
        existed = os.path.exists(path)
        module.atomic_move(tmp, path, unsafe_writes=False)
        if not existed:
            os.chmod(path, mode)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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
