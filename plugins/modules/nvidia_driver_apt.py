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
  distribution:
    description: C(ansible_facts['distribution']) (Debian or Ubuntu name their packages differently).
    type: str
    required: true
  kernel:
    description: C(ansible_facts['kernel']) (Ubuntu's precompiled module packages name it).
    type: str
    required: true
  module_type:
    description: The kernel module flavour the role installs.
    type: str
    required: true
    choices: [open, proprietary]
  build:
    description: C(nvidia_driver_build).
    type: str
    required: true
    choices: [dkms, precompiled]
  persistenced:
    description: Whether nvidia-persistenced is wanted.
    type: bool
    required: true
  fabricmanager:
    description: Whether Fabric Manager is wanted.
    type: bool
    required: true
  packages:
    description: C(nvidia_driver_packages); empty for the packages the distribution and source name.
    type: list
    elements: str
    default: []
  fabricmanager_package:
    description: C(nvidia_driver_fabricmanager_package); empty for the source's.
    type: str
    default: ""
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
  host:
    description: What the host looks like besides its packages, to say whether it is settled.
    type: dict
    required: true
    suboptions:
      gpu_count:
        description: The NVIDIA GPUs found (C(nvidia_pci)).
        type: int
        required: true
      services:
        description: The NVIDIA services the settings want.
        type: list
        elements: str
        default: []
      module_loaded:
        description: Whether the nvidia module is loaded.
        type: bool
        required: true
      nouveau_loaded:
        description: Whether nouveau is loaded.
        type: bool
        required: true
      loaded_driver:
        description: The loaded nvidia module's version and flavour (C(nvidia_pci)); none when none is loaded.
        type: dict
      needs_headers:
        description: Whether the role checks the kernel headers for DKMS.
        type: bool
        required: true
      files_in_place:
        description: Whether the nouveau blacklist and the module parameters are as the role writes them.
        type: bool
        required: true
      fact_sha256:
        description: The sha256 of the local fact C(kubegpu_driver); none when it is missing or not root's.
        type: str
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
    distribution: Debian
    kernel: 6.1.0-27-amd64
    module_type: proprietary
    build: dkms
    persistenced: true
    fabricmanager: false
    branch: "535"
    own: kubegpu-nvidia-distribution
    suites: [bookworm, bookworm-updates, bookworm-security]
    components: [contrib, non-free, non-free-firmware]
    keyring: /usr/share/keyrings/debian-archive-keyring.gpg
    host:
      gpu_count: 1
      services: [nvidia-persistenced.service]
      module_loaded: true
      nouveau_loaded: false
      loaded_driver: {version: 535.216.01, flavor: proprietary}
      needs_headers: false
      files_in_place: true
      fact_sha256: null
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
names:
  description: The packages for these settings (version_package, versioned, extra, pin, fabricmanager, stream).
  returned: always
  type: dict
packages:
  description: The packages installed at the driver version (the versioned ones and Fabric Manager when wanted).
  returned: always
  type: list
  elements: str
pin:
  description: NVIDIA's branch pinning package, when the source has one.
  returned: always
  type: list
  elements: str
rows_query:
  description: The dpkg-query command line whose rows (NAME|STATUS|VERSION|SELECTION) the read prints for the packages; the role reads them again with it after the install.
  returned: always
  type: list
  elements: str
settled:
  description: Whether the host has nothing left to change.
  returned: always
  type: bool
state:
  description: The driver state the role records when the host is settled.
  returned: always
  type: dict
"""
