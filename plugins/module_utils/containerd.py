# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Wiring the NVIDIA runtime into containerd through a drop-in file: the pure logic.

What containerd does with imported files decides what the drop-in must hold (both verified
against the real binaries, see tests/integration/test_containerd_host.py):

- containerd 1.6 and 1.7 replace a whole plugin section with the one from an imported file
  (containerd issue 5837). A drop-in holding only ``runtimes.nvidia`` would drop the runc
  runtime, the sandbox image and every other CRI setting of the main config, and the CRI plugin
  then fails ("no corresponding runtime configured ... default_runtime_name"). So on 1.x the
  drop-in carries the whole effective CRI section, as ``containerd config dump`` reports it for
  the main config and the other imports, plus the nvidia runtime. It is derived again on every
  run, so a changed main config is followed.
- containerd 2.x merges imported files key by key, so there the drop-in holds only the nvidia
  runtime (and the default runtime name when asked).

A drop-in must have the main config's ``version`` (containerd 2.x refuses a higher one, 1.x takes
the last version it reads for the whole config). Versions: absent or 1 (containerd 1.x only,
plugin ``cri``), 2 (plugin ``io.containerd.grpc.v1.cri``), 3 (containerd 2.x, plugin
``io.containerd.cri.v1.runtime``). Higher versions (containerd 2.3 brings 4) are refused.

TOML: reading and writing go through module_utils/toml_text.py (``tomllib``, else python3-toml,
else its own reader, since the target's Python may predate ``tomllib``). Edits of the main config
are text surgery on the ``imports`` line with that reader's positions, so every other byte of the
file stays as it was.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import copy
import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from ansible_collections.kubegpu.gpu.plugins.module_utils import toml_text

NVIDIA_RUNTIME_TYPE = "io.containerd.runc.v2"
HIGHEST_KNOWN_CONFIG_VERSION = 3
MANAGED_MARK = "Managed by kubegpu (kubegpu.gpu.containerd_runtime)"


class ContainerdConfigError(Exception):
    """A containerd config, version or drop-in that cannot be used: what, where, and what to do."""


# --- TOML, through the shared reader and writer (module_utils/toml_text.py) -----------------------


def toml_loads(text, source="TOML"):
    """Parse TOML text into dicts and lists, with the best parser the target has."""
    return toml_text.loads(text, source, ContainerdConfigError)


def toml_loads_builtin(text, source="TOML"):
    """Parse TOML text with the builtin reader (used when neither tomllib nor toml exists)."""
    return toml_text.loads_builtin(text, source, ContainerdConfigError)


def toml_parser_name():
    return toml_text.parser_name()


def toml_dumps(data, indent=True):
    """Serialise nested dicts as TOML; with `indent`, tables are indented by depth the way
    containerd writes them."""
    return toml_text.dumps(data, indent, ContainerdConfigError)


# --- the main config's top level: version and imports --------------------------------------------


def scan_top_level(text, source="config.toml"):
    """Read the root keys of a TOML document (before its first table) with their positions.

    Returns {"version": int or None, "imports": None or {"values", "spans", "close",
    "value_start", "value_end", "line_start", "line_end"}, "region_end": offset of the first table
    header, "keys": [...]}. Only this region is read, so the rest of the file can hold any TOML.
    """
    reader = toml_text.Reader(text, source, ContainerdConfigError)
    data, top_level, region_end = reader.document(stop_at_first_table=True)
    result = {"version": None, "imports": None, "region_end": region_end, "keys": top_level}
    if "version" in data:
        version = data["version"]
        if isinstance(version, bool) or not isinstance(version, int):
            raise ContainerdConfigError(
                "%s: `version` is %r; containerd expects a whole number (2 for containerd 1.x, 3 for 2.x)"
                % (source, version)
            )
        result["version"] = version
    for entry in top_level:
        if entry["key"] == ("imports",):
            imports = data["imports"]
            if not isinstance(imports, list) or not all(isinstance(v, str) for v in imports):
                raise ContainerdConfigError(
                    "%s: `imports` must be a list of file paths or globs, found %r"
                    % (source, imports)
                )
            arr = toml_text.Reader(text, source, ContainerdConfigError)
            arr.i = entry["value_start"] - arr.offset
            values, spans, close = arr.array()
            spans = [(a + arr.offset, b + arr.offset) for a, b in spans]
            info = dict(entry)
            info.update({"values": values, "spans": spans, "close": close + arr.offset})
            result["imports"] = info
        elif entry["key"][0] == "imports":
            raise ContainerdConfigError(
                "%s: `imports` must be a list at the top of the file" % source
            )
    return result


def _newline_of(text):
    return "\r\n" if "\r\n" in text else "\n"


def _line_end_before_newline(text, offset):
    """Offset of the newline that ends the line holding `offset` (len(text) when none)."""
    end = text.find("\n", offset)
    if end < 0:
        return len(text)
    return end - 1 if end > 0 and text[end - 1] == "\r" else end


def _insert_top_level_line(text, scan, line):
    """Insert a root-level `line` after `version`, else after the last root key, else on top."""
    nl = _newline_of(text)
    anchor = None
    for key in scan["keys"]:
        if key["key"] == ("version",):
            anchor = key
    if anchor is None and scan["keys"]:
        anchor = scan["keys"][-1]
    if anchor is None:
        return line + nl + text
    at = anchor["line_end"]
    if at == len(text) and not text.endswith("\n"):
        return text + nl + line + nl
    return text[:at] + line + nl + text[at:]


def add_import(text, entry, source="config.toml"):
    """Return `text` with `entry` appended to its top-level `imports`, changing nothing else.

    Handles a missing `imports` (a new line after `version`, else after the last top-level key,
    else at the top), an empty array, single-line and multi-line arrays (the new element gets the
    indentation and trailing-comma style of the last one), and comments inside the array.
    """
    scan = scan_top_level(text, source)
    nl = _newline_of(text)
    line = "imports = [%s]" % toml_text.quote_string(entry)
    imports = scan["imports"]
    if imports is None:
        return _insert_top_level_line(text, scan, line)
    spans = imports["spans"]
    close = imports["close"]
    quoted = toml_text.quote_string(entry)
    if not spans:
        return text[: imports["value_start"]] + "[" + quoted + "]" + text[close + 1 :]
    last_start, last_end = spans[-1]
    between = text[last_end:close]
    if "\n" not in between:
        # The closing bracket shares the last element's line: add inline after it.
        return text[:last_end] + ", " + quoted + text[last_end:]
    # Multi-line: a new line after the last element's line, in the same style.
    comma = re.match(r"[ \t]*,", between)
    line_start = text.rfind("\n", 0, last_start) + 1
    indent = re.match(r"[ \t]*", text[line_start:last_start]).group(0)
    if line_start <= imports["value_start"]:
        # The first element sits on the `imports = [` line: indent new lines by two spaces.
        indent = "  "
    eol = _line_end_before_newline(text, last_end)
    if comma:
        return text[:eol] + nl + indent + quoted + "," + text[eol:]
    return text[:last_end] + "," + text[last_end:eol] + nl + indent + quoted + text[eol:]


def replace_imports(text, entries, source="config.toml"):
    """Return `text` with its top-level `imports` set to exactly `entries` (for scratch copies)."""
    scan = scan_top_level(text, source)
    value = "[" + ", ".join(toml_text.quote_string(e) for e in entries) + "]"
    imports = scan["imports"]
    if imports is None:
        return _insert_top_level_line(text, scan, "imports = " + value)
    return text[: imports["value_start"]] + value + text[imports["value_end"] :]


# --- versions and schemas ------------------------------------------------------------------------


def parse_containerd_version(text):
    """(major, minor, patch) from `containerd --version` output, e.g.
    'containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3'."""
    tokens = text.split()
    for token in tokens[1:]:
        m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", token)
        if m and not token.startswith("github.com"):
            return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    raise ContainerdConfigError(
        "cannot read a version from `containerd --version` output %r; expected for example "
        "'containerd github.com/containerd/containerd 1.7.24 ...'" % text.strip()
    )


class Schema:
    """Where the nvidia runtime goes for one containerd version and config version."""

    def __init__(self, config_version, plugin_id, merge, effective_plugin_id, write_version):
        self.config_version = config_version  # 1, 2 or 3
        self.plugin_id = plugin_id  # CRI runtime plugin key in files of this version
        self.merge = merge  # "replace" (containerd 1.x) or "deep" (2.x)
        self.effective_plugin_id = effective_plugin_id  # its key in `containerd config dump`
        self.write_version = write_version  # write `version = N` in the drop-in

    def as_dict(self):
        return {
            "config_version": self.config_version,
            "plugin": self.plugin_id,
            "merge": self.merge,
            "effective_plugin": self.effective_plugin_id,
        }


def choose_schema(containerd_version, main_version, main_exists, config_path="config.toml"):
    """Pick the drop-in schema, or say clearly why this combination is refused."""
    major, minor = containerd_version[0], containerd_version[1]
    shown = "%d.%d.%d" % tuple(containerd_version[:3])
    if major == 0 or (major == 1 and minor < 6):
        raise ContainerdConfigError(
            "containerd %s is older than 1.6, the oldest release kubegpu supports; "
            "upgrade containerd to 1.6, 1.7 or 2.x" % shown
        )
    if major > 2:
        raise ContainerdConfigError(
            "containerd %s is newer than kubegpu knows (1.6, 1.7 and 2.x are supported)" % shown
        )
    if not main_exists:
        main_version = 2 if major == 1 else 3
    if main_version is not None and main_version > HIGHEST_KNOWN_CONFIG_VERSION:
        raise ContainerdConfigError(
            "%s has `version = %d`; kubegpu writes drop-ins for config versions 2 (containerd 1.x) "
            "and 3 (containerd 2.x) only, and a drop-in must have the main config's version "
            "(containerd refuses a higher one, or leaves the main config's settings unmigrated), so "
            "nothing was changed. Use a kubegpu release that supports version %d."
            % (config_path, main_version, main_version)
        )
    if major == 1:
        if main_version in (None, 0, 1):
            return Schema(1, "cri", "replace", "io.containerd.grpc.v1.cri", False)
        if main_version == 2:
            return Schema(
                2, "io.containerd.grpc.v1.cri", "replace", "io.containerd.grpc.v1.cri", True
            )
        raise ContainerdConfigError(
            "%s has `version = %d`, which containerd %s cannot load (1.x reads versions 1 and 2); "
            "nothing was changed. Set `version = 2` with containerd 1.x, or upgrade containerd to 2.x."
            % (config_path, main_version, shown)
        )
    if main_version in (None, 0, 1):
        raise ContainerdConfigError(
            "%s has no `version` (or version 1); containerd %s does not read version 1 configs. "
            "Run `containerd config migrate` and write its output to %s, then run again."
            % (config_path, shown, config_path)
        )
    if main_version == 2:
        return Schema(2, "io.containerd.grpc.v1.cri", "deep", "io.containerd.cri.v1.runtime", True)
    return Schema(3, "io.containerd.cri.v1.runtime", "deep", "io.containerd.cri.v1.runtime", True)


# --- the effective config (containerd config dump) ------------------------------------------------


def _get(data, path, default=None):
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return data


def effective_cri(effective, schema):
    """The CRI runtime plugin's section of a dumped config (an empty dict when absent)."""
    section = _get(effective, ["plugins", schema.effective_plugin_id], {})
    return section if isinstance(section, dict) else {}


def cri_disabled(effective, schema):
    """The `disabled_plugins` entries that switch off the CRI plugin, if any."""
    names = {"cri", "io.containerd.grpc.v1.cri", schema.effective_plugin_id}
    return [p for p in effective.get("disabled_plugins") or [] if p in names]


def source_systemd_cgroup(effective, schema, runtime_name):
    """SystemdCgroup of the runtime the nvidia one must agree with, and where it was read.

    That runtime is the default one (unless it is ours), else `runc`, else an entry of our own
    runtime that the main config already has (for example one nvidia-ctk wrote there).
    """
    cri = effective_cri(effective, schema)
    runtimes = _get(cri, ["containerd", "runtimes"], {}) or {}
    default_name = _get(cri, ["containerd", "default_runtime_name"], "runc")
    candidates = [default_name] if default_name and default_name != runtime_name else []
    candidates += [n for n in ("runc", runtime_name) if n not in candidates]
    for name in candidates:
        runtime = runtimes.get(name)
        if isinstance(runtime, dict):
            value = _get(runtime, ["options", "SystemdCgroup"], None)
            if isinstance(value, bool):
                return value, "runtimes.%s.options.SystemdCgroup" % name
            return False, "runtimes.%s has no SystemdCgroup (containerd's default: false)" % name
    return False, "no runc runtime in the effective config (containerd's default: false)"


def render_drop_in(schema, runtime_name, binary, systemd_cgroup, default_runtime, source_cri=None):
    """The drop-in text for `schema`.

    For "replace" (containerd 1.x) `source_cri` is the effective CRI section of everything but
    this drop-in; it is copied and the nvidia runtime added, because 1.x replaces the section.
    """
    runtime = {
        "runtime_type": NVIDIA_RUNTIME_TYPE,
        "options": {"BinaryName": binary, "SystemdCgroup": bool(systemd_cgroup)},
    }
    if schema.merge == "replace":
        section = copy.deepcopy(source_cri or {})
        containerd = section.setdefault("containerd", {})
        runtimes = containerd.setdefault("runtimes", {})
        runtimes[runtime_name] = runtime
        if default_runtime:
            containerd["default_runtime_name"] = runtime_name
        why = [
            "containerd 1.x replaces a whole plugin section with the one from an imported file, so",
            "this file carries the CRI section of the main config (as `containerd config dump`",
            "shows it) plus the %s runtime; kubegpu derives it again on every run." % runtime_name,
        ]
    else:
        containerd = {}
        if default_runtime:
            containerd["default_runtime_name"] = runtime_name
        containerd["runtimes"] = {runtime_name: runtime}
        section = {"containerd": containerd}
        why = [
            "containerd 2.x merges imported files key by key: only the %s runtime is here."
            % runtime_name
        ]
    data = {}
    if schema.write_version:
        data["version"] = schema.config_version
    data["plugins"] = {schema.plugin_id: section}
    head = ["# %s. Changes here are overwritten." % MANAGED_MARK] + ["# " + w for w in why]
    return "\n".join(head) + "\n" + toml_dumps(data, indent=schema.merge == "replace")


def check_effective(effective, schema, runtime_name, binary, systemd_cgroup, default_runtime):
    """What is wrong with a candidate's dumped config (an empty list when all is right)."""
    problems = []
    cri = effective_cri(effective, schema)
    runtime = _get(cri, ["containerd", "runtimes", runtime_name])
    where = "plugins.%s.containerd.runtimes.%s" % (schema.effective_plugin_id, runtime_name)
    if not isinstance(runtime, dict):
        return ["the effective config has no %s" % where]
    if runtime.get("runtime_type") != NVIDIA_RUNTIME_TYPE:
        problems.append(
            "%s.runtime_type is %r, expected %r"
            % (where, runtime.get("runtime_type"), NVIDIA_RUNTIME_TYPE)
        )
    options = runtime.get("options") or {}
    if options.get("BinaryName") != binary:
        problems.append(
            "%s.options.BinaryName is %r, expected %r" % (where, options.get("BinaryName"), binary)
        )
    if bool(options.get("SystemdCgroup", False)) != bool(systemd_cgroup):
        problems.append(
            "%s.options.SystemdCgroup is %r, expected %r"
            % (where, options.get("SystemdCgroup"), bool(systemd_cgroup))
        )
    default_name = _get(cri, ["containerd", "default_runtime_name"])
    if default_runtime and default_name != runtime_name:
        problems.append("default_runtime_name is %r, expected %r" % (default_name, runtime_name))
    runtimes = _get(cri, ["containerd", "runtimes"], {}) or {}
    if default_name and default_name not in runtimes:
        problems.append("default_runtime_name %r names no configured runtime" % default_name)
    return problems


# --- imports and globs (Go filepath.Match semantics) -----------------------------------------------


def _go_segment_regex(segment):
    out, i = [], 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = segment.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = segment[i + 1 : end]
                if body.startswith("^"):
                    body = "!" + body[1:]
                out.append(
                    "["
                    + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\")
                    + "]"
                )
                i = end
        elif c == "\\" and i + 1 < len(segment):
            i += 1
            out.append(re.escape(segment[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def go_match(pattern, path):
    """Whether `path` matches `pattern` as Go's filepath.Match does ('*' never crosses '/')."""
    return re.match("^" + _go_segment_regex(pattern) + "$", path) is not None


def resolve_import(entry, main_path):
    """An import entry as containerd resolves it: relative to the main config's directory."""
    entry = os.path.normpath(entry) if "*" not in entry else entry
    if not os.path.isabs(entry):
        entry = os.path.join(os.path.dirname(os.path.abspath(main_path)), entry)
    return entry


def is_imported(entries, main_path, path):
    """Whether one of the import entries loads `path`."""
    for entry in entries:
        resolved = resolve_import(entry, main_path)
        if resolved == path or (any(c in resolved for c in "*?[") and go_match(resolved, path)):
            return True
    return False


def expand_imports(
    entries, main_path, drop_in_path, substitute=None, include_drop_in=True, node=None
):
    """The files containerd loads for `entries`, in its order, given the drop-in in place.

    `substitute` replaces the drop-in's path (a scratch copy); `include_drop_in=False` leaves the
    drop-in out (to read the config as it is without it). `node` reads the folders (LocalFiles
    by default).
    """
    node = node or LocalFiles()
    files = []
    for entry in entries:
        resolved = resolve_import(entry, main_path)
        if any(c in resolved for c in "*?["):
            directory = os.path.dirname(resolved)
            if any(c in directory for c in "*?["):
                candidates = node.glob(resolved) + node.glob(os.path.join(directory, ".*"))
            elif node.isdir(directory):
                candidates = [os.path.join(directory, n) for n in node.listdir(directory)]
            else:
                candidates = []
            matches = [m for m in candidates if go_match(resolved, m)]
            if go_match(resolved, drop_in_path) and drop_in_path not in matches:
                matches.append(drop_in_path)
            matches = sorted(set(matches))
        else:
            matches = [resolved]
        for match in matches:
            if match == drop_in_path:
                if not include_drop_in:
                    continue
                match = substitute or match
            if match not in files:
                files.append(match)
    return files


# --- commands: config dump, the scratch containerd --------------------------------------------------


def dump_config(run, containerd, config_path, names=None):
    """`containerd --config X config dump` parsed; raises with containerd's own message, in
    which `names` maps scratch paths back to the paths they stand for."""
    rc, out, err = run([containerd, "--config", config_path, "config", "dump"])
    if rc != 0:
        message = " ".join((err or out).strip().splitlines()[-3:]) or "exit %d" % rc
        for scratch, real in sorted((names or {}).items(), key=lambda kv: -len(kv[0])):
            message = message.replace(scratch, real)
        raise ContainerdConfigError("containerd cannot load the configuration: %s" % message)
    return toml_loads(out, "containerd config dump")


def parse_plugins_ls(text):
    """Rows of `ctr plugins ls`: [{"type", "id", "platforms", "status"}]."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[0] == "TYPE":
            continue
        rows.append({"type": parts[0], "id": parts[1], "platforms": parts[2], "status": parts[-1]})
    return rows


def required_plugins(containerd_version):
    required = [("io.containerd.grpc.v1", "cri")]
    if containerd_version[0] >= 2:
        required += [("io.containerd.cri.v1", "runtime"), ("io.containerd.cri.v1", "images")]
    return required


def scratch_overrides(effective, schema, workdir):
    """A config file for the scratch containerd that moves every listener and socket that would
    clash with a running containerd into `workdir` (only what the config sets)."""
    data = {}
    if schema.write_version:
        data["version"] = schema.config_version
    if _get(effective, ["grpc", "tcp_address"]):
        data.setdefault("grpc", {})["tcp_address"] = "127.0.0.1:0"
    if _get(effective, ["ttrpc", "address"]):
        data.setdefault("ttrpc", {})["address"] = os.path.join(workdir, "c.sock.ttrpc")
    if _get(effective, ["debug", "address"]):
        data.setdefault("debug", {})["address"] = os.path.join(workdir, "debug.sock")
    if _get(effective, ["metrics", "address"]):
        data.setdefault("metrics", {})["address"] = "127.0.0.1:0"
    plugins = {}

    def override(plugin_id, values):
        current = _get(effective, ["plugins", plugin_id])
        if not isinstance(current, dict):
            return
        # 1.x replaces a section from an imported file: start from the whole of it there
        section = copy.deepcopy(current) if schema.merge == "replace" else {}
        section.update(values)
        key = plugin_id
        if schema.config_version == 1:
            key = plugin_id.rsplit(".", 1)[-1]
        plugins[key] = section

    nri = _get(effective, ["plugins", "io.containerd.nri.v1.nri"])
    if isinstance(nri, dict) and not nri.get("disable", False):
        os.makedirs(os.path.join(workdir, "nri-plugins"))
        override(
            "io.containerd.nri.v1.nri",
            {
                "socket_path": os.path.join(workdir, "nri.sock"),
                "plugin_path": os.path.join(workdir, "nri-plugins"),
            },
        )
    stream = _get(effective, ["plugins", "io.containerd.grpc.v1.cri"], {})
    # On 1.x the CRI section is the drop-in itself: its scratch copy gets port 0 instead.
    port = str(stream.get("stream_server_port", "0")) if isinstance(stream, dict) else "0"
    if schema.merge == "deep" and port not in ("0", ""):
        override(
            "io.containerd.grpc.v1.cri",
            {"stream_server_port": "0", "stream_server_address": "127.0.0.1"},
        )
    devmapper = _get(effective, ["plugins", "io.containerd.snapshotter.v1.devmapper"], {})
    if isinstance(devmapper, dict) and devmapper.get("pool_name"):
        data["disabled_plugins"] = ["io.containerd.snapshotter.v1.devmapper"]
    if plugins:
        data["plugins"] = plugins
    return toml_dumps(data)


def _stop(proc):
    if proc.poll() is not None:
        return
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_scratch_containerd(
    run, containerd, ctr, config_path, workdir, containerd_version, timeout=30
):
    """Start containerd on `config_path` with its own socket, root and state under `workdir`,
    and report whether it came up with the CRI plugins ok. Always stops it again.

    Returns {"ok": bool, "plugins": {...status of the required ones}, "message": str, "log": tail}.
    """
    sock = os.path.join(workdir, "c.sock")
    root = os.path.join(workdir, "root")
    state = os.path.join(workdir, "state")
    log_path = os.path.join(workdir, "containerd.log")
    env = dict(os.environ, LC_ALL="C")
    argv = [
        containerd,
        "--config",
        config_path,
        "--address",
        sock,
        "--root",
        root,
        "--state",
        state,
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    result = {"ok": False, "plugins": {}, "message": "", "command": argv}
    try:
        deadline = time.time() + timeout
        rows = None
        while time.time() < deadline:
            if proc.poll() is not None:
                result["message"] = (
                    "containerd exited with status %d before it served its socket" % proc.returncode
                )
                break
            if os.path.exists(sock):
                rc, out, _err = run([ctr, "--address", sock, "--timeout", "5s", "plugins", "ls"])
                if rc == 0:
                    rows = parse_plugins_ls(out)
                    break
            time.sleep(0.2)
        else:
            result["message"] = "containerd did not serve its socket within %d s" % timeout
        if rows is not None:
            time.sleep(0.5)  # a CRI service that fails after init stops containerd
            if proc.poll() is not None:
                result["message"] = (
                    "containerd exited with status %d after start-up" % proc.returncode
                )
            else:
                bad = []
                for ptype, pid in required_plugins(containerd_version):
                    status = [r["status"] for r in rows if r["type"] == ptype and r["id"] == pid]
                    result["plugins"]["%s.%s" % (ptype, pid)] = status[0] if status else "missing"
                    if status != ["ok"]:
                        bad.append((ptype, pid, status[0] if status else "missing"))
                if bad:
                    details = []
                    for ptype, pid, status in bad:
                        rc, out, _err = run(
                            [ctr, "--address", sock, "plugins", "ls", "-d", "id==%s" % pid]
                        )
                        msg = re.findall(r"Message:\s*(.*)", out or "")
                        details.append(
                            "%s.%s %s%s" % (ptype, pid, status, (": " + msg[0]) if msg else "")
                        )
                    result["message"] = "; ".join(details)
                else:
                    result["ok"] = True
    finally:
        _stop(proc)
    if not result["ok"]:
        with open(log_path, "rb") as log:
            lines = log.read().decode("utf-8", "replace").splitlines()
        result["log"] = [
            ln for ln in lines if "level=error" in ln or "level=fatal" in ln or "level=warn" in ln
        ][-8:] or lines[-8:]
    return result


def validate_candidate(
    run,
    containerd,
    ctr,
    containerd_version,
    schema,
    main_path,
    main_text,
    drop_in_path,
    drop_in_text,
    runtime_name,
    binary,
    systemd_cgroup,
    default_runtime,
    start_daemon=True,
    timeout=30,
    tmp_root=None,
):
    """Check a candidate (main text + drop-in text) with the real containerd, touching no live file.

    The candidate is laid out in a scratch directory: the main text with its imports spelled out
    as files (the candidate drop-in in place of the live one), `containerd config dump` must load
    it and show the nvidia runtime as rendered, and (start_daemon) a containerd started on it
    with its own socket, root and state must bring the CRI plugin up ok.
    Returns a report dict; raises ContainerdConfigError when the candidate is not good.
    """
    workdir = tempfile.mkdtemp(prefix="kubegpu-containerd-", dir=tmp_root)
    report = {"dump": "not run", "daemon": "not run"}
    try:
        scratch_drop_in = os.path.join(workdir, os.path.basename(drop_in_path))
        with open(scratch_drop_in, "w") as f:
            f.write(drop_in_text)
        entries = scan_top_level(main_text, main_path)["imports"]
        entries = entries["values"] if entries else []
        files = expand_imports(entries, main_path, drop_in_path, substitute=scratch_drop_in)
        scratch_main = os.path.join(workdir, "config.toml")
        with open(scratch_main, "w") as f:
            f.write(replace_imports(main_text, files, main_path))
        try:
            effective = dump_config(
                run,
                containerd,
                scratch_main,
                {scratch_main: main_path + " (new)", scratch_drop_in: drop_in_path + " (new)"},
            )
        except ContainerdConfigError as exc:
            raise ContainerdConfigError("the new configuration does not load: %s" % exc) from None
        problems = check_effective(
            effective, schema, runtime_name, binary, systemd_cgroup, default_runtime
        )
        if problems:
            later = files[files.index(scratch_drop_in) + 1 :] if scratch_drop_in in files else []
            hint = ""
            if later and schema.merge == "replace":
                hint = " Files imported after %s replace the CRI section on containerd 1.x: %s." % (
                    drop_in_path,
                    ", ".join(later),
                )
            raise ContainerdConfigError(
                "the new configuration loads, but %s.%s" % ("; ".join(problems), hint)
            )
        report["dump"] = "ok"
        if not start_daemon:
            report["daemon"] = "skipped"
            return report
        overrides = os.path.join(workdir, "zz-kubegpu-scratch.toml")
        with open(overrides, "w") as f:
            f.write(scratch_overrides(effective, schema, workdir))
        if schema.merge == "replace":
            _scratch_stream_port(scratch_drop_in, schema)
        with open(scratch_main, "w") as f:
            f.write(replace_imports(main_text, [*files, overrides], main_path))
        daemon = run_scratch_containerd(
            run, containerd, ctr, scratch_main, workdir, containerd_version, timeout
        )
        report["plugins"] = daemon["plugins"]
        if not daemon["ok"]:
            raise ContainerdConfigError(
                "a scratch containerd on the new configuration did not come up with the CRI plugin "
                "ok: %s. Log: %s" % (daemon["message"], " | ".join(daemon.get("log", [])))
            )
        report["daemon"] = "ok"
        return report
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _scratch_stream_port(path, schema):
    """On 1.x the scratch copy of the drop-in (which holds the CRI section) gets port 0."""
    with open(path) as f:
        data = toml_loads(f.read(), path)
    section = _get(data, ["plugins", schema.plugin_id])
    if isinstance(section, dict) and str(section.get("stream_server_port", "0")) not in ("0", ""):
        section["stream_server_port"] = "0"
        section["stream_server_address"] = "127.0.0.1"
        with open(path, "w") as f:
            f.write(toml_dumps(data))


# --- planning: everything computed, nothing touched ------------------------------------------------


def _read_text(path, what):
    try:
        with open(path, "r", encoding="utf-8", newline="") as f:
            return f.read()
    except UnicodeDecodeError as exc:
        raise ContainerdConfigError(
            "%s %s is not UTF-8 text (%s); containerd cannot read it either" % (what, path, exc)
        ) from None
    except OSError as exc:
        raise ContainerdConfigError(
            "cannot read %s %s: %s" % (what, path, exc.strerror or exc)
        ) from None


class LocalFiles:
    """What plan() reads of the node, read where the module runs. The action plugin has a
    reader with the same methods that answers from one sh script's reads."""

    def __init__(self, tmp_root=None):
        self.tmp_root = tmp_root

    def exists(self, path):
        return os.path.exists(path)

    def isdir(self, path):
        return os.path.isdir(path)

    def isfile(self, path):
        return os.path.isfile(path)

    def listdir(self, path):
        return os.listdir(path)

    def glob(self, pattern):
        return glob.glob(pattern)

    def read_text(self, path, what):
        return _read_text(path, what)

    def dump_scratch(self, run, containerd, text, main_path):
        """`containerd config dump` of `text` as a scratch main config that stands for
        main_path (in containerd's messages)."""
        workdir = tempfile.mkdtemp(prefix="kubegpu-containerd-", dir=self.tmp_root)
        try:
            scratch = os.path.join(workdir, "config.toml")
            with open(scratch, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            return dump_config(run, containerd, scratch, {scratch: main_path})
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def minimal_main_config(schema, import_entry):
    """The main config kubegpu writes when there is none: the version and the imports line."""
    return (
        "# Created by kubegpu (kubegpu.gpu.containerd_runtime): containerd's defaults apply to\n"
        "# everything not set here or in the imported drop-ins.\n"
        "version = %d\n"
        "imports = [%s]\n" % (schema.config_version, toml_text.quote_string(import_entry))
    )


def read_effective_without(
    run, containerd, main_path, main_text, schema, drop_in_path, tmp_root=None, node=None
):
    """`containerd config dump` of the main config and its imports, leaving out the drop-in."""
    node = node or LocalFiles(tmp_root)
    text = main_text if main_text is not None else "version = %d\n" % schema.config_version
    imports = scan_top_level(text, main_path)["imports"]
    entries = imports["values"] if imports else []
    files = expand_imports(entries, main_path, drop_in_path, include_drop_in=False, node=node)
    scratch_text = replace_imports(text, files, main_path) if imports or files else text
    return node.dump_scratch(run, containerd, scratch_text, main_path)


def stray_drop_ins(main_path, drop_in_dir, entries, node=None):
    """*.toml files in conf.d or config.d beside the main config that its imports do not load."""
    node = node or LocalFiles()
    strays = []
    base = os.path.dirname(main_path)
    for directory in (os.path.join(base, "conf.d"), os.path.join(base, "config.d")):
        if os.path.normpath(directory) == os.path.normpath(drop_in_dir) or not node.isdir(
            directory
        ):
            continue
        for name in sorted(node.listdir(directory)):
            path = os.path.join(directory, name)
            if name.endswith(".toml") and not is_imported(entries, main_path, path):
                strays.append(path)
    return strays


def plan(
    run,
    containerd,
    main_path,
    drop_in_dir,
    drop_in_name,
    runtime_name,
    binary,
    default_runtime,
    tmp_root=None,
    node=None,
):
    """Work out the main config and drop-in texts that wire the runtime in. Changes nothing.

    `run(argv)` runs a command and returns (rc, stdout, stderr); `node` reads the node's files
    (LocalFiles where the module runs; the action plugin answers from its sh script's reads).
    """
    node = node or LocalFiles(tmp_root)
    if not drop_in_name.endswith(".toml") or "/" in drop_in_name:
        raise ContainerdConfigError(
            "drop_in_name %r must be a file name ending in .toml (the import glob is <dir>/*.toml)"
            % drop_in_name
        )
    if not os.path.isabs(drop_in_dir) or not os.path.isabs(main_path):
        raise ContainerdConfigError("config_path and drop_in_dir must be absolute paths")
    if node.exists(drop_in_dir) and not node.isdir(drop_in_dir):
        raise ContainerdConfigError(
            "drop_in_dir %s exists but is not a directory; containerd cannot import drop-ins from it. "
            "Move that file away (or set drop_in_dir to a directory) and run again; nothing was changed."
            % drop_in_dir
        )
    drop_in_path = os.path.join(drop_in_dir, drop_in_name)
    if node.exists(drop_in_path) and not node.isfile(drop_in_path):
        raise ContainerdConfigError(
            "%s exists but is not a regular file; nothing was changed" % drop_in_path
        )
    if node.exists(main_path) and not node.isfile(main_path):
        raise ContainerdConfigError(
            "config_path %s exists but is not a regular file; nothing was changed" % main_path
        )

    rc, out, err = run([containerd, "--version"])
    if rc != 0:
        raise ContainerdConfigError(
            "`%s --version` failed (exit %d): %s" % (containerd, rc, (err or out).strip())
        )
    version = parse_containerd_version(out)
    main_exists = node.isfile(main_path)
    main_text = node.read_text(main_path, "config_path") if main_exists else None
    scan = scan_top_level(main_text, main_path) if main_text is not None else None
    main_version = scan["version"] if scan else None
    schema = choose_schema(version, main_version, main_exists, main_path)

    import_entry = os.path.join(drop_in_dir, "*.toml")
    entries = scan["imports"]["values"] if scan and scan["imports"] else []
    if main_text is None:
        new_main = minimal_main_config(schema, import_entry)
    elif is_imported(entries, main_path, drop_in_path):
        new_main = main_text
    else:
        new_main = add_import(main_text, import_entry, main_path)

    # What containerd will load besides the drop-in, with the imports line as it will be: a
    # file already in the drop-in folder counts from the first run on, not only once imported.
    source = read_effective_without(
        run, containerd, main_path, new_main, schema, drop_in_path, node=node
    )
    disabled = cri_disabled(source, schema)
    if disabled:
        raise ContainerdConfigError(
            "%s disables the CRI plugin (disabled_plugins has %s), so Kubernetes cannot use this "
            "containerd and a runtime for it has no effect. Remove it from disabled_plugins (Docker's "
            "containerd packages ship it disabled) and run again; nothing was changed."
            % (main_path, ", ".join(repr(d) for d in disabled))
        )
    systemd_cgroup, systemd_source = source_systemd_cgroup(source, schema, runtime_name)
    source_cri = effective_cri(source, schema) if schema.merge == "replace" else None
    drop_in_text = render_drop_in(
        schema, runtime_name, binary, systemd_cgroup, default_runtime, source_cri
    )
    old_drop_in = node.read_text(drop_in_path, "drop-in") if node.isfile(drop_in_path) else None

    warnings = [
        "%s is not imported by %s, so containerd ignores it (nvidia-ctk 1.18.0 wrote its drop-in to "
        "config.d while the imports read conf.d); kubegpu's runtime is in %s"
        % (stray, main_path, drop_in_path)
        for stray in stray_drop_ins(
            main_path,
            drop_in_dir,
            scan_top_level(new_main, main_path)["imports"]["values"],
            node,
        )
    ]
    if not node.exists(binary):
        warnings.append(
            "%s does not exist on this host yet; containerd loads the config, but pods of the %s runtime "
            "fail until nvidia-container-toolkit is installed" % (binary, runtime_name)
        )
    return {
        "containerd_version": "%d.%d.%d" % version,
        "containerd_version_tuple": version,
        "schema": schema,
        "config_version": main_version if main_exists else schema.config_version,
        "main_path": main_path,
        "main_exists": main_exists,
        "main_before": main_text,
        "main_after": new_main,
        "drop_in_path": drop_in_path,
        "drop_in_before": old_drop_in,
        "drop_in_after": drop_in_text,
        "import_entry": import_entry,
        "systemd_cgroup": systemd_cgroup,
        "systemd_cgroup_source": systemd_source,
        "warnings": warnings,
    }


# --- the module's parameters and result, shared with the action plugin ----------------------------

ARGUMENT_SPEC = dict(
    config_path=dict(type="path", default="/etc/containerd/config.toml"),
    drop_in_dir=dict(type="path", default="/etc/containerd/conf.d"),
    drop_in_name=dict(type="str", default="99-nvidia.toml"),
    runtime_name=dict(type="str", default="nvidia"),
    runtime_binary=dict(type="path", default="/usr/bin/nvidia-container-runtime"),
    default_runtime=dict(type="bool", default=False),
    validate=dict(type="bool", default=True),
    validate_timeout=dict(type="int", default=30),
    containerd_binary=dict(type="path"),
    ctr_binary=dict(type="path"),
    backup=dict(type="bool", default=True),
    state=dict(type="str", default="present", choices=["present", "absent"]),
    record_path=dict(type="str", default="/etc/ansible/facts.d/kubegpu_containerd.fact"),
)
# Where containerd and ctr are looked for before PATH (get_bin_path's opt_dirs).
BINARY_DIRS = ["/usr/local/bin", "/usr/bin"]
# The environment of the containerd commands the module runs.
COMMAND_ENVIRONMENT = {"LC_ALL": "C", "LANG": "C"}
RUNTIME_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def initial_result(params):
    """The module's result before anything is read."""
    return dict(
        changed=False,
        restart_required=False,
        drop_in_path=os.path.join(params["drop_in_dir"], params["drop_in_name"]),
        config_changed=False,
        drop_in_changed=False,
        validation={"dump": "not run", "daemon": "not run"},
        backup_files=[],
        toml_parser=toml_parser_name(),
    )


def param_problem(params):
    """The message for the first parameter the module refuses (state=absent uses only
    record_path), or None."""
    if params["record_path"] and not os.path.isabs(params["record_path"]):
        return (
            "record_path %r must be an absolute path (or empty to keep no record)"
            % params["record_path"]
        )
    if params["state"] == "absent":
        return None
    if not RUNTIME_NAME.match(params["runtime_name"]):
        return (
            "runtime_name %r is not a valid RuntimeClass handler: lowercase letters, digits and "
            "'-', starting and ending with a letter or digit, at most 63 characters"
            % params["runtime_name"]
        )
    if not os.path.isabs(params["runtime_binary"]):
        return (
            "runtime_binary %r must be an absolute path (containerd runs BinaryName without a "
            "search path), for example /usr/bin/nvidia-container-runtime" % params["runtime_binary"]
        )
    if params["validate_timeout"] < 1:
        return "validate_timeout must be at least 1 second, got %d" % params["validate_timeout"]
    return None


def not_installed_message(containerd):
    return (
        "containerd is not installed on this host (no containerd binary%s); install it first "
        "(container_runtime_install: true installs the distribution's package)"
        % (" at %s" % containerd if containerd else " on PATH")
    )


def plan_for(params, run, containerd, node=None):
    """plan() for the module's parameters."""
    return plan(
        run,
        containerd,
        params["config_path"],
        params["drop_in_dir"],
        params["drop_in_name"],
        params["runtime_name"],
        params["runtime_binary"],
        params["default_runtime"],
        node=node,
    )


def update_result(result, planned):
    """Put what plan() found into the result; returns whether anything changes."""
    config_changed = planned["main_before"] != planned["main_after"]
    drop_in_changed = planned["drop_in_before"] != planned["drop_in_after"]
    changed = config_changed or drop_in_changed
    result.update(
        containerd_version=planned["containerd_version"],
        config_version=planned["config_version"],
        schema=planned["schema"].as_dict(),
        systemd_cgroup=planned["systemd_cgroup"],
        systemd_cgroup_source=planned["systemd_cgroup_source"],
        changed=changed,
        restart_required=changed,
        config_changed=config_changed,
        drop_in_changed=drop_in_changed,
    )
    return changed


# --- what kubegpu did, and undoing exactly that -----------------------------------------------------
#
# The module keeps a record of its changes to the main config in a local fact file (JSON, read
# by `setup` as ansible_facts['local'][<name>]), so that a reset removes exactly the imports
# entry kubegpu added and keeps every later change the user made, instead of putting an old
# backup back over them. The record says, for the latest time kubegpu added the entry, whether
# it also created the `imports` line (or the whole main config) then.

RECORD_FORMAT = 1


def remove_import(text, entry, drop_line_if_empty, source="config.toml"):
    """Return `text` with `entry` taken out of its top-level `imports`, changing nothing else.

    Only that element (and the separator next to it) goes; the array keeps its layout. When it
    was the only element, the line goes too if `drop_line_if_empty`, else `imports = []` stays.
    Returns `text` unchanged when the entry is not there.
    """
    scan = scan_top_level(text, source)
    imports = scan["imports"]
    if imports is None or entry not in imports["values"]:
        return text
    index = imports["values"].index(entry)
    spans = imports["spans"]
    if len(spans) == 1:
        if drop_line_if_empty:
            return text[: imports["line_start"]] + text[imports["line_end"] :]
        return text[: imports["value_start"]] + "[]" + text[imports["close"] + 1 :]
    start, end = spans[index]
    if index + 1 < len(spans):
        return text[:start] + text[spans[index + 1][0] :]
    return text[: spans[index - 1][1]] + text[end:]


def record_after_apply(record, planned, main_changed):
    """The record to keep after the module applied `planned` (a result of plan())."""
    record = dict(record or {})
    record.update(
        {
            "format": RECORD_FORMAT,
            "config_path": planned["main_path"],
            "drop_in": planned["drop_in_path"],
            "import_entry": planned["import_entry"],
        }
    )
    if main_changed:
        before = planned["main_before"]
        record["config_created"] = before is None
        record["import_added"] = True
        record["imports_line_added"] = (
            before is None or scan_top_level(before, planned["main_path"])["imports"] is None
        )
    else:
        record.setdefault("import_added", False)
        record.setdefault("config_created", False)
        record.setdefault("imports_line_added", False)
    return record


def plan_removal(main_text, record, import_entry, oldest_backup_text=None, source="config.toml"):
    """What a reset does with the main config: ("keep"|"edit"|"remove", new_text, why).

    With a record, the entry is taken out exactly when kubegpu added it. Without one (files left
    by a kubegpu that kept no record), the oldest backup kubegpu made decides: when it lacks the
    entry, kubegpu added it. The file goes only when kubegpu created it and nothing but its own
    lines is in it.
    """
    if main_text is None:
        return "keep", None, "there is no main config"
    if record and record.get("import_entry"):
        import_entry = record["import_entry"]
    scan = scan_top_level(main_text, source)
    present = bool(scan["imports"]) and import_entry in scan["imports"]["values"]
    if not present:
        return "keep", main_text, "the main config does not import %s" % import_entry
    if record:
        if not record.get("import_added"):
            return "keep", main_text, "the imports entry was there before kubegpu"
        drop_line = bool(record.get("imports_line_added"))
        why = "kubegpu added the imports entry (recorded)"
    elif oldest_backup_text is not None:
        old = scan_top_level(oldest_backup_text, source)["imports"]
        if old is not None and import_entry in old["values"]:
            return "keep", main_text, "the oldest backup already imports %s" % import_entry
        drop_line = old is None
        why = "the oldest backup kubegpu made does not import %s" % import_entry
    else:
        return "keep", main_text, "no record and no backup says kubegpu added the imports entry"
    new_text = remove_import(main_text, import_entry, drop_line, source)
    if record and record.get("config_created"):
        rest = [
            ln
            for ln in new_text.splitlines()
            if ln.strip() and not ln.lstrip().startswith("#") and not re.match(r"^version\s*=", ln)
        ]
        if not rest:
            return "remove", None, "kubegpu created the main config and nothing else is in it"
    return "edit", new_text, why
