# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.checks: many input checks in one task."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

_CHECK_KEYS = {"name", "that", "msg", "when"}


def _as_list(value: t.Any, where: str) -> list[str]:
    items = [value] if isinstance(value, (str, bool)) else value
    if not isinstance(items, list) or not all(isinstance(item, (str, bool)) for item in items):
        raise AnsibleActionFail(f"{where} must be a condition or a list of conditions")
    return items


class ActionModule(ActionBase):
    """Evaluate each check's conditions in order and fail with the message of the first failed
    check, exactly as a chain of ansible.builtin.assert tasks with quiet: true would, but as
    one task: one worker, one result, one line of output per host instead of one per check."""

    _requires_connection = False
    _supports_check_mode = True

    @classmethod
    def finalize_task_arg(cls, name: str, value: t.Any, templar: t.Any, context: t.Any) -> t.Any:
        # `checks` is read as written: its conditions are evaluated and its messages templated
        # one check at a time in run(), so a message may use a variable that exists only when
        # its check applies (as a skipped assert's fail_msg is never templated).
        if name == "checks":
            return value
        return super().finalize_task_arg(name, value, templar, context)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        checks = self._task.args.get("checks")
        unknown = sorted(set(self._task.args) - {"checks"})
        if unknown:
            raise AnsibleActionFail(
                f"kubegpu.gpu.checks: unknown option(s) {', '.join(unknown)} (allowed: checks)"
            )
        if not isinstance(checks, list) or not checks:
            raise AnsibleActionFail(
                "kubegpu.gpu.checks: checks must be a non-empty list of {name, that, msg, when}"
            )

        evaluated = 0
        for index, check in enumerate(checks):
            if (
                not isinstance(check, dict)
                or not {"that", "msg"} <= set(check)
                or set(check) - _CHECK_KEYS
            ):
                raise AnsibleActionFail(
                    f"kubegpu.gpu.checks: checks[{index}] must be a mapping with that and msg "
                    f"(and optionally name and when), got {sorted(check) if isinstance(check, dict) else type(check).__name__}"
                )
            name = str(check.get("name", f"checks[{index}]"))
            when = _as_list(check.get("when", []), f"checks[{index}].when ({name})")
            if not all(self._templar.evaluate_conditional(conditional=cond) for cond in when):
                continue
            evaluated += 1
            for that in _as_list(check["that"], f"checks[{index}].that ({name})"):
                if not self._templar.evaluate_conditional(conditional=that):
                    result["failed"] = True
                    result["check"] = name
                    result["assertion"] = that
                    result["evaluated_to"] = False
                    result["msg"] = self._templar.template(check["msg"])
                    return result

        result["changed"] = False
        result["checked"] = evaluated
        result["msg"] = f"{evaluated} of {len(checks)} checks applied and passed"
        return result
