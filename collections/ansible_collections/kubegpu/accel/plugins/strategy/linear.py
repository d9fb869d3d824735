# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""kubegpu.accel.linear: the accelerated linear strategy where the gate lets it run
(plugin_utils/gate.py), ansible-core's own linear strategy everywhere else."""

from __future__ import annotations

DOCUMENTATION = r"""
name: linear
short_description: Ansible's linear strategy; skips and controller-only actions without forking
description:
  - Runs tasks in lockstep across hosts, as ansible-core's C(linear) strategy does (it is that
    strategy, subclassed).
  - ansible-core forks a worker process for every task and host, also for a task whose C(when)
    is false there and for an action that never leaves the controller; the fork, the
    copy-on-write faults of the worker touching the controller's memory, and its exit cost more
    than such a task itself.
  - A task whose action runs on the controller alone and returns all it does in its result
    (C(set_fact), C(debug), C(assert), C(fail), C(include_vars), C(include_tasks),
    C(include_role), C(validate_argument_spec) and C(kubegpu.gpu.checks)) runs in the main
    process, with ansible-core's own TaskExecutor, on a copy of the task and its parent blocks,
    the same variables and the same play context, and its result goes to the result queue as a
    worker's would. Loops run there too. A task with C(delegate_to), C(async), C(until),
    C(timeout) or a loop C(pause) goes to a worker as usual, so nothing waits in the main
    process.
  - Any other task with C(when) and no loop or C(delegate_to) has its condition evaluated in the
    main process first, by the same executor stopped right after the condition. When the
    condition is false the result (the same C(skipped) result a worker returns) goes to the
    result queue, and no worker starts. When it is true, or anything else happens (an error, an
    undefined variable), the task is queued to a worker as usual, which evaluates it again.
  - The main process does this work for a task when the strategy waits for the task's results,
    and shares it with helper processes when the controller has CPUs to spare (as many helpers
    as further CPUs this process may run on; C(KUBEGPU_MAIN_HELPERS) sets the most, C(0) turns
    them off), and only as many as there are free worker slots (C(forks)) and pairs of hosts
    (two hosts at least for each process), and only when the work a helper would take comes to
    C(KUBEGPU_HELPER_MIN_MS) (default 20) milliseconds of CPU at least, reckoned from what the
    task's first host took the main process (a helper costs more than its fork, as each side
    copies the memory pages it writes afterwards, and the helper unmaps them all when it ends;
    C(0) shares every task a helper can take). Each helper is forked as a worker is, after the
    main process has done the first host's work, and runs the last hosts' share one host after
    another, as the main process runs the first hosts'. A helper
    sends each result to the result queue as a worker does; of conditions, it sends back which
    are false and the main process sends those results, and queues a worker for each host whose
    condition holds. Conditions are shared only when the first host's is false (else the task
    likely runs everywhere, and a helper's work would come back as workers to start). A task
    with C(throttle) is not shared.
    ansible-core's check of its workers watches the helpers too; one that dies fails the run.
  - C(include_vars) in the main process parses a file once and gives each host a deep copy of
    what it parsed, for as long as the file's modification time, size and inode stay the same;
    ansible-core's C(include_vars) parses it again for every host. A vault-encrypted file stays
    marked as such in the copy, so its content is hidden as before.
  - At the start of a play, for each of the first hosts (as many as C(forks)) whose first task
    runs in the main process and whose connection is ansible's C(ssh) plugin with
    C(ControlPersist) in its C(ssh_args), a forked child opens the SSH master connection through
    ansible-core's own executor, on a copy of that task, with C(BatchMode=yes) and without
    waiting for it; the handshakes then happen while the controller works instead of at the
    first task that connects. A host it cannot reach fails at that task as before.
    C(KUBEGPU_PRECONNECT=0) turns it off (plugin_utils/preconnect.py).
  - With the C(jsonfile) or C(memory) fact cache, which hold the cached facts in memory for
    the whole run anyway, each host's facts are decoded once per run instead of for every task.
  - Every template render of ansible-core wraps the variables it is given into a new lazy dict,
    one marker object per variable, and a task renders the same variables several times (its
    fields, its conditions, its arguments). Under this strategy the markers of a task's
    variables are made once and copied for each render, as long as every key and value of the
    variables is still the same object; a render's resolved values stay in its own copy.
    C(KUBEGPU_VARS_WRAP_REUSE=0) turns it off (plugin_utils/lazy_vars.py).
  - Callbacks that treat only ansible-core's C(linear) and C(debug) as lockstep strategies
    by name, such as C(ansible.posix.json), group results by host under this one, as they do
    under any other strategy.
  - A condition that holds is evaluated twice, in the main process and in the worker, so a
    lookup inside it runs twice there.
  - kubegpu's ansible.cfg sets it (C(strategy)). C(ANSIBLE_STRATEGY=linear), or
    C(KUBEGPU_STRATEGY=linear) through kubegpu's Python API, runs ansible-core's own, and
    C(KUBEGPU_STRATEGY=mitogen) mitogen's.
  - It runs only on the ansible-core minors it was tested on (plugin_utils/gate.py,
    C(TESTED_MINORS)); on any other, with C(KUBEGPU_ACCEL=0), or when its code fails to
    load, this strategy is ansible-core's C(linear), after one warning line (none for
    C(KUBEGPU_ACCEL=0)). Nothing of the accelerator is then in the run.
  - tests/unit/test_linear_strategy.py runs the same plays under this one and ansible-core's
    and compares every result.
"""

import typing as t

from ansible.plugins.strategy.linear import StrategyModule as _StockLinear
from ansible_collections.kubegpu.accel.plugins.plugin_utils import gate


def _strategy() -> t.Any:
    """The accelerated strategy where the gate lets it run and its code loads, else
    ansible-core's linear strategy."""
    if gate.active():
        try:
            from ansible_collections.kubegpu.accel.plugins.plugin_utils import fast_linear
        except Exception as exc:  # whatever the internals raise, the run goes on
            gate.step_aside(f"its strategy failed to load ({type(exc).__name__}: {exc})")
        else:
            return fast_linear.StrategyModule
    return _StockLinear


StrategyModule = _strategy()
