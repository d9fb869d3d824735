# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.containerd_runtime: a run with nothing to change answers
without Python on the node when the connection pipelines.

One sh script reads what the module's plan reads first: the containerd binary (as
get_bin_path finds it) and its `--version`, whether the main config, the drop-in, its folder,
the runtime binary and the conf.d and config.d folders beside the main config exist and what
they are, the texts of the main config and the drop-in, and the names in those folders. The
module's own plan (module_utils/containerd.py) then runs on the controller over those answers;
its one other question, `containerd config dump` of the main config without the drop-in, is a
second sh script that writes that scratch config to a temporary folder on the node, dumps it
and removes it. When the plan finds nothing to change, that is the result. Anything else runs
the module itself: a change to write (and validate), state=absent, a parameter or
configuration the module refuses, and anything the scripts did not read (an import from
another folder, a glob in a folder name, an unreadable file, a path the node must expand)."""

from __future__ import annotations

import base64
import os
import typing as t

from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd as c
from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd_params as cp
from ansible_collections.kubegpu.gpu.plugins.module_utils.containerd_hosts import HOSTS_MARK
from ansible_collections.kubegpu.gpu.plugins.module_utils.files import RESTART_PENDING_NOTE
from ansible_collections.kubegpu.gpu.plugins.plugin_utils.piped import (
    B64_HELPERS,
    PipedAction,
    BIN_PATH,
    Unanswered,
    answered,
    b64_text,
    node_argument_spec,
    run_script,
)

# $1 the given containerd or "", then the paths: main, drop-in, drop-in folder, runtime binary,
# conf.d and config.d beside the main config, the restart marker (or ""), then the search
# folders for containerd. Lines:
# "bin B64PATH" (or "nobin", and nothing more), "version RC B64STDOUT", per path "type I f|d|o|n"
# (I its position, 0-6: regular file, directory, other, absent; symlinks followed), "text I B64"
# or "unreadable I" for the main config and the drop-in when they are files, and for each of the
# three folders that is a directory "ls I B64NAME..." (dotfiles too) or "nols I".
_READ = (
    B64_HELPERS
    + BIN_PATH
    + r"""
given=$1
main=$2 drop_in=$3 drop_in_dir=$4 runtime=$5 conf_d=$6 config_d=$7 marker=$8 certs_d=$9
shift 9
if [ -n "$given" ]; then
  [ -e "$given" ] && bin=$given || bin=
else
  bin=$(bin_path containerd "$@") || bin=
fi
[ -n "$bin" ] || { echo nobin; exit 0; }
printf 'bin %s\n' "$(b64 "$bin")"
out=$(LC_ALL=C LANG=C "$bin" --version 2>/dev/null)
printf 'version %s %s\n' "$?" "$(b64 "$out")"
i=0
for p in "$main" "$drop_in" "$drop_in_dir" "$runtime" "$conf_d" "$config_d" "$marker"; do
  if [ -f "$p" ]; then kind=f
  elif [ -d "$p" ]; then kind=d
  elif [ -e "$p" ]; then kind=o
  else kind=n
  fi
  printf 'type %s %s\n' "$i" "$kind"
  case $i:$kind in
    [01]:f)
      if text=$(base64 -w0 < "$p" 2>/dev/null); then printf 'text %s %s\n' "$i" "$text"
      else printf 'unreadable %s\n' "$i"; fi ;;
    [245]:d)
      if [ -r "$p" ] && [ -x "$p" ]; then
        line="ls $i"
        for f in "$p"/* "$p"/.[!.]* "$p"/..?*; do
          [ -e "$f" ] || [ -L "$f" ] || continue
          line="$line $(b64 "${f##*/}")"
        done
        printf '%s\n' "$line"
      else
        printf 'nols %s\n' "$i"
      fi ;;
  esac
  i=$((i + 1))
done
for f in "$certs_d"/*/hosts.toml; do
  [ -f "$f" ] && grep -qF "$HOSTS_MARK" "$f" && printf 'ours %s\n' "$(b64 "$f")"
done
exit 0
"""
)

# $1 containerd, with the scratch config's text (base64) in $text set before this: writes it
# to a new temporary folder, prints "dump RC B64FOLDER B64STDOUT B64STDERR" of `containerd
# --config FOLDER/config.toml config dump`, and removes the folder.
_DUMP = r"""
d=$(mktemp -d "${TMPDIR:-/tmp}/kubegpu-containerd-XXXXXXXX") || exit 5
status=6
if printf '%s' "$text" | base64 -d > "$d/config.toml"; then
  LC_ALL=C LANG=C "$1" --config "$d/config.toml" config dump > "$d/out" 2> "$d/err"
  rc=$?
  printf 'dump %s %s %s %s\n' "$rc" "$(b64 "$d")" "$(base64 -w0 < "$d/out")" \
    "$(base64 -w0 < "$d/err")" && status=0
fi
rm -rf "$d"
exit $status
"""

_ARGUMENT_SPEC, _PATH_OPTIONS = node_argument_spec(cp.ARGUMENT_SPEC)


class _Node:
    """A reader for module_utils/containerd.py's plan() that answers from the first script's
    reads and runs the scratch dump as the second."""

    def __init__(self, action: ActionModule, stdout: str, paths: list[str]) -> None:
        self._action = action
        self.binary: str | None = None
        self._version: tuple[int, str] | None = None
        self._types: dict[str, str] = {}
        self._texts: dict[str, bytes | None] = {}
        self._listings: dict[str, list[str] | None] = {}
        self.hosts_files: list[str] = []  # kubegpu's registry hosts.toml files
        for line in stdout.splitlines():
            key, *fields = line.split(" ")
            if key == "nobin":
                return
            if key == "bin":
                self.binary = b64_text(fields[0])
            elif key == "version":
                self._version = (int(fields[0]), b64_text(fields[1]))
            elif key == "type":
                self._types[paths[int(fields[0])]] = fields[1]
            elif key == "text":
                self._texts[paths[int(fields[0])]] = base64.b64decode(fields[1])
            elif key == "unreadable":
                self._texts[paths[int(fields[0])]] = None
            elif key == "ls":
                self._listings[paths[int(fields[0])]] = [b64_text(name) for name in fields[1:]]
            elif key == "nols":
                self._listings[paths[int(fields[0])]] = None
            elif key == "ours":
                self.hosts_files.append(b64_text(fields[0]))
            else:
                raise ValueError(f"unexpected line {line!r}")

    @staticmethod
    def _answer(table: dict[str, t.Any], path: str) -> t.Any:
        answer = answered(table, path)
        if answer is None:  # unreadable there: the module says so in its own words
            raise Unanswered(path)
        return answer

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        if argv != [self.binary, "--version"] or self._version is None:
            raise Unanswered(" ".join(argv))
        rc, out = self._version
        if rc != 0:  # the module's message has containerd's stderr, which was not read
            raise Unanswered(f"{self.binary} --version exited {rc}")
        return rc, out, ""

    def exists(self, path: str) -> bool:
        return self._answer(self._types, path) != "n"

    def isdir(self, path: str) -> bool:
        return self._answer(self._types, path) == "d"

    def isfile(self, path: str) -> bool:
        return self._answer(self._types, path) == "f"

    def listdir(self, path: str) -> list[str]:
        return list(self._answer(self._listings, path))

    def glob(self, pattern: str) -> list[str]:
        raise Unanswered(pattern)

    def read_text(self, path: str, what: str) -> str:
        try:
            return self._answer(self._texts, path).decode("utf-8")
        except UnicodeDecodeError:
            raise Unanswered(path) from None

    def dump_scratch(self, run: t.Any, containerd: str, text: str, main_path: str) -> t.Any:
        encoded = base64.b64encode(text.encode("utf-8")).decode("ascii")
        script = B64_HELPERS + f"text='{encoded}'\n" + _DUMP
        done = run_script(
            self._action, script, [containerd], self._action._compute_environment_string()
        )
        fields = done["stdout"].rstrip("\n").split(" ")
        if done["rc"] != 0 or len(fields) != 5 or fields[0] != "dump":
            raise ValueError(f"the scratch dump failed: rc {done['rc']}: {done['stderr']}")
        rc, folder, out, err = int(fields[1]), b64_text(fields[2]), fields[3], fields[4]
        scratch = os.path.join(folder, "config.toml")

        def ran(argv: list[str]) -> tuple[int, str, str]:
            return rc, b64_text(out), b64_text(err)

        return c.dump_config(ran, containerd, scratch, {scratch: main_path})


class ActionModule(PipedAction):
    ARGUMENT_SPEC = _ARGUMENT_SPEC

    def node_paths(self, args: dict[str, t.Any]) -> list[str]:
        return [args[name] for name in _PATH_OPTIONS if args[name]]

    def answer(
        self, args: dict[str, t.Any], task_vars: dict[str, t.Any] | None
    ) -> dict[str, t.Any]:
        if args["state"] != "present" or cp.param_problem(args):
            raise Unanswered("the module refuses or undoes")
        if args["registry_mirrors"]:
            raise Unanswered("the registry mirrors' hosts.toml files, which the module reads")
        return self._unchanged(args)

    def _unchanged(self, params: dict[str, t.Any]) -> dict[str, t.Any]:
        main = params["config_path"]
        base = os.path.dirname(main)
        outcome = cp.initial_result(params)
        paths = [
            main,
            outcome["drop_in_path"],
            params["drop_in_dir"],
            params["runtime_binary"],
            os.path.join(base, "conf.d"),
            os.path.join(base, "config.d"),
            params["restart_marker"],
        ]
        given = params["containerd_binary"] or ""
        environment = self._compute_environment_string()
        done = self.read(
            f"HOSTS_MARK='{HOSTS_MARK}'\n" + _READ,
            [given, *paths, params["registry_config_path"], *cp.BINARY_DIRS],
            environment,
        )
        node = _Node(self, done["stdout"], paths)
        if node.binary is None:
            raise Unanswered("containerd")
        try:
            planned = cp.plan_for(params, node.run, node.binary, node)
        except c.ContainerdConfigError as exc:
            raise Unanswered(f"the module refuses: {exc}") from None
        if cp.update_result(outcome, planned):
            raise Unanswered("a change to validate and write")
        if node.hosts_files:
            raise Unanswered("registry hosts.toml files of kubegpu's to remove")
        outcome["registry_hosts"] = {"written": [], "removed": []}
        if planned["warnings"]:
            outcome["warnings"] = list(planned["warnings"])
        if params["restart_marker"] and node.exists(params["restart_marker"]):
            outcome.update(changed=True, restart_required=True, restart_pending=True)
            outcome.setdefault("warnings", []).append(
                RESTART_PENDING_NOTE % params["restart_marker"]
            )
        return outcome
