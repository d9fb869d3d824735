# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.kubelet_config: a run that changes nothing, without a
module on the node when the connection pipelines.

One sh script reads what the module would read on the node: for flavor auto the /etc/rancher
folders and the rke2 and k3s binaries, the kubelet's binary (given, or looked up as the module
does) and its `--version` output when the inputs need the version, the files the module may
merge into (and whether the extra-args candidates and /etc/sysconfig exist), and from the
node's Python whether it has PyYAML and the encoding it opens files with. The module's own code
(module_utils/kubelet_node.py) then decides on the controller. Only a result with nothing to
write and nothing wrong is answered here; files to write, a failure, anything the script did
not read, a path the node must expand (~ or $), or a connection that does not pipeline, and the
module runs, so that writes and messages stay in one place."""

from __future__ import annotations

import base64
import io
import json
import typing as t

import yaml
from ansible.errors import AnsibleActionFail
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubelet_node as kn
from ansible_collections.kubegpu.gpu.plugins.module_utils.kubelet import (
    DEFAULT_PATHS,
    dropin_path,
)
from ansible_collections.kubegpu.gpu.plugins.plugin_utils.piped import (
    B64_HELPERS,
    PipedAction,
    BIN_PATH,
    Unanswered,
    answered,
    b64_text,
    node_argument_spec,
    node_python,
)

_ARGUMENT_SPEC, _PATH_OPTIONS = node_argument_spec(kn.ARGUMENT_SPEC)

# What the node's Python says, run as the module would be (cwd left off sys.path, the locale
# set as AnsibleModule sets it): "python 0|1 ENCODING", whether PyYAML is there (found, for
# validate_only; imported, otherwise) and the encoding open() reads text with.
_PYTHON = """import locale, os, sys
sys.path = [p for p in sys.path if p not in ("", ".")]
locale.setlocale(locale.LC_ALL, "")
if sys.argv[1] == "find":
    import importlib.util
    found = importlib.util.find_spec("yaml") is not None
else:
    try:
        import yaml
        found = True
    except ImportError:
        found = False
with open(os.devnull) as handle:
    print("python %d %s" % (found, handle.encoding))
"""

# $1 the given binary or "", $2 "1" to run `BINARY --version`, $3 the node's Python, $4 the
# code it runs (_PYTHON), $5 "find" or "import" (PyYAML), $6 the flavors to try in
# detect_flavor's order, as words "DIR:BINARY" (the flavor's /etc/rancher folder and binary),
# the last a plain "BINARY" (the flavor taken when none is there; the only word for a given
# flavor); then the paths to read, each "r" + path ("s" + path: only whether it exists and is
# a folder), "--", and the folders bin_path looks in beside PATH. Lines: "p B64PATH EXISTS
# ISDIR" per path, "f B64PATH B64TEXT" for a regular file read, "bin NAME B64PATH" or "nobin
# NAME" per lookup, "ver B64BINARY RC B64STDOUT" and "verr B64STDERR" for the one --version
# run, and the Python's line. Where the flavor picked here is not the one the module's code
# picks, the code asks what was not read and the module runs. The binary runs only when it
# starts as an ELF file or a script does: sh would run a file without "#!" as a script, where
# the module's run_command fails.
_SCRIPT = (
    B64_HELPERS
    + BIN_PATH
    + r"""
exec 3>&1
given=$1 want_version=$2 python=$3 python_code=$4 yaml_mode=$5 choices=$6
shift 6
probe() {
  e=0 d=0 key=$(b64 "$2")
  [ -e "$2" ] && e=1
  [ -d "$2" ] && d=1
  printf 'p %s %s %s\n' "$key" "$e" "$d"
  if [ "$1" = r ] && [ -f "$2" ] && text=$(base64 -w0 2>/dev/null < "$2"); then
    printf 'f %s %s\n' "$key" "$text"
  fi
}
while [ $# -gt 0 ]; do
  arg=$1
  shift
  case $arg in
    --) break ;;
    r*) probe r "${arg#r}" ;;
    s*) probe s "${arg#s}" ;;
  esac
done
lookup() {
  name=$1
  shift
  if found=$(bin_path "$name" "$@"); then
    printf 'bin %s %s\n' "$name" "$(b64 "$found")"
  else
    found=
    printf 'nobin %s\n' "$name"
  fi
}
binary=
for choice in $choices; do
  case $choice in
    *:*)
      dir=${choice%%:*}
      probe s "$dir"
      lookup "${choice#*:}" "$@"
      if [ "$d" = 1 ] || [ -n "$found" ]; then binary=$found; break; fi ;;
    *) lookup "$choice" "$@"; binary=$found ;;
  esac
done
[ -z "$given" ] || binary=$given
if [ -n "$binary" ]; then
  probe s "$binary"
  case $binary in
    */*) [ "$want_version" = 1 ] && [ "$e" = 1 ] || binary= ;;
    *) binary= ;;
  esac
fi
if [ -n "$binary" ]; then
  case $(head -c 4 2>/dev/null < "$binary") in
    "#!"*|"$(printf '\177ELF')") ;;
    *) binary= ;;
  esac
fi
if [ -n "$binary" ]; then
  # stdout through one command substitution and stderr through the other, each with an end
  # mark so that trailing newlines stay.
  err=$({
    out=$(LC_ALL=C "$binary" --version 2>&5 3>&- 5>&-; echo "x$?")
    rc=${out##*x} out=${out%x*}
    printf 'ver %s %s %s\n' "$(b64 "$binary")" "$rc" "$(b64 "$out")" >&3
  } 5>&1; printf x)
  printf 'verr %s\n' "$(b64 "${err%x}")"
fi
"$python" -c "$python_code" "$yaml_mode"
"""
)


class _Answers:
    """A node for module_utils/kubelet_node.py that answers from what the script read."""

    def __init__(self, stdout: str, bin_dirs: list[str], yaml_mode: str) -> None:
        self.warnings: list[str] = []
        self._bin_dirs = bin_dirs
        self._yaml_mode = yaml_mode
        self._paths: dict[str, tuple[bool, bool]] = {}
        self._texts: dict[str, bytes] = {}
        self._bins: dict[str, str | None] = {}
        self._version: tuple[str, int, str] | None = None
        self._stderr: str | None = None
        self._python: tuple[bool, str] | None = None
        for line in stdout.splitlines():
            key, _, rest = line.partition(" ")
            words = rest.split(" ")
            if key == "p":
                self._paths[b64_text(words[0])] = (words[1] == "1", words[2] == "1")
            elif key == "f":
                self._texts[b64_text(words[0])] = base64.b64decode(words[1])
            elif key == "bin":
                self._bins[words[0]] = b64_text(words[1])
            elif key == "nobin":
                self._bins[rest] = None
            elif key == "ver":
                self._version = (b64_text(words[0]), int(words[1]), b64_text(words[2]))
            elif key == "verr":
                self._stderr = b64_text(rest)
            elif key == "python":
                self._python = (words[0] == "1", words[1])
            else:
                raise ValueError(f"unexpected line {line!r}")

    def exists(self, path: str) -> bool:
        return bool(answered(self._paths, path)[0])

    def isdir(self, path: str) -> bool:
        return bool(answered(self._paths, path)[1])

    def read_text(self, path: str) -> str:
        if path not in self._texts:
            raise Unanswered(f"{path}: not a file the script read")
        # As open(path).read() on the node: its encoding, universal newlines.
        try:
            return io.TextIOWrapper(io.BytesIO(self._texts[path]), encoding=self._encoding()).read()
        except (UnicodeDecodeError, LookupError) as exc:
            raise Unanswered(f"{path}: {exc}") from None

    def bin_path(self, name: str, opt_dirs: list[str]) -> str | None:
        if list(opt_dirs) != self._bin_dirs or name not in self._bins:
            raise Unanswered(f"bin_path {name} {opt_dirs}")
        return self._bins[name]

    def version_output(self, binary: str) -> tuple[int, str, str]:
        if self._version is None or self._stderr is None or self._version[0] != binary:
            raise Unanswered(f"{binary} --version")
        rc = self._version[1]
        if rc in (126, 127) or any(c in binary for c in "~$"):
            # sh could not run it (the module's run_command fails on that, in its words), or
            # the module's run_command would expand the path.
            raise Unanswered(f"{binary} --version: rc {rc}")
        return rc, self._version[2], self._stderr

    def _python_says(self, mode: str) -> tuple[bool, str]:
        if self._python is None or mode != self._yaml_mode:
            raise Unanswered(f"the node's Python ({mode})")
        return self._python

    def _encoding(self) -> str:
        return self._python_says(self._yaml_mode)[1]

    def find_yaml(self) -> bool:
        return self._python_says("find")[0]

    def import_yaml(self) -> t.Any:
        # The node has PyYAML: the controller's reads and writes the same YAML.
        return yaml if self._python_says("import")[0] else None

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def _script_argv(args: dict[str, t.Any], python: str) -> list[str]:
    flavor = args["flavor"]
    flavors = [*kn.AUTO_FLAVORS, "kubeadm"] if flavor == "auto" else [flavor]
    choices = [kn.RANCHER_DIR + f + ":" + kn.BINARIES[f] for f in flavors[:-1]]
    choices.append(kn.BINARIES[flavors[-1]])
    reads = [args["config_path"]] if args["config_path"] else [DEFAULT_PATHS[f] for f in flavors]
    stats = []
    if "kubeadm" in flavors:
        if args["extra_args_path"]:
            reads.append(args["extra_args_path"])
        else:
            reads.extend(kn.EXTRA_ARGS_PATHS)
            stats.append(kn.SYSCONFIG_DIR)
    if args["config_dir"]:
        reads.append(dropin_path(args["config_dir"], args["dropin_name"]))
    if args["restart_marker"]:
        stats.append(args["restart_marker"])
    return [
        args["binary"] or "",
        "1" if kn.needs_version(args) else "0",
        python,
        _PYTHON,
        "find" if args["validate_only"] else "import",
        " ".join(choices),
        *("r" + path for path in reads),
        *("s" + path for path in stats),
        "--",
        *kn.EXTRA_DIRS,
    ]


class ActionModule(PipedAction):
    ARGUMENT_SPEC = _ARGUMENT_SPEC

    def arguments(self) -> dict[str, t.Any] | None:
        try:
            # Plain data, as the module gets its arguments (through JSON).
            return dict(json.loads(json.dumps(super().arguments())))
        except (AnsibleActionFail, TypeError):
            # The module says what is wrong with its arguments, in its own words.
            return None

    def node_paths(self, args: dict[str, t.Any]) -> list[str]:
        return [args[name] or "" for name in _PATH_OPTIONS]

    def answer(
        self, args: dict[str, t.Any], task_vars: dict[str, t.Any] | None
    ) -> dict[str, t.Any]:
        if args["state"] == "absent":
            raise Unanswered("state=absent undoes from the node's record: the module's to do")
        argv = _script_argv(args, node_python(self, task_vars))
        done = self.read(_SCRIPT, argv, self._compute_environment_string())
        return self._unchanged(_Answers(done["stdout"], kn.EXTRA_DIRS, argv[4]), args)

    def _unchanged(self, answers: _Answers, args: dict[str, t.Any]) -> dict[str, t.Any]:
        outcome, msg, plans = kn.decide(args, answers, self._task.diff)
        if msg is not None or plans:
            raise Unanswered("files to write, or a failure: the module's to do and say")
        if answers.warnings:
            outcome["warnings"] = answers.warnings
        return outcome
