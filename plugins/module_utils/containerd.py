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

This file holds the config model (versions, schemas, the effective CRI section, the drop-in), the
imports and the plan. Beside it: containerd_validate.py checks a candidate with the real containerd
(config dump and a throwaway daemon), containerd_reset.py keeps the record of what kubegpu changed
and undoes exactly that, containerd_params.py has the module's parameters and result.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import glob
import os
import re
import shutil
import tempfile

from ansible_collections.kubegpu.gpu.plugins.module_utils import toml_text

# containerd's runc shim: runc's own type, and the nvidia runtime's (it runs through the shim).
RUNC_RUNTIME_TYPE = "io.containerd.runc.v2"
NVIDIA_RUNTIME_TYPE = RUNC_RUNTIME_TYPE
HIGHEST_KNOWN_CONFIG_VERSION = 3
# Where the container toolkit writes CDI specs (nvidia-ctk cdi generate, nvidia-cdi-refresh):
# containerd's own default spec directories, which the CRI plugin must read.
CDI_SPEC_DIRS = ["/etc/cdi", "/var/run/cdi"]
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


def cgroup_runtimes(effective, schema, runtime_name, systemd_cgroup):
    """The runtimes a set cgroup driver changes, as the drop-in writes them: the default one
    (unless it is ours) and runc, each copied whole from the effective config with SystemdCgroup
    set (2.x decodes a runtime's table whole, so a table with only that key would lose the
    runtime's type), or a runc of containerd's default type where the config has none."""
    cri = effective_cri(effective, schema)
    runtimes = _get(cri, ["containerd", "runtimes"], {}) or {}
    default_name = _get(cri, ["containerd", "default_runtime_name"], "runc")
    names = [n for n in (default_name, "runc") if n and n != runtime_name]
    found = {}
    for name in dict.fromkeys(names):
        runtime = runtimes.get(name)
        if isinstance(runtime, dict):
            found[name] = copy.deepcopy(runtime)
    if not found:
        found["runc"] = {"runtime_type": RUNC_RUNTIME_TYPE}
    for runtime in found.values():
        options = runtime.get("options")
        if not isinstance(options, dict):
            options = runtime["options"] = {}
        options["SystemdCgroup"] = bool(systemd_cgroup)
    return found


def cdi_settings(effective, schema, containerd_version, cdi):
    """What the drop-in sets for CDI, and what containerd will do: (settings, state, warnings).

    `settings` are keys of the CRI runtime plugin's own section (``enable_cdi``,
    ``cdi_spec_dirs``); `state` is {"enabled", "spec_dirs", "source"} as containerd will run.
    containerd 1.7 has CDI off by default (``enable_cdi = false``): the drop-in turns it on with
    the spec directories. containerd 2.x has it on by default: the drop-in sets a key only where
    the effective config (main config and other imports) turned it off or dropped a directory.
    containerd 1.6 has no CDI. With `cdi` false nothing is set and the config keeps its own.
    """
    cri = effective_cri(effective, schema)
    enabled = cri.get("enable_cdi")
    dirs = cri.get("cdi_spec_dirs")
    dirs = list(dirs) if isinstance(dirs, list) else []
    state = {"enabled": enabled is True, "spec_dirs": dirs, "source": "config"}
    if not cdi:
        state["source"] = "not managed (cdi false)"
        return {}, state, []
    major, minor = containerd_version[0], containerd_version[1]
    if major == 1 and minor < 7:
        state.update(enabled=False, spec_dirs=[], source="unsupported")
        return (
            {},
            state,
            [
                "containerd %d.%d.%d has no CDI support (containerd 1.7 brought enable_cdi), so "
                "devices are injected the legacy way through the nvidia runtime; upgrade "
                "containerd to 1.7 or 2.x for CDI, or set cdi false (container_runtime_cdi) to "
                "say the legacy way is meant" % tuple(containerd_version[:3])
            ],
        )
    settings = {}
    if enabled is not True or schema.merge == "replace":
        settings["enable_cdi"] = True
    missing = [d for d in CDI_SPEC_DIRS if d not in dirs]
    if missing or schema.merge == "replace":
        settings["cdi_spec_dirs"] = dirs + missing
    if settings:
        state.update(enabled=True, spec_dirs=dirs + missing, source="drop-in")
    else:
        state["source"] = "containerd default"
    return settings, state, []


IMAGES_PLUGIN = "io.containerd.cri.v1.images"


def registry_plugins(schema):
    """(the plugin in a file of this schema, the plugin in the dump) whose ``registry`` table
    holds ``config_path``: the CRI plugin on 1.x and in version 2 files, the images plugin of
    2.x in version 3 files and dumps."""
    effective = IMAGES_PLUGIN if schema.merge == "deep" else schema.effective_plugin_id
    return (IMAGES_PLUGIN if schema.config_version == 3 else schema.plugin_id), effective


def render_drop_in(
    schema,
    runtime_name,
    binary,
    systemd_cgroup,
    default_runtime,
    source_cri=None,
    cdi=None,
    registry_config_path=None,
    nvidia=True,
    set_cgroup=None,
):
    """The drop-in text for `schema`.

    For "replace" (containerd 1.x) `source_cri` is the effective CRI section of everything but
    this drop-in; it is copied and the nvidia runtime added, because 1.x replaces the section.
    `cdi` holds the CDI keys of the section (from cdi_settings). Without `nvidia` the drop-in
    has no nvidia runtime (a host with no GPU that still needs the rest). `set_cgroup` are the
    runtimes whose SystemdCgroup the drop-in sets (cgroup_runtimes), None to leave them.
    """
    runtime = {
        "runtime_type": NVIDIA_RUNTIME_TYPE,
        "options": {"BinaryName": binary, "SystemdCgroup": bool(systemd_cgroup)},
    }
    default_runtime = default_runtime and nvidia
    added = []
    if nvidia:
        added.append("the %s runtime" % runtime_name)
    if set_cgroup:
        added.append(
            "SystemdCgroup = %s on %s"
            % ("true" if systemd_cgroup else "false", ", ".join(sorted(set_cgroup)))
        )
    added_text = " and ".join(added) or "kubegpu's settings"
    if schema.merge == "replace":
        section = copy.deepcopy(source_cri or {})
        containerd = section.setdefault("containerd", {})
        runtimes = containerd.setdefault("runtimes", {})
        runtimes.update(copy.deepcopy(set_cgroup or {}))
        if nvidia:
            runtimes[runtime_name] = runtime
        if default_runtime:
            containerd["default_runtime_name"] = runtime_name
        why = [
            "containerd 1.x replaces a whole plugin section with the one from an imported file, so",
            "this file carries the CRI section of the main config (as `containerd config dump`",
            "shows it) plus %s; kubegpu derives it again on every run." % added_text,
        ]
    else:
        containerd = {}
        if default_runtime:
            containerd["default_runtime_name"] = runtime_name
        runtimes = copy.deepcopy(set_cgroup or {})
        if nvidia:
            runtimes[runtime_name] = runtime
        if runtimes:
            containerd["runtimes"] = runtimes
        section = {"containerd": containerd} if containerd else {}
        why = [
            "containerd 2.x merges imported files key by key: only %s is here." % added_text
            if added
            else "containerd 2.x merges imported files key by key: only kubegpu's settings are here."
        ]
        if cdi:
            why.append("CDI is on by default in 2.x; the other files turned off what is set here.")
    if cdi:
        section.update(cdi)
    data = {}
    if schema.write_version:
        data["version"] = schema.config_version
    data["plugins"] = {schema.plugin_id: section}
    if registry_config_path:
        plugin = registry_plugins(schema)[0]
        table = data["plugins"].setdefault(plugin, {}).setdefault("registry", {})
        table["config_path"] = registry_config_path
        why.append(
            "The registry mirrors' hosts.toml files are read from %s." % registry_config_path
        )
    head = ["# %s. Changes here are overwritten." % MANAGED_MARK] + ["# " + w for w in why]
    return "\n".join(head) + "\n" + toml_dumps(data, indent=schema.merge == "replace")


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
    return re.fullmatch(_go_segment_regex(pattern), path) is not None


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


# --- containerd config dump -------------------------------------------------------------------------


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
    cdi=True,
    registry_config_path=None,
    nvidia=True,
    systemd_cgroup=None,
):
    """Work out the main config and drop-in texts that wire the runtime in. Changes nothing.

    With `cdi` the drop-in also has containerd read CDI specs (see cdi_settings). Without
    `nvidia` it adds no nvidia runtime. `systemd_cgroup` (True or False) is the SystemdCgroup
    the pods' runtimes must have (the kubelet's cgroup driver is systemd, or cgroupfs): the
    drop-in sets it where the other files have it otherwise. None leaves it as they have it.

    `run(argv)` runs a command and returns (rc, stdout, stderr); `node` reads the node's files
    (LocalFiles where the module runs; the action plugin answers from its sh script's reads).
    """
    node = node or LocalFiles(tmp_root)
    if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,249}[.]toml", drop_in_name):
        raise ContainerdConfigError(
            "drop_in_name %r must be a file name ending in .toml, of letters, digits, '.', '_' "
            "and '-' (the import glob is <dir>/*.toml)" % drop_in_name
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
    found_cgroup, systemd_source = source_systemd_cgroup(source, schema, runtime_name)
    set_cgroup = None
    if systemd_cgroup is None or bool(systemd_cgroup) == found_cgroup:
        systemd_cgroup = found_cgroup
    else:
        systemd_cgroup = bool(systemd_cgroup)
        set_cgroup = cgroup_runtimes(source, schema, runtime_name, systemd_cgroup)
        systemd_source = "set in %s on %s (the other files: %s)" % (
            drop_in_name,
            ", ".join(sorted(set_cgroup)),
            systemd_source,
        )
    source_cri = effective_cri(source, schema) if schema.merge == "replace" else None
    cdi_keys, cdi_state, cdi_warnings = cdi_settings(source, schema, version, cdi)
    drop_in_text = render_drop_in(
        schema,
        runtime_name,
        binary,
        systemd_cgroup,
        default_runtime,
        source_cri,
        cdi_keys,
        registry_config_path,
        nvidia=nvidia,
        set_cgroup=set_cgroup,
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
    ] + cdi_warnings
    if nvidia and not node.exists(binary):
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
        "cgroup_runtimes": sorted(set_cgroup or {}),
        "cdi_settings": cdi_keys,
        "cdi": cdi_state,
        "warnings": warnings,
    }
