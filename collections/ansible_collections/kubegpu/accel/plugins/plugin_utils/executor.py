# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""ansible-core's TaskExecutor as the accelerator drives it outside a worker (fast_linear.py,
preconnect.py), for each tested minor: the few calls whose shape changed between them.

2.19 and 2.20: the executor is made with its task and variables, squashes the task itself,
returns a result dict, and a worker sends a _RawTaskResult of it and of the task's fields.
2.21: the executor reads its task and variables from an ambient TaskContext, the worker squashes
the task and works out its registered values, the executor returns a UnifiedTaskResult, and a
worker sends a WireTaskResult. The when condition is resolved through
_resolve_conditional_with_item there, through _resolve_conditional before.

Each function does what ansible-core's WorkerProcess does at that point of the minor it runs on
(ansible/executor/process/worker.py), so a result made here is the one a worker would send."""

from __future__ import annotations

import contextlib
import typing as t
from collections.abc import Iterator

from ansible._internal import _task
from ansible.executor.task_executor import TaskExecutor
from ansible.plugins import loader as plugin_loader
from ansible_collections.kubegpu.accel.plugins.plugin_utils import gate

# What a run gives back: the result (a dict, or on 2.21 a UnifiedTaskResult) and the task's
# fields after it; both go to the result queue as a worker's would, also through a pipe.
Outcome = tuple[t.Any, dict[str, t.Any]]

# 2.21 reworked the executor around UnifiedTaskResult; 2.19 and 2.20 have the earlier shape.
UNIFIED = gate.minor() not in ("2.19", "2.20")

if UNIFIED:
    from ansible._internal._task import WireTaskResult
else:
    from ansible.executor.task_result import _RawTaskResult


@contextlib.contextmanager
def running(
    host: t.Any,
    task: t.Any,
    task_vars: dict[str, t.Any],
    play_context: t.Any,
    loader: t.Any,
    final_q: t.Any,
    variable_manager: t.Any,
    executor_class: type[TaskExecutor] = TaskExecutor,
) -> Iterator[t.Any]:
    """An executor (ansible-core's, or a subclass) of this task on this host, inside the
    task's context, with a copy of the variables. The task is changed: pass a copy."""
    shared_loader = plugin_loader.get_plugin_loader_namespace()
    own_vars = dict(task_vars)
    if UNIFIED:
        with _task.TaskContext.create(task=task, task_vars=own_vars, host_name=host.name):
            task.squash()
            yield executor_class(
                host, play_context, loader, shared_loader, final_q, variable_manager
            )
    else:
        with _task.TaskContext(task):
            yield executor_class(
                host, task, own_vars, play_context, loader, shared_loader, final_q, variable_manager
            )


def run(executor: t.Any, task: t.Any) -> Outcome:
    """The executor's whole run, as a worker runs it; called inside running()."""
    result = executor.run()
    if UNIFIED:
        result.finalize_registered_values()
        # As the worker does: callbacks read these from the task it sends.
        task.ignore_errors = result.ignore_errors
        task.ignore_unreachable = result.ignore_unreachable
    return result, task.dump_attrs()


def execute(executor: t.Any) -> t.Any:
    """The executor's run of the task without loop handling (its _execute)."""
    if UNIFIED:
        return executor._execute()
    return executor._execute(executor._task_templar, executor._job_vars)


def is_skip(result: t.Any) -> bool:
    """Whether the result is a skip, and no failure."""
    if UNIFIED:
        return result.skipped is True and not result.failed
    return result.get("skipped") is True and not result.get("failed")


def send(final_q: t.Any, host: t.Any, task: t.Any, outcome: Outcome) -> None:
    """Put a run's outcome on the result queue, as a worker sends its result."""
    result, fields = outcome
    if UNIFIED:
        final_q.put(
            WireTaskResult(
                host_name=host.name, task_uuid=task._uuid, task_fields=fields, utr=result
            )
        )
    else:
        final_q.send_task_result(
            _RawTaskResult(host=host, task=task, return_data=result, task_fields=fields)
        )


def stop_when_true(task: t.Any, stop: type[BaseException]) -> None:
    """Make this task (a copy) raise `stop` where its when condition holds, before the
    executor goes on to run it."""
    if UNIFIED:
        resolve_with_item = task._resolve_conditional_with_item

        def with_item(conditional: t.Any, variables: t.Any) -> tuple[bool, t.Any]:
            held, item = resolve_with_item(conditional, variables)
            if held:
                raise stop()
            return held, item

        task._resolve_conditional_with_item = with_item
        return
    resolve = task._resolve_conditional

    def plain(conditional: t.Any, variables: t.Any, result_context: t.Any = None) -> bool:
        if resolve(conditional, variables, result_context=result_context):
            raise stop()
        return False

    task._resolve_conditional = plain
