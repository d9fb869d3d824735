# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Node readiness: the per-layer checks of the GPU and its driver (PCI, nouveau, kernel
modules, device nodes, nvidia-smi, driver branch, persistence, fabric manager, ECC, MIG).

Runs on the target's Python (3.8+), standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.gpu.plugins.module_utils.node_host import (
    FABRIC_MANAGER_UNIT,
    STATUSES,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_smi import (
    REMEDIES,
    NvidiaParseError,
    parse_proc_version,
    version_tuple,
    versions_agree,
)

# --- checks -------------------------------------------------------------------------------------


def make_check(name, layer, status, observed, expected, remedy=None):
    if status not in STATUSES:
        raise ValueError("unknown check status %r" % status)
    return {
        "name": name,
        "layer": layer,
        "status": status,
        "observed": observed,
        "expected": expected,
        "remedy": remedy if status in ("fail", "warn") else None,
    }


def smi_gpus(smi):
    facts = (smi or {}).get("facts") or {}
    return facts.get("gpus") or []


def smi_ok(smi):
    return bool(smi and smi.get("ok"))


def _smi_reason(smi):
    failure = (smi or {}).get("failure") or {}
    return "nvidia-smi gave no GPU data (%s)" % failure.get("class", "not run")


def gpu_label(gpu):
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("pci_bus_id"))


def check_pci(view):
    pci = view["pci"]
    gpus = [f for f in pci["functions"] if f["kind"] == "gpu"]
    expected = "at least one NVIDIA display/3D PCI function (vendor 0x10de, class 0x03xxxx)"
    if not pci["readable"]:
        return make_check(
            "pci_gpus_present",
            "hardware",
            "fail",
            "sysfs not readable under %s" % view["host_root"],
            expected,
            "Mount the host's /sys (read-only is enough) under host_root.",
        )
    if not gpus:
        return make_check(
            "pci_gpus_present",
            "hardware",
            "fail",
            "no NVIDIA GPU among the PCI functions",
            expected,
            "This machine has no NVIDIA GPU on its PCI bus (or the VM was given none): check the "
            "hardware, the hypervisor's passthrough and `lspci -nn -d 10de:`.",
        )
    listed = ", ".join(
        "%s [10de:%s] %s" % (f["bdf"], f["device"][2:], f["driver"] or "no driver") for f in gpus
    )
    return make_check(
        "pci_gpus_present",
        "hardware",
        "pass",
        "%d NVIDIA GPU(s): %s" % (len(gpus), listed),
        expected,
    )


def check_nouveau(view):
    modules = view["modules"]
    checks = []
    if modules is None:
        checks.append(
            make_check(
                "nouveau_not_loaded",
                "kernel",
                "skip",
                "/proc/modules not readable",
                "nouveau not loaded",
            )
        )
    elif "nouveau" in modules:
        checks.append(
            make_check(
                "nouveau_not_loaded",
                "kernel",
                "fail",
                "nouveau is loaded",
                "nouveau not loaded",
                "Blacklist nouveau (role kubegpu.gpu.nvidia_driver writes /etc/modprobe.d), rebuild the "
                "initramfs and reboot.",
            )
        )
    else:
        checks.append(
            make_check(
                "nouveau_not_loaded",
                "kernel",
                "pass",
                "nouveau is not loaded",
                "nouveau not loaded",
            )
        )
    found = view["nouveau_blacklist"]
    if found:
        checks.append(
            make_check(
                "nouveau_blacklisted",
                "kernel",
                "pass",
                "blacklisted in " + ", ".join(found),
                "nouveau blacklisted in modprobe.d or on the kernel command line",
            )
        )
    else:
        checks.append(
            make_check(
                "nouveau_blacklisted",
                "kernel",
                "warn",
                "no blacklist entry for nouveau found",
                "nouveau blacklisted in modprobe.d or on the kernel command line",
                "Add `blacklist nouveau` and `options nouveau modeset=0` to a file in /etc/modprobe.d "
                "and rebuild the initramfs, so that nouveau cannot claim the GPU at the next boot.",
            )
        )
    return checks


def _kernel_module(view):
    """(version, flavor) of the loaded nvidia module, from /proc or /sys."""
    if view["proc_version"]:
        try:
            parsed = parse_proc_version(view["proc_version"])
            return parsed["version"], parsed["flavor"]
        except NvidiaParseError:
            pass
    if view["sys_module_version"]:
        return view["sys_module_version"], None
    return None, None


def check_modules(view):
    modules = view["modules"]
    expected = "nvidia loaded (with nvidia_uvm for CUDA)"
    if modules is None:
        return make_check(
            "nvidia_modules_loaded", "kernel", "skip", "/proc/modules not readable", expected
        )
    loaded = [m for m in modules if m == "nvidia" or m.startswith("nvidia_")]
    version, flavor = _kernel_module(view)
    detail = "loaded: %s" % (", ".join(loaded) or "none")
    if version:
        detail += "; module %s (%s)" % (version, flavor or "flavor unknown")
    if "nvidia" not in loaded:
        return make_check(
            "nvidia_modules_loaded",
            "kernel",
            "fail",
            detail,
            expected,
            REMEDIES["driver_not_loaded"],
        )
    if "nvidia_uvm" not in loaded:
        return make_check(
            "nvidia_modules_loaded",
            "kernel",
            "warn",
            detail,
            expected,
            "nvidia_uvm is not loaded yet; CUDA loads it on first use through nvidia-modprobe. "
            "Load it at boot (`nvidia_uvm` in /etc/modules-load.d) so containers find /dev/nvidia-uvm.",
        )
    return make_check("nvidia_modules_loaded", "kernel", "pass", detail, expected)


def _userspace_version(smi):
    facts = (smi or {}).get("facts") or {}
    if facts.get("driver_version"):
        return facts["driver_version"], "nvidia-smi"
    failure = (smi or {}).get("failure") or {}
    if failure.get("nvml_library_version"):
        return failure["nvml_library_version"], "NVML library"
    return None, None


def check_module_version(view, smi):
    kernel, _ = _kernel_module(view)
    user, source = _userspace_version(smi)
    expected = "kernel module version == userspace driver version"
    if not kernel or not user:
        missing = (
            "kernel module version" if not kernel else "userspace version (%s)" % _smi_reason(smi)
        )
        return make_check(
            "kernel_module_matches_userspace",
            "kernel",
            "skip",
            "no %s to compare" % missing,
            expected,
        )
    observed = "kernel module %s, %s %s" % (kernel, source, user)
    if versions_agree(kernel, user):
        return make_check("kernel_module_matches_userspace", "kernel", "pass", observed, expected)
    return make_check(
        "kernel_module_matches_userspace",
        "kernel",
        "fail",
        observed,
        expected,
        REMEDIES["driver_library_mismatch"],
    )


def _expected_gpu_minors(view, smi):
    minors = [g.get("minor_number") for g in smi_gpus(smi) if g.get("minor_number") is not None]
    if minors:
        return sorted(minors)
    count = len([f for f in view["pci"]["functions"] if f["kind"] == "gpu"])
    return list(range(count))


def check_device_nodes(view, smi):
    minors = _expected_gpu_minors(view, smi)
    wanted = ["nvidiactl"] + ["nvidia%d" % m for m in minors]
    expected = "/dev/" + ", /dev/".join(wanted) + " (and /dev/nvidia-uvm)"
    if not minors:
        return make_check(
            "device_nodes",
            "kernel",
            "skip",
            "no GPU to expect device nodes for",
            "/dev/nvidiactl and /dev/nvidia<N> per GPU",
        )
    present = set(view["dev"])
    missing = [n for n in wanted if n not in present]
    observed = "present: " + (", ".join(sorted(present)) or "none")
    if missing:
        return make_check(
            "device_nodes",
            "kernel",
            "fail",
            observed + "; missing: " + ", ".join(missing),
            expected,
            "Device nodes appear once the nvidia module is loaded and nvidia-modprobe or "
            "nvidia-persistenced has run: load the module, then run `nvidia-modprobe -c0 -u` "
            "(or `nvidia-smi` as root).",
        )
    if "nvidia-uvm" not in present:
        return make_check(
            "device_nodes",
            "kernel",
            "warn",
            observed + "; missing: nvidia-uvm",
            expected,
            "Run `nvidia-modprobe -u -c=0` so that /dev/nvidia-uvm exists "
            "before containers start; CUDA in containers needs it.",
        )
    mig = any(g["mig"]["current"] for g in smi_gpus(smi))
    if mig and "nvidia-caps" not in present:
        return make_check(
            "device_nodes",
            "kernel",
            "warn",
            observed + "; missing: nvidia-caps/",
            expected + " and /dev/nvidia-caps for MIG",
            "Create the MIG capability nodes: `nvidia-modprobe -f "
            "/proc/driver/nvidia/capabilities/mig/config`, or run nvidia-ctk "
            "system create-dev-char-symlinks.",
        )
    return make_check("device_nodes", "kernel", "pass", observed, expected)


def check_nvidia_smi(smi):
    expected = "nvidia-smi -q -x answers with every GPU"
    if smi_ok(smi):
        facts = smi["facts"]
        observed = "driver %s, CUDA %s, %d GPU(s)" % (
            facts.get("driver_version"),
            facts.get("cuda_version"),
            len(facts["gpus"]),
        )
        if smi.get("simulated"):
            observed += " (SIMULATED nvidia-smi replaying a real capture)"
        return make_check("nvidia_smi_healthy", "driver", "pass", observed, expected)
    failure = (smi or {}).get("failure") or {}
    observed = "%s (rc %s): %s" % (
        failure.get("class", "unknown"),
        failure.get("rc"),
        failure.get("message", ""),
    )
    return make_check(
        "nvidia_smi_healthy",
        "driver",
        "fail",
        observed,
        expected,
        failure.get("remedy") or REMEDIES["unknown"],
    )


def check_gpu_count(view, smi, expected_count):
    pci = [f for f in view["pci"]["functions"] if f["kind"] == "gpu"]
    drivers = {}
    for function in pci:
        drivers[function["driver"] or "none"] = drivers.get(function["driver"] or "none", 0) + 1
    bound = ", ".join("%d on %s" % (n, d) for d, n in sorted(drivers.items()))
    parts = ["PCI %d (%s)" % (len(pci), bound or "none")]
    smi_count = len(smi_gpus(smi)) if smi_ok(smi) else None
    if smi_count is not None:
        parts.append("nvidia-smi %d" % smi_count)
    observed = ", ".join(parts)
    expected = "nvidia-smi count == PCI count"
    if expected_count is not None:
        expected += " == %d" % expected_count
    problems = []
    if smi_count is not None and smi_count != len(pci):
        problems.append("nvidia-smi sees %d of %d PCI GPUs" % (smi_count, len(pci)))
    if expected_count is not None:
        seen = smi_count if smi_count is not None else len(pci)
        if seen != expected_count:
            problems.append("%d GPU(s) where %d are expected" % (seen, expected_count))
    if problems:
        return make_check(
            "gpu_count",
            "driver",
            "fail",
            observed + ": " + "; ".join(problems),
            expected,
            "A GPU is missing: look for 'RmInitAdapter failed' and Xid messages in `dmesg`, check "
            "which driver each GPU is bound to (vfio-pci keeps it from the nvidia driver) and "
            "reseat or replace the GPU; or correct kubegpu_expected_gpu_count.",
        )
    if smi_count is None and expected_count is None:
        return make_check(
            "gpu_count", "driver", "skip", observed + "; " + _smi_reason(smi), expected
        )
    return make_check("gpu_count", "driver", "pass", observed, expected)


def driver_branch_matches(version, branch):
    """'580' pins the major branch; '580.95.05' pins a version (compared on shared parts)."""
    if "." in branch:
        return versions_agree(version, branch)
    parsed = version_tuple(version)
    return parsed is not None and parsed[0] == int(branch)


def check_driver_branch(view, smi, branch):
    expected = (
        "driver branch %s" % branch
        if branch
        else "any driver branch (nvidia_driver_branch unset, none recorded)"
    )
    if not branch:
        return make_check(
            "driver_branch",
            "driver",
            "skip",
            "nvidia_driver_branch is not set and role nvidia_driver recorded no branch on the node",
            expected,
        )
    version, source = _userspace_version(smi)
    if not version:
        version, _ = _kernel_module(view)
        source = "kernel module"
    if not version:
        return make_check("driver_branch", "driver", "skip", "no driver version found", expected)
    observed = "%s %s" % (source, version)
    if driver_branch_matches(version, branch):
        return make_check("driver_branch", "driver", "pass", observed, expected)
    return make_check(
        "driver_branch",
        "driver",
        "fail",
        observed,
        expected,
        "Install the pinned branch with role kubegpu.gpu.nvidia_driver (playbook "
        "upgrade_driver.yml drains and reboots the node), or set nvidia_driver_branch to the "
        "branch the node runs.",
    )


def check_persistence(smi):
    expected = "persistence mode enabled on every GPU (nvidia-persistenced running)"
    if not smi_ok(smi):
        return make_check("persistence_mode", "driver", "skip", _smi_reason(smi), expected)
    states = [(g, g.get("persistence_mode")) for g in smi_gpus(smi)]
    off = [gpu_label(g) for g, state in states if state is False]
    if off:
        return make_check(
            "persistence_mode",
            "driver",
            "warn",
            "disabled on " + ", ".join(off),
            expected,
            "Enable and start nvidia-persistenced (`systemctl enable --now nvidia-persistenced`) "
            "so the driver stays initialised between jobs.",
        )
    if all(state is None for _, state in states):
        return make_check("persistence_mode", "driver", "skip", "not reported", expected)
    return make_check("persistence_mode", "driver", "pass", "enabled on all GPUs", expected)


def _nvswitch_evidence(view, smi):
    evidence = []
    switches = [f for f in view["pci"]["functions"] if f["kind"] == "nvswitch"]
    if switches:
        evidence.append("%d NVSwitch PCI function(s)" % len(switches))
    for name in view["dmi"]:
        if re.search(r"\b[DH]GX\b", name, re.IGNORECASE):
            evidence.append("system '%s'" % name)
    return evidence


def check_fabric_manager(view, smi, services, services_reason):
    expected = "nvidia-fabricmanager active on NVSwitch systems"
    evidence = _nvswitch_evidence(view, smi)
    if not evidence:
        return make_check(
            "fabric_manager",
            "driver",
            "skip",
            "no NVSwitch PCI functions and no HGX/DGX system name: not needed",
            expected,
        )
    remedy = (
        "Install nvidia-fabricmanager of exactly the driver's version and run "
        "`systemctl enable --now nvidia-fabricmanager`; CUDA fails to initialise on NVSwitch "
        "systems without it."
    )
    observed = "; ".join(evidence)
    if services is not None:
        state = services.get(FABRIC_MANAGER_UNIT)
        observed += "; %s is %s" % (FABRIC_MANAGER_UNIT, state or "unknown")
        status = "pass" if state == "active" else "fail"
        return make_check("fabric_manager", "driver", status, observed, expected, remedy)
    states = [(g.get("fabric") or {}) for g in smi_gpus(smi)]
    known = [s for s in states if s.get("state")]
    if known:
        done = all(
            s["state"].lower() == "completed" and (s.get("status") or "").lower() == "success"
            for s in known
        )
        observed += "; GPU fabric state: " + ", ".join(
            "%s/%s" % (s.get("state"), s.get("status")) for s in known
        )
        return make_check(
            "fabric_manager", "driver", "pass" if done else "fail", observed, expected, remedy
        )
    return make_check(
        "fabric_manager",
        "driver",
        "skip",
        observed + "; service state unknown: " + services_reason,
        expected,
    )


def check_ecc(smi):
    expected = "no uncorrectable ECC errors; ECC mode not pending a change"
    if not smi_ok(smi):
        return make_check("ecc_errors", "gpu", "skip", _smi_reason(smi), expected)
    gpus = smi_gpus(smi)
    volatile = [
        (g, g["ecc"]["volatile_uncorrected"])
        for g in gpus
        if (g["ecc"]["volatile_uncorrected"] or 0) > 0
    ]
    aggregate = [
        (g, g["ecc"]["aggregate_uncorrected"])
        for g in gpus
        if (g["ecc"]["aggregate_uncorrected"] or 0) > 0
    ]
    pending = [
        g
        for g in gpus
        if g["ecc"]["current"] is not None
        and g["ecc"]["pending"] is not None
        and g["ecc"]["current"] != g["ecc"]["pending"]
    ]
    if volatile:
        return make_check(
            "ecc_errors",
            "gpu",
            "fail",
            "uncorrectable errors since boot: "
            + ", ".join("%s: %d" % (gpu_label(g), n) for g, n in volatile),
            expected,
            "Drain the node, reset the GPU (`nvidia-smi -r -i <bus id>`) or reboot, and check "
            "retired pages / remapped rows; replace the GPU if errors return.",
        )
    if all(g["ecc"]["current"] is None for g in gpus):
        return make_check("ecc_errors", "gpu", "skip", "ECC not supported by these GPUs", expected)
    modes = ", ".join(
        "%s ECC %s" % (gpu_label(g), {True: "on", False: "off", None: "n/a"}[g["ecc"]["current"]])
        for g in gpus
    )
    if aggregate:
        return make_check(
            "ecc_errors",
            "gpu",
            "warn",
            modes
            + "; uncorrectable errors in the GPU's lifetime: "
            + ", ".join("%s: %d" % (gpu_label(g), n) for g, n in aggregate),
            expected,
            "None since boot, but the GPU has a history: watch it with DCGM and check its retired "
            "pages or remapped rows.",
        )
    if pending:
        return make_check(
            "ecc_errors",
            "gpu",
            "warn",
            modes + "; ECC change pending on " + ", ".join(gpu_label(g) for g in pending),
            expected,
            "An ECC mode change takes effect after a GPU reset or reboot: drain and reboot the node.",
        )
    return make_check("ecc_errors", "gpu", "pass", modes + "; no uncorrectable errors", expected)


def check_retired_pages(smi):
    expected = "no page retirement pending"
    if not smi_ok(smi):
        return make_check("retired_pages", "gpu", "skip", _smi_reason(smi), expected)
    gpus = smi_gpus(smi)
    pending = [g for g in gpus if g.get("retired_pages_pending") is True]
    if pending:
        return make_check(
            "retired_pages",
            "gpu",
            "fail",
            "retirement pending on " + ", ".join(gpu_label(g) for g in pending),
            expected,
            "Retired pages take effect after a GPU reset: drain the node and reboot (or "
            "`nvidia-smi -r`); replace the GPU when retirements keep growing.",
        )
    if all(g.get("retired_pages_pending") is None for g in gpus):
        return make_check(
            "retired_pages",
            "gpu",
            "skip",
            "page retirement not reported (GPUs with row remapping report that instead)",
            expected,
        )
    counts = ", ".join(
        "%s: %s retired" % (gpu_label(g), g.get("retired_pages_count")) for g in gpus
    )
    return make_check("retired_pages", "gpu", "pass", counts + "; none pending", expected)


def check_row_remapping(smi):
    expected = "no row remap pending and no remap failure"
    if not smi_ok(smi):
        return make_check("row_remapping", "gpu", "skip", _smi_reason(smi), expected)
    gpus = smi_gpus(smi)
    failed = [g for g in gpus if g["remapped_rows"]["failure"] is True]
    pending = [g for g in gpus if g["remapped_rows"]["pending"] is True]
    if failed:
        return make_check(
            "row_remapping",
            "gpu",
            "fail",
            "row remap failure on " + ", ".join(gpu_label(g) for g in failed),
            expected,
            "The GPU ran out of spare rows: drain the node and have the GPU replaced.",
        )
    if pending:
        return make_check(
            "row_remapping",
            "gpu",
            "fail",
            "row remap pending on " + ", ".join(gpu_label(g) for g in pending),
            expected,
            "Drain the node and reset the GPU (`nvidia-smi -r -i <bus id>`) or reboot so "
            "the pending row remap is applied.",
        )
    if all(
        g["remapped_rows"]["pending"] is None and g["remapped_rows"]["failure"] is None
        for g in gpus
    ):
        return make_check(
            "row_remapping", "gpu", "skip", "row remapping not reported by these GPUs", expected
        )
    return make_check("row_remapping", "gpu", "pass", "no remap pending or failed", expected)


def check_mig(smi, desired):
    expected = "MIG %s on every GPU" % desired if desired else "any MIG mode (mig_mode unset)"
    if not desired:
        return make_check("mig_mode", "gpu", "skip", "mig_mode is not set", expected)
    if not smi_ok(smi):
        return make_check("mig_mode", "gpu", "skip", _smi_reason(smi), expected)
    want = desired == "enabled"
    wrong, unsupported, pending = [], [], []
    for gpu in smi_gpus(smi):
        current = gpu["mig"]["current"]
        if current is None:
            if want:
                unsupported.append(gpu_label(gpu))
            continue
        if current != want:
            wrong.append(gpu_label(gpu))
        if gpu["mig"]["pending"] is not None and gpu["mig"]["pending"] != current:
            pending.append(gpu_label(gpu))
    states = ", ".join(
        "%s MIG %s"
        % (gpu_label(g), {True: "enabled", False: "disabled", None: "n/a"}[g["mig"]["current"]])
        for g in smi_gpus(smi)
    )
    if unsupported:
        return make_check(
            "mig_mode",
            "gpu",
            "fail",
            states + "; no MIG support: " + ", ".join(unsupported),
            expected,
            "Only A100/A30/H100/H200/B200-class GPUs support MIG: set "
            "mig_mode to disabled for this node.",
        )
    if wrong:
        verb = 1 if want else 0
        return make_check(
            "mig_mode",
            "gpu",
            "fail",
            states,
            expected,
            "Set it with `nvidia-smi -i <index> -mig %d` (or the MIG manager's config), then "
            "reset the GPU or reboot the drained node." % verb,
        )
    if pending:
        return make_check(
            "mig_mode",
            "gpu",
            "warn",
            states + "; change pending on " + ", ".join(pending),
            expected,
            "A MIG mode change waits for a GPU reset: drain and reboot the node.",
        )
    return make_check("mig_mode", "gpu", "pass", states, expected)
