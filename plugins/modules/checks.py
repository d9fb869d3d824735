#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: checks
short_description: Run many input checks in one task, failing with the first failed check's message
version_added: "0.1.0"
description:
  - Each entry of O(checks) is what one quiet M(ansible.builtin.assert) task would be, that is,
    conditions (O(checks[].that)), the message for when one is false (O(checks[].msg)) and
    optionally conditions for whether the check applies at all (O(checks[].when)).
  - The checks are taken in order; the task fails with the message of the first check whose
    C(that) is false, as a chain of assert tasks stops at the first failure. A check that does
    not apply is not evaluated, and its message is never templated.
  - The roles use it for their input validation because each task costs the controller a worker
    process per host, so one task for a dozen checks costs less than a dozen tasks.
  - Runs on the controller only (an action plugin); it never connects to the host.
options:
  checks:
    description:
      - The checks, in order. Written literally in the task (not as one template string), so
        that each message is templated only when its check fails.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: What the check is about; shown as RV(check) when it fails.
        type: str
      that:
        description: Conditions (bare Jinja expressions, as in assert's C(that)) that must all be true.
        type: list
        elements: str
        required: true
      msg:
        description: The error message when a condition is false; a template.
        type: str
        required: true
      when:
        description: Conditions for whether the check applies; it is skipped when one is false.
        type: list
        elements: str
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: all
author:
  - kubegpu contributors
"""

EXAMPLES = r"""
- name: Check the driver settings
  kubegpu.gpu.checks:
    checks:
      - name: nvidia_driver_branch
        that:
          - nvidia_driver_branch is match('^[0-9]{3}$')
        msg: "nvidia_driver_branch is '{{ nvidia_driver_branch }}': three digits, quoted."
      - name: nvidia_driver_version
        when: nvidia_driver_version | length > 0
        that:
          - nvidia_driver_version.split('.') | first == nvidia_driver_branch
        msg: "nvidia_driver_version '{{ nvidia_driver_version }}' is not of nvidia_driver_branch."
"""

RETURN = r"""
checked:
  description: How many checks applied (their C(when) was true) and passed.
  returned: success
  type: int
check:
  description: The name of the check that failed.
  returned: failure
  type: str
assertion:
  description: The condition that was false.
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec=dict(checks=dict(type="list", elements="dict", required=True)),
        supports_check_mode=True,
    )
    module.fail_json(
        msg="kubegpu.gpu.checks runs on the controller (its action plugin); it was run as a module"
    )


if __name__ == "__main__":
    main()
