# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The installed, offered and target driver versions of the nvidia_driver role on Debian and
Ubuntu, worked out from the role's version read in one Python call instead of a Jinja pipeline
that the controller's main process renders for every host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: nvidia_driver_versions
short_description: The installed, offered and target driver versions from the nvidia_driver role's APT read
description:
  - Takes the result of the nvidia_driver role's version read on Debian and Ubuntu
    (tasks/install-Debian.yml) and returns the versions the role decides with.
  - C(row) is the read's first line, dpkg's C(STATUS|VERSION) of the version package (empty when
    the read printed nothing). C(installed) is the upstream part of that C(VERSION) when
    C(STATUS) says installed (its second character is C(i)), else empty.
  - C(candidate) is what C(apt-cache policy) offers (the first C(Candidate:) of the read, C((none))
    when there is none); C(candidate_version) its upstream part when it is a driver version
    (three digits and a dot, after an optional epoch), else empty.
  - C(target) is O(version) when it is given; else the installed version when it is on O(branch)
    and O(allow_change) is false; else C(candidate_version).
  - The role's first APT read makes the version read too, after a line C(#version-read) and up to
    a line C(#version-read-ok); given such a read, the filter takes those lines as the version
    read.
  - The upstream part of a package version is what the role's C(__nvidia_driver_upstream_regex)
    takes (C(535.309.01-0+deb12u1) gives C(535.309.01), C(3:580.95.05-1) gives C(580.95.05)); a
    version that is not a driver version is left as it is, as C(regex_replace) leaves it.
options:
  _input:
    description: The registered read, with C(stdout) and C(stdout_lines).
    type: dict
    required: true
  version:
    description: The exact version asked for (C(nvidia_driver_version)); empty when none.
    type: str
    required: true
  branch:
    description: The driver branch (C(nvidia_driver_branch)), compared as it is given.
    type: str
    required: true
  allow_change:
    description: Whether the installed version may change (C(nvidia_driver_allow_version_change | bool)).
    type: bool
    required: true
"""

EXAMPLES = r"""
- name: Work out the installed, offered and target driver versions
  ansible.builtin.set_fact:
    __nvidia_driver_target_version: >-
      {{ (__nvidia_driver_version_reads
          | kubegpu.gpu.nvidia_driver_versions(nvidia_driver_version, nvidia_driver_branch,
                                               nvidia_driver_allow_version_change | bool))['target'] }}
"""

RETURN = r"""
_value:
  description: The versions, all strings.
  type: dict
  contains:
    row:
      description: dpkg's C(STATUS|VERSION) row of the version package, or empty.
      type: str
    installed:
      description: The installed driver version, empty when the version package is not installed.
      type: str
    candidate:
      description: The package version APT offers, C((none)) when none.
      type: str
    candidate_version:
      description: The driver version APT offers, empty when none.
      type: str
    target:
      description: The driver version the role installs, empty when the repository decides.
      type: str
"""

import re

from ansible.errors import AnsibleFilterError

# The same expression as the role's __nvidia_driver_upstream_regex (vars/main.yml), replaced by
# its first group as regex_replace does: a version it does not match stays as it is.
_UPSTREAM = re.compile(r"^(?:[0-9]+:)?([0-9]{3}(?:[.][0-9]+){1,2})(?:[-~+].*)?$")
_CANDIDATE = re.compile(r"Candidate: (\S+)")
_INSTALLED = re.compile(r"^.i")
_DRIVER_VERSION = re.compile(r"^([0-9]+:)?[0-9]{3}[.]")
# The lines around the version read inside the role's first APT read (tasks/install-Debian.yml).
_MARKER = "#version-read"
_DONE = "#version-read-ok"


def _upstream(version):
    return _UPSTREAM.sub(r"\1", version)


def nvidia_driver_versions(read, version, branch, allow_change):
    if not isinstance(read, dict):
        raise AnsibleFilterError(
            "nvidia_driver_versions takes the registered version read, not a %s"
            % type(read).__name__
        )
    lines, stdout = read.get("stdout_lines"), read.get("stdout")
    if not isinstance(lines, list) or not isinstance(stdout, str):
        raise AnsibleFilterError(
            "nvidia_driver_versions: the read has no stdout and stdout_lines (was it skipped?)"
        )
    if not isinstance(version, str):
        raise AnsibleFilterError(
            "nvidia_driver_versions: version is %r; it is a string, empty for none" % (version,)
        )
    if not isinstance(allow_change, bool):
        raise AnsibleFilterError(
            "nvidia_driver_versions: allow_change is %r; pass it through the bool filter"
            % (allow_change,)
        )
    if _MARKER in lines:
        # The first APT read, which makes the version read too, after its marker line.
        start = lines.index(_MARKER) + 1
        end = lines.index(_DONE) if _DONE in lines[start:] else len(lines)
        lines = lines[start:end]
        stdout = "\n".join(lines)
    row = lines[0] if lines else ""
    installed = _upstream(row.split("|")[-1]) if _INSTALLED.match(row) else ""
    found = _CANDIDATE.search(stdout)
    candidate = found.group(1) if found else "(none)"
    candidate_version = _upstream(candidate) if _DRIVER_VERSION.match(candidate) else ""
    if len(version) > 0:
        target = version
    elif installed.split(".")[0] == branch and not allow_change:
        target = installed
    else:
        target = candidate_version
    return {
        "row": row,
        "installed": installed,
        "candidate": candidate,
        "candidate_version": candidate_version,
        "target": target,
    }


class FilterModule(object):
    def filters(self):
        return {"nvidia_driver_versions": nvidia_driver_versions}
