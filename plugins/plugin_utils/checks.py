# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Input checks as kubegpu.gpu.checks evaluates them, for that action and for the reads that
take a `checks` option (read_script, nvidia_pci_facts): a list of {name, that, msg, when},
evaluated in order, the first failed check's message the task's message.

A read with checks evaluates them after it has read the node, with its own result visible
under the task's register name (and its ansible_facts among the host's facts): the read and
the checks of what it shows cost one task, one worker per host, instead of two."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleActionFail

CHECK_KEYS = frozenset(("name", "that", "msg", "when"))


class RawChecks:
    """A mixin for an action plugin with a `checks` option: ansible-core leaves that option as
    written, and the action evaluates its conditions and templates a message one check at a
    time, so a message may use a variable that exists only when its check applies (as a
    skipped assert's fail_msg is never templated)."""

    @classmethod
    def finalize_task_arg(cls, name: str, value: t.Any, templar: t.Any, context: t.Any) -> t.Any:
        if name == "checks":
            return value
        return super().finalize_task_arg(name, value, templar, context)  # type: ignore[misc]


def _as_list(value: t.Any, where: str) -> list[t.Any]:
    items = [value] if isinstance(value, (str, bool)) else value
    if not isinstance(items, list) or not all(isinstance(item, (str, bool)) for item in items):
        raise AnsibleActionFail(f"{where} must be a condition or a list of conditions")
    return items


def validate(checks: t.Any, action_name: str) -> list[dict[str, t.Any]]:
    """The checks as given, or AnsibleActionFail naming what is wrong with their shape."""
    if not isinstance(checks, list) or not checks:
        raise AnsibleActionFail(
            f"{action_name}: checks must be a non-empty list of {{name, that, msg, when}}"
        )
    for index, check in enumerate(checks):
        if (
            not isinstance(check, dict)
            or not {"that", "msg"} <= set(check)
            or set(check) - CHECK_KEYS
        ):
            got = sorted(check) if isinstance(check, dict) else type(check).__name__
            raise AnsibleActionFail(
                f"{action_name}: checks[{index}] must be a mapping with that and msg "
                f"(and optionally name and when), got {got}"
            )
    return checks


def evaluate(templar: t.Any, checks: list[dict[str, t.Any]]) -> dict[str, t.Any]:
    """Each check whose `when` holds, in order: the first whose `that` fails gives failed, check,
    assertion, evaluated_to and msg (its message templated only then, as a skipped assert's
    fail_msg never is); else checked (how many applied) and a summary msg."""
    evaluated = 0
    for index, check in enumerate(checks):
        name = str(check.get("name", f"checks[{index}]"))
        when = _as_list(check.get("when", []), f"checks[{index}].when ({name})")
        if not all(templar.evaluate_conditional(conditional=cond) for cond in when):
            continue
        evaluated += 1
        for that in _as_list(check["that"], f"checks[{index}].that ({name})"):
            if not templar.evaluate_conditional(conditional=that):
                return {
                    "failed": True,
                    "check": name,
                    "assertion": that,
                    "evaluated_to": False,
                    "msg": templar.template(check["msg"]),
                }
    return {"checked": evaluated, "msg": f"{evaluated} of {len(checks)} checks applied and passed"}


def after_read(action: t.Any, result: dict[str, t.Any], checks: t.Any) -> None:
    """Evaluate the checks of a read (action: the read's action plugin) against its result, in
    place: a failed check fails the result with its message; a read that failed is left as it
    is. The result is visible under the task's register name, its ansible_facts among the
    host's facts."""
    if checks is None or result.get("failed") or result.get("skipped"):
        return
    checks = validate(checks, action._task.action)
    variables = dict(action._templar.available_variables)
    facts = result.get("ansible_facts")
    if facts:
        variables["ansible_facts"] = {**dict(variables.get("ansible_facts") or {}), **facts}
    # A name (ansible-core up to 2.20), or names mapped to what each holds (2.21 register
    # projections, a plain name among them): the checks see the whole result under each name.
    register = action._task.register
    for name in [register] if isinstance(register, str) else list(register or ()):
        variables[name] = result
    # The action's own templar, its variables swapped for the time of the checks: a templar of
    # its own would compile every expression again.
    templar = action._templar
    before = templar.available_variables
    templar.available_variables = variables
    try:
        outcome = evaluate(templar, checks)
    finally:
        templar.available_variables = before
    if outcome.get("failed"):
        result.update(outcome)
    else:
        result["checked"] = outcome["checked"]


def pop_checks(action: t.Any) -> t.Any:
    """The task's `checks` option, taken out of its arguments (the argument spec and the module
    that may run instead of the piped read do not know it); None when not given."""
    if "checks" not in action._task.args:
        return None
    args = dict(action._task.args)
    checks = args.pop("checks")
    action._task.args = args
    return checks
