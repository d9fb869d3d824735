# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Which driver packages the nvidia_driver role installs, holds or leaves alone on Debian and
Ubuntu, worked out from the dpkg rows of its reads in one Python call instead of Jinja
pipelines that the controller's main process renders for every host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: nvidia_driver_package_plan
short_description: The driver packages that move, are not held yet, or are all at the target version
description:
  - Takes the lines of the nvidia_driver role's version read on Debian and Ubuntu
    (tasks/install-Debian.yml); the rows among them are those with four C(|)-separated fields,
    C(PACKAGE|STATUS|VERSION|SELECTION) (dpkg-query's C(${Package}|${db:Status-Abbrev}|${Version}|${db:Status-Want})).
    A package name loses an architecture suffix (C(:amd64)) wherever it is compared.
  - C(install_set) is O(packages) and, when O(changing), the companions of the version package,
    without repeats (compared without regard to case, as the C(unique) filter does; the first
    stays). The companions are the installed packages of the second read, O(all_packages), built
    from the same source package as O(version_package) at the version of O(installed_row).
  - C(unheld) is the packages of C(install_set) that no row shows held.
  - C(at_target) is true when the version does not change, O(target_version) is not empty, every
    package of O(packages) has an installed row whose version starts with O(target_version) and
    C(-) (what apt's C(PACKAGE=TARGET-*) takes), and every one of O(extra_packages) has an
    installed row.
options:
  _input:
    description: The version read's C(stdout_lines).
    type: list
    elements: str
    required: true
  packages:
    description: The packages installed at the target version (versioned and Fabric Manager packages).
    type: list
    elements: str
    required: true
  extra_packages:
    description: The packages installed at any version.
    type: list
    elements: str
    required: true
  version_package:
    description:
      - The package whose version is the driver's. It is put in a regular expression as it is
        (C(^NAME(:.*)?$)), not escaped.
    type: str
    required: true
  installed_row:
    description: dpkg's C(STATUS|VERSION) row of the version package, empty when none.
    type: str
    required: true
  target_version:
    description: The driver version to install, empty when the repository decides.
    type: str
    required: true
  changing:
    description: Whether the driver version changes in this run.
    type: bool
    required: true
  all_packages:
    description:
      - The lines of C(dpkg-query --show --showformat='${db:Status-Abbrev} ${Package} ${Version} ${source:Package}\n'),
        read when the version changes; the installed ones (C(.i.) and a space) are split at runs of spaces.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Decide which packages move to the new driver version
  ansible.builtin.set_fact:
    __nvidia_driver_install_set: "{{ __nvidia_driver_plan['install_set'] }}"
    __nvidia_driver_unheld: "{{ __nvidia_driver_plan['unheld'] }}"
  vars:
    __nvidia_driver_plan: >-
      {{ __nvidia_driver_version_reads.stdout_lines
         | kubegpu.gpu.nvidia_driver_package_plan(
             packages=__nvidia_driver_versioned_packages, extra_packages=[],
             version_package=__nvidia_driver_version_package,
             installed_row=__nvidia_driver_installed_row,
             target_version=__nvidia_driver_target_version,
             changing=__nvidia_driver_version_changing | bool,
             all_packages=__nvidia_driver_all_packages.stdout_lines | default([])) }}
"""

RETURN = r"""
_value:
  description: What moves and what is held.
  type: dict
  contains:
    install_set:
      description: The packages to install at the target version, in order.
      type: list
      elements: str
    unheld:
      description: The packages of install_set that are not held.
      type: list
      elements: str
    at_target:
      description: Whether every package is installed, the versioned ones at the target version.
      type: bool
"""

import re

from ansible.errors import AnsibleFilterError

_ARCH = re.compile(r":.*$")
_INSTALLED = re.compile(r"^.i")
_INSTALLED_LINE = re.compile(r"^.i. ")


def _name(package):
    """The package name without its architecture suffix (libcuda1:amd64 -> libcuda1)."""
    return _ARCH.sub("", package)


def _unique(items):
    """The items without repeats, as Jinja's unique filter: strings compare in lower case."""
    seen = set()
    kept = []
    for item in items:
        key = item.lower() if isinstance(item, str) else item
        if key not in seen:
            seen.add(key)
            kept.append(item)
    return kept


def _list(value, what, strings=True):
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise AnsibleFilterError(
            "nvidia_driver_package_plan: %s is a list, not a %s" % (what, type(value).__name__)
        )
    if strings and not all(isinstance(item, str) for item in value):
        raise AnsibleFilterError(
            "nvidia_driver_package_plan: %s has an item that is not a string" % what
        )
    return list(value)


def _field(row, index):
    if index >= len(row):
        raise AnsibleFilterError(
            "nvidia_driver_package_plan: the installed package line %r has no field %d "
            "(STATUS PACKAGE VERSION SOURCE)" % (" ".join(row), index + 1)
        )
    return row[index]


def _companions(all_packages, version_package, installed_row):
    """The installed packages of the version package's source package at its installed version."""
    rows = [line.split() for line in all_packages if _INSTALLED_LINE.match(line)]
    if not rows:
        return []
    own = re.compile("^" + version_package + "(:.*)?$")
    sources = [_field(row, 3) for row in rows if own.match(_field(row, 1))]
    source = sources[0] if sources else ""
    version = installed_row.split("|")[-1]
    return [_name(row[1]) for row in rows if _field(row, 2) == version and _field(row, 3) == source]


def nvidia_driver_package_plan(
    lines,
    packages,
    extra_packages,
    version_package,
    installed_row,
    target_version,
    changing,
    all_packages=(),
):
    lines = _list(lines, "the input (the read's stdout_lines)")
    packages = _list(packages, "packages", strings=False)
    extra_packages = _list(extra_packages, "extra_packages", strings=False)
    all_packages = _list(all_packages, "all_packages")
    for what, value in (
        ("version_package", version_package),
        ("installed_row", installed_row),
        ("target_version", target_version),
    ):
        if not isinstance(value, str):
            raise AnsibleFilterError(
                "nvidia_driver_package_plan: %s is %r; it is a string" % (what, value)
            )
    if not isinstance(changing, bool):
        raise AnsibleFilterError(
            "nvidia_driver_package_plan: changing is %r; pass it through the bool filter"
            % (changing,)
        )
    rows = [row for row in (line.split("|") for line in lines) if len(row) >= 4]
    moving = packages + (
        _companions(all_packages, version_package, installed_row) if changing else []
    )
    install_set = _unique(moving)
    held = [_name(row[0]) for row in rows if row[3] == "hold"]
    at_target = False
    if not changing and len(target_version) > 0:
        installed = [row for row in rows if _INSTALLED.match(row[1])]
        at_version = re.compile(re.escape(target_version) + "-")
        versioned = [_name(row[0]) for row in installed if at_version.match(row[2])]
        present = [_name(row[0]) for row in installed]
        at_target = all(package in versioned for package in packages) and all(
            package in present for package in extra_packages
        )
    return {
        "install_set": install_set,
        "unheld": [package for package in install_set if package not in held],
        "at_target": at_target,
    }


class FilterModule(object):
    def filters(self):
        return {"nvidia_driver_package_plan": nvidia_driver_package_plan}
