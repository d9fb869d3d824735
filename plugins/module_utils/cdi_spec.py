# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Container Device Interface (CDI) specs: reading them, and what their device names mean.

A CDI spec is YAML or JSON (``nvidia-ctk cdi generate`` writes YAML by default, JSON with
``--format=json``). JSON goes through ``json``; YAML through PyYAML when the target has it, else
through a small reader for the block YAML that generators write (mappings, sequences, plain and
quoted scalars, empty and simple flow collections), which the unit tests hold to PyYAML's
answers on real specs. Anything outside that subset is an error that names the line, never a
silent guess.

NVIDIA's device names (``nvidia-ctk cdi generate --device-name-strategy``): ``index`` gives
``0`` and ``0:1`` (GPU 0, its MIG device 1), ``type-index`` ``gpu0`` and ``mig0:1``, ``uuid``
the GPU's ``GPU-...`` and the MIG device's ``MIG-...`` UUID; ``all`` names every device.

Runs on the target's Python (3.8+), standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

NVIDIA_GPU_KIND = "nvidia.com/gpu"


class CdiSpecError(Exception):
    """A CDI spec that cannot be read: the file, the place, and what was found."""


# --- a block-YAML reader for generated specs ------------------------------------------------------

_KEY = re.compile(
    r"""^("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s'"\[\]{}#,:][^:#]*?)\s*:(?:\s+|$)(.*)$"""
)


def _scalar(text, where):
    text = text.strip()
    if text.startswith('"'):
        try:
            value, end = json.JSONDecoder().raw_decode(text)
        except ValueError:
            raise CdiSpecError("%s: unreadable double-quoted string %s" % (where, text)) from None
        rest = text[end:].strip()
        if rest and not rest.startswith("#"):
            raise CdiSpecError("%s: text after a quoted string: %s" % (where, text))
        return value
    if text.startswith("'"):
        m = re.match(r"^'((?:[^']|'')*)'\s*(#.*)?$", text)
        if not m:
            raise CdiSpecError("%s: unreadable single-quoted string %s" % (where, text))
        return m.group(1).replace("''", "'")
    text = re.sub(r"\s+#.*$", "", text)
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if re.match(r"^[-+]?(0|[1-9][0-9]*)$", text):
        return int(text)
    if re.match(r"^[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$", text):
        return float(text)
    if text == "[]":
        return []
    if text == "{}":
        return {}
    if text.startswith("["):
        if not text.endswith("]") or any(c in text[1:-1] for c in "[]{}\"'"):
            raise CdiSpecError("%s: flow sequence this reader does not take: %s" % (where, text))
        return [_scalar(part, where) for part in text[1:-1].split(",") if part.strip()]
    if text[0] in "{&*!|>%@`":
        raise CdiSpecError("%s: YAML this reader does not take: %s" % (where, text))
    return text


class _Lines:
    def __init__(self, text, source):
        self.source = source
        self.items = []  # (line number, indent, content)
        for number, raw in enumerate(text.splitlines(), 1):
            if "\t" in raw[: len(raw) - len(raw.lstrip())]:
                raise CdiSpecError("%s line %d: a tab in the indentation" % (source, number))
            stripped = raw.strip()
            if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
                continue
            self.items.append((number, len(raw) - len(raw.lstrip(" ")), stripped))
        self.i = 0

    def peek(self):
        return self.items[self.i] if self.i < len(self.items) else None

    def where(self, number):
        return "%s line %d" % (self.source, number)


def _block(lines, indent):
    """The node whose lines start at `indent` (a sequence when they start with '- ')."""
    first = lines.peek()
    if first is None or first[1] < indent:
        return None
    if first[2] == "-" or first[2].startswith("- "):
        return _sequence(lines, first[1])
    return _mapping(lines, first[1])


def _value_after_key(lines, rest, indent, number):
    """The value of `key: rest` at `indent`: inline, or the block on the lines below."""
    if rest.strip() and not rest.strip().startswith("#"):
        return _scalar(rest, lines.where(number))
    nxt = lines.peek()
    if nxt is None:
        return None
    if nxt[1] > indent:
        return _block(lines, nxt[1])
    if nxt[1] == indent and (nxt[2] == "-" or nxt[2].startswith("- ")):
        return _sequence(lines, indent)  # a sequence may sit at its key's indentation
    return None


def _mapping(lines, indent, first_content=None, first_number=None):
    result = {}
    while True:
        if first_content is not None:
            number, content = first_number, first_content
            first_content = None
        else:
            line = lines.peek()
            if line is None or line[1] < indent:
                return result
            if line[1] > indent:
                raise CdiSpecError("%s: unexpected indentation" % lines.where(line[0]))
            if line[2] == "-" or line[2].startswith("- "):
                return result  # the sequence this mapping is a key of continues
            number, content = line[0], line[2]
            lines.i += 1
        m = _KEY.match(content)
        if not m:
            raise CdiSpecError(
                "%s: expected `key: value`, found %s" % (lines.where(number), content)
            )
        key = _scalar(m.group(1), lines.where(number))
        if key in result:
            raise CdiSpecError("%s: key %r appears twice" % (lines.where(number), key))
        result[key] = _value_after_key(lines, m.group(2), indent, number)


def _sequence(lines, indent):
    result = []
    while True:
        line = lines.peek()
        if line is None or line[1] != indent or not (line[2] == "-" or line[2].startswith("- ")):
            if line is not None and line[1] > indent:
                raise CdiSpecError("%s: unexpected indentation" % lines.where(line[0]))
            return result
        number, content = line[0], line[2][1:]
        lines.i += 1
        item = content.lstrip(" ")
        item_indent = indent + 1 + (len(content) - len(item))
        if not item or item.startswith("#"):
            result.append(_block(lines, indent + 1))
        elif item == "-" or item.startswith("- "):
            raise CdiSpecError("%s: nested inline sequences are not read" % lines.where(number))
        elif _KEY.match(item):
            result.append(_mapping(lines, item_indent, item, number))
        else:
            result.append(_scalar(item, lines.where(number)))


def load_yaml_builtin(text, source="CDI spec"):
    """Read block YAML of the kind spec generators write (see the module's docstring)."""
    lines = _Lines(text, source)
    if lines.peek() is None:
        return None
    first = lines.peek()
    if first[1] != 0:
        raise CdiSpecError("%s: the document does not start at column 0" % lines.where(first[0]))
    data = _block(lines, 0)
    rest = lines.peek()
    if rest is not None:
        raise CdiSpecError("%s: unexpected %s" % (lines.where(rest[0]), rest[2]))
    return data


def load_spec_text(text, source="CDI spec"):
    """The spec's data: JSON when it is JSON, else YAML (PyYAML where the target has it)."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise CdiSpecError("%s: not valid JSON (%s)" % (source, exc)) from None
    try:
        import yaml  # optional on the target
    except ImportError:
        return load_yaml_builtin(text, source)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        message = " ".join(str(exc).split())
        raise CdiSpecError("%s: not valid YAML (%s)" % (source, message)) from None


def read_spec(text, source="CDI spec"):
    """{"kind", "cdi_version", "devices": [names]} of one spec; raises CdiSpecError."""
    data = load_spec_text(text, source)
    if not isinstance(data, dict):
        raise CdiSpecError("%s: a CDI spec is a mapping with cdiVersion, kind and devices" % source)
    kind = data.get("kind")
    if not isinstance(kind, str) or not kind:
        raise CdiSpecError("%s: no `kind` (vendor/class, for example nvidia.com/gpu)" % source)
    devices = data.get("devices")
    if devices is None:
        devices = []
    if not isinstance(devices, list):
        raise CdiSpecError("%s: `devices` is not a list" % source)
    names = []
    for position, device in enumerate(devices):
        name = device.get("name") if isinstance(device, dict) else None
        if isinstance(name, int) and not isinstance(name, bool):
            name = str(name)  # an unquoted 0 in hand-written YAML
        if not isinstance(name, str) or not name:
            raise CdiSpecError("%s: device %d has no name" % (source, position))
        names.append(name)
    return {"kind": kind, "cdi_version": data.get("cdiVersion"), "devices": names}


# --- what NVIDIA's device names stand for ---------------------------------------------------------

_GPU_UUID = re.compile(r"^GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$")
_MIG_UUID = re.compile(
    r"^MIG-(GPU-[0-9a-fA-F-]+/\d+/\d+|[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})$"
)
_GPU_INDEX = re.compile(r"^(?:gpu)?(\d+)$")
_MIG_INDEX = re.compile(r"^(?:mig)?(\d+):(\d+)$")


def name_kind(name):
    """What an NVIDIA CDI device name refers to: ("gpu-index", i), ("mig-index", (g, m)),
    ("gpu-uuid", uuid), ("mig-uuid", uuid), ("all", None) or ("other", name)."""
    if name == "all":
        return "all", None
    m = _GPU_INDEX.match(name)
    if m:
        return "gpu-index", int(m.group(1))
    m = _MIG_INDEX.match(name)
    if m:
        return "mig-index", (int(m.group(1)), int(m.group(2)))
    if _GPU_UUID.match(name):
        return "gpu-uuid", name
    if _MIG_UUID.match(name):
        return "mig-uuid", name
    return "other", name
