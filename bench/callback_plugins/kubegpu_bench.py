# kubegpu bench callback: records, per task, when it started, the CPU the main ansible process
# spent on it, and what each host did, and the play recap, then writes them as JSON to
# $KUBEGPU_BENCH_OUT when the playbook ends. Used only by
# bench/bench_node_plays.py (enabled through the environment), never by the product.
from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: kubegpu_bench
    type: aggregate
    short_description: per-task timing and per-host results for kubegpu's benchmarks
    description:
      - Writes task start times, the main process's CPU time from each task's start to the
        next one's (where the strategy templates, evaluates conditions and handles results; the
        forked workers are not in it), per-host statuses (ok, changed, skipped, failed,
        unreachable) and the play recap as JSON to the file named by KUBEGPU_BENCH_OUT.
    requirements:
      - enabled through ANSIBLE_CALLBACKS_ENABLED
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "kubegpu_bench"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._tasks: list[dict] = []
        self._by_uuid: dict[str, dict] = {}
        self._started = time.monotonic()

    def _close(self, now: float) -> None:
        """End the task before: its wall end and the main process's CPU time since its start."""
        if self._tasks and self._tasks[-1].get("end") is None:
            self._tasks[-1]["end"] = now
            self._tasks[-1]["main_cpu"] = time.process_time() - self._tasks[-1]["main_cpu"]

    def _start(self, task, handler: bool) -> None:
        now = time.monotonic()
        self._close(now)
        entry = {
            "name": task.get_name(),
            "action": task.action,
            "handler": handler,
            "start": now,
            "end": None,
            "main_cpu": time.process_time(),
            "hosts": {},
            "items": 0,
        }
        self._tasks.append(entry)
        self._by_uuid[task._uuid] = entry

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start(task, False)

    def v2_playbook_on_handler_task_start(self, task):
        self._start(task, True)

    def _record(self, result, status: str) -> None:
        entry = self._by_uuid.get(result._task._uuid)
        if entry is None:
            return
        if status == "ok" and result._result.get("changed", False):
            status = "changed"
        entry["hosts"][result._host.get_name()] = status

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def _item(self, result):
        entry = self._by_uuid.get(result._task._uuid)
        if entry is not None:
            entry["items"] += 1

    def v2_runner_item_on_ok(self, result):
        self._item(result)

    def v2_runner_item_on_failed(self, result):
        self._item(result)

    def v2_playbook_on_stats(self, stats):
        now = time.monotonic()
        self._close(now)
        recap = {host: stats.summarize(host) for host in sorted(stats.processed)}
        path = os.environ.get("KUBEGPU_BENCH_OUT")
        if not path:
            return
        data = {
            "seconds": now - self._started,
            "tasks": [
                dict(t, start=t["start"] - self._started, end=t["end"] - self._started)
                for t in self._tasks
            ],
            "recap": recap,
        }
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
