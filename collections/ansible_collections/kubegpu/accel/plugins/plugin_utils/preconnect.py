# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Open the hosts' SSH master connections in the background while a play's first tasks run on
the controller (kubegpu.accel.linear).

A play whose first tasks are controller-only (argument validation, include_vars, input checks)
keeps the controller busy for a while before the first task that connects; the SSH handshakes
of all hosts then happen at that task, with the controller waiting. With OpenSSH's
ControlPersist, a master connection outlives the command that opened it, and every later
command to that host goes through it. So at the start of the play, for each host whose next
task runs on the controller and whose connection is ansible's ssh plugin with ControlPersist in
its arguments, a forked child builds the connection exactly as a task would (ansible-core's
TaskExecutor, on a copy of that task: the same variables, play context, connection options and
control path) and runs `true` on the host through it, leaving the master behind. The first
task that connects then finds it, as a second run within ControlPersist does.

Nothing waits for the children. A child that cannot connect (an unknown host key, a password,
an unreachable host) ends silently: its options add BatchMode=yes, so nothing prompts, and the
real task then connects and fails or prompts exactly as without it. The children are reaped
when the play ends. KUBEGPU_PRECONNECT=0 turns it off."""

from __future__ import annotations

import os
import typing as t

from ansible import constants as C
from ansible._internal._templating._engine import TemplateEngine
from ansible.executor.task_executor import TaskExecutor
from ansible_collections.kubegpu.accel.plugins.plugin_utils import executor

SSH = frozenset(("ssh", "ansible.builtin.ssh", "ansible.legacy.ssh"))
_TURNED_OFF = ("0", "false", "no", "off")


class _ConnectOnly:
    """An action handler that only runs `true` on the host through the task's connection."""

    def __init__(self, connection: t.Any) -> None:
        self._connection = connection

    def run(self, task_vars: t.Any = None) -> dict[str, t.Any]:
        options = self._connection.get_option("ssh_args") or ""
        if "ControlPersist" not in options:
            # No master would outlive this command: nothing to win.
            return {"skipped": True}
        extra = self._connection.get_option("ssh_extra_args") or ""
        self._connection.set_option("ssh_extra_args", f"{extra} -o BatchMode=yes".strip())
        rc, _out, _err = self._connection.exec_command("true", sudoable=False)
        return {"rc": rc}

    def cleanup(self, force: bool = False) -> None:
        pass


class _Executor(TaskExecutor):
    """ansible-core's executor, up to the connection: the handler is _ConnectOnly."""

    def _get_action_handler_with_module_context(self, templar: t.Any) -> t.Any:
        return _ConnectOnly(self._connection), None


def enabled() -> bool:
    return os.environ.get("KUBEGPU_PRECONNECT", "1").strip().lower() not in _TURNED_OFF


def connection_name(task_vars: t.Mapping[str, t.Any], task: t.Any, loader: t.Any) -> str:
    """The connection a task on this host uses, as the executor works it out."""
    if task_vars.get("ansible_connection") is not None:
        return str(
            TemplateEngine(loader=loader, variables=task_vars).template(
                task_vars["ansible_connection"]
            )
        )
    return str(task.connection or C.DEFAULT_TRANSPORT)


def probe_task(task: t.Any) -> t.Any:
    """A copy of the host's next task that connects and does nothing else: the action of
    ansible.builtin.ping without arguments (an include would return before connecting), no
    condition, loop, delegation, retries, async, timeout or register; its keywords (become,
    remote_user, connection, vars, environment) stay."""
    probe = task.copy(exclude_tasks=True)
    probe.action = "ansible.builtin.ping"
    probe._resolved_action = "ansible.builtin.ping"
    probe.args = {}
    probe.when = []
    probe.loop = None
    probe.loop_with = None
    probe.delegate_to = None
    probe.until = []
    probe.retries = None
    probe.async_val = 0
    probe.timeout = 0
    probe.register = None
    return probe


def start(
    host: t.Any,
    task: t.Any,
    task_vars: dict[str, t.Any],
    play_context: t.Any,
    loader: t.Any,
    variable_manager: t.Any,
) -> int | None:
    """Fork a child that opens the host's master connection; its pid, or None in the child's
    stead when forking failed."""
    probe = probe_task(task)
    try:
        pid = os.fork()
    except OSError:
        return None
    if pid:
        return pid
    # The child: no output, no input; whatever happens, it ends here.
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        with executor.running(
            host, probe, task_vars, play_context, loader, None, variable_manager, _Executor
        ) as task_executor:
            executor.execute(task_executor)
    finally:
        os._exit(0)


def reap(pids: list[int], wait: bool = False) -> list[int]:
    """The children still running (all are waited for when `wait`)."""
    left = []
    for pid in pids:
        try:
            done, _status = os.waitpid(pid, 0 if wait else os.WNOHANG)
        except ChildProcessError:
            continue
        if not done:
            left.append(pid)
    return left
