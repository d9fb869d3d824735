# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""A sh script run on the node through the task's connection, without a module: no Python, no
AnsiballZ payload and no temporary files there (kubegpu.gpu.read_script and the fact actions
that read the node this way)."""

from __future__ import annotations

import base64
import typing as t

from ansible import constants as C
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.kubegpu.gpu.plugins.plugin_utils import checks as kchecks

display = Display()

# The command the node runs: sh reads the whole script from stdin first (the command
# substitution is expanded before the redirection applies), then evaluates it with stdin on
# /dev/null, so that a command in the script that reads stdin cannot eat the rest of the script.
RUNNER = 'eval "$(cat)" </dev/null'


# What the fact actions' scripts start with: they print paths and file contents through
# base64 (a node without it fails the script, and the module answers instead).
B64_HELPERS = """command -v base64 >/dev/null || exit 3
b64() { printf '%s' "$1" | base64 -w0; }
"""


# `bin_path NAME DIR...` prints what ansible's get_bin_path(NAME, opt_dirs=[DIR...]) returns
# on the node (a module's lookup of a command), and fails where that raises: the DIRs that
# exist, then each PATH folder, then /sbin, /usr/sbin and /usr/local/sbin where they exist and
# are not among those; the first NAME there that exists, is not a directory and has an execute
# bit (any of the three, as ansible's is_executable asks; stat only where test -x says no).
BIN_PATH = r"""_kg_xbit() {
  _kg_m=$(stat -L -c %a -- "$1" 2>/dev/null) || return 1
  _kg_m=00$_kg_m
  _kg_m=${_kg_m#"${_kg_m%???}"}
  case $_kg_m in *[1357]*) return 0 ;; esac
  return 1
}
_kg_try() {
  case $1 in */) _kg_p=$1$_kg_name ;; *) _kg_p=$1/$_kg_name ;; esac
  [ -e "$_kg_p" ] && ! [ -d "$_kg_p" ] && { [ -x "$_kg_p" ] || _kg_xbit "$_kg_p"; } &&
    printf '%s\n' "$_kg_p"
}
bin_path() {
  _kg_name=$1
  shift
  _kg_seen=:
  for _kg_d in "$@"; do
    [ -e "$_kg_d" ] || continue
    _kg_seen=$_kg_seen$_kg_d:
    [ -z "$_kg_d" ] || ! _kg_try "$_kg_d" || return 0
  done
  _kg_rest=${PATH-}:
  while [ -n "$_kg_rest" ]; do
    _kg_d=${_kg_rest%%:*} _kg_rest=${_kg_rest#*:}
    _kg_seen=$_kg_seen$_kg_d:
    [ -z "$_kg_d" ] || ! _kg_try "$_kg_d" || return 0
  done
  for _kg_d in /sbin /usr/sbin /usr/local/sbin; do
    case $_kg_seen in *:"$_kg_d":*) continue ;; esac
    [ -e "$_kg_d" ] && _kg_try "$_kg_d" && return 0
  done
  return 1
}
"""


def node_argument_spec(
    spec: t.Mapping[str, dict[str, t.Any]],
) -> tuple[dict[str, dict[str, t.Any]], list[str]]:
    """A module's argument spec for its action to validate with, and the names of its path
    options. Each path option is a plain string here: validation on the controller would
    expand its ~ and $ there, and such a path must go to the module, which expands them on the
    node (answer_or_run_module sends it there)."""
    paths = [name for name, option in spec.items() if option.get("type") == "path"]
    plain = {name: dict(spec[name], type="str") if name in paths else spec[name] for name in spec}
    return plain, paths


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


class Unanswered(LookupError):
    """The module's code asked the node something the script did not read: the action runs
    the module instead."""


def answered(table: t.Mapping[str, t.Any], key: str) -> t.Any:
    """What the script read for key (a path, mostly), as parsed into table; Unanswered where it
    did not read it, so that the module runs."""
    try:
        return table[key]
    except KeyError:
        raise Unanswered(key) from None


def b64_text(encoded: str) -> str:
    """What the script printed through `base64 -w0`, as text (undecodable bytes kept as
    surrogates, as a module reads them)."""
    return base64.b64decode(encoded).decode("utf-8", "surrogateescape")


def answer_or_run_module(
    action: t.Any,
    task_vars: dict[str, t.Any] | None,
    node_paths: t.Iterable[str],
    answer: t.Callable[[], dict[str, t.Any]],
) -> dict[str, t.Any]:
    """answer() (which reads the node with run_script() and runs the module's code here) where
    the connection pipelines; the module itself otherwise, for a path the node must expand (~
    or $), and when answer() raises ValueError (the read failed, or printed what it should
    not) or Unanswered."""
    if not can_pipe(action) or any(c in path for path in node_paths for c in "~$"):
        return action._execute_module(task_vars=task_vars)
    try:
        return answer()
    except (ValueError, Unanswered) as exc:
        display.vvv(
            f"{action._task.action}: the piped read did not do ({exc!r}); running the module"
        )
        return action._execute_module(task_vars=task_vars)


def node_python(action: t.Any, task_vars: dict[str, t.Any] | None) -> str:
    """The node's Python, as the word ansible's module command runs it with: the
    interpreter_python setting (ansible_python_interpreter, or the configuration) where it names
    one, else the interpreter that discovery found (the discovered_interpreter_python fact).
    Unanswered where neither is known yet (discovery has not run for the host): the module
    runs, and discovers it."""
    use_vars = task_vars or {}
    if action._task.delegate_to:
        use_vars = use_vars.get("ansible_delegated_vars", {}).get(action._task.delegate_to, {})
    if getattr(action._connection, "_remote_is_local", False):
        return str(use_vars["ansible_playbook_python"])
    setting = C.config.get_config_value("INTERPRETER_PYTHON", variables=use_vars)
    setting = str(action._templar.template(setting) if setting else "").strip()
    if setting and setting not in ("auto", "auto_legacy", "auto_silent", "auto_legacy_silent"):
        return setting
    found = (use_vars.get("ansible_facts") or {}).get("discovered_interpreter_python")
    if not found:
        raise Unanswered("the node's Python: interpreter discovery has not run")
    return str(found).strip()


class PipedAction(ActionBase):
    """The base of the actions that answer a run with nothing to change from one sh script on
    the node and the module's own code here (containerd_runtime, kubelet_config,
    nvidia_gpu_facts, nvidia_pci_facts): validate the arguments, then answer() where the
    connection pipelines, else run the module (answer_or_run_module). A subclass gives its
    argument spec, the path options the node must expand (node_paths) and answer()."""

    _supports_check_mode = True
    _supports_async = False
    ARGUMENT_SPEC: t.ClassVar[dict[str, dict[str, t.Any]]] = {}
    REQUIRED_BY: t.ClassVar[dict[str, tuple[str, ...]] | None] = None

    # Whether the action takes a `checks` option (plugin_utils/checks.py): evaluated after the
    # read, against its result. A subclass that sets it also mixes in checks.RawChecks.
    TAKES_CHECKS: t.ClassVar[bool] = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        checks = kchecks.pop_checks(self) if self.TAKES_CHECKS else None
        args = self.arguments()
        if args is None:
            result.update(self._execute_module(task_vars=task_vars))
        else:
            result.update(
                answer_or_run_module(
                    self, task_vars, self.node_paths(args), lambda: self.answer(args, task_vars)
                )
            )
        kchecks.after_read(self, result, checks)
        return result

    def arguments(self) -> dict[str, t.Any] | None:
        """The validated arguments; None sends them to the module, to say in its own words
        what is wrong with them."""
        _, args = self.validate_argument_spec(
            argument_spec=self.ARGUMENT_SPEC, required_by=self.REQUIRED_BY
        )
        return dict(args)

    def node_paths(self, args: dict[str, t.Any]) -> list[str]:
        raise NotImplementedError

    def answer(
        self, args: dict[str, t.Any], task_vars: dict[str, t.Any] | None
    ) -> dict[str, t.Any]:
        raise NotImplementedError

    def read(self, script: str, argv: t.Sequence[str], environment: str = "") -> dict[str, t.Any]:
        """run_script(), where a non-zero exit is ValueError (the module answers instead)."""
        done = run_script(self, script, argv, environment)
        if done["rc"] != 0:
            raise ValueError(f"rc {done['rc']}: {done['stderr']}")
        return done


# The message of a non-zero rc, in both ways of running: ansible.builtin.command's up to
# ansible-core 2.19. ansible-core 2.21's command words it as the second text below, which the run
# through the module turns back into this one, so that a result reads the same on every release.
NONZERO_MSG = "non-zero return code"
_COMMAND_NONZERO_MSGS = (NONZERO_MSG, "The command exited with a non-zero return code.")


def read_command(
    action: t.Any, script: str, argv: t.Sequence[str], task_vars: dict[str, t.Any] | None
) -> dict[str, t.Any]:
    """What ansible.builtin.command returns for `sh -c SCRIPT sh ARGV...` (rc, stdout, stderr
    and their lines; failed and msg on a non-zero rc): through the connection where it
    pipelines, else through ansible.builtin.command, in check mode too (a read changes nothing)."""
    if can_pipe(action):
        return _read_piped(action, script, argv)
    return _read_with_command(action, script, argv, task_vars)


def _read_piped(action: t.Any, script: str, argv: t.Sequence[str]) -> dict[str, t.Any]:
    done = run_script(action, script, argv, action._compute_environment_string())
    # As ansible.builtin.command: trailing line ends stripped, the lines split.
    stdout = done["stdout"].rstrip("\r\n")
    stderr = done["stderr"].rstrip("\r\n")
    outcome: dict[str, t.Any] = {
        "rc": done["rc"],
        "stdout": stdout,
        "stderr": stderr,
        "stdout_lines": stdout.splitlines(),
        "stderr_lines": stderr.splitlines(),
    }
    if done["rc"] != 0:
        outcome["failed"] = True
        outcome["msg"] = NONZERO_MSG
    return outcome


def _read_with_command(
    action: t.Any, script: str, argv: t.Sequence[str], task_vars: dict[str, t.Any] | None
) -> dict[str, t.Any]:
    # ansible.builtin.command skips itself in check mode; a read runs in both modes.
    check_mode = action._task.check_mode
    action._task.check_mode = False
    try:
        done = action._execute_module(
            module_name="ansible.builtin.command",
            # Passed as written, as the piped run passes them ($HOME stays $HOME).
            module_args={
                "argv": ["sh", "-c", script, "sh", *argv],
                "expand_argument_vars": False,
            },
            task_vars=task_vars,
        )
    finally:
        action._task.check_mode = check_mode
    # The same keys as the piped run: command's timing, command line and (on a non-zero
    # rc) its traceback placeholder are left out.
    for noise in ("changed", "cmd", "start", "end", "delta", "invocation", "exception"):
        done.pop(noise, None)
    if not done.get("msg"):
        done.pop("msg", None)
    elif done.get("rc") and done["msg"] in _COMMAND_NONZERO_MSGS:
        done["msg"] = NONZERO_MSG
    return done
