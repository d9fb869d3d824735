# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.nvidia_gpu_facts: the module's facts, without Python on
the node when the connection pipelines.

One sh script reads what the module would read on the node: PATH, whether each nvidia-smi
candidate exists and is executable, /proc/driver/nvidia/version under host_root, and the
output of the one `nvidia-smi -q -x` the module would run. The controller then runs the
module's own code (module_utils/nvidia_smi.py) over those answers; anything else that code asks
to run (`nvidia-smi -L` on a MIG host) runs on the node then. Where the connection does not
pipeline, or an option needs the node to read it (a path with ~ or $), the module runs."""

from __future__ import annotations

import errno
import os
import typing as t
import uuid

from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_smi
from ansible_collections.kubegpu.gpu.plugins.plugin_utils.piped import (
    B64_HELPERS,
    PipedAction,
    Unanswered,
    b64_text,
    run_script,
)

# $1 host_root, $2 the given nvidia-smi or "", $3 a boundary line, then the default search
# folders. Lines: "path B64", "root 0|1", "proc B64" or "proc-missing", per candidate
# "cand EXISTS EXECUTABLE B64", and "ran B64" before the command's own stdout, which ends with
# "\n$3 rc N". Candidates are the given path, else each non-empty PATH folder and then the
# default folders joined with nvidia-smi as os.path.join would. The one run is the given path
# when it is an executable file, else the first executable candidate; a given path that exists
# but cannot be executed is reported as "noexec B64".
_SCRIPT = (
    B64_HELPERS
    + r"""
root=$1 given=$2 boundary=$3
shift 3
printf 'path %s\n' "$(b64 "$PATH")"
if [ -d "$root" ]; then echo 'root 1'; else echo 'root 0'; fi
version=${root%/}/proc/driver/nvidia/version
if [ -f "$version" ] && [ -r "$version" ]; then
  printf 'proc %s\n' "$(base64 -w0 < "$version")"
else
  echo proc-missing
fi
run=
probe() {
  e=0 x=0
  [ -e "$1" ] && e=1
  [ -f "$1" ] && [ -x "$1" ] && x=1
  printf 'cand %s %s %s\n' "$e" "$x" "$(b64 "$1")"
}
if [ -n "$given" ]; then
  probe "$given"
  if [ "$x" = 1 ]; then run=$given; elif [ "$e" = 1 ]; then printf 'noexec %s\n' "$(b64 "$given")"; fi
else
  folders=$PATH
  while :; do
    case $folders in
      *:*) folder=${folders%%:*} folders=${folders#*:} ;;
      *) folder=$folders folders= ;;
    esac
    if [ -n "$folder" ]; then
      case $folder in */) candidate=${folder}nvidia-smi ;; *) candidate=$folder/nvidia-smi ;; esac
      probe "$candidate"
      if [ -z "$run" ] && [ "$x" = 1 ]; then run=$candidate; fi
    fi
    [ -n "$folders" ] || break
  done
  for folder in "$@"; do
    probe "$folder/nvidia-smi"
    if [ -z "$run" ] && [ "$x" = 1 ]; then run=$folder/nvidia-smi; fi
  done
fi
[ -n "$run" ] || exit 0
printf 'ran %s\n' "$(b64 "$run")"
LC_ALL=C LANG=C "$run" -q -x
printf '\n%s rc %s\n' "$boundary" "$?"
"""
)

_ARGUMENT_SPEC: dict[str, t.Any] = {
    "nvidia_smi": {"type": "str"},
    "host_root": {"type": "str", "default": "/"},
}


class _Answers:
    """What the script read, answering the module's code the way the node would have."""

    def __init__(self, stdout: str, stderr: str, boundary: str) -> None:
        self.candidates: dict[str, tuple[bool, bool]] = {}
        self.proc_version: str | None = None
        self.root_is_dir = False
        self.path_env = ""
        self.noexec: str | None = None
        self.ran: tuple[str, int, str, str] | None = None
        head, sep, output = stdout.partition("\nran ")
        for line in head.splitlines():
            key, _, value = line.partition(" ")
            if key == "path":
                self.path_env = b64_text(value)
            elif key == "root":
                self.root_is_dir = value == "1"
            elif key == "proc":
                self.proc_version = b64_text(value)
            elif key == "cand":
                exists, executable, path = value.split(" ", 2)
                self.candidates[b64_text(path)] = (exists == "1", executable == "1")
            elif key == "noexec":
                self.noexec = b64_text(value)
            elif key and key != "proc-missing":
                raise ValueError(f"unexpected line {line!r}")
        if sep:
            path, _, output = output.partition("\n")
            tail = f"\n{boundary} rc "
            at = output.rindex(tail)
            rc = int(output[at + len(tail) :].strip())
            self.ran = (b64_text(path), rc, output[:at], stderr)

    def exists(self, path: str) -> bool:
        return self._candidate(path)[0]

    def is_executable(self, path: str) -> bool:
        return self._candidate(path)[1]

    def _candidate(self, path: str) -> tuple[bool, bool]:
        try:
            return self.candidates[path]
        except KeyError:
            raise Unanswered(path) from None


class ActionModule(PipedAction):
    ARGUMENT_SPEC = _ARGUMENT_SPEC

    def node_paths(self, args: dict[str, t.Any]) -> list[str]:
        return [args["nvidia_smi"] or "", args["host_root"] or "/"]

    def answer(
        self, args: dict[str, t.Any], task_vars: dict[str, t.Any] | None
    ) -> dict[str, t.Any]:
        given, root = self.node_paths(args)
        boundary = f"kubegpu-{uuid.uuid4().hex}"
        done = self.read(_SCRIPT, [root, given, boundary, *nvidia_smi.DEFAULT_SEARCH_DIRS])
        return self._facts(_Answers(done["stdout"], done["stderr"], boundary), given, root)

    def _runner(self, answers: _Answers) -> t.Callable[[list[str]], tuple[int, str, str]]:
        def run(argv: list[str]) -> tuple[int, str, str]:
            if answers.ran is not None and argv == [answers.ran[0], "-q", "-x"]:
                return answers.ran[1:]
            if answers.noexec is not None and argv[0] == answers.noexec:
                # What the module's runner reports when the file cannot be executed (its
                # run_command gives the OS the path as bytes).
                denied = PermissionError(
                    errno.EACCES, os.strerror(errno.EACCES), os.fsencode(argv[0])
                )
                return 126, "", f"{argv[0]}: {denied}"
            done = run_script(self, 'export LC_ALL=C LANG=C; exec "$@"', argv)
            return done["rc"], done["stdout"], done["stderr"]

        return run

    def _facts(self, answers: _Answers, given: str, root: str) -> dict[str, t.Any]:
        if not answers.root_is_dir:
            return {
                "failed": True,
                "msg": (
                    f"host_root {root!r} is not a directory; give where the host's / is "
                    "mounted (default /)"
                ),
            }
        outcome, path, error = nvidia_smi.run_query(
            self._runner(answers),
            given or None,
            answers.path_env,
            exists=answers.exists,
            is_executable=answers.is_executable,
        )
        if error:
            return {"failed": True, "msg": error}
        facts = nvidia_smi.gpu_facts(outcome, path, answers.proc_version)
        warnings = nvidia_smi.fact_warnings(facts)
        done: dict[str, t.Any] = {"changed": False, "ansible_facts": {"kubegpu_gpus": facts}}
        if warnings:
            done["warnings"] = warnings
        return done
