# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""ansible-core's linear strategy, except that a task whose condition is false for a host is
skipped in the controller's main process instead of in a forked worker."""

from __future__ import annotations

DOCUMENTATION = r"""
name: linear
short_description: Ansible's linear strategy; a false condition skips without forking a worker
description:
  - Runs tasks in lockstep across hosts, as ansible-core's C(linear) strategy does (it is that
    strategy, subclassed).
  - ansible-core forks a worker process for every task and host, also for a task whose C(when)
    is false there; the fork, the copy-on-write faults of the worker touching the controller's
    memory, and its exit cost more than the evaluation itself.
  - This strategy evaluates the condition in the main process first, with ansible-core's own
    TaskExecutor on a copy of the task, the same variables and the same play context, and stops
    it right after the condition. When the condition is false the result (the same
    C(skipped) result a worker returns) goes to the result queue as a worker's would, and no
    worker starts. When it is true, or anything else happens (an error, an undefined
    variable), the task is queued to a worker as usual, which evaluates it again.
  - Tasks with a loop, C(delegate_to) or no C(when) always go to a worker.
  - Callbacks that treat only ansible-core's C(linear) and C(debug) as lockstep strategies
    by name, such as C(ansible.posix.json), group results by host under this one, as they do
    under any other strategy.
  - A condition that holds is evaluated twice, in the main process and in the worker, so a
    lookup inside it runs twice there.
  - kubegpu's ansible.cfg sets it (C(strategy)). C(ANSIBLE_STRATEGY=linear), or
    C(KUBEGPU_STRATEGY=linear) through kubegpu's Python API, runs ansible-core's own, and
    C(KUBEGPU_STRATEGY=mitogen) mitogen's. tests/unit/test_linear_strategy.py runs the same
    plays under this one and ansible-core's and compares every result.
"""

import copy
import typing as t

from ansible.executor.task_executor import TaskExecutor
from ansible.executor.task_result import _RawTaskResult
from ansible.plugins import loader as plugin_loader
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule


class _WouldRun(BaseException):
    """The condition holds: the probe stops before the task does anything."""


class StrategyModule(LinearStrategyModule):
    def _queue_task(self, host: t.Any, task: t.Any, task_vars: t.Any, play_context: t.Any) -> None:
        probed = self._skip_in_main(host, task, task_vars, play_context)
        if probed is None:
            super()._queue_task(host, task, task_vars, play_context)
            return
        result, fields = probed
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host,
            "task": task,
            "task_vars": task_vars,
            "play_context": play_context,
        }
        self._tqm.send_callback("v2_runner_on_start", host, task)
        self._final_q.send_task_result(
            _RawTaskResult(host=host, task=task, return_data=result, task_fields=fields)
        )
        self._pending_results += 1

    def _skip_in_main(
        self, host: t.Any, task: t.Any, task_vars: t.Any, play_context: t.Any
    ) -> tuple[dict[str, t.Any], dict[str, t.Any]] | None:
        if not task.when or task.loop or task.loop_with or task.delegate_to:
            return None
        # A shallow copy: the executor squashes it (sets its inherited attributes on it) and
        # sets its delegate_to; the task's parents and values stay shared and unchanged.
        probe = copy.copy(task)

        resolve = probe._resolve_conditional

        def stop_when_true(
            conditional: t.Any, variables: t.Any, result_context: t.Any = None
        ) -> bool:
            if resolve(conditional, variables, result_context=result_context):
                raise _WouldRun()
            return False

        probe._resolve_conditional = stop_when_true
        executor = TaskExecutor(
            host,
            probe,
            dict(task_vars),
            play_context,
            self._loader,
            plugin_loader.get_plugin_loader_namespace(),
            self._final_q,
            self._variable_manager,
        )
        try:
            result = executor.run()
        except _WouldRun:
            return None
        if result.get("skipped") is not True or result.get("failed"):
            return None
        return result, probe.dump_attrs()
