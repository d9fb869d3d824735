#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: dpkg_state
short_description: Wait for the apt/dpkg locks and finish an interrupted dpkg run
version_added: "0.1.0"
description:
  - Run before any package task on a Debian or Ubuntu host. First waits, up to
    O(lock_timeout) seconds, until no other process holds the apt and dpkg locks
    (O(lock_files)); when one is still held at the deadline the task fails naming the lock
    and the holder's PID and command line.
  - Then looks for a dpkg run that was killed (power loss, SIGKILL, a lost SSH session), by
    the journal entries dpkg leaves in C(<admindir>/updates/) and by C(dpkg --audit), and
    runs C(dpkg --configure -a) when either says so, holding the apt frontend lock as apt
    does. The task fails, quoting dpkg, when the audit still finds problems afterwards
    (a half-installed package needs a reinstall, which is left to the operator).
  - Changes nothing when dpkg is in order.
options:
  lock_timeout:
    description: Seconds to wait for each lock's holder to let go, all locks together.
    type: int
    default: 120
  lock_timeout_variable:
    description: The name the error message gives the timeout (the variable that sets it).
    type: str
    default: lock_timeout
  poll_interval:
    description: Seconds between tries of a held lock.
    type: float
    default: 1.0
  lock_files:
    description: The lock files, taken in this order (the frontend lock first, as apt does).
    type: list
    elements: path
    default:
      - /var/lib/dpkg/lock-frontend
      - /var/lib/dpkg/lock
      - /var/lib/apt/lists/lock
      - /var/cache/apt/archives/lock
  repair:
    description: Run C(dpkg --configure -a) when dpkg was interrupted; false only reports it.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Reports who holds a lock and whether a repair is due; waits for nothing and
      changes nothing.
  diff_mode:
    support: none
  platform:
    platforms: debian
requirements:
  - dpkg on the host
notes:
  - Only fcntl (POSIX) locks count, as for apt and dpkg themselves; a flock(2) lock on the
    same file does not keep apt out.
seealso:
  - module: ansible.builtin.apt
author:
  - kubegpu maintainers
"""

EXAMPLES = r"""
- name: Wait for the package locks and repair an interrupted dpkg run
  kubegpu.gpu.dpkg_state:
    lock_timeout: "{{ kubegpu_apt_lock_timeout | default(120) }}"
    lock_timeout_variable: kubegpu_apt_lock_timeout
"""

RETURN = r"""
interrupted:
  description: Whether dpkg had been interrupted (journal entries or audit findings).
  returned: always
  type: bool
reasons:
  description: What showed the interruption.
  returned: always
  type: list
  elements: str
journal:
  description: The dpkg journal entries found in updates/ before any repair.
  returned: always
  type: list
  elements: str
audit:
  description: The lines of C(dpkg --audit) before any repair.
  returned: always
  type: list
  elements: str
audit_after:
  description: The lines of C(dpkg --audit) after the repair ([] when it fixed everything).
  returned: when a repair ran
  type: list
  elements: str
repaired:
  description: Whether C(dpkg --configure -a) ran.
  returned: always
  type: bool
lock_wait_seconds:
  description: How long the task waited for the locks.
  returned: always
  type: float
lock_holders:
  description: The processes that held a lock while the task waited (in check mode, now).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/var/lib/dpkg/lock-frontend", "pid": 4242, "command": "apt-get install x"}]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.kubegpu.gpu.plugins.module_utils.dpkg_state import (
    FRONTEND_LOCK,
    LOCK_FILES,
    DpkgStateError,
    LockSet,
    LockTimeout,
    audit_lines,
    pending_journal,
    query_locks,
    repair_plan,
)

ENV = {"LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"}


def _audit(module):
    rc, out, err = module.run_command(["dpkg", "--audit"], environ_update=ENV)
    # dpkg --audit exits 0 or 1 (problems found) and prints what it found on stdout.
    if rc not in (0, 1):
        raise DpkgStateError("dpkg --audit failed (exit %s): %s" % (rc, (err or out).strip()))
    return audit_lines(out)


def _journal():
    try:
        names = os.listdir(os.path.join("/var/lib/dpkg", "updates"))
    except OSError:
        names = []
    return pending_journal(names)


def run(module):
    p = module.params
    result = dict(
        changed=False,
        interrupted=False,
        reasons=[],
        journal=[],
        audit=[],
        repaired=False,
        lock_wait_seconds=0.0,
        lock_holders=[],
    )
    locks = None
    if module.check_mode:
        result["lock_holders"] = query_locks(p["lock_files"])
    else:
        locks = LockSet(p["lock_files"])
        try:
            locks.acquire(p["lock_timeout"], p["poll_interval"], p["lock_timeout_variable"])
        finally:
            result["lock_holders"] = locks.waited_for
            result["lock_wait_seconds"] = round(locks.waited, 2)
        # dpkg takes its own lock; the frontend lock stays ours, as apt keeps it.
        locks.release(keep=(FRONTEND_LOCK,))
    try:
        journal = _journal()
        audit = _audit(module)
        needed, reasons = repair_plan(journal, audit)
        result.update(interrupted=needed, reasons=reasons, journal=journal, audit=audit)
        if not needed or not p["repair"]:
            return result
        result["changed"] = True
        if module.check_mode:
            return result
        env = dict(ENV)
        if locks is not None and FRONTEND_LOCK in locks.fds:
            env["DPKG_FRONTEND_LOCKED"] = "1"
        rc, out, err = module.run_command(
            ["dpkg", "--force-confdef", "--force-confold", "--configure", "-a"], environ_update=env
        )
        result["repaired"] = True
        after = _audit(module)
        result["audit_after"] = after
        if rc != 0 or after or _journal():
            raise DpkgStateError(
                "dpkg was interrupted (%s) and `dpkg --configure -a` did not finish the job "
                "(exit %s): %s%s. Look at the packages it names: a half-installed one needs "
                "`apt-get install --reinstall <package>`, a broken dependency "
                "`apt-get --fix-broken install`."
                % (
                    "; ".join(reasons),
                    rc,
                    (err or out).strip()[-1500:] or "no output",
                    ("; dpkg --audit still reports: " + " / ".join(after[:6])) if after else "",
                )
            )
        return result
    finally:
        if locks is not None:
            locks.release()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            lock_timeout=dict(type="int", default=120),
            lock_timeout_variable=dict(type="str", default="lock_timeout"),
            poll_interval=dict(type="float", default=1.0),
            lock_files=dict(type="list", elements="path", default=list(LOCK_FILES)),
            repair=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    if module.params["lock_timeout"] < 0:
        module.fail_json(
            msg="%s must be 0 or more seconds, not %s"
            % (module.params["lock_timeout_variable"], module.params["lock_timeout"])
        )
    if module.get_bin_path("dpkg") is None:
        module.fail_json(msg="dpkg is not installed: this module is for Debian and Ubuntu hosts")
    try:
        result = run(module)
    except LockTimeout as exc:
        module.fail_json(msg=str(exc), lock_path=exc.path, lock_holder=exc.holder)
    except DpkgStateError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
