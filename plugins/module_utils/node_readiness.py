# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Readiness of one GPU node, layer by layer, as data.

Two steps, both free of side effects:

1. read_host_view(host_root, runtime) reads what the checks need from a host's file system
   (sysfs, /proc, /dev, configuration files), addressed through host_root so that a mounted
   host (/host in a container) or a test tree can be read the same way as /.
2. evaluate(view, smi, options) turns that view plus the result of nvidia_smi.query() and the
   expectations into a list of checks: name, layer, status (pass|fail|warn|skip), observed,
   expected, remedy (for fail and warn). verdict(checks) sums them up.

Runs on the target's Python (3.8+), standard library only.
"""

from __future__ import absolute_import, division, print_function

import json
import os
import time

from ansible_collections.kubegpu.gpu.plugins.module_utils.cdi_spec import (
    NVIDIA_GPU_KIND,
    CdiSpecError,
    name_kind,
    read_spec,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.node_gpu_checks import (
    _smi_reason,
    smi_gpus,
    gpu_label,
    smi_ok,
    check_device_nodes,
    check_driver_branch,
    check_ecc,
    check_fabric_manager,
    check_gpu_count,
    check_mig,
    check_module_version,
    check_modules,
    check_nouveau,
    check_nvidia_smi,
    check_pci,
    check_persistence,
    check_retired_pages,
    check_row_remapping,
    make_check,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.node_host import (
    CDI_DIRS,
    CONTAINERD_CONFIGS,
    DEVICE_PLUGIN_DIR,
    DOCKER_CONFIG,
    FABRIC_MANAGER_UNIT,
    KUBELET_UNITS,
    LAYERS,
    RUNTIME_UNITS,
    STATUSES,
    TOOLKIT_BINARIES,
    nvidia_runtime_paths,
    scan_files,
    find_binary,
    host_path,
    read_host_view,
    scan_toml,
    toml_get,
)

__metaclass__ = type

__all__ = [
    "FABRIC_MANAGER_UNIT",
    "KUBELET_UNITS",
    "LAYERS",
    "RUNTIME_UNITS",
    "STATUSES",
    "evaluate",
    "failing",
    "make_check",
    "read_host_view",
    "scan_toml",
    "summarize",
    "toml_get",
    "verdict",
]


def _invalid_toml(name, layer, expected, invalid, runtime):
    return make_check(
        name,
        layer,
        "fail",
        "not valid TOML: " + "; ".join(invalid),
        expected,
        "%s does not start with a config it cannot read: fix the file at the place named."
        % runtime,
    )


def check_toolkit(view, runtime):
    expected = "nvidia-container-runtime or nvidia-ctk installed"
    if runtime == "none":
        return make_check(
            "container_toolkit_installed", "container_toolkit", "skip", "runtime is none", expected
        )
    found = dict((k, v) for k, v in view["toolkit"].items() if v)
    observed = ", ".join(sorted(found.values())) or "none of " + ", ".join(TOOLKIT_BINARIES)
    if found.get("nvidia-container-runtime") or found.get("nvidia-ctk"):
        return make_check(
            "container_toolkit_installed", "container_toolkit", "pass", observed, expected
        )
    return make_check(
        "container_toolkit_installed",
        "container_toolkit",
        "fail",
        observed,
        expected,
        "Install nvidia-container-toolkit with role kubegpu.gpu.nvidia_container_toolkit.",
    )


CDI_REMEDY = (
    "Generate it: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (role "
    "kubegpu.gpu.nvidia_container_toolkit does), or let NVIDIA's nvidia-cdi-refresh units keep "
    "/var/run/cdi/nvidia.yaml current (`systemctl enable --now nvidia-cdi-refresh.path`); "
    "generate again after a driver, GPU or MIG change."
)


def _cdi_specs(view):
    """([(path, spec)] of kind nvidia.com/gpu, [problems of specs that do not read])."""
    specs, problems = [], []
    for item in view["cdi_specs"]:
        try:
            spec = read_spec(item["text"], item["path"])
        except CdiSpecError as exc:
            problems.append(str(exc))
            continue
        if spec["kind"] == NVIDIA_GPU_KIND:
            specs.append((item["path"], spec))
    return specs, problems


def _cdi_coverage(gpus, names):
    """(missing, foreign, unmatched MIG UUIDs) of the node's GPUs and MIG devices against the
    spec's device names. A GPU is named by its index (`0`, `gpu0`) or UUID; a GPU in MIG mode
    by each of its MIG devices (`0:1`, `mig0:1` or the MIG UUID) instead. Foreign: a name that
    points at a GPU, MIG device or UUID this node does not have."""
    kinds = [(n, *name_kind(n)) for n in names]
    gpu_indices = set(g["index"] for g in gpus)
    gpu_uuids = set(g.get("uuid") for g in gpus if g.get("uuid"))
    mig_indices, mig_uuids, unknown_mig_uuid = set(), set(), False
    for gpu in gpus:
        if gpu["mig"]["current"]:
            for device in gpu["mig"]["devices"]:
                mig_indices.add((gpu["index"], device["index"]))
                if device.get("uuid"):
                    mig_uuids.add(device["uuid"])
                else:
                    unknown_mig_uuid = True
    named = set(n for n, _kind, _value in kinds)
    missing = []
    for gpu in gpus:
        if gpu["mig"]["current"]:
            for device in gpu["mig"]["devices"]:
                labels = ["%d:%d" % (gpu["index"], device["index"])]
                labels.append("mig" + labels[0])
                if device.get("uuid"):
                    labels.append(device["uuid"])
                if not named.intersection(labels):
                    missing.append("MIG device %s of %s" % (labels[0], gpu_label(gpu)))
            continue
        labels = [str(gpu["index"]), "gpu%d" % gpu["index"], gpu.get("uuid")]
        if not named.intersection(labels):
            missing.append(gpu_label(gpu) + (" " + gpu["uuid"] if gpu.get("uuid") else ""))
    foreign, unmatched = [], []
    for name, kind, value in kinds:
        known = {"gpu-index": gpu_indices, "gpu-uuid": gpu_uuids, "mig-index": mig_indices}
        if kind in known and value not in known[kind]:
            foreign.append(name)
        elif kind == "mig-uuid" and value not in mig_uuids:
            (unmatched if unknown_mig_uuid else foreign).append(name)
    return missing, foreign, unmatched


def check_cdi(view, smi, runtime):
    """The node's CDI specs of kind nvidia.com/gpu read as YAML or JSON: they must exist, read,
    define each device once, and name every GPU and MIG device of the node and no other."""
    name, layer = "cdi_spec", "container_toolkit"
    expected = (
        "a CDI spec of kind nvidia.com/gpu in /etc/cdi or /var/run/cdi naming every GPU (index "
        "or UUID) and MIG device of this node, and none it does not have"
    )
    if runtime == "none":
        return make_check(name, layer, "skip", "runtime is none", expected)
    specs, problems = _cdi_specs(view)
    if problems:
        return make_check(
            name,
            layer,
            "fail",
            "; ".join(problems),
            expected,
            "The runtime cannot inject devices from a spec it cannot read. " + CDI_REMEDY,
        )
    if not specs:
        return make_check(
            name,
            layer,
            "fail",
            "no CDI spec of kind %s in %s" % (NVIDIA_GPU_KIND, ", ".join(CDI_DIRS)),
            expected,
            "With CDI (the default) pods get no GPU without it. " + CDI_REMEDY,
        )
    where = {}
    for path, spec in specs:
        for device in spec["devices"]:
            where.setdefault(device, []).append(path)
    observed = "%s; devices: %s" % (
        ", ".join(path for path, _spec in specs),
        ", ".join(sorted(where)) or "none",
    )
    if not where:
        return make_check(name, layer, "fail", observed, expected, CDI_REMEDY)
    twice = sorted(n for n, paths in where.items() if len(paths) > 1)
    if twice:
        return make_check(
            name,
            layer,
            "fail",
            observed + "; defined in more than one spec: " + ", ".join(twice),
            expected,
            "The runtime's CDI registry refuses device names that two specs define: keep one "
            "nvidia.com/gpu spec (remove the stale file), then generate it again.",
        )
    if not smi_ok(smi):
        return make_check(name, layer, "skip", observed + "; " + _smi_reason(smi), expected)
    missing, foreign, unmatched = _cdi_coverage(smi_gpus(smi), sorted(where))
    if missing or foreign:
        parts = []
        if missing:
            parts.append("not in the spec: " + ", ".join(missing))
        if foreign:
            parts.append("not on this node: " + ", ".join(foreign))
        return make_check(
            name,
            layer,
            "fail",
            observed + "; " + "; ".join(parts),
            expected,
            "The spec is stale (made before a GPU, driver or MIG change, or on another "
            "machine). " + CDI_REMEDY,
        )
    if unmatched:
        return make_check(
            name,
            layer,
            "warn",
            observed + "; MIG UUIDs not checked (nvidia-smi gave none): " + ", ".join(unmatched),
            expected,
            "Check them against `nvidia-smi -L`; " + CDI_REMEDY,
        )
    return make_check(name, layer, "pass", observed, expected)


def _binary_present(view, path):
    if path.startswith("/"):
        return os.path.isfile(host_path(view["host_root"], path))
    return find_binary(view["host_root"], path) is not None


def _check_containerd(view):
    name, layer = "runtime_nvidia_configured", "container_runtime"
    expected = "containerd config (with its imports) defines the nvidia runtime"
    data = view["containerd"] or {}
    remedy = (
        "Let role kubegpu.gpu.container_runtime write the nvidia runtime drop-in and import it "
        "from the main config (module kubegpu.gpu.containerd_runtime)."
    )
    main = data.get("main")
    if not main:
        return make_check(
            name,
            layer,
            "fail",
            "no containerd config (%s): built-in defaults have no nvidia runtime"
            % ", ".join(CONTAINERD_CONFIGS),
            expected,
            remedy,
        )
    files, invalid = scan_files([main] + data["imported"])
    if invalid:
        return _invalid_toml(name, layer, expected, invalid, "containerd")
    main_version = toml_get(files[0][1], ("version",))
    defined, binaries, defaults, too_new = [], [], [], []
    for item, entries in files:
        if nvidia_runtime_paths(entries, "plugins"):
            defined.append(item["path"])
        for key, value in nvidia_runtime_paths(entries, "plugins"):
            if key[-1] == "BinaryName" and isinstance(value, str):
                binaries.append(value)
        for key, value in entries:
            if key and key[-1] == "default_runtime_name" and isinstance(value, str):
                defaults.append(value)
        version = toml_get(entries, ("version",))
        if (
            item is not main
            and isinstance(version, int)
            and isinstance(main_version, int)
            and version > main_version
        ):
            too_new.append("%s (version %d > %d)" % (item["path"], version, main_version))
    observed = "%s (version %s), imports %s" % (
        main["path"],
        main_version,
        data["imports"] or "none",
    )
    if too_new:
        return make_check(
            name,
            layer,
            "fail",
            observed + "; drop-in newer than main config: " + ", ".join(too_new),
            expected,
            "containerd exits when an imported file has a higher config version than "
            "the main config: write the drop-in with the main config's version.",
        )
    if not defined:
        stray = [
            f["path"]
            for f, entries in scan_files(data["unimported"])[0]
            if nvidia_runtime_paths(entries, "plugins")
        ]
        if stray:
            return make_check(
                name,
                layer,
                "fail",
                observed
                + "; nvidia runtime only in files containerd does not import: "
                + ", ".join(stray),
                expected,
                "Add the drop-in's directory to `imports` in %s (nvidia-ctk 1.18.0 writes to "
                "/etc/containerd/config.d while imports often name conf.d), then restart "
                "containerd." % main["path"],
            )
        return make_check(name, layer, "fail", observed + "; no nvidia runtime", expected, remedy)
    observed += "; nvidia runtime in " + ", ".join(defined)
    if defaults:
        observed += "; default runtime " + defaults[-1]
    missing = [b for b in binaries if not _binary_present(view, b)]
    if binaries:
        observed += "; BinaryName " + ", ".join(binaries)
    if missing:
        return make_check(
            name,
            layer,
            "fail",
            observed + "; missing: " + ", ".join(missing),
            expected,
            "Install nvidia-container-toolkit, or point BinaryName at "
            "where nvidia-container-runtime is installed.",
        )
    return make_check(name, layer, "pass", observed, expected)


def _check_docker(view):
    name, layer = "runtime_nvidia_configured", "container_runtime"
    expected = "%s defines runtimes.nvidia" % DOCKER_CONFIG
    remedy = (
        "Configure it with role kubegpu.gpu.container_runtime (or `nvidia-ctk runtime "
        "configure --runtime=docker`) and restart docker."
    )
    item = view["docker"]
    if not item:
        return make_check(name, layer, "fail", "%s not found" % DOCKER_CONFIG, expected, remedy)
    try:
        config = json.loads(item["text"])
    except ValueError as exc:
        return make_check(
            name,
            layer,
            "fail",
            "%s is not valid JSON: %s" % (DOCKER_CONFIG, exc),
            expected,
            "Fix the JSON; dockerd does not start with an invalid daemon.json.",
        )
    runtimes = config.get("runtimes") if isinstance(config, dict) else None
    nvidia = runtimes.get("nvidia") if isinstance(runtimes, dict) else None
    if not isinstance(nvidia, dict):
        return make_check(
            name, layer, "fail", "%s has no runtimes.nvidia" % DOCKER_CONFIG, expected, remedy
        )
    path = nvidia.get("path") or ""
    observed = "runtimes.nvidia.path %s; default-runtime %s" % (
        path or "(none)",
        config.get("default-runtime", "runc (unset)"),
    )
    if not path or not _binary_present(view, path):
        return make_check(
            name,
            layer,
            "fail",
            observed + "; runtime binary not found",
            expected,
            "Install nvidia-container-toolkit, or fix runtimes.nvidia.path.",
        )
    return make_check(name, layer, "pass", observed, expected)


def _check_crio(view):
    name, layer = "runtime_nvidia_configured", "container_runtime"
    expected = "CRI-O config defines [crio.runtime.runtimes.nvidia]"
    files = view["crio"] or []
    scanned, invalid = scan_files(files)
    if invalid:
        return _invalid_toml(name, layer, expected, invalid, "CRI-O")
    defined, paths = [], []
    for item, entries in scanned:
        found = nvidia_runtime_paths(entries, "crio")
        if found:
            defined.append(item["path"])
        paths.extend(v for k, v in found if k[-1] == "runtime_path" and isinstance(v, str))
    read = ", ".join(f["path"] for f in files) or "no CRI-O config"
    if not defined:
        return make_check(
            name,
            layer,
            "fail",
            read + "; no nvidia runtime",
            expected,
            "Configure it with role kubegpu.gpu.container_runtime (or `nvidia-ctk "
            "runtime configure --runtime=crio`) and restart crio.",
        )
    observed = "nvidia runtime in " + ", ".join(defined)
    missing = [p for p in paths if not _binary_present(view, p)]
    if missing:
        return make_check(
            name,
            layer,
            "fail",
            observed + "; missing: " + ", ".join(missing),
            expected,
            "Install nvidia-container-toolkit, or fix runtime_path.",
        )
    return make_check(name, layer, "pass", observed, expected)


def check_runtime(view, runtime):
    if runtime == "none":
        return make_check(
            "runtime_nvidia_configured",
            "container_runtime",
            "skip",
            "runtime is none",
            "no container runtime to check",
        )
    return {"containerd": _check_containerd, "docker": _check_docker, "crio": _check_crio}[runtime](
        view
    )


def _service_check(name, layer, units, services, services_reason, remedy):
    expected = "one of %s active" % ", ".join(units)
    if services is None:
        return make_check(
            name, layer, "skip", "service state unknown: " + services_reason, expected
        )
    states = ", ".join("%s %s" % (u, services.get(u) or "unknown") for u in units)
    if any(services.get(u) == "active" for u in units):
        return make_check(name, layer, "pass", states, expected)
    return make_check(name, layer, "fail", states, expected, remedy)


def check_runtime_service(runtime, services, services_reason):
    if runtime == "none":
        return make_check(
            "runtime_service",
            "container_runtime",
            "skip",
            "runtime is none",
            "no container runtime to check",
        )
    return _service_check(
        "runtime_service",
        "container_runtime",
        RUNTIME_UNITS[runtime],
        services,
        services_reason,
        "Start it: `systemctl enable --now %s`, and read "
        "`journalctl -u %s` if it does not stay up." % (runtime, runtime),
    )


def _when(seconds):
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def check_config_loaded(name, layer, daemon, units, view, services, started, reason):
    """Whether the running daemon started after its configuration files last changed, and no
    kubegpu run left its restart pending: else it runs a configuration other than the files'."""
    expected = "the running %s started after its configuration files last changed" % daemon
    times = view.get("config_times") or {}
    files = times.get("runtime" if layer == "container_runtime" else "kubelet") or []
    if services is None or started is None:
        return make_check(name, layer, "skip", "start time unknown: " + reason, expected)
    active = [u for u in units if services.get(u) == "active" and started.get(u) is not None]
    if not active:
        return make_check(name, layer, "skip", "%s is not running" % daemon, expected)
    unit = active[0]
    start = started[unit]
    restart = "Restart it so that it loads them: `systemctl restart %s`." % unit
    if daemon in (times.get("pending") or []):
        return make_check(
            name,
            layer,
            "fail",
            "a kubegpu run changed the configuration of %s and was cut off before restarting "
            "it (%s started %s)" % (daemon, unit, _when(start)),
            expected,
            "Run kubegpu again (it restarts %s), or: `systemctl restart %s`." % (daemon, unit),
        )
    # One second of slack: file systems with coarse timestamps.
    newer = [(path, mtime) for path, mtime in files if mtime > start + 1]
    if newer:
        return make_check(
            name,
            layer,
            "fail",
            "%s started %s, before %s changed (%s)"
            % (
                unit,
                _when(start),
                ", ".join(path for path, _ in newer),
                ", ".join(_when(m) for _, m in newer),
            ),
            expected,
            restart,
        )
    return make_check(
        name,
        layer,
        "pass",
        "%s started %s, after its %d configuration file(s) last changed"
        % (unit, _when(start), len(files)),
        expected,
    )


def check_kubelet(view, services, services_reason, enabled):
    if not enabled:
        return [
            make_check(n, "kubelet", "skip", "check_kubelet is false", "not checked")
            for n in (
                "kubelet_running",
                "kubelet_device_plugin_socket",
                "nvidia_device_plugin_registered",
            )
        ]
    checks = [
        _service_check(
            "kubelet_running",
            "kubelet",
            KUBELET_UNITS,
            services,
            services_reason,
            "Start the kubelet (`systemctl enable --now kubelet`) and read "
            "`journalctl -u kubelet`; join the node to the cluster first.",
        )
    ]
    sockets = view["device_plugin_sockets"]
    expected = DEVICE_PLUGIN_DIR + "/kubelet.sock"
    if sockets is not None and "kubelet.sock" in sockets:
        checks.append(
            make_check(
                "kubelet_device_plugin_socket", "kubelet", "pass", expected + " present", expected
            )
        )
    else:
        checks.append(
            make_check(
                "kubelet_device_plugin_socket",
                "kubelet",
                "fail",
                expected + " missing",
                expected,
                "The kubelet creates its device plugin socket when it runs: start the kubelet; with a "
                "non-default --root-dir, mount that directory where the device plugin expects it.",
            )
        )
    plugins = [s for s in (sockets or []) if s.startswith("nvidia")]
    expected = "an nvidia*.sock registered in " + DEVICE_PLUGIN_DIR
    if plugins:
        checks.append(
            make_check(
                "nvidia_device_plugin_registered", "kubelet", "pass", ", ".join(plugins), expected
            )
        )
    else:
        checks.append(
            make_check(
                "nvidia_device_plugin_registered",
                "kubelet",
                "warn",
                "no nvidia device plugin socket",
                expected,
                "Deploy the NVIDIA device plugin (role kubegpu.gpu.gpu_cluster) and check "
                "its pod on this node.",
            )
        )
    return checks


DEFAULT_OPTIONS = {
    "expected_gpu_count": None,
    "driver_branch": None,
    "mig_mode": None,
    "runtime": "containerd",
    "check_kubelet": True,
    "services": None,
    "services_reason": "not asked",
    "started": None,
    "started_reason": "not asked",
}


def evaluate(view, smi, options=None):
    """All checks, in layer order. smi is nvidia_smi.query()'s result; options as DEFAULT_OPTIONS.

    options["services"] maps unit names to `systemctl is-active` answers, or is None when the
    service state cannot be read (host_root is not /); options["services_reason"] says why.
    options["started"] maps active units to when they last started (seconds since the epoch),
    or is None (options["started_reason"] says why).
    """
    opts = dict(DEFAULT_OPTIONS)
    opts.update(options or {})
    runtime = opts["runtime"]
    services = opts["services"]
    reason = opts["services_reason"]
    checks = [check_pci(view)]
    checks.extend(check_nouveau(view))
    checks.append(check_modules(view))
    checks.append(check_module_version(view, smi))
    checks.append(check_device_nodes(view, smi))
    checks.append(check_nvidia_smi(smi))
    checks.append(check_gpu_count(view, smi, opts["expected_gpu_count"]))
    checks.append(check_driver_branch(view, smi, opts["driver_branch"]))
    checks.append(check_persistence(smi))
    checks.append(check_fabric_manager(view, smi, services, reason))
    checks.append(check_ecc(smi))
    checks.append(check_retired_pages(smi))
    checks.append(check_row_remapping(smi))
    checks.append(check_mig(smi, opts["mig_mode"]))
    checks.append(check_toolkit(view, runtime))
    checks.append(check_cdi(view, smi, runtime))
    checks.append(check_runtime(view, runtime))
    checks.append(check_runtime_service(runtime, services, reason))
    started, started_reason = opts["started"], opts["started_reason"]
    if runtime != "none":
        checks.append(
            check_config_loaded(
                "runtime_config_loaded",
                "container_runtime",
                runtime,
                RUNTIME_UNITS[runtime],
                view,
                services,
                started,
                started_reason,
            )
        )
    checks.extend(check_kubelet(view, services, reason, opts["check_kubelet"]))
    if opts["check_kubelet"]:
        checks.append(
            check_config_loaded(
                "kubelet_config_loaded",
                "kubelet",
                "kubelet",
                KUBELET_UNITS,
                view,
                services,
                started,
                started_reason,
            )
        )
    return checks


def summarize(checks):
    counts = dict((s, 0) for s in STATUSES)
    for check in checks:
        counts[check["status"]] += 1
    return counts


def verdict(checks):
    """not_ready if any check failed, ready_with_warnings if any warned, else ready."""
    counts = summarize(checks)
    if counts["fail"]:
        return "not_ready"
    if counts["warn"]:
        return "ready_with_warnings"
    return "ready"


def failing(checks, fail_on):
    """The checks whose status is one of fail_on."""
    return [c for c in checks if c["status"] in fail_on]
