# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Kubelet settings that are checked against the kubelet they go to, and merged into its files.

Pure functions over data and text: they run on the target's Python (3.8+), import only the
standard library, and are tested without a host.

Validators (each returns a list of messages, one per problem; empty means valid):
- validate_feature_gates(gates, kubernetes_version, unchecked=()): gates against the release table
  (the table itself is data, in kubelet_gates.py)
- validate_settings(settings): KubeletConfiguration field names and reserved keys
Node labels and taints are validated in kubelet_labels.py.

Helpers:
- parse_kubernetes_version(text): (1, 31) from "1.31", "v1.31.2", "Kubernetes v1.31.2",
  "k3s version v1.31.2+k3s1 (...)"
- merge_kubelet_config / build_dropin_config: KubeletConfiguration data
- merge_extra_args_file(text, ...): the KUBELET_EXTRA_ARGS line of /etc/default/kubelet
- merge_rancher_config(data, ...): node-label, node-taint and kubelet-arg of a k3s/RKE2 config
"""

from __future__ import absolute_import, division, print_function

import copy
import difflib
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils.kubelet_gates import (
    GATES_PRESENT,
    GATES_REMOVED,
    SUPPORTED_RELEASES,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.kubelet_labels import (
    parse_taint_text,
    format_taint,
    normalize_taints,
)

__metaclass__ = type

# ---------------------------------------------------------------------------------------------
# Feature gates by Kubernetes release (the table and its encoding: kubelet_gates.py)
# ---------------------------------------------------------------------------------------------

_STAGE_NAMES = {"A": "alpha", "B": "beta", "G": "GA", "D": "deprecated"}


def _parse_release(text):
    """(major, minor) from '1.31'; None when the text is not of that form."""
    m = re.match(r"^(\d+)\.(\d+)$", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _fmt(release):
    return "%d.%d" % release


def _parse_tokens(spec):
    states = []
    for token in spec.split(","):
        version, flags = token.split()
        states.append(
            {
                "since": _parse_release(version),
                "stage": _STAGE_NAMES[flags[0]],
                "default": flags[1] == "+",
                "locked": flags.endswith("!"),
            }
        )
    return states


def _parse_removal(text):
    if text is None:
        return None
    if ".." in text:
        lo, hi = text.split("..")
        return (_parse_release(lo), _parse_release(hi))
    release = _parse_release(text)
    return (release, release)


def _build_table():
    table = {}
    for name, spec in GATES_PRESENT.items():
        table[name] = {"states": _parse_tokens(spec), "removed": None}
    for name, (spec, removal) in GATES_REMOVED.items():
        table[name] = {"states": _parse_tokens(spec), "removed": _parse_removal(removal)}
    return table


FEATURE_GATES = _build_table()


# A version as a person writes it, matched against the whole text (fullmatch), in ASCII digits
# ("\d" takes fullwidth and other scripts' digits too); major and minor of at most three digits.
_USER_VERSION_RE = re.compile(r"v?([0-9]{1,3})\.([0-9]{1,3})(?:\.[0-9]+)?(?:[-+][0-9A-Za-z.+-]*)?")
_PRINTED_VERSION_RE = re.compile(
    r"(?<![\w.])v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+][0-9A-Za-z.+-]*)?(?![\w.])"
)


def parse_kubernetes_version(text, printed=False):
    """(major, minor) of a Kubernetes version, or None when the text holds none.

    As written by a person (the default): "1.31", "v1.31", "1.31.2", "v1.31.2+k3s1". With
    printed=True, the first version in what a binary printed: "Kubernetes v1.31.2",
    "k3s version v1.31.2+k3s1 (abc)", "rke2 version v1.31.2+rke2r1 (abc)".
    """
    if text is None:
        return None
    m = _PRINTED_VERSION_RE.search(str(text)) if printed else _USER_VERSION_RE.fullmatch(str(text))
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2)))


def gate_state(name, release):
    """What the table knows of a gate at a release (major, minor).

    Returns a dict: status one of "present", "not_yet", "removed", "maybe_removed", "unknown";
    and for known gates stage, default, locked, since (first release), removed_in (first release
    without it, or a (lo, hi) window).
    """
    entry = FEATURE_GATES.get(name)
    if entry is None:
        return {"status": "unknown"}
    states = entry["states"]
    first = states[0]
    info = {"since": first["since"], "first_stage": first["stage"], "removed_in": entry["removed"]}
    removed = entry["removed"]
    if removed is not None and release >= removed[1]:
        info["status"] = "removed"
        return info
    if release < first["since"]:
        info["status"] = "not_yet"
        return info
    current = [s for s in states if s["since"] <= release][-1]
    info.update(stage=current["stage"], default=current["default"], locked=current["locked"])
    if removed is not None and release >= removed[0]:
        info["status"] = "maybe_removed"
    else:
        info["status"] = "present"
    return info


def _gates_at(release):
    return sorted(
        n for n in FEATURE_GATES if gate_state(n, release)["status"] in ("present", "maybe_removed")
    )


def _bool_word(value):
    return "true" if value else "false"


def validate_feature_gates(gates, kubernetes_version, unchecked=()):
    """One message per problem with `gates` (name -> bool) for the kubelet of that version.

    Problems: a value that is not a boolean; a gate the release does not have (never existed,
    not yet added, or removed: the message says which, and when); a locked gate set against its
    locked value. Gates named in `unchecked` are only checked for a boolean value.
    """
    messages = []
    if not gates:
        return messages
    if not isinstance(gates, dict):
        return [
            "feature_gates: must be a mapping of gate name to true or false, got %s"
            % type(gates).__name__
        ]
    unchecked = set(unchecked or ())
    release = parse_kubernetes_version(kubernetes_version)
    lo, hi = SUPPORTED_RELEASES
    version_ok = True
    if release is None:
        messages.append(
            "kubernetes_version: %r is not a Kubernetes version; write it as 1.35 or v1.35.2"
            % (kubernetes_version,)
        )
        version_ok = False
    elif not lo <= release <= hi:
        messages.append(
            "kubernetes_version: %s is outside the releases kubegpu supports (%s to %s), so its "
            "feature gates cannot be checked; use a kubelet from %s to %s"
            % (_fmt(release), _fmt(lo), _fmt(hi), _fmt(lo), _fmt(hi))
        )
        version_ok = False
    for name in sorted(gates, key=str):
        value = gates[name]
        if not isinstance(value, bool):
            messages.append(
                "feature_gates: %r must be true or false, got %r (%s); write the value without "
                "quotes" % (name, value, type(value).__name__)
            )
            continue
        if not version_ok or name in unchecked:
            continue
        messages.extend(_check_gate(str(name), value, release))
    return messages


def _check_gate(name, value, release):
    version = _fmt(release)
    state = gate_state(name, release)
    status = state["status"]
    if status == "unknown":
        close = difflib.get_close_matches(name, _gates_at(release), n=1, cutoff=0.8)
        hint = " Did you mean %r?" % close[0] if close else ""
        return [
            "feature_gates: %r is not a feature gate of Kubernetes %s (no release kubegpu knows "
            "of has it).%s Remove it, or if your kubelet does have it, list it in "
            "unchecked_feature_gates." % (name, version, hint)
        ]
    if status == "not_yet":
        return [
            "feature_gates: %r does not exist in Kubernetes %s; it was added in %s (%s). Remove "
            "it, or use a kubelet of %s or later."
            % (name, version, _fmt(state["since"]), state["first_stage"], _fmt(state["since"]))
        ]
    if status == "removed":
        lo, hi = state["removed_in"]
        when = "in %s" % _fmt(lo) if lo == hi else "in %s or %s" % (_fmt(lo), _fmt(hi))
        if lo != hi and hi[1] - lo[1] > 1:
            when = "between %s and %s" % (_fmt(lo), _fmt(hi))
        return [
            "feature_gates: %r was removed from Kubernetes %s; the kubelet of %s does not have it "
            "and would refuse to start. Remove it." % (name, when, version)
        ]
    if state["locked"] and value != state["default"]:
        return [
            "feature_gates: %r is locked to %s in Kubernetes %s (%s); the kubelet refuses to "
            "start with %s=%s. Set it to %s or remove it."
            % (
                name,
                _bool_word(state["default"]),
                version,
                state["stage"],
                name,
                _bool_word(value),
                _bool_word(state["default"]),
            )
        ]
    return []


# ---------------------------------------------------------------------------------------------
# KubeletConfiguration settings
# ---------------------------------------------------------------------------------------------

KUBELET_CONFIG_API_VERSION = "kubelet.config.k8s.io/v1beta1"
KUBELET_CONFIG_KIND = "KubeletConfiguration"
# Matched against the whole name (fullmatch).
_FIELD_RE = re.compile(r"[a-z][A-Za-z0-9]*")


def validate_settings(settings):
    """One message per problem with settings to merge into the KubeletConfiguration."""
    if not settings:
        return []
    if not isinstance(settings, dict):
        return [
            "settings: must be a mapping of KubeletConfiguration fields, got %s"
            % type(settings).__name__
        ]
    messages = []
    for key in sorted(settings, key=str):
        if key in ("apiVersion", "kind"):
            messages.append(
                "settings: %r is set by kubegpu (%s); remove it from settings"
                % (key, KUBELET_CONFIG_API_VERSION if key == "apiVersion" else KUBELET_CONFIG_KIND)
            )
        elif key == "featureGates":
            messages.append(
                "settings: put feature gates in feature_gates, not settings.featureGates, so "
                "that they are checked against the kubelet's version"
            )
        elif not isinstance(key, str) or not _FIELD_RE.fullmatch(key):
            camel = re.sub(r"[_-]([a-z0-9])", lambda m: m.group(1).upper(), str(key))
            messages.append(
                "settings: %r is not a KubeletConfiguration field name; fields are camelCase, "
                "for example %s" % (key, camel[:1].lower() + camel[1:])
            )
    return messages


def deep_merge(base, override):
    """A copy of base with override merged in: mappings merge key by key, other values replace."""
    result = copy.deepcopy(base) if base else {}
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def merge_kubelet_config(existing, feature_gates=None, settings=None):
    """The KubeletConfiguration `existing` (a dict, or None for a new file) with ours merged in.

    Every other key is kept; settings are merged deeply; featureGates are merged gate by gate.
    """
    result = copy.deepcopy(existing) if existing else {}
    if not result:
        result = {"apiVersion": KUBELET_CONFIG_API_VERSION, "kind": KUBELET_CONFIG_KIND}
    result = deep_merge(result, settings or {})
    if feature_gates:
        gates = result.get("featureGates")
        gates = dict(gates) if isinstance(gates, dict) else {}
        gates.update(feature_gates)
        result["featureGates"] = gates
    return result


def build_dropin_config(feature_gates=None, settings=None):
    """A kubelet drop-in file's content (owned by kubegpu): apiVersion, kind, settings, gates."""
    return merge_kubelet_config(None, feature_gates, settings)


# ---------------------------------------------------------------------------------------------
# Kubelet flags: KUBELET_EXTRA_ARGS (kubeadm packages) and k3s/RKE2 config.yaml
# ---------------------------------------------------------------------------------------------

EXTRA_ARGS_VARIABLE = "KUBELET_EXTRA_ARGS"
_TOKEN_RE = re.compile(r"""(?:[^\s"']+|"[^"]*"|'[^']*')+""")


def _unquote(raw):
    return re.sub(r""""([^"]*)"|'([^']*)'""", lambda m: m.group(1) or m.group(2) or "", raw)


def parse_label_list(text):
    """Ordered (key, value) pairs from 'a=b,c=d'."""
    pairs = []
    for item in text.split(","):
        if item.strip():
            key, _, value = item.strip().partition("=")
            pairs.append((key, value))
    return pairs


def merge_labels(existing_pairs, labels):
    """Existing (key, value) pairs with ours: ours replace same keys, new ones are appended."""
    merged = []
    done = set()
    for key, value in existing_pairs:
        if key in labels:
            if key not in done:
                merged.append((key, str(labels[key])))
                done.add(key)
        elif key not in done:
            merged.append((key, value))
            done.add(key)
    for key in labels:
        if key not in done:
            merged.append((key, str(labels[key])))
            done.add(key)
    return merged


def merge_taints(existing_texts, taints):
    """Existing taint strings with ours: a taint of ours replaces one with the same key+effect."""
    ours = {(t["key"], t["effect"]): t for t in taints}
    merged = []
    done = set()
    for text in existing_texts:
        parsed = parse_taint_text(text)
        identity = (parsed["key"], parsed["effect"]) if parsed else None
        if identity in ours:
            if identity not in done:
                merged.append(format_taint(ours[identity]))
                done.add(identity)
        elif identity is None or identity not in done:
            merged.append(text)
            if identity:
                done.add(identity)
    for identity, taint in ours.items():
        if identity not in done:
            merged.append(format_taint(taint))
    return merged


def _split_args(value):
    """Tokens of a command line: (flag name or None, value or None, raw) per argument."""
    raws = _TOKEN_RE.findall(value)
    args = []
    i = 0
    while i < len(raws):
        raw = raws[i]
        text = _unquote(raw)
        if text.startswith("--"):
            name, sep, flag_value = text.partition("=")
            if sep:
                args.append([name, flag_value, raw])
            elif i + 1 < len(raws) and not _unquote(raws[i + 1]).startswith("-"):
                args.append([name, _unquote(raws[i + 1]), raw + " " + raws[i + 1]])
                i += 1
            else:
                args.append([name, None, raw])
        else:
            args.append([None, text, raw])
        i += 1
    return args


def _merged_flag_values(args, node_labels, node_taints, flags):
    """Wanted value per managed flag, given the current arguments."""
    wanted = {}
    if node_labels:
        pairs = []
        for name, value, _raw in args:
            if name == "--node-labels" and value:
                pairs.extend(parse_label_list(value))
        wanted["--node-labels"] = ",".join("%s=%s" % kv for kv in merge_labels(pairs, node_labels))
    if node_taints:
        texts = []
        for name, value, _raw in args:
            if name == "--register-with-taints" and value:
                texts.extend(t for t in value.split(",") if t.strip())
        wanted["--register-with-taints"] = ",".join(merge_taints(texts, node_taints))
    for name, value in (flags or {}).items():
        wanted[name] = value
    return wanted


def merge_extra_args(value, node_labels=None, node_taints=None, flags=None):
    """The KUBELET_EXTRA_ARGS value with our flags merged in, or None when nothing changes.

    --node-labels and --register-with-taints are merged as lists (other labels and taints stay);
    flags in `flags` (name -> value) are set. Every other argument is kept as written.
    """
    args = _split_args(value)
    wanted = _merged_flag_values(args, node_labels, node_taints, flags)
    current = {}
    counts = {}
    for name, flag_value, raw in args:
        if name in wanted:
            counts[name] = counts.get(name, 0) + 1
            current[name] = (flag_value, raw)
    if all(
        counts.get(name) == 1 and current[name][1] == "%s=%s" % (name, wanted[name])
        for name in wanted
    ):
        return None
    out = []
    placed = set()
    for name, _flag_value, raw in args:
        if name in wanted:
            if name not in placed:
                out.append("%s=%s" % (name, wanted[name]))
                placed.add(name)
        else:
            out.append(raw)
    for name in wanted:
        if name not in placed:
            out.append("%s=%s" % (name, wanted[name]))
    return " ".join(out)


_ASSIGN_RE = re.compile(r"^(\s*(?:export\s+)?)([A-Za-z_][A-Za-z0-9_]*)=(.*?)(\r?\n)?$")


def merge_extra_args_file(text, node_labels=None, node_taints=None, flags=None, env=None):
    """An /etc/default/kubelet (or /etc/sysconfig/kubelet) text with our settings merged in.

    Only the last KUBELET_EXTRA_ARGS line changes (or one is appended); every other line, comment
    and blank stays byte for byte. `env` (name -> value) are further variables the kubelet's
    unit reads from the same file; a line is added or replaced for each. Returns the new text,
    equal to `text` when nothing changes.
    """
    lines = (text or "").splitlines(True)
    index = None
    for i, line in enumerate(lines):
        m = _ASSIGN_RE.match(line)
        if m and m.group(2) == EXTRA_ARGS_VARIABLE:
            index = i
    if index is None:
        new_value = merge_extra_args("", node_labels, node_taints, flags)
        if new_value is not None:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            # Quoted, so that the file also reads right when a shell sources it.
            lines.append('%s="%s"\n' % (EXTRA_ARGS_VARIABLE, new_value))
    else:
        m = _ASSIGN_RE.match(lines[index])
        lead, raw_value, eol = m.group(1), m.group(3), m.group(4) or ""
        quote = ""
        stripped = raw_value.strip()
        if len(stripped) >= 2 and stripped[0] == stripped[-1] and stripped[0] in "\"'":
            quote, inner = stripped[0], stripped[1:-1]
        else:
            inner = stripped
        new_value = merge_extra_args(inner, node_labels, node_taints, flags)
        if new_value is not None:
            lines[index] = "%s%s=%s%s%s%s" % (
                lead,
                EXTRA_ARGS_VARIABLE,
                quote,
                new_value,
                quote,
                eol,
            )
    for name, value in (env or {}).items():
        wanted = "%s=%s" % (name, value)
        found = False
        for i, line in enumerate(lines):
            m = _ASSIGN_RE.match(line)
            if m and m.group(2) == name:
                found = True
                if m.group(3).strip().strip("\"'") != str(value):
                    lines[i] = wanted + (m.group(4) or "")
        if not found:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            lines.append(wanted + "\n")
    return "".join(lines)


def _as_list(value):
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]


def merge_rancher_config(
    data, node_labels=None, node_taints=None, kubelet_args=None, feature_gates=None
):
    """A k3s or RKE2 config.yaml (as data) with ours merged in; other keys stay as they are.

    node-label ("key=value") and node-taint ("key=value:Effect") lists are merged like the
    kubelet flags; kubelet-arg entries ("name=value") are set by name, and feature gates are
    merged into the feature-gates entry gate by gate.
    """
    result = copy.deepcopy(data) if data else {}
    if node_labels:
        pairs = [tuple(t.partition("=")[::2]) for t in _as_list(result.get("node-label"))]
        result["node-label"] = ["%s=%s" % kv for kv in merge_labels(pairs, node_labels)]
    if node_taints:
        result["node-taint"] = merge_taints(_as_list(result.get("node-taint")), node_taints)
    wanted = dict(kubelet_args or {})
    if feature_gates:
        existing = ""
        for item in _as_list(result.get("kubelet-arg")):
            name, _, value = item.lstrip("-").partition("=")
            if name == "feature-gates":
                existing = value
        gates = [tuple(p.partition("=")[::2]) for p in existing.split(",") if p.strip()]
        merged = merge_labels(gates, dict((k, _bool_word(v)) for k, v in feature_gates.items()))
        wanted["feature-gates"] = ",".join("%s=%s" % kv for kv in merged)
    if wanted:
        out = []
        placed = set()
        for item in _as_list(result.get("kubelet-arg")):
            name = item.lstrip("-").partition("=")[0]
            if name in wanted:
                if name not in placed:
                    out.append("%s=%s" % (name, wanted[name]))
                    placed.add(name)
            else:
                out.append(item)
        for name, value in wanted.items():
            if name not in placed:
                out.append("%s=%s" % (name, value))
        result["kubelet-arg"] = out
    return result


# ---------------------------------------------------------------------------------------------
# What to write where, per kubelet layout
# ---------------------------------------------------------------------------------------------

FLAVORS = ("kubeadm", "k3s", "rke2")
DEFAULT_PATHS = {
    "kubeadm": "/var/lib/kubelet/config.yaml",
    "k3s": "/etc/rancher/k3s/config.yaml",
    "rke2": "/etc/rancher/rke2/config.yaml",
}
DROPIN_ALPHA_ENV = "KUBELET_CONFIG_DROPIN_DIR_ALPHA"
# --config-dir: alpha in 1.28 and 1.29 (only with the environment variable above set), beta from
# 1.30, GA in 1.35 (kubernetes/website tasks/administer-cluster/kubelet-config-file.md; KEP-3983).
DROPIN_SINCE = (1, 28)
DROPIN_ENV_UNTIL = (1, 29)


class KubeletConfigError(Exception):
    """A file on the host cannot be merged into (unreadable YAML, not the expected kind)."""


def dropin_path(config_dir, dropin_name):
    """The kubegpu drop-in file in the kubelet's drop-in directory."""
    return config_dir.rstrip("/") + "/" + dropin_name


def plan_kubelet_files(
    flavor,
    read,
    load_yaml,
    dump_yaml,
    config_path,
    extra_args_path=None,
    feature_gates=None,
    settings=None,
    node_labels=None,
    node_taints=None,
    config_dir=None,
    dropin_name="50-kubegpu.conf",
    release=None,
):
    """The files to change, as dicts with path, before (None: absent), after, mode and kind
    (how kubelet_record sees the file: owned, config, args or rancher).

    read(path) returns a file's text or None; load_yaml(text) and dump_yaml(data) convert. Only
    files whose content would change are returned. Raises KubeletConfigError.
    """
    taints = normalize_taints(node_taints)
    plans = []

    def load(path, text):
        if text is None or not text.strip():
            return {}
        try:
            data = load_yaml(text)
        except Exception as exc:
            raise KubeletConfigError("%s is not valid YAML: %s" % (path, exc)) from exc
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise KubeletConfigError(
                "%s holds a %s, not a mapping; kubegpu merges only into a mapping"
                % (path, type(data).__name__)
            )
        return data

    def add(path, before, data, mode, before_data, kind):
        if before is not None and data == before_data:
            return
        plans.append(
            {"path": path, "before": before, "after": dump_yaml(data), "mode": mode, "kind": kind}
        )

    dropin = None
    if config_dir and (feature_gates or settings):
        dropin = dropin_path(config_dir, dropin_name)
        before = read(dropin)
        add(
            dropin,
            before,
            build_dropin_config(feature_gates, settings),
            0o644,
            load(dropin, before),
            "owned",
        )

    if flavor == "kubeadm":
        if not dropin and (feature_gates or settings):
            before = read(config_path)
            existing = load(config_path, before)
            kind = existing.get("kind")
            if existing and kind != KUBELET_CONFIG_KIND:
                raise KubeletConfigError(
                    "%s is a %r, not a %s; point config_path at the kubelet's --config file"
                    % (config_path, kind, KUBELET_CONFIG_KIND)
                )
            add(
                config_path,
                before,
                merge_kubelet_config(existing, feature_gates, settings),
                0o644,
                existing,
                "config",
            )
        flags = {"--config-dir": config_dir} if dropin else {}
        env = {}
        if dropin and release is not None and release <= DROPIN_ENV_UNTIL:
            env[DROPIN_ALPHA_ENV] = "on"
        if node_labels or taints or flags or env:
            before = read(extra_args_path)
            after = merge_extra_args_file(before or "", node_labels, taints, flags, env)
            if after != (before or ""):
                plans.append(
                    {
                        "path": extra_args_path,
                        "before": before,
                        "after": after,
                        "mode": 0o644,
                        "kind": "args",
                    }
                )
    else:
        before = read(config_path)
        existing = load(config_path, before)
        kubelet_args = {"config-dir": config_dir} if dropin else {}
        gates_as_flag = None if dropin else feature_gates
        if node_labels or taints or kubelet_args or gates_as_flag:
            merged = merge_rancher_config(
                existing, node_labels, taints, kubelet_args, gates_as_flag
            )
            add(config_path, before, merged, 0o600, existing, "rancher")
    return plans
