# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Filters that read what a node's read-only commands printed, so that one command task can
answer what several module runs would ask. They run on the controller and touch nothing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: systemd_units
short_description: The units that C(systemctl show --property=Id,...) printed, by name
description:
  - Takes the text of C(systemctl show --property=Id,LoadState,...) for one or more units and
    returns a mapping of each unit's Id to its properties, for example C(containerd.service) to
    C(LoadState) C(loaded) and C(ActiveState) C(active).
  - A unit the host does not have is there with C(LoadState) C(not-found); a block without an
    C(Id) property is left out, so ask for C(Id) too.
options:
  _input:
    description: What systemctl show printed (blocks separated by an empty line).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Enable containerd only when it is not enabled and running already
  ansible.builtin.systemd_service:
    name: containerd
    enabled: true
    state: started
  when: >-
    (__states.stdout | kubegpu.gpu.systemd_units)['containerd.service']['ActiveState'] != 'active'
"""

RETURN = r"""
_value:
  description: Unit Id to a mapping of property to value (strings, as systemctl prints them).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_driver_apt import (
    systemd_units as parse_units,
)


def systemd_units(text):
    if not isinstance(text, str):
        raise AnsibleFilterError(
            "systemd_units takes the text systemctl show printed, not a %s" % type(text).__name__
        )
    return parse_units(text)


class FilterModule(object):
    def filters(self):
        return {"systemd_units": systemd_units}
