#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: check_inputs
short_description: Check every layer's variables against the roles' argument specs, on the controller
version_added: "0.1.0"
description:
  - For every host of O(node_group), the variables the inventory and extra vars set with the
    prefix of a node role (nvidia_driver, cuda_toolkit, nvidia_container_toolkit,
    container_runtime, kubelet_gpu); for the controller, those of the cluster roles
    (gpu_cluster, gpu_tenancy), whether or not the cluster layer will run.
  - Each is checked against its role's meta/argument_specs.yml (types, choices, suboptions); a
    name with a role's prefix that the role does not know is reported with the closest known
    name; node labels, taints, kubelet settings and (with kubelet_gpu_kubernetes_version)
    feature gates are checked as the kubelet_gpu role checks them.
  - Returns one line per problem in RV(problems), each naming the inventory variable; a problem
    found for some GPU nodes only names them. It does not fail by itself; the preflight play
    records the problems and stops the run.
  - A value built from what only a host can tell (a template on its facts) is left to the
    roles' own checks on the host and listed in RV(unread).
  - Runs on the controller only (an action plugin); it never connects to a host.
options:
  node_group:
    description: The inventory group of the GPU nodes.
    type: str
    default: gpu_nodes
  scope:
    description:
      - V(all) checks the node layers and the cluster layer (the preflight play, on the
        controller, before any host is contacted).
      - V(nodes) checks the node layers only, for every host of O(node_group). The node play
        runs it once (C(run_once)) after gathering facts, in place of the argument-spec check
        that ansible-core adds to each role for each host, so a value built from a host's facts
        is checked too.
    type: str
    choices: [all, nodes]
    default: all
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - kubegpu maintainers
"""

EXAMPLES = r"""
- name: Check every input before any host is contacted
  kubegpu.gpu.check_inputs:
  register: inputs
"""

RETURN = r"""
problems:
  description: One line per problem, naming the variable, what was wrong and what is allowed.
  returned: always
  type: list
  elements: str
nodes:
  description: How many GPU nodes' variables were checked.
  returned: always
  type: int
unread:
  description: Variables left to the hosts' checks (their values use host facts).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node_group=dict(type="str", default="gpu_nodes"),
            scope=dict(type="str", choices=["all", "nodes"], default="all"),
        ),
        supports_check_mode=True,
    )
    module.fail_json(
        msg="kubegpu.gpu.check_inputs runs on the controller (its action plugin); it was run as a module"
    )


if __name__ == "__main__":
    main()
