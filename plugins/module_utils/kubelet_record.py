# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""What kubelet_config changed in the kubelet's files, and undoing exactly that (state=absent).

Each file is seen as entries, each with a value:

- config (a KubeletConfiguration): every leaf, by its key path (featureGates/<gate> too);
- args (the KUBELET_EXTRA_ARGS file): each node label, each taint (by key and effect), each
  other flag of the KUBELET_EXTRA_ARGS line, and each other variable line of the file;
- rancher (a k3s or RKE2 config.yaml): each node-label, each node-taint, each kubelet-arg
  (the feature-gates argument gate by gate);
- owned (kubegpu's own drop-in): the whole file.

When the module writes a file, record_write() keeps, for every entry whose value it changed,
the value it set and the one before (the first one before, across runs; none: the entry was
not there). undo() puts back, for each entry still at the value kubegpu set, the value before,
or takes the entry out; an entry someone changed since is left as they made it. A file kubegpu
created goes when nothing but kubegpu's entries was in it. Entry ids are JSON lists, so that
any key can be one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

from ansible_collections.kubegpu.gpu.plugins.module_utils.kubelet import (
    _ASSIGN_RE,
    EXTRA_ARGS_VARIABLE,
    _as_list,
    _split_args,
    parse_label_list,
    parse_taint_text,
)

RECORD_FORMAT = 1
KINDS = ("config", "args", "rancher", "owned")
_LABELS, _TAINTS = "--node-labels", "--register-with-taints"


def _id(*parts):
    return json.dumps(list(parts))


# --- views -------------------------------------------------------------------------------------


def _leaves(data, path=()):
    out = {}
    for key, value in (data or {}).items():
        if isinstance(value, dict) and value:
            out.update(_leaves(value, (*path, str(key))))
        else:
            out[_id(*path, str(key))] = value
    return out


def _taint_id(text):
    parsed = parse_taint_text(text)
    if parsed:
        return _id("taint", parsed["key"], parsed["effect"])
    return _id("taint", text, "")


def _args_line(text):
    """(index, lead, quote, inner, eol) of the last KUBELET_EXTRA_ARGS line, index None if none."""
    lines = (text or "").splitlines(True)
    found = (None, "", '"', "", "\n")
    for i, line in enumerate(lines):
        m = _ASSIGN_RE.match(line)
        if m and m.group(2) == EXTRA_ARGS_VARIABLE:
            raw = m.group(3).strip()
            quote = raw[0] if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'" else ""
            inner = raw[1:-1] if quote else raw
            found = (i, m.group(1), quote, inner, m.group(4) or "")
    return lines, found


def _args_view(text):
    view = {}
    lines, (index, _lead, _quote, inner, _eol) = _args_line(text)
    for i, line in enumerate(lines):
        m = _ASSIGN_RE.match(line)
        if m and i != index and m.group(2) != EXTRA_ARGS_VARIABLE:
            view[_id("env", m.group(2))] = m.group(3).strip().strip("\"'")
    for name, value, _raw in _split_args(inner):
        if name == _LABELS and value:
            for key, label in parse_label_list(value):
                view[_id("label", key)] = label
        elif name == _TAINTS and value:
            for taint in (t.strip() for t in value.split(",") if t.strip()):
                view[_taint_id(taint)] = taint
        elif name:
            view[_id("flag", name)] = value
    return view


def _rancher_view(data):
    view = {}
    for item in _as_list(data.get("node-label")):
        key, _, value = item.partition("=")
        view[_id("label", key)] = value
    for item in _as_list(data.get("node-taint")):
        view[_taint_id(item)] = item
    for item in _as_list(data.get("kubelet-arg")):
        name, _, value = item.lstrip("-").partition("=")
        if name == "feature-gates":
            for gate, _, setting in (p.partition("=") for p in value.split(",") if p.strip()):
                view[_id("gate", gate)] = setting
        else:
            view[_id("arg", name)] = value
    return view


def view(kind, text, load_yaml):
    """The file's entries (id -> value); an absent or empty file has none."""
    if kind == "owned":
        return {} if text is None else {_id("file"): text}
    if kind == "args":
        return _args_view(text or "")
    data = load_yaml(text) if text and text.strip() else {}
    data = data if isinstance(data, dict) else {}
    return _leaves(data) if kind == "config" else _rancher_view(data)


# --- changing entries --------------------------------------------------------------------------


def _set_path(data, path, value):
    for key in path[:-1]:
        if not isinstance(data.get(key), dict):
            data[key] = {}
        data = data[key]
    data[path[-1]] = value


def _del_path(data, path):
    """Remove the leaf, then every mapping on its path that it leaves empty."""
    parents = [data]
    for key in path[:-1]:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return
        parents.append(child)
    parents[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):
        if not parents[depth]:
            parents[depth - 1].pop(path[depth - 1], None)


def _merge_pairs(pairs, changes, kind):
    """(key, value) pairs with changes for entries (kind, key): set in place, appended, or out."""
    out, seen = [], set()
    for key, value in pairs:
        entry = _id(kind, key)
        if entry in changes:
            seen.add(entry)
            if changes[entry] is not None:
                out.append((key, changes[entry]))
        else:
            out.append((key, value))
    for entry, value in changes.items():
        parts = json.loads(entry)
        if parts[0] == kind and entry not in seen and value is not None:
            out.append((parts[1], value))
    return out


def _merge_taints(texts, changes):
    out, seen = [], set()
    for text in texts:
        entry = _taint_id(text)
        if entry in changes:
            seen.add(entry)
            if changes[entry] is not None:
                out.append(changes[entry])
        else:
            out.append(text)
    for entry, value in changes.items():
        if json.loads(entry)[0] == "taint" and entry not in seen and value is not None:
            out.append(value)
    return out


def _apply_args(text, changes):
    lines, (index, lead, quote, inner, eol) = _args_line(text)
    args = _split_args(inner)
    labels = [kv for n, v, _r in args if n == _LABELS and v for kv in parse_label_list(v)]
    taints = [
        t.strip() for n, v, _r in args if n == _TAINTS and v for t in v.split(",") if t.strip()
    ]
    labels = _merge_pairs(labels, changes, "label")
    taints = _merge_taints(taints, changes)
    flags = dict((json.loads(e)[1], v) for e, v in changes.items() if json.loads(e)[0] == "flag")
    out, placed = [], set()
    for name, _value, raw in args:
        if name in (_LABELS, _TAINTS):
            if name in placed:
                continue
            placed.add(name)
            joined = (
                ",".join("%s=%s" % kv for kv in labels) if name == _LABELS else ",".join(taints)
            )
            if joined:
                out.append("%s=%s" % (name, joined))
        elif name in flags:
            if name not in placed and flags[name] is not None:
                out.append("%s=%s" % (name, flags[name]))
            placed.add(name)
        else:
            out.append(raw)
    if _LABELS not in placed and labels:
        out.append("%s=%s" % (_LABELS, ",".join("%s=%s" % kv for kv in labels)))
    if _TAINTS not in placed and taints:
        out.append("%s=%s" % (_TAINTS, ",".join(taints)))
    for name, value in flags.items():
        if name not in placed and value is not None:
            out.append("%s=%s" % (name, value))
    value = " ".join(out)
    if index is not None:
        lines[index] = "%s%s=%s%s%s%s" % (lead, EXTRA_ARGS_VARIABLE, quote, value, quote, eol)
    elif value:
        lines.append('%s="%s"\n' % (EXTRA_ARGS_VARIABLE, value))
    envs = dict((json.loads(e)[1], v) for e, v in changes.items() if json.loads(e)[0] == "env")
    kept = []
    for line in lines:
        m = _ASSIGN_RE.match(line)
        if m and m.group(2) in envs:
            value = envs.pop(m.group(2))
            if value is not None:
                kept.append("%s=%s%s" % (m.group(2), value, m.group(4) or ""))
            continue
        kept.append(line)
    for name, value in envs.items():
        if value is not None:
            kept.append("%s=%s\n" % (name, value))
    return "".join(kept)


def _apply_rancher(data, changes):
    labels = [tuple(t.partition("=")[::2]) for t in _as_list(data.get("node-label"))]
    labels = _merge_pairs(labels, changes, "label")
    taints = _merge_taints(_as_list(data.get("node-taint")), changes)
    args, gates = [], []
    for item in _as_list(data.get("kubelet-arg")):
        name, _, value = item.lstrip("-").partition("=")
        if name == "feature-gates":
            gates = [tuple(p.partition("=")[::2]) for p in value.split(",") if p.strip()]
        else:
            args.append((name, value))
    args = _merge_pairs(args, changes, "arg")
    gates = _merge_pairs(gates, changes, "gate")
    if gates:
        args.append(("feature-gates", ",".join("%s=%s" % g for g in gates)))
    for key, items in (
        ("node-label", ["%s=%s" % kv for kv in labels]),
        ("node-taint", taints),
        ("kubelet-arg", ["%s=%s" % kv for kv in args]),
    ):
        if items:
            data[key] = items
        else:
            data.pop(key, None)
    return data


def apply(kind, text, changes, load_yaml, dump_yaml):
    """The file's text with entries changed: {id: value}, None takes the entry out."""
    if kind == "args":
        return _apply_args(text or "", changes)
    data = load_yaml(text) if text and text.strip() else {}
    data = copy.deepcopy(data) if isinstance(data, dict) else {}
    if kind == "rancher":
        data = _apply_rancher(data, changes)
    else:
        for entry, value in changes.items():
            path = json.loads(entry)
            if value is None:
                _del_path(data, path)
            else:
                _set_path(data, path, value)
    return dump_yaml(data) if data else ""


# --- the record ----------------------------------------------------------------------------------


def record_write(record, path, kind, before, after, load_yaml):
    """The record after the module wrote `after` over `before` (None: no file) at path."""
    record = copy.deepcopy(record) if isinstance(record, dict) else {}
    record["format"] = RECORD_FORMAT
    files = record.setdefault("files", {})
    entry = files.get(path)
    if not isinstance(entry, dict) or entry.get("kind") != kind:
        entry = {"kind": kind, "created": before is None, "entries": {}}
    old, new = view(kind, before, load_yaml), view(kind, after, load_yaml)
    entries = entry["entries"]
    for key, value in new.items():
        if key in old and old[key] == value:
            continue
        if key in entries:
            entries[key]["set"] = value
        else:
            entries[key] = {"set": value}
            if key in old:
                entries[key]["before"] = old[key]
    files[path] = entry
    return record


def undo(entry, text, load_yaml, dump_yaml):
    """(new text, or None to remove the file; ids put back; ids left as someone changed them)
    for one recorded file whose current text is `text` (None: gone)."""
    if text is None:
        return None, [], []
    if entry["kind"] == "owned":
        return None, [_id("file")], []
    current = view(entry["kind"], text, load_yaml)
    changes, undone, kept = {}, [], []
    for key, recorded in sorted(entry["entries"].items()):
        if key not in current:
            continue  # someone took it out already
        if current[key] != recorded["set"]:
            kept.append(key)
            continue
        changes[key] = recorded.get("before")
        undone.append(key)
    new = apply(entry["kind"], text, changes, load_yaml, dump_yaml) if changes else text
    created_and_empty = entry.get("created") and not view(entry["kind"], new, load_yaml)
    if created_and_empty and (entry["kind"] != "args" or _only_empty_assignments(new)):
        return None, undone, kept
    return new, undone, kept


def _only_empty_assignments(text):
    """Whether the text has nothing but comments, blanks and variables set to nothing."""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _ASSIGN_RE.match(line)
        if not m or m.group(3).strip().strip("\"'").strip():
            return False
    return True


def describe(entry_id):
    """An entry id in words, for messages."""
    parts = json.loads(entry_id)
    if parts[0] in ("label", "flag", "env", "arg", "gate"):
        return "%s %s" % (parts[0], parts[1])
    if parts[0] == "taint":
        return "taint %s:%s" % (parts[1], parts[2])
    return "/".join(str(p) for p in parts)
