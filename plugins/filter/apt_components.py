# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The APT sources that add an archive's missing components to the archive URIs a host already
uses, worked out from apt-get indextargets in Python instead of a Jinja loop per line."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: apt_component_sources
short_description: The sources that add missing components to the archive URIs a host uses
description:
  - Takes the lines C(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(SOURCESENTRY)')
    printed (other lines, with fewer than four space-separated fields, are left out) and returns
    one source per archive URI and set of missing components.
  - For each URI and suite of O(suites) that has C(main) (from a source other than the role's own,
    those whose C(SOURCESENTRY) starts with O(own)), the components of O(components) it lacks are
    missing. Suites of one URI that lack the same components share one source.
  - Each source is C(uri), C(components) (in the order of O(components)), C(suites) (sorted) and
    C(name), the base name of O(own), C(-) and the first 8 hex digits of the SHA-1 of the URI, a
    space and the components joined by commas. Sources are sorted by URI, then components.
  - The nvidia_driver role adds the components that carry the driver (C(contrib), C(non-free),
    C(non-free-firmware) on Debian) with it, next to the host's own archive sources.
options:
  _input:
    description: The lines (a read's C(stdout_lines)).
    type: list
    elements: str
    required: true
  suites:
    description: The suites to complete (the release, its updates and security suites).
    type: list
    elements: str
    required: true
  components:
    description: The components every one of those suites should have.
    type: list
    elements: str
    required: true
  own:
    description: The path prefix of the role's own source files, which are not counted.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Work out the sources the driver's archive components need
  ansible.builtin.set_fact:
    __sources: >-
      {{ __read.stdout_lines | kubegpu.gpu.apt_component_sources(['bookworm', 'bookworm-updates'],
         ['contrib', 'non-free', 'non-free-firmware'], '/etc/apt/sources.list.d/kubegpu-nvidia-distribution') }}
"""

RETURN = r"""
_value:
  description: The sources, each with uri, components, suites and name.
  type: list
  elements: dict
"""

import hashlib
import os

from ansible.errors import AnsibleFilterError


def _strings(value, what):
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise AnsibleFilterError(
            "apt_component_sources: %s is a list of strings, not a %s"
            % (what, type(value).__name__)
        )
    if not all(isinstance(item, str) for item in value):
        raise AnsibleFilterError(
            "apt_component_sources: %s has an item that is not a string" % what
        )
    return list(value)


def apt_component_sources(lines, suites, components, own):
    lines = _strings(lines, "the input (lines)")
    suites = _strings(suites, "suites")
    components = _strings(components, "components")
    if not isinstance(own, str):
        raise AnsibleFilterError("apt_component_sources: own is a path prefix (a string)")
    have = {}
    for line in lines:
        fields = line.split(" ")
        if len(fields) >= 4 and fields[1] in suites and not fields[3].startswith(own):
            have.setdefault(fields[0] + " " + fields[1], []).append(fields[2])
    groups = {}
    for key, found in sorted(have.items()):
        missing = [component for component in components if component not in found]
        if "main" in found and missing:
            uri, suite = key.split(" ")
            entry = groups.setdefault(
                uri + " " + ",".join(missing), {"uri": uri, "components": missing, "suites": []}
            )
            entry["suites"].append(suite)
    prefix = os.path.basename(own)
    return [
        dict(entry, name="%s-%s" % (prefix, hashlib.sha1(key.encode("utf-8")).hexdigest()[:8]))
        for key, entry in sorted(groups.items())
    ]


class FilterModule(object):
    def filters(self):
        return {"apt_component_sources": apt_component_sources}
