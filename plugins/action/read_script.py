# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.read_script: a read-only sh script, without Python on the
node when the connection pipelines."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.kubegpu.gpu.plugins.plugin_utils.piped import can_pipe, run_script

# The message of a non-zero rc, in both ways of running: ansible.builtin.command's up to
# ansible-core 2.19. ansible-core 2.21's command words it as the second text below, which the run
# through the module turns back into this one, so that a result reads the same on every release.
NONZERO_MSG = "non-zero return code"
_COMMAND_NONZERO_MSGS = (NONZERO_MSG, "The command exited with a non-zero return code.")

_ARGUMENT_SPEC: dict[str, t.Any] = {
    "script": {"type": "str", "required": True},
    "argv": {"type": "list", "elements": "str", "default": []},
}


class ActionModule(ActionBase):
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
        _, args = self.validate_argument_spec(argument_spec=_ARGUMENT_SPEC)
        script: str = args["script"]
        argv: list[str] = args["argv"]
        if not script.strip():
            raise AnsibleActionFail("kubegpu.gpu.read_script: script is empty")

        if can_pipe(self):
            result.update(self._run_piped(script, argv))
        else:
            result.update(self._run_command_module(script, argv, task_vars))
        result["changed"] = False
        return result

    def _run_piped(self, script: str, argv: list[str]) -> dict[str, t.Any]:
        done = run_script(self, script, argv, self._compute_environment_string())
        # As ansible.builtin.command: trailing line ends stripped, the lines split.
        stdout = done["stdout"].rstrip("\r\n")
        stderr = done["stderr"].rstrip("\r\n")
        outcome: dict[str, t.Any] = {
            "rc": done["rc"],
            "stdout": stdout,
            "stderr": stderr,
            "stdout_lines": stdout.splitlines(),
            "stderr_lines": stderr.splitlines(),
        }
        if done["rc"] != 0:
            outcome["failed"] = True
            outcome["msg"] = NONZERO_MSG
        return outcome

    def _run_command_module(
        self, script: str, argv: list[str], task_vars: dict[str, t.Any] | None
    ) -> dict[str, t.Any]:
        # ansible.builtin.command skips itself in check mode; a read runs in both modes.
        check_mode = self._task.check_mode
        self._task.check_mode = False
        try:
            done = self._execute_module(
                module_name="ansible.builtin.command",
                # Passed as written, as the piped run passes them ($HOME stays $HOME).
                module_args={
                    "argv": ["sh", "-c", script, "sh", *argv],
                    "expand_argument_vars": False,
                },
                task_vars=task_vars,
            )
        finally:
            self._task.check_mode = check_mode
        # The same keys as the piped run: command's timing, command line and (on a non-zero
        # rc) its traceback placeholder are left out.
        for noise in ("changed", "cmd", "start", "end", "delta", "invocation", "exception"):
            done.pop(noise, None)
        if not done.get("msg"):
            done.pop("msg", None)
        elif done.get("rc") and done["msg"] in _COMMAND_NONZERO_MSGS:
            done["msg"] = NONZERO_MSG
        return done
