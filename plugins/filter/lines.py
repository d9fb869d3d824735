# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""A filter that picks lines out of what a node's read printed, in one step instead of a
select/map pipeline that Jinja runs item by item."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: matching_fields
short_description: The fields of each line that matches a regular expression
description:
  - Takes a list of lines (a command's C(stdout_lines)) and returns, for each line that the
    regular expression matches at its start, the line split at each O(sep).
  - The same as C(lines | select('match', pattern) | map('split', sep) | list), which Jinja
    runs one line and one filter call at a time, in one Python call.
  - The roles read the tagged lines of their one-command reads with it (C(helper NAME STATUS),
    C(package-lists-age N)).
options:
  _input:
    description: The lines.
    type: list
    elements: str
    required: true
  pattern:
    description: A Python regular expression, matched at the start of each line as the C(match) test does.
    type: str
    required: true
  sep:
    description: What separates the fields; each occurrence splits, as Python's C(str.split) with a separator.
    type: str
    default: " "
  field:
    description:
      - Return only this field of each matching line (0 is the first, -1 the last), not the list
        of fields. A line without that field is left out.
    type: int
"""

EXAMPLES = r"""
- name: Install the APT helpers that are not installed
  ansible.builtin.apt:
    name: >-
      {{ ['python3-apt', 'gpg'] | reject('in', __read.stdout_lines
         | kubegpu.gpu.matching_fields('^helper [^ ]+ .i', field=1)) | list }}
"""

RETURN = r"""
_value:
  description:
    - One list of fields (strings) per matching line, in the lines' order; with O(field), that
      field of each matching line that has it.
  type: list
"""

import re

from ansible.errors import AnsibleFilterError


def matching_fields(lines, pattern, sep=" ", field=None):
    if isinstance(lines, str) or not isinstance(lines, (list, tuple)):
        raise AnsibleFilterError(
            "matching_fields takes a list of lines (stdout_lines), not a %s" % type(lines).__name__
        )
    if not isinstance(sep, str) or not sep:
        raise AnsibleFilterError("matching_fields: sep is %r; it is a non-empty string" % (sep,))
    if field is not None and (isinstance(field, bool) or not isinstance(field, int)):
        raise AnsibleFilterError(
            "matching_fields: field is %r; it is the index of one field (an integer)" % (field,)
        )
    try:
        regex = re.compile(pattern)
    except (TypeError, re.error) as exc:
        raise AnsibleFilterError(
            "matching_fields: pattern %r is not a regular expression: %s" % (pattern, exc)
        ) from exc
    fields = []
    for line in lines:
        if not isinstance(line, str):
            raise AnsibleFilterError(
                "matching_fields: each line is a string, got a %s" % type(line).__name__
            )
        if regex.match(line):
            parts = line.split(sep)
            if field is None:
                fields.append(parts)
            elif -len(parts) <= field < len(parts):
                fields.append(parts[field])
    return fields


class FilterModule(object):
    def filters(self):
        return {"matching_fields": matching_fields}
