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

from ansible.errors import AnsibleFilterError
from ansible_collections.kubegpu.gpu.plugins.module_utils.deb822 import Deb822Error
from ansible_collections.kubegpu.gpu.plugins.module_utils.deb822 import deb822_source as _render


def deb822_source(options):
    try:
        return _render(options)
    except Deb822Error as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule(object):
    def filters(self):
        return {"deb822_source": deb822_source}
