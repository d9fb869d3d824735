# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.checks: many input checks in one task."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.kubegpu.gpu.plugins.plugin_utils import checks as kchecks


class ActionModule(kchecks.RawChecks, ActionBase):
    """Evaluate each check's conditions in order and fail with the message of the first failed
    check, exactly as a chain of ansible.builtin.assert tasks with quiet: true would, but as
    one task: one worker, one result, one line of output per host instead of one per check."""

    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        unknown = sorted(set(self._task.args) - {"checks"})
        if unknown:
            raise AnsibleActionFail(
                f"kubegpu.gpu.checks: unknown option(s) {', '.join(unknown)} (allowed: checks)"
            )
        checks = kchecks.validate(self._task.args.get("checks"), "kubegpu.gpu.checks")
        result.update(kchecks.evaluate(self._templar, checks))
        result["changed"] = False
        return result
