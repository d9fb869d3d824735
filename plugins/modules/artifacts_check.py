#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: artifacts_check
short_description: Ask the inventory's mirrors for every artifact it pulls, on the controller
version_added: "0.1.0"
description:
  - Lists the images and packages the inventory's settings pull, from kubegpu's artifact
    manifest (plugins/module_utils/data/artifacts.yaml), as C(kubegpu artifacts list) does.
  - Asks the mirror registry (C(gpu_cluster_image_registry), C(gpu_tenancy_workload_image_registry))
    for each image's manifest by digest (by tag where no digest is pinned), and the mirror
    repositories (C(nvidia_container_toolkit_repo_url), C(nvidia_driver_mirror_url)) for each
    package in their Packages index, for every architecture in C(kubegpu_architectures).
  - Returns one line per missing artifact in RV(problems); a package source left at the vendor's
    repository counts as missing. It does not fail by itself; the preflight play stops the run.
  - Runs on the controller only (an action plugin); it never connects to a host. The preflight
    play runs it when C(kubegpu_offline) is true.
options:
  node_group:
    description: The inventory group of the GPU nodes.
    type: str
    default: gpu_nodes
author:
  - kubegpu contributors
"""

EXAMPLES = r"""
- name: Ask the mirrors for every artifact before any host is contacted
  kubegpu.gpu.artifacts_check:
  register: artifacts
"""

RETURN = r"""
problems:
  description: One line per missing artifact, naming it and why.
  returned: always
  type: list
  elements: str
missing:
  description: The missing artifacts (kind, name, reason).
  returned: always
  type: list
  elements: dict
images:
  description: The image references the inventory pulls.
  returned: always
  type: list
  elements: str
packages:
  description: How many packages the inventory installs.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec=dict(node_group=dict(type="str", default="gpu_nodes")),
        supports_check_mode=True,
    )
    module.fail_json(msg="kubegpu.gpu.artifacts_check runs on the controller (its action plugin)")


if __name__ == "__main__":
    main()
