# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.read_script: a read-only sh script, without Python on the
node when the connection pipelines."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.kubegpu.gpu.plugins.module_utils import container_runtime_read
from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_container_toolkit_read
from ansible_collections.kubegpu.gpu.plugins.plugin_utils import checks as kchecks
from ansible_collections.kubegpu.gpu.plugins.plugin_utils.piped import read_command

# The roles' decisions over what their reads print, made once in Python (the plan option):
# role variables that derive them in Jinja would be rendered again at each reference.
PLANS: dict[str, t.Callable[[str, dict[str, t.Any]], dict[str, t.Any]]] = {
    "container_runtime": container_runtime_read.plan,
    "nvidia_container_toolkit": nvidia_container_toolkit_read.plan,
}

_ARGUMENT_SPEC: dict[str, t.Any] = {
    "script": {"type": "str", "default": ""},
    "argv": {"type": "list", "elements": "str", "default": []},
    "plan": {"type": "str", "choices": sorted(PLANS)},
    "plan_args": {"type": "dict", "default": {}},
}


class ActionModule(kchecks.RawChecks, ActionBase):
    """Run the script as `sh -c SCRIPT sh ARGV...` would, and return what
    ansible.builtin.command returns for that argv (rc, stdout, stderr and their lines; failed
    on a non-zero rc; never changed). It always runs, in check mode too: it only reads.

    When the connection pipelines (pipelining on, a connection and become method that support
    it), the script goes through the connection as the stdin of one sh: no module, no Python and
    no temporary files on the node. Otherwise it runs through ansible.builtin.command."""

    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        # Fails the task, naming the option, for a missing script, an unknown option or an
        # argv that is not a list.
        checks = kchecks.pop_checks(self)
        _, args = self.validate_argument_spec(argument_spec=_ARGUMENT_SPEC)
        script: str = args["script"]
        argv: list[str] = args["argv"]
        if not script.strip():
            # Nothing to read on this host: the checks alone (a task that reads only where
            # there is something to read, and checks everywhere).
            if checks is None:
                raise AnsibleActionFail("kubegpu.gpu.read_script: script is empty")
            result.update(rc=0, stdout="", stderr="", stdout_lines=[], stderr_lines=[])
        else:
            result.update(read_command(self, script, argv, task_vars))
        # Also over what a failed read printed (a query of packages some of which are unknown
        # exits 1 after printing the others' rows; the task's failed_when decides).
        if args["plan"]:
            try:
                result["plan"] = PLANS[args["plan"]](result.get("stdout", ""), args["plan_args"])
            except ValueError as exc:
                raise AnsibleActionFail(
                    f"kubegpu.gpu.read_script: plan {args['plan']}: {exc}"
                ) from exc
        kchecks.after_read(self, result, checks)
        result["changed"] = False
        return result
