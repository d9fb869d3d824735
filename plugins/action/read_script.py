# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.read_script: a read-only sh script, without Python on the
node when the connection pipelines."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.kubegpu.gpu.plugins.plugin_utils.piped import read_command

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

        result.update(read_command(self, script, argv, task_vars))
        result["changed"] = False
        return result
