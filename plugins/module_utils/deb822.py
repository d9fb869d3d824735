# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The text of a deb822 APT source, byte for byte what ansible.builtin.deb822_repository writes
for the same options (the filter kubegpu.gpu.deb822_source and the action
kubegpu.gpu.nvidia_driver_apt use it). Standard library only."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_REQUIRED = ("name", "types", "uris", "suites")
_LISTS = ("types", "uris", "suites", "components", "architectures")
_STRINGS = ("name", "signed_by")
_BOOLS = ("enabled",)
_FIELD_NAMES = {"name": "X-Repolib-Name", "uris": "URIs"}
# Matched against the whole name (fullmatch).
_SLUG = re.compile(r"[a-z0-9][a-z0-9-]*")


class Deb822Error(ValueError):
    """Options that make no deb822 source; the message names the option."""


def _field_name(option):
    return _FIELD_NAMES.get(option, option.replace("_", "-").title())


def deb822_source(options):
    if not isinstance(options, dict):
        raise Deb822Error(
            "deb822_source takes a mapping of the source's options, not a %s"
            % type(options).__name__
        )
    unknown = sorted(set(options) - set(_LISTS + _STRINGS + _BOOLS))
    if unknown:
        raise Deb822Error(
            "deb822_source: unknown option(s) %s; allowed: %s"
            % (", ".join(unknown), ", ".join(sorted(_LISTS + _STRINGS + _BOOLS)))
        )
    missing = [key for key in _REQUIRED if not options.get(key)]
    if missing:
        raise Deb822Error("deb822_source: %s must be given and not empty" % ", ".join(missing))
    if not _SLUG.fullmatch(str(options["name"])):
        raise Deb822Error(
            "deb822_source: name is %r; it names the file, so it is lower-case letters, digits "
            "and '-'" % (options["name"],)
        )
    lines = []
    for option in sorted(options):
        value = options[option]
        if value is None:
            continue
        if option in _LISTS:
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise Deb822Error(
                    "deb822_source: %s is %r; it is a list of strings" % (option, value)
                )
            if not value:
                continue
            text = " ".join(value)
        elif option in _BOOLS:
            if not isinstance(value, bool):
                raise Deb822Error("deb822_source: %s is %r; it is true or false" % (option, value))
            text = "yes" if value else "no"
        else:
            if not isinstance(value, str):
                raise Deb822Error("deb822_source: %s is %r; it is a string" % (option, value))
            text = value
        if "\n" in text or "\r" in text:
            raise Deb822Error(
                "deb822_source: %s has a line break; each option is one line here" % option
            )
        lines.append("%s: %s\n" % (_field_name(option), text))
    return "".join(lines)
