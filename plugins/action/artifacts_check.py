# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.artifacts_check: every artifact the inventory pulls, asked
of its mirrors (registry manifest by digest, apt index), before any host is contacted."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.kubegpu.gpu.plugins.plugin_utils import mirrors


class ActionModule(ActionBase):
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = self._task.args
        unknown = sorted(set(args) - {"node_group"})
        if unknown:
            raise AnsibleActionFail(
                f"kubegpu.gpu.artifacts_check: unknown option(s) {', '.join(unknown)}"
                " (allowed: node_group)"
            )
        group = str(args.get("node_group", "gpu_nodes"))
        result.update(changed=False, **mirrors.check(task_vars, self._templar.template, group))
        return result
