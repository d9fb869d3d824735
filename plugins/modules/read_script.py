#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: read_script
short_description: Run a read-only sh script on the node, without Python when the connection pipelines
version_added: "0.1.0"
description:
  - Runs O(script) as C(sh -c SCRIPT sh ARGV...) would and returns what
    M(ansible.builtin.command) returns for that command line. The roles use it for the reads
    that tell them what a node has (package states, units, file digests), one read per role step.
  - When pipelining is on and the connection and become method support it (see
    C(ansible.builtin.ssh)'s C(pipelining)), the script is sent through the connection as the
    standard input of one C(sh). No module, no Python and no temporary files on the node, which
    costs the node a few milliseconds instead of a Python start. Otherwise it runs through
    M(ansible.builtin.command).
  - The script's own commands read their standard input from C(/dev/null).
  - It only reads, so it runs in check mode too, and it never reports a change.
  - The task's C(environment) applies, as for a module.
  - Fails when the script exits with a non-zero status, unless the task says otherwise
    (C(failed_when)), or when one of O(checks) fails.
options:
  script:
    description:
      - The POSIX sh script. C($1), C($2), ... are the items of O(argv); pass values through
        O(argv) rather than templating them into the script.
      - Empty (the default) reads nothing, which only O(checks) may ask for (a task that reads
        only where there is something to read and checks everywhere).
    type: str
    default: ""
  argv:
    description: The script's positional parameters.
    type: list
    elements: str
    default: []
  plan:
    description:
      - A role's decisions over what the read printed, made once in Python and returned as
        RV(plan) with the read (role variables that derived them in Jinja would be rendered
        again at each reference).
      - V(container_runtime) (module_utils/container_runtime_read.py) and
        V(nvidia_container_toolkit) (module_utils/nvidia_container_toolkit_read.py) take the
        output of those roles' reads; O(plan_args) gives the settings they decide against.
    type: str
    choices: [container_runtime, nvidia_container_toolkit]
  plan_args:
    description: The settings O(plan) decides against, as its module_utils function names them.
    type: dict
    default: {}
  checks:
    description:
      - Checks of what the read shows, evaluated on the controller after the read as
        M(kubegpu.gpu.checks) evaluates its O(kubegpu.gpu.checks#module:checks), with the
        task's result visible under its C(register) name. The first failed check fails the task
        with its message; they apply only to a read that did not fail.
      - The read and the checks of what it shows cost one task (one worker per host) instead of
        two.
    type: list
    elements: dict
attributes:
  check_mode:
    support: full
    details: Always runs; it reads only.
  diff_mode:
    support: none
  platform:
    platforms: posix
author:
  - kubegpu contributors
"""

EXAMPLES = r"""
- name: Read the state of two packages
  kubegpu.gpu.read_script:
    script: dpkg-query --show --showformat='${Package} ${db:Status-Abbrev}\n' "$@"
    argv:
      - gpg
      - python3-apt
  environment:
    LC_ALL: C
  register: package_states
"""

RETURN = r"""
rc:
  description: The script's exit status.
  returned: always
  type: int
stdout:
  description: Its standard output, trailing line ends stripped.
  returned: always
  type: str
plan:
  description: The decisions of O(plan) over what the read printed (also when it failed).
  returned: when O(plan) is given
  type: dict
checked:
  description: How many of O(checks) applied (and passed).
  returned: when O(checks) is given and the read and every check passed
  type: int
stdout_lines:
  description: RV(stdout) split into lines.
  returned: always
  type: list
  elements: str
stderr:
  description: Its standard error, trailing line ends stripped.
  returned: always
  type: str
stderr_lines:
  description: RV(stderr) split into lines.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec=dict(
            script=dict(type="str", default=""),
            argv=dict(type="list", elements="str", default=[]),
            plan=dict(type="str", choices=["container_runtime", "nvidia_container_toolkit"]),
            plan_args=dict(type="dict", default={}),
            checks=dict(type="list", elements="dict"),
        ),
        supports_check_mode=True,
    )
    module.fail_json(
        msg="kubegpu.gpu.read_script runs through its action plugin; it was run as a module"
    )


if __name__ == "__main__":
    main()
