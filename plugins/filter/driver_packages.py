# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The filters through which the nvidia_driver role names its packages, reads their holds, and
works out the services to change, the reasons to reboot and the state it records
(plugins/module_utils/nvidia_driver_apt.py holds the rules, which kubegpu.gpu.nvidia_driver_apt
uses too)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: nvidia_driver_packages
short_description: The NVIDIA driver packages of a distribution, source, flavour and branch
description:
  - Returns the packages role C(kubegpu.gpu.nvidia_driver) installs for these settings, from
    the rules in C(plugins/module_utils/nvidia_driver_apt.py) that the action
    C(kubegpu.gpu.nvidia_driver_apt) uses too.
options:
  _input:
    description: The packages the user names (C(nvidia_driver_packages)); empty for the defaults.
    type: list
    elements: str
    required: true
  distribution:
    description: C(ansible_facts['distribution']).
    type: str
    required: true
  os_family:
    description: C(ansible_facts['os_family']).
    type: str
    required: true
  source:
    description: C(distribution), C(cuda_repo) or C(mirror).
    type: str
    required: true
  module_type:
    description: The kernel module flavour, C(open) or C(proprietary).
    type: str
    required: true
  branch:
    description: The driver branch, three digits.
    type: str
    required: true
  build:
    description: C(dkms) or C(precompiled).
    type: str
    required: true
  kernel:
    description: C(ansible_facts['kernel']) (Ubuntu's precompiled module packages name it).
    type: str
    required: true
  persistenced:
    description: Whether nvidia-persistenced is wanted (Debian packages it apart).
    type: bool
    required: true
  fabricmanager_package:
    description: The Fabric Manager package the user names; empty for the default.
    type: str
    default: ""
"""

EXAMPLES = r"""
__nvidia_driver_package_names: >-
  {{ nvidia_driver_packages | kubegpu.gpu.nvidia_driver_packages(
       distribution=ansible_facts['distribution'], os_family=ansible_facts['os_family'],
       source=nvidia_driver_source, module_type='proprietary', branch=nvidia_driver_branch,
       build=nvidia_driver_build, kernel=ansible_facts['kernel'], persistenced=true) }}
"""

RETURN = r"""
_value:
  description: >-
    version_package (the package whose version is the driver's), versioned (installed at the
    driver version and held), extra (installed at any version), pin (NVIDIA's branch pinning
    package), fabricmanager (the Fabric Manager package) and stream (the dnf module stream,
    RedHat family).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_driver_apt import (
    AptPlanError,
    driver_state,
    fact_text,
    held,
    package_names,
    reboot_reasons,
    services_to_change,
)
from ansible_collections.kubegpu.gpu.plugins.plugin_utils.plain import plain


def nvidia_driver_packages(
    packages,
    distribution,
    os_family,
    source,
    module_type,
    branch,
    build,
    kernel,
    persistenced,
    fabricmanager_package="",
):
    if isinstance(packages, str) or not isinstance(packages, (list, tuple)):
        raise AnsibleFilterError(
            "nvidia_driver_packages: the input (nvidia_driver_packages) is a list, not a %s"
            % type(packages).__name__
        )
    if not isinstance(persistenced, bool):
        raise AnsibleFilterError(
            "nvidia_driver_packages: persistenced is %r; pass it through the bool filter"
            % (persistenced,)
        )
    return package_names(
        str(distribution),
        str(os_family),
        str(source),
        str(module_type),
        str(branch),
        str(build),
        str(kernel),
        persistenced,
        [str(name) for name in packages],
        str(fabricmanager_package or ""),
    )


def nvidia_driver_held(lines):
    if isinstance(lines, str) or not isinstance(lines, (list, tuple)):
        raise AnsibleFilterError(
            "nvidia_driver_held: the input is a read's stdout_lines (a list), not a %s"
            % type(lines).__name__
        )
    return held([str(line) for line in lines])


def nvidia_driver_services_to_change(units_text, wanted, module_loaded):
    if not isinstance(units_text, str):
        raise AnsibleFilterError(
            "nvidia_driver_services_to_change takes what systemctl show printed, not a %s"
            % type(units_text).__name__
        )
    return services_to_change(units_text, list(wanted), bool(module_loaded))


def nvidia_driver_reboot_reasons(pci, target, module_type):
    if not isinstance(pci, dict) or "modules" not in pci or "loaded_driver" not in pci:
        raise AnsibleFilterError(
            "nvidia_driver_reboot_reasons takes ansible_facts['nvidia_pci'] (modules, loaded_driver)"
        )
    loaded = pci["loaded_driver"]
    return reboot_reasons(
        bool(pci["modules"].get("nouveau")),
        dict(loaded) if loaded is not None else None,
        str(target or ""),
        str(module_type),
    )


def nvidia_driver_state(installed_version, **values):
    try:
        return driver_state(installed_version=str(installed_version), **values)
    except AptPlanError as exc:
        raise AnsibleFilterError("nvidia_driver_state: %s" % exc) from exc


def nvidia_driver_fact_text(state):
    if not isinstance(state, dict):
        raise AnsibleFilterError(
            "nvidia_driver_fact_text takes the driver state (a mapping), not a %s"
            % type(state).__name__
        )
    return fact_text(plain(state))


class FilterModule(object):
    def filters(self):
        return {
            "nvidia_driver_packages": nvidia_driver_packages,
            "nvidia_driver_held": nvidia_driver_held,
            "nvidia_driver_services_to_change": nvidia_driver_services_to_change,
            "nvidia_driver_reboot_reasons": nvidia_driver_reboot_reasons,
            "nvidia_driver_state": nvidia_driver_state,
            "nvidia_driver_fact_text": nvidia_driver_fact_text,
        }
