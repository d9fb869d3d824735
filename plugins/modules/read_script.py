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
    (C(failed_when)).
options:
  script:
    description:
      - The POSIX sh script. C($1), C($2), ... are the items of O(argv); pass values through
        O(argv) rather than templating them into the script.
    type: str
    required: true
  argv:
    description: The script's positional parameters.
    type: list
    elements: str
    default: []
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
            script=dict(type="str", required=True),
            argv=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    module.fail_json(
        msg="kubegpu.gpu.read_script runs through its action plugin; it was run as a module"
    )


if __name__ == "__main__":
    main()
