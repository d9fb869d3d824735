#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_driver_apt
short_description: Read a Debian or Ubuntu node once and decide the NVIDIA driver's APT steps
version_added: "0.1.0"
description:
  - "The Debian and Ubuntu half of role C(kubegpu.gpu.nvidia_driver) asks one question of the
    node with it and acts on the answer. An action plugin only: it runs on the controller, reads
    the node with one C(sh) script (through the connection when it pipelines, else through
    M(ansible.builtin.command)) and decides there, with the rules of
    C(plugins/module_utils/nvidia_driver_apt.py)."
  - "The read: which APT helpers are installed, the age of the package lists, the host's APT
    sources and the role's own sources (O(source=distribution)), the version package's status
    and what C(apt-cache policy) offers, the rows of the driver packages, and the NVIDIA
    services. When the driver version changes, every installed package too (apt moves a driver
    only when every package of its source package moves with it)."
  - It only reads, so it runs in check mode too, and it never reports a change.
  - "Fails where the role must stop: the read failed; O(source=distribution) and no APT source
    of the host provides C(RELEASE main); C(apt-cache policy) failed when the sources step has
    nothing to do first, or on the read after that step (O(reread))."
options:
  source:
    description: C(nvidia_driver_source).
    type: str
    required: true
    choices: [distribution, cuda_repo, mirror]
  release:
    description: The OS release's code name, whose C(main) the host's sources must carry (O(source=distribution)).
    type: str
    default: ""
  helpers:
    description: The APT helpers the role's steps need.
    type: list
    elements: str
    default: []
  version_package:
    description: The package whose version is the driver's.
    type: str
    required: true
  packages:
    description: The packages installed at the driver version (and the Fabric Manager package).
    type: list
    elements: str
    default: []
  extra_packages:
    description: The packages installed at any version.
    type: list
    elements: str
    default: []
  version:
    description: C(nvidia_driver_version); empty for the newest of the branch.
    type: str
    default: ""
  branch:
    description: C(nvidia_driver_branch).
    type: str
    required: true
  allow_version_change:
    description: C(nvidia_driver_allow_version_change).
    type: bool
    default: false
  own:
    description: The name prefix of the sources the role writes for O(source=distribution).
    type: str
    default: ""
  suites:
    description: The suites the archive components are added for.
    type: list
    elements: str
    default: []
  components:
    description: The archive components that carry the driver.
    type: list
    elements: str
    default: []
  keyring:
    description: The archive keyring the role's sources are signed by.
    type: str
    default: ""
  reread:
    description: The read after the sources step; its version read must succeed.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Always runs; it reads only.
  diff_mode:
    support: none
  platform:
    platforms: debian
author:
  - kubegpu contributors
"""

EXAMPLES = r"""
- name: Read the node's APT state and decide the driver packages
  kubegpu.gpu.nvidia_driver_apt:
    source: distribution
    release: bookworm
    helpers: [python3-apt]
    version_package: nvidia-driver
    packages: [nvidia-driver, nvidia-kernel-dkms, nvidia-smi, libcuda1]
    extra_packages: [firmware-misc-nonfree]
    branch: "535"
    own: kubegpu-nvidia-distribution
    suites: [bookworm, bookworm-updates, bookworm-security]
    components: [contrib, non-free, non-free-firmware]
    keyring: /usr/share/keyrings/debian-archive-keyring.gpg
  environment:
    LC_ALL: C
  register: driver_apt
"""

RETURN = r"""
helpers_missing:
  description: The O(helpers) not installed.
  returned: always
  type: list
  elements: str
lists_age:
  description: Seconds since the package lists were refreshed (999999 when unknown).
  returned: always
  type: int
source_files:
  description: The role's own sources to write or remove, as C(kubegpu.gpu.file_set) takes them.
  returned: always
  type: list
  elements: dict
sources_pending:
  description: Whether the sources step has work (helpers, sources, old lists, or NVIDIA's repository to check).
  returned: always
  type: bool
version_read_ok:
  description: Whether C(apt-cache policy) answered.
  returned: always
  type: bool
row:
  description: dpkg's C(STATUS|VERSION) of the version package; empty when it is not installed.
  returned: always
  type: str
installed:
  description: The installed driver version; empty for none.
  returned: always
  type: str
candidate:
  description: The package version C(apt-cache policy) offers, C((none)) for none.
  returned: always
  type: str
candidate_version:
  description: The driver version of RV(candidate); empty when it is not a driver version.
  returned: always
  type: str
target:
  description: The driver version the role installs.
  returned: always
  type: str
changing:
  description: Whether an installed driver moves to another version.
  returned: always
  type: bool
install_set:
  description: The packages the install step names (with the source package's other installed packages when the version changes).
  returned: always
  type: list
  elements: str
unheld:
  description: The packages of RV(install_set) not held.
  returned: always
  type: list
  elements: str
held:
  description: The driver packages held.
  returned: always
  type: list
  elements: str
at_target:
  description: Whether every package is installed, the versioned ones at RV(target).
  returned: always
  type: bool
units:
  description: What C(systemctl show) printed of the NVIDIA services.
  returned: always
  type: str
"""
