# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""What kubegpu did to containerd's main config, and undoing exactly that (state=absent, reset).

The module keeps a record of its changes to the main config in a local fact file (JSON, read
by `setup` as ansible_facts['local'][<name>]), so that a reset removes exactly the imports
entry kubegpu added and keeps every later change the user made, instead of putting an old
backup back over them. The record says, for the latest time kubegpu added the entry, whether
it also created the `imports` line (or the whole main config) then.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.gpu.plugins.module_utils.containerd import scan_top_level


RECORD_FORMAT = 1


def remove_import(text, entry, drop_line_if_empty, source="config.toml"):
    """Return `text` with `entry` taken out of its top-level `imports`, changing nothing else.

    Only that element (and the separator next to it) goes; the array keeps its layout. When it
    was the only element, the line goes too if `drop_line_if_empty`, else `imports = []` stays.
    Returns `text` unchanged when the entry is not there.
    """
    scan = scan_top_level(text, source)
    imports = scan["imports"]
    if imports is None or entry not in imports["values"]:
        return text
    index = imports["values"].index(entry)
    spans = imports["spans"]
    if len(spans) == 1:
        if drop_line_if_empty:
            return text[: imports["line_start"]] + text[imports["line_end"] :]
        return text[: imports["value_start"]] + "[]" + text[imports["close"] + 1 :]
    start, end = spans[index]
    if index + 1 < len(spans):
        return text[:start] + text[spans[index + 1][0] :]
    return text[: spans[index - 1][1]] + text[end:]


def record_after_apply(record, planned, main_changed):
    """The record to keep after the module applied `planned` (a result of plan())."""
    record = dict(record or {})
    record.update(
        {
            "format": RECORD_FORMAT,
            "config_path": planned["main_path"],
            "drop_in": planned["drop_in_path"],
            "import_entry": planned["import_entry"],
        }
    )
    if main_changed:
        before = planned["main_before"]
        record["config_created"] = before is None
        record["import_added"] = True
        record["imports_line_added"] = (
            before is None or scan_top_level(before, planned["main_path"])["imports"] is None
        )
    else:
        record.setdefault("import_added", False)
        record.setdefault("config_created", False)
        record.setdefault("imports_line_added", False)
    return record


def plan_removal(main_text, record, import_entry, oldest_backup_text=None, source="config.toml"):
    """What a reset does with the main config: ("keep"|"edit"|"remove", new_text, why).

    With a record, the entry is taken out exactly when kubegpu added it. Without one (files left
    by a kubegpu that kept no record), the oldest backup kubegpu made decides: when it lacks the
    entry, kubegpu added it. The file goes only when kubegpu created it and nothing but its own
    lines is in it.
    """
    if main_text is None:
        return "keep", None, "there is no main config"
    if record and record.get("import_entry"):
        import_entry = record["import_entry"]
    scan = scan_top_level(main_text, source)
    present = bool(scan["imports"]) and import_entry in scan["imports"]["values"]
    if not present:
        return "keep", main_text, "the main config does not import %s" % import_entry
    if record:
        if not record.get("import_added"):
            return "keep", main_text, "the imports entry was there before kubegpu"
        drop_line = bool(record.get("imports_line_added"))
        why = "kubegpu added the imports entry (recorded)"
    elif oldest_backup_text is not None:
        old = scan_top_level(oldest_backup_text, source)["imports"]
        if old is not None and import_entry in old["values"]:
            return "keep", main_text, "the oldest backup already imports %s" % import_entry
        drop_line = old is None
        why = "the oldest backup kubegpu made does not import %s" % import_entry
    else:
        return "keep", main_text, "no record and no backup says kubegpu added the imports entry"
    new_text = remove_import(main_text, import_entry, drop_line, source)
    if record and record.get("config_created"):
        rest = [
            ln
            for ln in new_text.splitlines()
            if ln.strip() and not ln.lstrip().startswith("#") and not re.match(r"^version\s*=", ln)
        ]
        if not rest:
            return "remove", None, "kubegpu created the main config and nothing else is in it"
    return "edit", new_text, why
