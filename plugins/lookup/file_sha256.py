# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The SHA-256 of a file on the controller, found the way copy's src is, so a role can tell
whether a copy would change anything without running it on the node."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: file_sha256
short_description: The SHA-256 (hex) of files on the controller
description:
  - Reads each file on the controller, looked up in the role's and the play's C(files) folders
    like the C(ansible.builtin.file) lookup and C(ansible.builtin.copy)'s C(src), and returns
    the hex SHA-256 of its bytes. Binary files (a C(.gpg) keyring) are fine.
  - Reads only on the controller; touches no host.
options:
  _terms:
    description: Paths of the files.
    required: true
"""

EXAMPLES = r"""
- name: Copy the key only when the node's copy differs
  ansible.builtin.copy:
    src: "{{ key_file }}"
    dest: /etc/apt/keyrings/example.asc
    mode: "0644"
  when: node_key_sha256 != lookup('kubegpu.gpu.file_sha256', key_file)
"""

RETURN = r"""
_raw:
  description: One lowercase hex SHA-256 per term.
  type: list
  elements: str
"""

import hashlib

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        sums = []
        for term in terms:
            path = self.find_file_in_search_path(variables, "files", term, ignore_missing=True)
            if not path:
                raise AnsibleLookupError(
                    "file_sha256: %s is not a file on the controller (looked in the role's and "
                    "the play's files folders too)" % term
                )
            digest = hashlib.sha256()
            try:
                with open(path, "rb") as handle:
                    for chunk in iter(lambda: handle.read(65536), b""):
                        digest.update(chunk)
            except OSError as err:
                raise AnsibleLookupError("file_sha256: cannot read %s: %s" % (path, err)) from err
            sums.append(digest.hexdigest())
        return sums
