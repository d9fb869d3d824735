# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Filters for APT sources, so that a role can put its deb822 source in place with
kubegpu.gpu.file_set (one module run for several files, no python3-debian on the node)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: deb822_source
short_description: The text of a deb822 APT source, as ansible.builtin.deb822_repository writes it
description:
  - Takes the options of one deb822 source and returns the file's text, byte for byte what
    M(ansible.builtin.deb822_repository) writes for the same options, one line (C(Field) colon value)
    per option given, in the order of the options' names, lists joined by spaces, C(name) as
    C(X-Repolib-Name). A source written by that module earlier is therefore left as it is.
  - The file belongs at C(/etc/apt/sources.list.d/<name>.sources), mode C(0644).
  - Signed-By must be a keyring path here (the roles download and verify keys themselves);
    values with a line break are refused.
options:
  _input:
    description: The source's options, by the names M(ansible.builtin.deb822_repository) uses.
    type: dict
    required: true
    suboptions:
      name:
        description: The repository's name, a slug (lower-case letters, digits, C(-)).
        type: str
        required: true
      types:
        description: C(deb) and/or C(deb-src).
        type: list
        elements: str
        required: true
      uris:
        description: The repository URIs.
        type: list
        elements: str
        required: true
      suites:
        description: The suites (C(/) for a flat repository).
        type: list
        elements: str
        required: true
      components:
        description: The components; empty or left out for a flat repository.
        type: list
        elements: str
      signed_by:
        description: Path of the keyring that signs the repository.
        type: str
      architectures:
        description: Architectures to fetch.
        type: list
        elements: str
      enabled:
        description: Whether APT uses the source.
        type: bool
"""

EXAMPLES = r"""
- name: Add the repository as a deb822 source signed by its keyring
  kubegpu.gpu.file_set:
    files:
      - path: /etc/apt/sources.list.d/example.sources
        content: >-
          {{ {'name': 'example', 'types': ['deb'], 'uris': ['https://repo.example/debian'],
              'suites': ['stable'], 'components': ['main'],
              'signed_by': '/etc/apt/keyrings/example.gpg'} | kubegpu.gpu.deb822_source }}
        mode: "0644"
"""

RETURN = r"""
_value:
  description: The file's text, each line ending in a line feed.
  type: str
"""

import re

from ansible.errors import AnsibleFilterError

_REQUIRED = ("name", "types", "uris", "suites")
_LISTS = ("types", "uris", "suites", "components", "architectures")
_STRINGS = ("name", "signed_by")
_BOOLS = ("enabled",)
_FIELD_NAMES = {"name": "X-Repolib-Name", "uris": "URIs"}
_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def _field_name(option):
    return _FIELD_NAMES.get(option, option.replace("_", "-").title())


def deb822_source(options):
    if not isinstance(options, dict):
        raise AnsibleFilterError(
            "deb822_source takes a mapping of the source's options, not a %s"
            % type(options).__name__
        )
    unknown = sorted(set(options) - set(_LISTS + _STRINGS + _BOOLS))
    if unknown:
        raise AnsibleFilterError(
            "deb822_source: unknown option(s) %s; allowed: %s"
            % (", ".join(unknown), ", ".join(sorted(_LISTS + _STRINGS + _BOOLS)))
        )
    missing = [key for key in _REQUIRED if not options.get(key)]
    if missing:
        raise AnsibleFilterError(
            "deb822_source: %s must be given and not empty" % ", ".join(missing)
        )
    if not _SLUG.match(str(options["name"])):
        raise AnsibleFilterError(
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
                raise AnsibleFilterError(
                    "deb822_source: %s is %r; it is a list of strings" % (option, value)
                )
            if not value:
                continue
            text = " ".join(value)
        elif option in _BOOLS:
            if not isinstance(value, bool):
                raise AnsibleFilterError(
                    "deb822_source: %s is %r; it is true or false" % (option, value)
                )
            text = "yes" if value else "no"
        else:
            if not isinstance(value, str):
                raise AnsibleFilterError(
                    "deb822_source: %s is %r; it is a string" % (option, value)
                )
            text = value
        if "\n" in text or "\r" in text:
            raise AnsibleFilterError(
                "deb822_source: %s has a line break; each option is one line here" % option
            )
        lines.append("%s: %s\n" % (_field_name(option), text))
    return "".join(lines)


class FilterModule(object):
    def filters(self):
        return {"deb822_source": deb822_source}
