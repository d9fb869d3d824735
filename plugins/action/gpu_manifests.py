# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.gpu_manifests: the objects' templates for the module.

The cluster layer's objects are YAML files in module_utils/data/cluster/ (cluster_manifests.py
fills them in). AnsiballZ ships only the Python files of module_utils, so the module cannot
read them where it runs: this action reads them here, from the collection on disk, and passes
them to the module in its internal option _object_templates, then leaves them out of the
invocation the result shows."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.kubegpu.gpu.plugins.module_utils.cluster_manifests import TEMPLATE_FOLDER
from ansible_collections.kubegpu.gpu.plugins.module_utils.data_files import read_templates

TEMPLATES_OPTION = "_object_templates"


class ActionModule(ActionBase):
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args: dict[str, t.Any] = dict(self._task.args)
        if TEMPLATES_OPTION in args:
            raise AnsibleActionFail(
                f"kubegpu.gpu.gpu_manifests: {TEMPLATES_OPTION} is internal (the action passes "
                "the collection's object templates); leave it out of the task"
            )
        try:
            args[TEMPLATES_OPTION] = read_templates(TEMPLATE_FOLDER)
        except RuntimeError as exc:
            raise AnsibleActionFail(f"kubegpu.gpu.gpu_manifests: {exc}") from exc
        result.update(self._execute_module(module_args=args, task_vars=task_vars))
        invocation = result.get("invocation") or {}
        (invocation.get("module_args") or {}).pop(TEMPLATES_OPTION, None)
        return result
