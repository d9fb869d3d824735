# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""A sh script run on the node through the task's connection, without a module: no Python, no
AnsiballZ payload and no temporary files there (kubegpu.gpu.read_script)."""

from __future__ import annotations

import typing as t

# The command the node runs: sh reads the whole script from stdin first (the command
# substitution is expanded before the redirection applies), then evaluates it with stdin on
# /dev/null, so that a command in the script that reads stdin cannot eat the rest of the script.
RUNNER = 'eval "$(cat)" </dev/null'


def can_pipe(action: t.Any) -> bool:
    """Whether the script can go through the connection as a command's stdin, as a pipelined
    module does: pipelining on, and a connection and become method that support it. Where
    pipelining is off (sudo's requiretty, for one), so is this."""
    return bool(action._connection.is_pipelining_enabled())


def run_script(
    action: t.Any, script: str, argv: t.Sequence[str] = (), environment: str = ""
) -> dict[str, t.Any]:
    """Run `sh -c SCRIPT sh ARGV...` on the node, with become as the task asks; rc, stdout and
    stderr as text, as the node printed them. environment is a shell prefix such as
    `action._compute_environment_string()` gives."""
    shell = action._connection._shell
    words = [environment, "sh -c", shell.quote(RUNNER), "sh"]
    words.extend(shell.quote(arg) for arg in argv)
    done = action._low_level_execute_command(
        " ".join(word for word in words if word),
        sudoable=True,
        in_data=script.encode("utf-8", "surrogateescape"),
    )
    return {"rc": done["rc"], "stdout": done["stdout"], "stderr": done["stderr"]}

