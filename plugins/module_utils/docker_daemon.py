# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Merging the nvidia runtime into Docker's daemon.json: the pure logic.

daemon.json is JSON data, so it is merged as data: every key the file has is kept (order
included), only ``runtimes.<name>.path`` and, when asked, ``default-runtime`` and
``features.cdi`` are set, and the file is written again only when the data changed, in the
indentation the file already uses.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import re


class DockerDaemonError(Exception):
    """A daemon.json that cannot be merged: what was found, and what is expected."""


def detect_indent(text):
    """The indentation unit of a JSON text: an int (spaces), a tab, or None for one line."""
    stripped = text.strip()
    if "\n" not in stripped:
        return None if stripped and stripped != "{}" else 4
    for line in stripped.splitlines()[1:]:
        m = re.match(r"^([ \t]+)\S", line)
        if m:
            unit = m.group(1)
            return "\t" if unit.startswith("\t") else len(unit)
    return 4


def load_daemon_json(text, path="daemon.json"):
    """The JSON object of daemon.json; an empty (or whitespace-only) file is an empty object."""
    if text is None or not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DockerDaemonError(
            "%s is not valid JSON (%s); dockerd would not start with it either. Fix or remove the "
            "file and run again; nothing was changed." % (path, exc)
        ) from None
    if not isinstance(data, dict):
        raise DockerDaemonError(
            "%s holds a JSON %s; Docker expects an object ({...}) of settings"
            % (path, type(data).__name__)
        )
    return data


# Docker's CDI: 25.0 brought it behind the `cdi` feature (features.cdi in daemon.json); 28.2
# turned it on by default, so from then on only an explicit `"cdi": false` turns it off.
CDI_FIRST = (25, 0)
CDI_DEFAULT_ON = (28, 2)


def parse_docker_version(text):
    """(major, minor, patch) from `dockerd --version` (for example 'Docker version
    26.1.5+dfsg1, build a72d7cd'), or None when the text has none."""
    m = re.search(r"\bversion v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def cdi_plan(config, version, cdi):
    """(set_cdi, state, warnings): whether daemon.json needs `features.cdi = true`, and CDI as
    dockerd will run it. `version` is dockerd's (None when unknown: then the feature is set,
    which any Docker accepts, as `features` is a free map)."""
    features = config.get("features")
    current = features.get("cdi") if isinstance(features, dict) else None
    shown = ".".join(str(v) for v in version) if version else "unknown"
    on_by_default = bool(version) and tuple(version[:2]) >= CDI_DEFAULT_ON
    if not cdi:
        enabled = current is True or (on_by_default and current is not False)
        return False, {"enabled": enabled, "source": "not managed (cdi false)"}, []
    if version and tuple(version[:2]) < CDI_FIRST:
        return (
            False,
            {"enabled": False, "source": "unsupported"},
            [
                "Docker %s has no CDI support (Docker 25.0 brought it); devices are injected the "
                "legacy way through the nvidia runtime. Upgrade Docker for CDI, or set cdi false "
                "(container_runtime_cdi) to say the legacy way is meant" % shown
            ],
        )
    if current is True or (on_by_default and current is not False):
        source = "daemon.json" if current is True else "docker default"
        return False, {"enabled": True, "source": source}, []
    return True, {"enabled": True, "source": "daemon.json (kubegpu)"}, []


def merge_nvidia(config, runtime_name, binary, default_runtime, path="daemon.json", cdi=False):
    """A copy of `config` with the runtime (and, when asked, the default runtime and the
    `cdi` feature) set."""
    merged = copy.deepcopy(config)
    if cdi:
        features = merged.setdefault("features", {})
        if not isinstance(features, dict):
            raise DockerDaemonError(
                "%s: `features` is a JSON %s; Docker expects an object of feature name -> "
                "true/false" % (path, type(features).__name__)
            )
        features["cdi"] = True
    runtimes = merged.setdefault("runtimes", {})
    if not isinstance(runtimes, dict):
        raise DockerDaemonError(
            "%s: `runtimes` is a JSON %s; Docker expects an object of runtime name -> "
            '{"path": ...}' % (path, type(runtimes).__name__)
        )
    entry = runtimes.get(runtime_name)
    if entry is not None and not isinstance(entry, dict):
        raise DockerDaemonError(
            "%s: `runtimes.%s` is a JSON %s; Docker expects an object with a `path`"
            % (path, runtime_name, type(entry).__name__)
        )
    entry = dict(entry or {})
    entry["path"] = binary
    runtimes[runtime_name] = entry
    if default_runtime:
        merged["default-runtime"] = runtime_name
    return merged


def render_daemon_json(config, indent):
    text = json.dumps(config, indent=indent, ensure_ascii=False)
    return text + "\n"


def plan_daemon_json(
    old_text, runtime_name, binary, default_runtime, path="daemon.json", cdi=False
):
    """(new_text, changed): `old_text` itself when the merged data equals what it holds.
    `cdi` sets `features.cdi` (the first value of cdi_plan)."""
    current = load_daemon_json(old_text, path)
    merged = merge_nvidia(current, runtime_name, binary, default_runtime, path, cdi)
    if old_text is not None and old_text.strip() and merged == current:
        return old_text, False
    indent = detect_indent(old_text) if old_text and old_text.strip() else 4
    return render_daemon_json(merged, indent), True


# --- what kubegpu did, and undoing exactly that -----------------------------------------------------
#
# The module records, in a local fact file, what daemon.json held before kubegpu first set the
# runtime (the entry of that name, `default-runtime`, whether `runtimes` or the file existed),
# so that a reset takes out only kubegpu's settings and keeps every key the user set since.

RECORD_FORMAT = 1
_MISSING = {"missing": True}


def record_after_merge(record, old_text, runtime_name, binary, default_runtime, path, cdi=False):
    """The record after a merge changed daemon.json; the `before` values of the first merge
    are kept, so a reset goes back to what the file held before kubegpu."""
    current = load_daemon_json(old_text, path)
    features = current.get("features") if isinstance(current.get("features"), dict) else None
    runtimes = current.get("runtimes") if isinstance(current.get("runtimes"), dict) else None
    fresh = {
        "format": RECORD_FORMAT,
        "path": path,
        "runtime_name": runtime_name,
        "file_created": old_text is None,
        "runtimes_key_added": runtimes is None,
        "runtime_before": copy.deepcopy(runtimes.get(runtime_name)) if runtimes else None,
        "default_runtime_before": current.get("default-runtime", _MISSING),
        "default_runtime_set": False,
    }
    if not record or record.get("path") != path or record.get("runtime_name") != runtime_name:
        record = fresh
    else:
        record = dict(record)
    record["runtime_binary"] = binary
    if default_runtime and current.get("default-runtime") != runtime_name:
        if not record.get("default_runtime_set"):
            record["default_runtime_before"] = current.get("default-runtime", _MISSING)
        record["default_runtime_set"] = True
    if cdi and (features or {}).get("cdi") is not True and not record.get("cdi_set"):
        record["features_key_added"] = features is None
        record["cdi_before"] = (features or {}).get("cdi", _MISSING)
        record["cdi_set"] = True
    return record


def unmerge_nvidia(config, record):
    """(new config, [what was undone]) for a reset, from kubegpu's record."""
    merged = copy.deepcopy(config)
    undone = []
    name = record.get("runtime_name")
    runtimes = merged.get("runtimes")
    ours = isinstance(runtimes, dict) and isinstance(runtimes.get(name), dict)
    if ours and runtimes[name].get("path") == record.get("runtime_binary"):
        before = record.get("runtime_before")
        if before is None:
            del runtimes[name]
            undone.append("removed runtimes.%s" % name)
        else:
            runtimes[name] = before
            undone.append("put back runtimes.%s as it was" % name)
        if not runtimes and record.get("runtimes_key_added"):
            del merged["runtimes"]
    if record.get("default_runtime_set") and merged.get("default-runtime") == name:
        before = record.get("default_runtime_before", _MISSING)
        if before == _MISSING:
            del merged["default-runtime"]
            undone.append("removed default-runtime")
        else:
            merged["default-runtime"] = before
            undone.append("put back default-runtime %r" % (before,))
    features = merged.get("features")
    if record.get("cdi_set") and isinstance(features, dict) and features.get("cdi") is True:
        before = record.get("cdi_before", _MISSING)
        if before == _MISSING:
            del features["cdi"]
            undone.append("removed features.cdi")
            if not features and record.get("features_key_added"):
                del merged["features"]
        else:
            features["cdi"] = before
            undone.append("put back features.cdi %r" % (before,))
    return merged, undone


def plan_reset(old_text, record, path="daemon.json"):
    """("keep"|"edit"|"remove", new_text, [what was undone]) for a reset of daemon.json."""
    if old_text is None or not record:
        return "keep", old_text, []
    current = load_daemon_json(old_text, path)
    merged, undone = unmerge_nvidia(current, record)
    if merged == current:
        return "keep", old_text, []
    if not merged and record.get("file_created"):
        return "remove", None, undone
    return "edit", render_daemon_json(merged, detect_indent(old_text)), undone
