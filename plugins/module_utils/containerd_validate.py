# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Checking a candidate containerd configuration with the real containerd, touching no live file.

``validate_candidate`` lays the candidate (main config and drop-in) out in a scratch directory,
has ``containerd config dump`` load it and checks the nvidia runtime in what it reports
(``check_effective``), then starts a throwaway containerd on it, with its own socket, root, state
and listeners (``scratch_overrides``), and asks ``ctr plugins ls`` whether the CRI plugins came up.
The config model and the plan are in module_utils/containerd.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import copy
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from ansible_collections.kubegpu.gpu.plugins.module_utils.containerd import (
    NVIDIA_RUNTIME_TYPE,
    ContainerdConfigError,
    _get,
    dump_config,
    effective_cri,
    expand_imports,
    registry_plugins,
    replace_imports,
    scan_top_level,
    toml_dumps,
    toml_loads,
)


# --- the effective config of a candidate ----------------------------------------------------------


def check_effective(
    effective,
    schema,
    runtime_name,
    binary,
    systemd_cgroup,
    default_runtime,
    cdi=None,
    registry_config_path=None,
    nvidia=True,
    cgroup_runtimes=(),
):
    """What is wrong with a candidate's dumped config (an empty list when all is right).

    `cdi` are the CDI keys the drop-in sets (containerd.cdi_settings): each must show as set;
    so must `registry_config_path` when given. `cgroup_runtimes` name the runtimes whose
    SystemdCgroup the drop-in sets to `systemd_cgroup`; without `nvidia` there is no nvidia
    runtime to find.
    """
    problems = []
    cri = effective_cri(effective, schema)
    for name in cgroup_runtimes:
        where = "plugins.%s.containerd.runtimes.%s" % (schema.effective_plugin_id, name)
        found = _get(cri, ["containerd", "runtimes", name])
        if not isinstance(found, dict):
            problems.append("the effective config has no %s" % where)
            continue
        if not found.get("runtime_type"):
            problems.append("%s has no runtime_type" % where)
        value = _get(found, ["options", "SystemdCgroup"])
        if value is not bool(systemd_cgroup):
            problems.append(
                "%s.options.SystemdCgroup is %r, expected %r" % (where, value, bool(systemd_cgroup))
            )
    if not nvidia:
        return problems
    if registry_config_path:
        plugin = registry_plugins(schema)[1]
        found = _get(effective, ["plugins", plugin, "registry", "config_path"])
        if found != registry_config_path:
            problems.append(
                "plugins.%s.registry.config_path is %r, expected %r"
                % (plugin, found, registry_config_path)
            )
    for key, value in sorted((cdi or {}).items()):
        if cri.get(key) != value:
            problems.append(
                "plugins.%s.%s is %r, expected %r"
                % (schema.effective_plugin_id, key, cri.get(key), value)
            )
    runtime = _get(cri, ["containerd", "runtimes", runtime_name])
    where = "plugins.%s.containerd.runtimes.%s" % (schema.effective_plugin_id, runtime_name)
    if not isinstance(runtime, dict):
        return [*problems, "the effective config has no %s" % where]
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


# --- the scratch containerd -------------------------------------------------------------------------


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
    cdi=None,
    registry_config_path=None,
    nvidia=True,
    cgroup_runtimes=(),
):
    """Check a candidate (main text + drop-in text) with the real containerd, touching no live file.

    The candidate is laid out in a scratch directory: the main text with its imports spelled out
    as files (the candidate drop-in in place of the live one), `containerd config dump` must load
    it and show the nvidia runtime (and the CDI keys `cdi`) as rendered, and (start_daemon) a containerd started on it
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
            effective,
            schema,
            runtime_name,
            binary,
            systemd_cgroup,
            default_runtime,
            cdi,
            registry_config_path,
            nvidia=nvidia,
            cgroup_runtimes=cgroup_runtimes,
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
