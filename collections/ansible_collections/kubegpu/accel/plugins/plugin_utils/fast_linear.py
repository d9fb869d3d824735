# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The accelerated linear strategy (kubegpu.accel.linear, whose DOCUMENTATION says what it
does): ansible-core's linear strategy, except that a task whose condition is false for a host
is skipped in the controller's main process instead of in a forked worker, and a
controller-only action (set_fact, debug, assert, ...) runs there whole, the work shared with a
helper process per spare CPU. It subclasses ansible-core's executor internals, so it is loaded
only on the ansible-core minors in gate.TESTED_MINORS (strategy/linear.py decides)."""

from __future__ import annotations


import collections
import contextlib
import copy
import os
import signal
import time
import typing as t
from collections.abc import Mapping

from ansible import constants as C
from ansible.errors import AnsibleError
from ansible.executor.process.worker import WorkerProcess
from ansible.plugins import loader as plugin_loader
from ansible.plugins.cache import BaseFileCacheModule
from ansible.plugins.cache.memory import CacheModule as MemoryCache
from ansible.plugins.strategy.linear import StrategyModule as LinearStrategyModule
from ansible.utils.multiprocessing import context as multiprocessing_context
from ansible import context
from ansible_collections.kubegpu.accel.plugins.plugin_utils import executor, lazy_vars, preconnect


# Actions that run on the controller alone, need no connection, and change nothing outside the
# result they return (ansible-core's strategy applies their facts, variables and includes from
# that result, wherever it was made).
_IN_MAIN = frozenset(
    (
        *C._ACTION_SET_FACT,
        *C._ACTION_DEBUG,
        *C._ACTION_INCLUDE_VARS,
        *C._ACTION_ALL_INCLUDES,
        *(
            f"{prefix}{name}"
            for name in ("assert", "fail", "validate_argument_spec")
            for prefix in ("", "ansible.builtin.", "ansible.legacy.")
        ),
        "kubegpu.gpu.checks",
    )
)


class _DecodedFacts:
    """The fact cache, each host's facts decoded once. ansible-core keeps them encoded (JSON
    with its type tags) and decodes a host's on every variable lookup of every task, also with
    the jsonfile and memory plugins, which hold them in memory for the whole run anyway.
    Callers never change what get returns (the variable manager copies the facts it uses,
    and set_host_facts stores its update with set, which drops the decoded copy)."""

    def __init__(self, wrapped: t.Any) -> None:
        self._wrapped = wrapped
        self._decoded: dict[str, t.Any] = {}

    @staticmethod
    def applies_to(cache: t.Any) -> bool:
        """Only for the plugins that keep what they loaded for the whole run."""
        plugin = getattr(cache, "__wrapped__", None)
        return isinstance(plugin, (BaseFileCacheModule, MemoryCache))

    def get(self, key: str) -> t.Any:
        if key not in self._decoded:
            self._decoded[key] = self._wrapped.get(key)
        return self._decoded[key]

    def set(self, key: str, value: t.Any) -> None:
        self._decoded.pop(key, None)
        self._wrapped.set(key, value)

    def delete(self, key: str) -> None:
        self._decoded.pop(key, None)
        self._wrapped.delete(key)

    def flush(self) -> None:
        self._decoded.clear()
        self._wrapped.flush()

    def __getattr__(self, name: str) -> t.Any:
        if name.startswith("__") or name == "_wrapped":
            raise AttributeError(name)
        return getattr(self._wrapped, name)


class _ParsedVarsFiles:
    """The main process's data loader, for include_vars: what it loads without ansible-core's
    cache (cache='none', which include_vars asks for so that a file changed during the run is
    read again) is parsed once for as long as the file's modification time, size and inode are
    the same, and each caller gets a deep copy, as from ansible-core's own cache. The copy
    keeps the parsed data's tags (its origin, SourceWasEncrypted for a vault-encrypted file).
    Its containers are new; its strings and numbers, immutable, are the parsed ones (deepcopy
    shares a plain str, but rebuilds each of the parser's tagged ones, which costs more than
    half a parse). Everything else is the real loader's. Holds one parse per path and set of
    options, the latest, so no more than the run's distinct vars files."""

    def __init__(self, wrapped: t.Any) -> None:
        self._wrapped = wrapped
        self._parsed: dict[
            tuple[str, bool, bool], tuple[tuple[int, int, int], t.Any, dict[int, t.Any]]
        ] = {}

    def load_from_file(
        self,
        file_name: str,
        cache: str = "all",
        unsafe: bool = False,
        json_only: bool = False,
        trusted_as_template: bool = False,
    ) -> t.Any:
        if cache != "none" or unsafe:
            # ansible-core's cache, or a caller that may change what it gets: the real loader.
            return self._wrapped.load_from_file(
                file_name,
                cache=cache,
                unsafe=unsafe,
                json_only=json_only,
                trusted_as_template=trusted_as_template,
            )
        path = self._wrapped.path_dwim(file_name)
        try:
            # Before reading, so that a change while it is read shows as one next time.
            found = os.stat(path)
        except OSError:
            return self._wrapped.load_from_file(
                file_name, cache=cache, json_only=json_only, trusted_as_template=trusted_as_template
            )
        key = (path, json_only, trusted_as_template)
        stamp = (found.st_mtime_ns, found.st_size, found.st_ino)
        held = self._parsed.get(key)
        if held is None or held[0] != stamp:
            parsed = self._wrapped.load_from_file(
                path,
                cache="none",
                unsafe=True,
                json_only=json_only,
                trusted_as_template=trusted_as_template,
            )
            held = self._parsed[key] = (stamp, parsed, self._immutables(parsed))
        # deepcopy's memo, seeded with the immutable values, returns those as they are.
        return copy.deepcopy(held[1], dict(held[2]))

    @staticmethod
    def _immutables(data: t.Any) -> dict[int, t.Any]:
        found: dict[int, t.Any] = {}
        seen: set[int] = set()  # YAML aliases share a container, or nest one in itself
        pending = [data]
        while pending:
            item = pending.pop()
            if isinstance(item, (str, bytes, int, float)):
                found[id(item)] = item
                continue
            if id(item) in seen:
                continue
            seen.add(id(item))
            if isinstance(item, Mapping):
                pending.extend(item.keys())
                pending.extend(item.values())
            elif isinstance(item, (list, tuple, set, frozenset)):
                pending.extend(item)
        return found

    def __getattr__(self, name: str) -> t.Any:
        if name.startswith("__") or name == "_wrapped":
            raise AttributeError(name)
        return getattr(self._wrapped, name)


def _helpers_allowed() -> int:
    """How many helper processes may share a task's controller-only work with the main process:
    KUBEGPU_MAIN_HELPERS if set (0 turns them off), else one for each CPU this process may run
    on beyond the one it runs on."""
    setting = os.environ.get("KUBEGPU_MAIN_HELPERS", "").strip()
    if not setting:
        return len(os.sched_getaffinity(0)) - 1
    if not setting.isdigit():
        raise AnsibleError(
            f"KUBEGPU_MAIN_HELPERS is {setting!r}: allowed are 0 (no helper processes) or a"
            " positive whole number (at most that many), or unset (one per further CPU)"
        )
    return int(setting)


# The least work, in ms of the main process's CPU, that a helper's share must come to for the
# helper to be forked (KUBEGPU_HELPER_MIN_MS). A helper costs the controller more CPU than its
# fork: it and the main process each copy the pages they then write (copy-on-write), and it
# unmaps them all when it exits; on the testbed's 2-CPU machine that came to about 15 ms a
# helper, and the main process's next host ran 4-6 ms slower after each fork.
HELPER_MIN_MS = 20.0


def _helper_min_ms() -> float:
    """KUBEGPU_HELPER_MIN_MS if set, else HELPER_MIN_MS."""
    setting = os.environ.get("KUBEGPU_HELPER_MIN_MS", "").strip()
    if not setting:
        return HELPER_MIN_MS
    try:
        value = float(setting)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise AnsibleError(
            f"KUBEGPU_HELPER_MIN_MS is {setting!r}: allowed are a number of milliseconds, 0 or"
            f" more (0 shares every task a helper can take), or unset ({HELPER_MIN_MS:g})"
        )
    return value


class _Helper(WorkerProcess):
    """A worker that runs a share of a task's controller-only work, several hosts one after
    another, as the main process would (StrategyModule._run_and_send, which sends each result
    to the results queue as a worker does, or _skip_in_main, whose answers it sends back
    through a pipe for the main process to act on). ansible-core's strategy watches it as one
    of its workers: one that dies raises "A worker was found in a dead state"."""

    def __init__(
        self,
        jobs: list[tuple[t.Any, ...]],
        run: t.Callable[..., t.Any],
        answers: t.Any = None,
        **kwargs: t.Any,
    ) -> None:
        super().__init__(**kwargs)
        self._jobs = jobs
        self._run_job = run
        self._answers = answers

    def _run(self) -> None:
        answers = [self._run_job(*job) for job in self._jobs]
        if self._answers is not None:
            self._answers.send(answers)


class _Announced(collections.deque):  # type: ignore[type-arg]
    """The results the results thread has taken in, which wakes the strategy's wait on their
    lock (a Condition) as each comes in. The thread appends with the lock held."""

    def __init__(self, lock: t.Any) -> None:
        super().__init__()
        self._lock = lock

    def append(self, item: t.Any) -> None:
        super().append(item)
        self._lock.notify_all()


class _WouldRun(BaseException):
    """The condition holds: the probe stops before the task does anything."""


class StrategyModule(LinearStrategyModule):
    def __init__(self, tqm: t.Any) -> None:
        super().__init__(tqm)
        # Nothing has come in yet: the results thread starts with the first task.
        self._results = _Announced(self._results_lock)
        manager = self._variable_manager
        if _DecodedFacts.applies_to(getattr(manager, "_fact_cache", None)):
            manager._fact_cache = _DecodedFacts(manager._fact_cache)
        self._vars_files_loader = _ParsedVarsFiles(self._loader)
        # The task being queued, (host, task, vars, play context) for each host, that runs in
        # the main process, or whose condition it evaluates, when the strategy waits for the
        # task's results; with helper processes when there are CPUs for them (_share).
        self._runs: list[tuple[t.Any, ...]] = []
        self._probes: list[tuple[t.Any, ...]] = []
        self._helpers = _helpers_allowed()
        self._helper_min_ms = _helper_min_ms()
        # A task's renders share one lazy wrap of its variables (plugin_utils/lazy_vars.py).
        lazy_vars.install()

    def run(self, iterator: t.Any, play_context: t.Any) -> t.Any:
        children = self._preconnect(iterator, play_context) if preconnect.enabled() else []
        try:
            return super().run(iterator, play_context)
        finally:
            for pid in preconnect.reap(children):
                # Still connecting (or stuck) when the play is over: no use any more.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            preconnect.reap(children, wait=True)

    def _preconnect(self, iterator: t.Any, play_context: t.Any) -> list[int]:
        """Start the SSH masters of the first hosts (as many as forks) whose first task runs
        on the controller, in the background (plugin_utils/preconnect.py)."""
        children: list[int] = []
        play = iterator._play
        self._set_hosts_cache(play)  # as the linear strategy's run() does first
        for host in self.get_hosts_left(iterator)[: max(1, self._tqm._forks)]:
            _state, task = iterator.get_next_task_for_host(host, peek=True)
            if task is None or not self._runs_in_main(task):
                continue
            task_vars = self._variable_manager.get_vars(
                play=play,
                host=host,
                task=task,
                _hosts=self._hosts_cache,
                _hosts_all=self._hosts_cache_all,
            )
            self.add_tqm_variables(task_vars, play=play)
            if preconnect.connection_name(task_vars, task, self._loader) not in preconnect.SSH:
                continue
            pid = preconnect.start(
                host,
                task,
                task_vars,
                play_context,
                self._loader,
                self._variable_manager,
            )
            if pid:
                children.append(pid)
        return children

    def _queue_task(self, host: t.Any, task: t.Any, task_vars: t.Any, play_context: t.Any) -> None:
        # What ansible-core's _queue_task records for a worker, before anything runs: the
        # results thread looks the task up there for every result and every loop item's
        # callback, which the executor sends while it runs.
        self._queued_task_cache[(host.name, task._uuid)] = {
            "host": host,
            "task": task,
            "task_vars": task_vars,
            "play_context": play_context,
        }
        if self._runs_in_main(task):
            self._tqm.send_callback("v2_runner_on_start", host, task)
            self._runs.append((host, task, task_vars, play_context))
        elif self._may_skip_in_main(task):
            self._probes.append((host, task, task_vars, play_context))
        else:
            super()._queue_task(host, task, task_vars, play_context)
            return
        self._pending_results += 1

    def _wait_on_pending_results(self, iterator: t.Any) -> t.Any:
        runs, self._runs = self._runs, []
        probes, self._probes = self._probes, []
        if runs:
            # The first host's run, timed, tells what a helper's share would come to. The shares
            # are cut from all the hosts' runs, so the main process's (mine) starts with it.
            _, cost = self._timed(self._run_and_send, runs[0])
            _, mine = self._share(runs, self._run_and_send, piped=False, cost=cost)
            for job in mine[1:]:
                self._run_and_send(*job)
        if probes:
            self._evaluate(probes)
        # ansible-core's wait, except that it sleeps until a result comes in (or the poll
        # interval is over), not for the whole interval whenever one is still out.
        found: list[t.Any] = []
        while self._pending_results > 0 and not self._tqm._terminated:
            if self._tqm.has_dead_workers():
                raise AnsibleError("A worker was found in a dead state")
            found.extend(self._process_pending_results(iterator))
            with self._results_lock:
                if self._pending_results > 0 and not self._results:
                    self._results_lock.wait(C.DEFAULT_INTERNAL_POLL_INTERVAL)
        return found

    @staticmethod
    def _timed(run: t.Callable[..., t.Any], job: tuple[t.Any, ...]) -> tuple[t.Any, float]:
        """run(*job), and the seconds of CPU it took the calling thread."""
        started = time.thread_time()
        result = run(*job)
        return result, time.thread_time() - started

    def _evaluate(self, probes: list[tuple[t.Any, ...]]) -> None:
        """Skip the task where its condition is false; queue it to a worker where it holds,
        as soon as that is known for a host the main process evaluates."""
        first, cost = self._timed(self._skip_in_main, probes[0])
        self._act(probes[0], first)
        if first is None:
            # It runs on the first host, and likely on the others: no helper, whose work would
            # come back as workers to start.
            helpers, mine = [], probes[1:]
        else:
            helpers, mine = self._share(probes[1:], self._skip_in_main, piped=True, cost=cost)
        for job in mine:
            self._act(job, self._skip_in_main(*job))
        for helper, reader, share in helpers:
            for job, skipped in zip(share, self._answers_of(helper, reader)):
                self._act(job, skipped)

    def _act(self, job: tuple[t.Any, ...], skipped: executor.Outcome | None) -> None:
        if skipped is None:
            self._pending_results -= 1  # counted again as the worker's
            super()._queue_task(*job)
        else:
            self._tqm.send_callback("v2_runner_on_start", job[0], job[1])
            executor.send(self._final_q, job[0], job[1], skipped)

    def _share(
        self,
        jobs: list[tuple[t.Any, ...]],
        run: t.Callable[..., t.Any],
        piped: bool,
        cost: float,
    ) -> tuple[list[tuple[t.Any, t.Any, list[tuple[t.Any, ...]]]], list[tuple[t.Any, ...]]]:
        """Start helper processes, each forked like a worker, on the last hosts' jobs, as many
        as there are CPUs and free worker slots for, each with two jobs at least, and only
        when a helper's share, at cost (seconds of CPU, what one job of the task took the main
        process), comes to KUBEGPU_HELPER_MIN_MS at least (so that the fork is worth it); the
        first hosts' are the main process's, returned with the helpers (helper, the pipe it
        answers through or None, its jobs)."""
        if jobs and jobs[0][1].throttle:
            # A throttled task keeps to one process at a time, as before the helpers.
            return [], jobs
        free = [
            i for i, worker in enumerate(self._workers) if worker is None or not worker.is_alive()
        ]
        parts = min(self._helpers + 1, len(jobs) // 2, len(free) + 1)
        if parts < 2:
            return [], jobs
        kept = len(jobs) // parts
        if cost * 1000 * (len(jobs) - kept) / (parts - 1) < self._helper_min_ms:
            return [], jobs
        started = []
        for i, slot in enumerate(free[: parts - 1]):
            share = jobs[kept + i :: parts - 1]
            reader, writer = multiprocessing_context.Pipe(duplex=False) if piped else (None, None)
            if self._workers[slot] is not None:
                self._workers[slot].close()
            self._workers[slot] = helper = _Helper(
                share,
                run,
                writer,
                final_q=self._final_q,
                host=share[0][0],
                task=share[0][1],
                task_vars=share[0][2],
                play_context=share[0][3],
                loader=self._loader,
                variable_manager=self._variable_manager,
                shared_loader_obj=plugin_loader.get_plugin_loader_namespace(),
                worker_id=slot,
                cliargs=context.CLIARGS,
            )
            helper.start()
            if writer is not None:
                writer.close()
            started.append((helper, reader, share))
        return started, jobs[:kept]

    @staticmethod
    def _answers_of(helper: t.Any, reader: t.Any) -> list[t.Any]:
        try:
            while not reader.poll(0.002):
                if helper.exitcode is not None and not reader.poll():
                    raise EOFError
            return list(reader.recv())
        except EOFError:
            raise AnsibleError(
                f"kubegpu.accel.linear: the helper process {helper.pid} that evaluated a condition"
                f" ended without its answers (exit code {helper.exitcode})"
            ) from None
        finally:
            reader.close()

    def _run_and_send(
        self, host: t.Any, task: t.Any, task_vars: t.Any, play_context: t.Any
    ) -> None:
        executor.send(
            self._final_q, host, task, self._run_in_main(host, task, task_vars, play_context)
        )

    @staticmethod
    def _runs_in_main(task: t.Any) -> bool:
        """A controller-only action without delegation, async, retries, a timeout or a loop
        that pauses: nothing in it waits, so the main process is not held up."""
        return (
            task.action in _IN_MAIN
            and (task._resolved_action is None or task._resolved_action in _IN_MAIN)
            and not (task.delegate_to or task.until or task.async_val or task.timeout)
            and not (task.loop_control and task.loop_control.pause)
        )

    @staticmethod
    def _may_skip_in_main(task: t.Any) -> bool:
        """A task with a condition, which a false one skips whole (no loop, no delegation)."""
        return bool(task.when) and not (task.loop or task.loop_with or task.delegate_to)

    def _executor(
        self, host: t.Any, task: t.Any, task_vars: t.Any, play_context: t.Any
    ) -> contextlib.AbstractContextManager[t.Any]:
        """ansible-core's TaskExecutor of this task (a copy), on a copy of the variables."""
        loader = self._vars_files_loader if task.action in C._ACTION_INCLUDE_VARS else self._loader
        return executor.running(
            host,
            task,
            task_vars,
            play_context,
            loader,
            self._final_q,
            self._variable_manager,
        )

    def _run_in_main(
        self, host: t.Any, task: t.Any, task_vars: t.Any, play_context: t.Any
    ) -> executor.Outcome:
        # The whole task, as a worker would run it, on a copy of it and of its parent blocks:
        # the executor's post_validate writes templated values into the task and its parents,
        # which a worker does on its own forked copy. The play context is copied by the
        # executor itself before it changes it. The parents are copied without their task
        # lists (a task's copy otherwise copies every task of its block), which the executor
        # never reads: includes come back as results, and loops copy the task alone.
        own = task.copy(exclude_tasks=True)
        with self._executor(host, own, task_vars, play_context) as task_executor:
            return executor.run(task_executor, own)

    def _skip_in_main(
        self, host: t.Any, task: t.Any, task_vars: t.Any, play_context: t.Any
    ) -> executor.Outcome | None:
        # A shallow copy: it is squashed (its inherited attributes set on it) and the executor
        # sets its delegate_to; the task's parents and values stay shared and unchanged.
        probe = copy.copy(task)
        executor.stop_when_true(probe, _WouldRun)
        try:
            with self._executor(host, probe, task_vars, play_context) as task_executor:
                outcome = executor.run(task_executor, probe)
        except _WouldRun:
            return None
        if not executor.is_skip(outcome[0]):
            return None
        return outcome
