# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Secrets out of the diffs kubegpu's modules return (`--diff` prints them on the controller).

The files kubegpu changes can hold secrets it never needs to show: k3s/RKE2's config.yaml
(`token`, `agent-token`, a datastore URL with a password), containerd's config.toml and its
drop-in (registry `auth`, `password`, `identitytoken`), docker's daemon.json. Each line of a
diff's text that sets a key whose name says it holds a secret (token, password, secret, auth,
credentials, a private or API key; not a key naming a file, path or directory that holds one)
keeps its key and loses its value; a URL's user:password@ loses the password. Line by line, so
TOML, YAML, JSON and env files are all covered, and nothing else of the text changes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

REDACTED = "<redacted>"

_SECRET_WORDS = frozenset(
    ["token", "password", "passwd", "passphrase", "pass", "secret", "auth", "credential"]
)
_PLACE_WORDS = frozenset(("file", "path", "dir", "directory"))
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def is_secret_key(key):
    """Whether a setting named ``key`` holds a secret: one of its words (split at -, _, . and
    camelCase) is token, password, secret, auth, credentials...; or private key / API key. A key
    whose last word is file, path or dir names where a secret is, not the secret."""
    words = [w.lower() for w in _WORD.findall(key)]
    if not words or words[-1] in _PLACE_WORDS:
        return False
    pairs = set(zip(words, words[1:]))  # noqa: RUF007 - itertools.pairwise is 3.10+, targets 3.8
    return (
        any(
            w in _SECRET_WORDS or w.endswith(("token", "password", "secret", "credentials"))
            for w in words
        )
        or ("private", "key") in pairs
        or ("api", "key") in pairs
    )


# key = value (TOML), key: value (YAML, also as a list item), "key": value (JSON), KEY=value.
_SETTING = re.compile(
    r"""^(?P<lead>\s*(?:-\s+)?["']?(?P<key>[A-Za-z0-9_.\-]+)["']?\s*(?:=|:(?=\s|$))\s*)"""
    r"""(?P<value>\S.*?)(?P<trail>\s*,?\s*)$"""
)
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^/@\s:]+:)[^/@\s]+(?=@)")
_EMPTY = ('""', "''", "[]", "{}", "null", "~")


def _redact_line(line):
    body = line.rstrip("\r\n")
    end = line[len(body) :]
    match = _SETTING.match(body)
    if match:
        key, value = match.group("key"), match.group("value")
        if is_secret_key(key) and value not in _EMPTY and value not in ("{", "["):
            quote = value[0] if value[0] in "\"'" else ""
            body = match.group("lead") + quote + REDACTED + quote + match.group("trail")
    return _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, body) + end


def redact_text(text):
    """``text`` with the values of secret settings replaced by <redacted>."""
    if not text:
        return text
    return "".join(_redact_line(line) for line in text.splitlines(True))


def redact_diff(diff):
    """A module's diff (one dict or a list of them) with before and after redacted."""
    if isinstance(diff, list):
        return [redact_diff(one) for one in diff]
    if not isinstance(diff, dict):
        return diff
    out = dict(diff)
    for side in ("before", "after"):
        if isinstance(out.get(side), str):
            out[side] = redact_text(out[side])
    return out
