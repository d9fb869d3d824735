# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""TOML for the modules: one reader and one writer, shared by containerd_runtime and the
readiness checks.

The target's Python may predate ``tomllib`` (3.11). ``loads`` uses ``tomllib``, else the ``toml``
package (python3-toml) when installed, else the reader below, which covers the TOML that
containerd and CRI-O configs and ``containerd config dump`` use (tables, arrays of tables, dotted
and quoted keys, all string forms, numbers, booleans, arrays, inline tables; dates are kept as
text). The reader also reports where top-level keys sit in the text, so callers can edit one line
and leave every other byte as it was.

Errors are ``TomlError`` unless the caller names its own exception class (``error=``), so a
module can keep reporting its own kind of error.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

try:  # Python 3.11+
    import tomllib as _tomllib
except ImportError:  # pragma: no cover - depends on the target's Python
    _tomllib = None

try:  # python3-toml, when installed
    import toml as _toml_pkg
except ImportError:  # pragma: no cover - depends on the target
    _toml_pkg = None


class TomlError(ValueError):
    """TOML text that cannot be read, or data that cannot be written as TOML."""


# --- reading --------------------------------------------------------------------------------


_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


class Reader:
    """A TOML reader that also reports where top-level keys sit in the text."""

    _BARE = re.compile(r"[A-Za-z0-9_-]+")
    _END = re.compile(r"[ \t]*(#[^\n]*)?(\r?\n|$)")
    _INT = re.compile(r"^[+-]?(0|[1-9](_?[0-9])*)$")
    _FLOAT = re.compile(
        r"^[+-]?(0|[1-9](_?[0-9])*)((\.[0-9](_?[0-9])*)([eE][+-]?[0-9](_?[0-9])*)?|[eE][+-]?[0-9](_?[0-9])*)$"
    )
    _DATE = re.compile(
        r"^\d{4}-\d{2}-\d{2}([Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?([Zz]|[+-]\d{2}:\d{2})?$|^\d{2}:\d{2}:\d{2}(\.\d+)?$"
    )

    def __init__(self, text, source="TOML", error=TomlError):
        self.s = text[1:] if text.startswith("\ufeff") else text
        self.offset = 1 if text.startswith("\ufeff") else 0
        self.i = 0
        self.source = source
        self.error_class = error

    # errors and positions
    def error(self, message, at=None):
        at = self.i if at is None else at
        line = self.s.count("\n", 0, at) + 1
        col = at - (self.s.rfind("\n", 0, at) + 1) + 1
        return self.error_class(
            "%s: TOML error at line %d, column %d: %s" % (self.source, line, col, message)
        )

    def peek(self, n=1):
        return self.s[self.i : self.i + n]

    def eof(self):
        return self.i >= len(self.s)

    def skip_ws(self):
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1

    def skip_ws_nl_comments(self):
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r\n":
                self.i += 1
            elif c == "#":
                end = self.s.find("\n", self.i)
                self.i = len(self.s) if end < 0 else end
            else:
                break

    def expect_line_end(self):
        m = self._END.match(self.s, self.i)
        if not m:
            raise self.error(
                "expected the end of the line, found %r" % self.s[self.i : self.i + 20]
            )
        self.i = m.end()

    # keys
    def key_part(self):
        c = self.peek()
        if c == '"':
            return self.basic_string()
        if c == "'":
            return self.literal_string()
        m = self._BARE.match(self.s, self.i)
        if not m:
            raise self.error("expected a key, found %r" % self.s[self.i : self.i + 20])
        self.i = m.end()
        return m.group(0)

    def dotted_key(self):
        parts = []
        while True:
            self.skip_ws()
            parts.append(self.key_part())
            self.skip_ws()
            if self.peek() == ".":
                self.i += 1
                continue
            return parts

    # strings
    def basic_string(self):
        if self.s.startswith('"""', self.i):
            return self.multiline_basic()
        self.i += 1
        out = []
        while True:
            if self.eof() or self.s[self.i] == "\n":
                raise self.error("unterminated string")
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                return "".join(out)
            if c == "\\":
                out.append(self.escape())
                continue
            out.append(c)
            self.i += 1

    def escape(self):
        self.i += 1
        c = self.peek()
        if c in _ESCAPES:
            self.i += 1
            return _ESCAPES[c]
        if c in ("u", "U"):
            n = 4 if c == "u" else 8
            digits = self.s[self.i + 1 : self.i + 1 + n]
            if len(digits) != n or not re.fullmatch(r"[0-9A-Fa-f]+", digits):
                raise self.error("bad unicode escape")
            self.i += 1 + n
            return chr(int(digits, 16))
        raise self.error("unknown escape \\%s" % c)

    def multiline_basic(self):
        self.i += 3
        if self.s.startswith("\r\n", self.i):
            self.i += 2
        elif self.peek() == "\n":
            self.i += 1
        out = []
        while True:
            if self.eof():
                raise self.error("unterminated multi-line string")
            if self.s.startswith('"""', self.i):
                # up to two quotes may close the content itself
                extra = 0
                while extra < 2 and self.s.startswith('"', self.i + 3 + extra):
                    extra += 1
                out.append('"' * extra)
                self.i += 3 + extra
                return "".join(out)
            c = self.s[self.i]
            if c == "\\":
                m = re.compile(r"\\[ \t]*\r?\n[ \t\r\n]*").match(self.s, self.i)
                if m:
                    self.i = m.end()
                    continue
                out.append(self.escape())
                continue
            out.append(c)
            self.i += 1

    def literal_string(self):
        if self.s.startswith("'''", self.i):
            self.i += 3
            if self.s.startswith("\r\n", self.i):
                self.i += 2
            elif self.peek() == "\n":
                self.i += 1
            end = self.s.find("'''", self.i)
            if end < 0:
                raise self.error("unterminated multi-line literal string")
            while self.s.startswith("'", end + 3) and end + 3 < len(self.s):
                end += 1
            value = self.s[self.i : end]
            self.i = end + 3
            return value
        end = self.i + 1
        while end < len(self.s) and self.s[end] not in "'\n":
            end += 1
        if end >= len(self.s) or self.s[end] != "'":
            raise self.error("unterminated literal string")
        value = self.s[self.i + 1 : end]
        self.i = end + 1
        return value

    # values
    def value(self):
        c = self.peek()
        if c == '"':
            return self.basic_string()
        if c == "'":
            return self.literal_string()
        if c == "[":
            return self.array()[0]
        if c == "{":
            return self.inline_table()
        m = re.compile(r"[^,\]\}#\s]+( [0-9][^,\]\}#\s]*)?").match(self.s, self.i)
        if not m:
            raise self.error("expected a value")
        token = m.group(0)
        self.i = m.end()
        if token == "true":
            return True
        if token == "false":
            return False
        plain = token.replace("_", "")
        if self._INT.match(token):
            return int(plain, 10)
        if re.match(r"^0x[0-9A-Fa-f](_?[0-9A-Fa-f])*$", token):
            return int(plain[2:], 16)
        if re.match(r"^0o[0-7](_?[0-7])*$", token):
            return int(plain[2:], 8)
        if re.match(r"^0b[01](_?[01])*$", token):
            return int(plain[2:], 2)
        if self._FLOAT.match(token) or re.match(r"^[+-]?(inf|nan)$", token):
            return float(plain)
        if self._DATE.match(token):
            return token
        raise self.error("not a TOML value: %r" % token)

    def array(self):
        """An array, with the span of each element: (values, [(start, end)], close_index)."""
        self.i += 1
        values, spans = [], []
        while True:
            self.skip_ws_nl_comments()
            if self.peek() == "]":
                close = self.i
                self.i += 1
                return values, spans, close
            start = self.i
            values.append(self.value())
            spans.append((start, self.i))
            self.skip_ws_nl_comments()
            if self.peek() == ",":
                self.i += 1
            elif self.peek() != "]":
                raise self.error("expected ',' or ']' in an array")

    def inline_table(self):
        self.i += 1
        table = {}
        self.skip_ws()
        if self.peek() == "}":
            self.i += 1
            return table
        while True:
            keys = self.dotted_key()
            if self.peek() != "=":
                raise self.error("expected '=' in an inline table")
            self.i += 1
            self.skip_ws()
            self.assign(table, keys, self.value())
            self.skip_ws()
            if self.peek() == ",":
                self.i += 1
                continue
            if self.peek() == "}":
                self.i += 1
                return table
            raise self.error("expected ',' or '}' in an inline table")

    def assign(self, table, keys, value):
        target = self.descend(table, keys[:-1])
        if keys[-1] in target:
            raise self.error("key %r defined twice" % ".".join(keys))
        target[keys[-1]] = value

    def descend(self, table, keys):
        for key in keys:
            if key not in table:
                table[key] = {}
            table = table[key]
            if isinstance(table, list) and table and isinstance(table[-1], dict):
                table = table[-1]
            if not isinstance(table, dict):
                raise self.error("key %r is not a table" % key)
        return table

    # documents
    def document(self, stop_at_first_table=False):
        """Parse the text. Returns (data, top_level) where top_level lists the root keys as
        dicts with their key path and the offsets of the line, the value and the line end."""
        root = {}
        current = root
        top_level = []
        while True:
            self.skip_ws_nl_comments()
            if self.eof():
                break
            if self.peek() == "[":
                if stop_at_first_table:
                    return root, top_level, self.i
                if self.s.startswith("[[", self.i):
                    self.i += 2
                    keys = self.dotted_key()
                    if not self.s.startswith("]]", self.i):
                        raise self.error("expected ']]'")
                    self.i += 2
                    parent = self.descend(root, keys[:-1])
                    items = parent.setdefault(keys[-1], [])
                    if not isinstance(items, list):
                        raise self.error("%r is not an array of tables" % ".".join(keys))
                    current = {}
                    items.append(current)
                else:
                    self.i += 1
                    keys = self.dotted_key()
                    if self.peek() != "]":
                        raise self.error("expected ']'")
                    self.i += 1
                    current = self.descend(root, keys)
                self.expect_line_end()
                continue
            line_start = self.s.rfind("\n", 0, self.i) + 1
            keys = self.dotted_key()
            if self.peek() != "=":
                raise self.error("expected '=' after the key %r" % ".".join(keys))
            self.i += 1
            self.skip_ws()
            value_start = self.i
            value = self.value()
            value_end = self.i
            self.assign(current, keys, value)
            self.expect_line_end()
            if current is root:
                top_level.append(
                    {
                        "key": tuple(keys),
                        "line_start": line_start + self.offset,
                        "value_start": value_start + self.offset,
                        "value_end": value_end + self.offset,
                        "line_end": self.i + self.offset,
                    }
                )
        return root, top_level, len(self.s) + self.offset


def loads(text, source="TOML", error=TomlError):
    """Parse TOML text into dicts and lists, with the best parser the target has."""
    if _tomllib is not None:
        try:
            return _tomllib.loads(text)
        except Exception as exc:  # tomllib.TOMLDecodeError
            raise error("%s: TOML error: %s" % (source, exc)) from None
    if _toml_pkg is not None:
        try:
            return _toml_pkg.loads(text)
        except Exception as exc:
            raise error("%s: TOML error: %s" % (source, exc)) from None
    return loads_builtin(text, source, error)


def loads_builtin(text, source="TOML", error=TomlError):
    """Parse TOML text with the reader in this file (used when neither tomllib nor toml exists)."""
    return Reader(text, source, error).document()[0]


def parser_name():
    if _tomllib is not None:
        return "tomllib"
    if _toml_pkg is not None:
        return "toml"
    return "builtin"


# --- writing --------------------------------------------------------------------------------

# Matched against the whole key (fullmatch): with "$", "a\n" would be written bare, its line
# break starting a new line of the file.
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def quote_key(key):
    if _BARE_KEY.fullmatch(key):
        return key
    return quote_string(key)


def quote_string(value):
    out = ['"']
    for c in value:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append("\\u%04x" % ord(c))
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _value_text(value, error):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return quote_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value_text(v, error) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join("%s = %s" % (quote_key(k), _value_text(v, error)) for k, v in value.items())
            + "}"
        )
    if hasattr(value, "isoformat"):  # dates read by tomllib
        return value.isoformat()
    raise error("cannot write %r as TOML" % (value,))


def _is_table_array(value):
    return isinstance(value, list) and len(value) > 0 and all(isinstance(v, dict) for v in value)


def dumps(data, indent=True, error=TomlError):
    """Serialise nested dicts as TOML; with `indent`, tables are indented by depth the way
    containerd writes them."""
    lines = []

    def emit(path, table, array_item=False):
        scalars = [
            (k, v) for k, v in table.items() if not isinstance(v, dict) and not _is_table_array(v)
        ]
        children = [(k, v) for k, v in table.items() if isinstance(v, dict) or _is_table_array(v)]
        pad = "  " * max(0, len(path) - 1) if indent else ""
        if path and (scalars or not children or array_item):
            if lines:
                lines.append("")
            header = ".".join(quote_key(k) for k in path)
            lines.append(
                "%s%s%s%s" % (pad, "[[" if array_item else "[", header, "]]" if array_item else "]")
            )
        for key, value in scalars:
            lines.append(
                "%s%s%s = %s"
                % (pad, "  " if path and indent else "", quote_key(key), _value_text(value, error))
            )
        for key, value in children:
            if isinstance(value, dict):
                emit([*path, key], value)
            else:
                for item in value:
                    emit([*path, key], item, array_item=True)

    emit([], data)
    return "\n".join(lines) + "\n"


# --- a flat view, for checks that look keys up by their full path ---------------------------------


def scan_entries(text, source="TOML", error=TomlError):
    """Every table and key of a TOML document as (full key path tuple, value), tables first as
    (path, {}), in document order; the items of an array of tables share its path."""
    entries = []

    def walk(path, table):
        for key, value in table.items():
            here = (*path, key)
            if isinstance(value, dict):
                entries.append((here, {}))
                walk(here, value)
            elif value and isinstance(value, list) and all(isinstance(v, dict) for v in value):
                for item in value:
                    entries.append((here, {}))
                    walk(here, item)
            else:
                entries.append((here, value))

    walk((), loads(text or "", source, error))
    return entries


def entry_value(entries, path):
    """The value at `path` in scan_entries' list, or None."""
    for key, value in entries:
        if key == tuple(path):
            return value
    return None
