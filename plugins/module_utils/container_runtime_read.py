# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""What the container_runtime role's read of a node shows, decided once in Python: which
runtime gets the nvidia runtime, whether the asked-for runtime is there, and whether containerd
is to be installed first. The read (roles/container_runtime/tasks/validate.yml) prints
`systemctl show --property=Id,LoadState,UnitFileState,ActiveState` for the runtimes' units,
then, after a "#dpkg" line, `dpkg-query` rows "PACKAGE STATUS-ABBREV" of containerd's
packages. kubegpu.gpu.read_script returns this plan with the read (its `plan` option)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_driver_apt import systemd_units

_KEYS = ("requested", "install", "packages", "services", "detect_order")


class RuntimePlanError(ValueError):
    """The plan's arguments are not what the role passes."""


def plan(stdout, args):
    """args: requested (container_runtime_type), install (container_runtime_install), packages
    (the distribution's containerd packages; none where the OS has none), services (runtime ->
    its systemd unit's name without .service), detect_order (the runtimes auto tries, in
    order). Returns units (Id -> properties), units_found (Ids whose LoadState is not
    not-found), type (the runtime, 'none' where auto finds none and none is to be installed),
    present (whether the requested runtime's unit is there), missing and unsettled (containerd
    packages absent, and not fully installed), install_work, and foreign_containerd (a
    containerd unit is there but none of the packages: it came from elsewhere, Docker's
    containerd.io for one, and nothing is installed over it)."""
    missing_keys = [key for key in _KEYS if key not in args]
    if missing_keys:
        raise RuntimePlanError("plan_args lacks %s" % ", ".join(missing_keys))
    text, _, rows_text = stdout.partition("#dpkg")
    units = systemd_units(text)
    found = [name for name, props in units.items() if props.get("LoadState") != "not-found"]
    services = args["services"]
    requested = args["requested"]
    install = bool(args["install"])
    if requested != "auto":
        runtime = requested
    else:
        detected = [name for name in args["detect_order"] if services[name] + ".service" in found]
        runtime = detected[0] if detected else ("containerd" if install else "none")
    rows = [line.split(" ") for line in rows_text.splitlines() if line.strip()]
    # Status-Abbrev's second letter is the state: n (not installed) and c (config files only)
    # count as absent, as they do for package_facts; only i means APT has nothing left to do.
    states = dict((row[0], row[1][1]) for row in rows if len(row) > 1 and len(row[1]) > 1)
    present_pkgs = set(name for name, state in states.items() if state not in "nc")
    settled_pkgs = set(name for name, state in states.items() if state == "i")
    packages = list(args["packages"])
    containerd_unit = services.get("containerd", "containerd") + ".service"
    # A containerd the distribution's packages did not bring (Docker's containerd.io, which
    # conflicts with them, or one installed by hand) is left as it is: its unit is there and
    # dpkg has no trace of any of them (a package removed with its config files left counts as
    # the distribution's, and is installed again).
    foreign = containerd_unit in found and not any(states.get(p, "n") != "n" for p in packages)
    install = install and not foreign
    missing = [p for p in packages if p not in present_pkgs] if install else []
    unsettled = [p for p in packages if p not in settled_pkgs] if install else []
    containerd = units.get(containerd_unit, {})
    install_work = (
        install
        and runtime == "containerd"
        and (
            not packages
            or bool(unsettled)
            or containerd.get("UnitFileState", "") != "enabled"
            or containerd.get("ActiveState", "") != "active"
        )
    )
    return {
        "units": units,
        "units_found": found,
        "type": runtime,
        "present": services.get(requested, "") + ".service" in found,
        "missing": missing,
        "unsettled": unsettled,
        "install_work": install_work,
        "foreign_containerd": foreign,
    }
