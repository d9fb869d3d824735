# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""MIG layouts: read a GPU's MIG state, check a wanted layout against it, plan the steps.

Pure functions over text and data (Python 3.8+, standard library only), tested against real
captured nvidia-smi output (tests/unit/data/mig, src/kubegpu/captures/nvidia-smi-mig).

- parse_gi_profiles(text): `nvidia-smi mig -lgip`
- parse_gi_placements(text): `nvidia-smi mig -lgipp`
- parse_gpu_instances(text): `nvidia-smi mig -lgi`
- parse_compute_instances(text): `nvidia-smi mig -lci`
- resolve_layout(name, custom, gpus): a layout name (all-disabled, all-enabled, all-balanced,
  all-<profile>, or one of the custom ones) as a wanted state per GPU index
- validate(wanted, profiles, placements, gpus): what the GPUs do not offer, as messages
- plan(current, wanted, profiles): the ordered nvidia-smi steps, [] when the state matches
"""

from __future__ import absolute_import, division, print_function

import re

__metaclass__ = type

NO_INSTANCES_MARKERS = ("No GPU instances found", "No compute instances found")
NOT_ENABLED_MARKERS = (
    "No MIG-enabled devices found",
    "No MIG-supported devices found",
    "No GPU instance profiles found",
)

_PROFILE_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<id>\d+)\s+(?P<free>\d+)/(?P<total>\d+)\s+"
    r"(?P<memory>[\d.]+)\s+(?P<p2p>\S+)\s+(?P<sm>\d+)\s+(?P<dec>\d+)\s+(?P<enc>\d+)\s*\|$"
)
_PLACEMENT_ROW = re.compile(
    r"^GPU\s+(?P<gpu>\d+)\s+Profile ID\s+(?P<id>\d+)\s+Placements?\s*:\s*"
    r"\{(?P<starts>[\d,\s]*)\}:(?P<size>\d+)\s*$"
)
_GI_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<profile>\d+)\s+(?P<gi>\d+)\s+"
    r"(?P<start>\d+):(?P<size>\d+)\s*\|$"
)
_CI_ROW = re.compile(
    r"^\|\s*(?P<gpu>\d+)\s+(?P<gi>\d+)\s+MIG\s+(?P<name>\S+)\s+(?P<profile>\d+)\s+(?P<ci>\d+)"
    r"(?:\s+(?P<start>\d+):(?P<size>\d+))?\s*\|$"
)
_SLICES = re.compile(r"^(\d+)g\.")
NAME_PATTERN = re.compile(r"^\d+g\.\d+gb(\+[a-z.]+)?$")

BUILTIN_LAYOUTS = ("all-disabled", "all-enabled", "all-balanced")


class MigLayoutError(ValueError):
    """A layout that cannot be applied: a name we do not know, or input we cannot read."""


def _matches(text, pattern):
    """The match of pattern on each line of text that has one (text may be None)."""
    for line in (text or "").splitlines():
        match = pattern.match(line.strip())
        if match:
            yield match


def parse_gi_profiles(text):
    """`nvidia-smi mig -lgip` -> {gpu index: [profile dict]} in the order printed.

    A profile dict: name ("1g.10gb"), id, free, total, memory_gib, p2p, sm, slices (the
    compute slices of its name: 1 for 1g.10gb).
    """
    result = {}
    for match in _matches(text, _PROFILE_ROW):
        name = match.group("name")
        slices = _SLICES.match(name)
        result.setdefault(int(match.group("gpu")), []).append(
            {
                "name": name,
                "id": int(match.group("id")),
                "free": int(match.group("free")),
                "total": int(match.group("total")),
                "memory_gib": float(match.group("memory")),
                "p2p": match.group("p2p"),
                "sm": int(match.group("sm")),
                "slices": int(slices.group(1)) if slices else None,
            }
        )
    return result


def parse_gi_placements(text):
    """`nvidia-smi mig -lgipp` -> {gpu index: {profile id: {"starts": [..], "size": n}}}."""
    result = {}
    for match in _matches(text, _PLACEMENT_ROW):
        starts = [int(s) for s in match.group("starts").replace(" ", "").split(",") if s]
        result.setdefault(int(match.group("gpu")), {})[int(match.group("id"))] = {
            "starts": starts,
            "size": int(match.group("size")),
        }
    return result


def parse_gpu_instances(text):
    """`nvidia-smi mig -lgi` -> [{gpu, name, profile_id, gi, start, size}] in the order printed."""
    return [
        {
            "gpu": int(match.group("gpu")),
            "name": match.group("name"),
            "profile_id": int(match.group("profile")),
            "gi": int(match.group("gi")),
            "start": int(match.group("start")),
            "size": int(match.group("size")),
        }
        for match in _matches(text, _GI_ROW)
    ]


def parse_compute_instances(text):
    """`nvidia-smi mig -lci` (with or without the Placement column) ->
    [{gpu, gi, name, profile_id, ci}]."""
    return [
        {
            "gpu": int(match.group("gpu")),
            "gi": int(match.group("gi")),
            "name": match.group("name"),
            "profile_id": int(match.group("profile")),
            "ci": int(match.group("ci")),
        }
        for match in _matches(text, _CI_ROW)
    ]


def current_layout(gpus, instances, compute_instances):
    """The state per GPU index: {index: {"mig_enabled", "mig_pending", "mig_devices":
    {profile: count}, "gpu_instances": [gi rows], "without_ci": [gi ids]}}.

    gpus: [{"index", "mig": {"current", "pending"}}] (nvidia_smi.parse_query_xml's "gpus").
    """
    with_ci = set((c["gpu"], c["gi"]) for c in compute_instances)
    state = {}
    for gpu in gpus:
        index = gpu["index"]
        mine = [g for g in instances if g["gpu"] == index]
        devices = {}
        for row in mine:
            devices[row["name"]] = devices.get(row["name"], 0) + 1
        state[index] = {
            "mig_enabled": bool(gpu["mig"]["current"]),
            "mig_pending": bool(gpu["mig"]["pending"]),
            "mig_devices": devices,
            "gpu_instances": mine,
            "without_ci": sorted(g["gi"] for g in mine if (index, g["gi"]) not in with_ci),
        }
    return state


def _balanced(offered):
    """mig-parted's all-balanced, from the profiles a GPU offers: two of the smallest 1g
    profile, one 2g and, on GPUs with seven compute slices, one 3g (with the 3g's memory)."""
    plain = [p for p in offered if "+" not in p["name"] and p["slices"]]
    by_slices = {}
    for profile in plain:
        current = by_slices.get(profile["slices"])
        if current is None or profile["memory_gib"] < current["memory_gib"]:
            by_slices[profile["slices"]] = profile
    largest = max(by_slices) if by_slices else 0
    if 1 not in by_slices or 2 not in by_slices:
        return None
    layout = {by_slices[1]["name"]: 2, by_slices[2]["name"]: 1}
    if largest >= 7 and 3 in by_slices:
        layout[by_slices[3]["name"]] = 1
    return layout


def _entries(config, name):
    if not isinstance(config, list) or not config:
        raise MigLayoutError(
            "MIG layout %r must be a non-empty list of {devices, mig_enabled, mig_devices}" % name
        )
    return config


def resolve_layout(name, custom, gpu_indexes, profiles):
    """The wanted state per GPU index: {index: {"mig_enabled": bool, "mig_devices": {..}}}.

    name: all-disabled, all-enabled (MIG on, no instances), all-balanced, all-<profile>
    (as many of that profile as the GPU offers), or a key of custom. custom: {name: [{devices:
    "all" | [indexes], mig_enabled: bool, mig_devices: {profile: count}}]}. profiles: parsed
    -lgip per GPU index ({} where MIG is off and nothing could be read).
    """
    custom = custom or {}
    wanted = {}
    if name in custom:
        for entry in _entries(custom[name], name):
            devices = entry.get("devices", "all")
            if devices == "all":
                targets = list(gpu_indexes)
            elif isinstance(devices, list) and all(isinstance(d, int) for d in devices):
                missing = [d for d in devices if d not in gpu_indexes]
                if missing:
                    raise MigLayoutError(
                        "MIG layout %r names GPU %s, but this host has GPUs %s"
                        % (name, ", ".join(str(m) for m in missing), list(gpu_indexes))
                    )
                targets = devices
            else:
                raise MigLayoutError(
                    "MIG layout %r: devices must be 'all' or a list of GPU indexes, got %r"
                    % (name, devices)
                )
            enabled = bool(entry.get("mig_enabled", True))
            devices_wanted = dict(entry.get("mig_devices") or {})
            if not enabled and devices_wanted:
                raise MigLayoutError(
                    "MIG layout %r: mig_devices given for GPUs %s with mig_enabled false"
                    % (name, targets)
                )
            for index in targets:
                if index in wanted:
                    raise MigLayoutError(
                        "MIG layout %r names GPU %d in two entries" % (name, index)
                    )
                wanted[index] = {"mig_enabled": enabled, "mig_devices": devices_wanted}
        for index in gpu_indexes:
            wanted.setdefault(index, None)  # not named: left as it is
        return wanted
    if name == "all-disabled":
        return dict((i, {"mig_enabled": False, "mig_devices": {}}) for i in gpu_indexes)
    if name == "all-enabled":
        return dict((i, {"mig_enabled": True, "mig_devices": {}}) for i in gpu_indexes)
    if name == "all-balanced":
        for index in gpu_indexes:
            offered = profiles.get(index)
            layout = _balanced(offered) if offered else None
            wanted[index] = {"mig_enabled": True, "mig_devices": layout, "balanced": True}
        return wanted
    if name.startswith("all-"):
        profile = name[len("all-") :]
        # mig-parted writes the +me profiles as "1g.10gb.me" in config names
        if profile.endswith(".me") and NAME_PATTERN.match(profile[:-3]):
            profile = profile[:-3] + "+me"
        if NAME_PATTERN.match(profile):
            for index in gpu_indexes:
                offered = dict((p["name"], p) for p in profiles.get(index) or [])
                count = offered[profile]["total"] if profile in offered else None
                wanted[index] = {"mig_enabled": True, "mig_devices": {profile: count}}
            return wanted
    known = [*BUILTIN_LAYOUTS, "all-<profile>, for example all-1g.10gb", *sorted(custom)]
    raise MigLayoutError("unknown MIG layout %r; known: %s" % (name, ", ".join(known)))


def _fits(wanted_devices, offered, placements):
    """Whether these counts can be placed together; uses the GPU's placements when known."""
    by_name = dict((p["name"], p) for p in offered)
    items = []
    for name, count in wanted_devices.items():
        items.extend([by_name[name]] * count)
    if placements:
        items.sort(key=lambda p: -placements[p["id"]]["size"])
        used = set()

        def place(i):
            if i == len(items):
                return True
            slot = placements[items[i]["id"]]
            for start in slot["starts"]:
                cells = set(range(start, start + slot["size"]))
                if not cells & used:
                    used.update(cells)
                    if place(i + 1):
                        return True
                    used.difference_update(cells)
            return False

        return place(0)
    compute = max(p["slices"] or 0 for p in offered)
    return sum(p["slices"] or 0 for p in items) <= compute


def _offer_text(offered):
    return ", ".join("%s (up to %d)" % (p["name"], p["total"]) for p in offered)


def validate(wanted, profiles, placements, gpu_names, layout_name):
    """Messages for what cannot be applied (empty when everything fits).

    Only GPUs whose profiles are known are checked; profiles[index] is parsed -lgip.
    """
    problems = []
    for index in sorted(wanted):
        target = wanted[index]
        if not target or not target["mig_enabled"]:
            continue
        offered = profiles.get(index)
        gpu = "GPU %d (%s)" % (index, gpu_names.get(index) or "unknown model")
        if not offered:
            continue
        devices = target["mig_devices"]
        if devices is None:
            problems.append(
                "MIG layout %r: %s offers no 1g and 2g profiles to balance; it offers %s"
                % (layout_name, gpu, _offer_text(offered))
            )
            continue
        by_name = dict((p["name"], p) for p in offered)
        bad = False
        for name, count in sorted(devices.items()):
            if name not in by_name:
                problems.append(
                    "MIG layout %r: %s does not offer the profile %s; it offers %s"
                    % (layout_name, gpu, name, _offer_text(offered))
                )
                bad = True
            elif not isinstance(count, int) or count < 1:
                problems.append(
                    "MIG layout %r: %s: the count of %s must be a whole number of at least 1, "
                    "got %r" % (layout_name, gpu, name, count)
                )
                bad = True
            elif count > by_name[name]["total"]:
                problems.append(
                    "MIG layout %r: %s offers at most %d of %s, %d asked"
                    % (layout_name, gpu, by_name[name]["total"], name, count)
                )
                bad = True
        if not bad and not _fits(devices, offered, placements.get(index)):
            problems.append(
                "MIG layout %r: %s cannot hold %s together (its slices run out); it offers %s"
                % (
                    layout_name,
                    gpu,
                    ", ".join("%d x %s" % (c, n) for n, c in sorted(devices.items())),
                    _offer_text(offered),
                )
            )
    return problems


def matches(state, target):
    """Whether one GPU's state is the wanted one (None: not named, always matches)."""
    if target is None:
        return True
    if (
        state["mig_enabled"] != target["mig_enabled"]
        or state["mig_pending"] != (target["mig_enabled"])
    ):
        return False
    if not target["mig_enabled"]:
        return True
    return state["mig_devices"] == target["mig_devices"] and not state["without_ci"]


def _creation_order(devices, offered):
    """Profile ids to create, the largest first (so that the small ones fill the gaps)."""
    by_name = dict((p["name"], p) for p in offered)
    names = sorted(devices, key=lambda n: (-(by_name[n]["slices"] or 0), -by_name[n]["id"], n))
    ids = []
    for name in names:
        ids.extend([by_name[name]["id"]] * devices[name])
    return ids


def plan(current, wanted, profiles):
    """The ordered steps that turn current into wanted; [] when they already match.

    A step: {"gpu": index, "action": one of mig-mode-on, mig-mode-off, destroy-compute-instances,
    destroy-gpu-instances, create-gpu-instances, "argv": nvidia-smi arguments, "why": text}.
    Creating needs the GPU's profiles (parsed -lgip); where MIG is still off they are read after
    the mode step, so such a plan carries "profiles_after_mode": True and no create step yet.
    """
    steps = []
    for index in sorted(wanted):
        target = wanted[index]
        state = current.get(index)
        if state is None:
            raise MigLayoutError("GPU %d is not on this host" % index)
        if matches(state, target):
            continue
        gpu = str(index)
        if state["gpu_instances"]:
            steps.append(
                {
                    "gpu": index,
                    "action": "destroy-compute-instances",
                    "argv": ["mig", "-i", gpu, "-dci"],
                    "why": "GPU %d holds %s" % (index, _describe(state["mig_devices"])),
                }
            )
            steps.append(
                {
                    "gpu": index,
                    "action": "destroy-gpu-instances",
                    "argv": ["mig", "-i", gpu, "-dgi"],
                    "why": "GPU %d holds %s" % (index, _describe(state["mig_devices"])),
                }
            )
        if not target["mig_enabled"]:
            if state["mig_enabled"] or state["mig_pending"]:
                steps.append(
                    {
                        "gpu": index,
                        "action": "mig-mode-off",
                        "argv": ["-i", gpu, "-mig", "0"],
                        "why": "the layout wants MIG off on GPU %d" % index,
                    }
                )
            continue
        if not state["mig_enabled"] or not state["mig_pending"]:
            steps.append(
                {
                    "gpu": index,
                    "action": "mig-mode-on",
                    "argv": ["-i", gpu, "-mig", "1"],
                    "why": "the layout wants MIG on on GPU %d" % index,
                }
            )
        devices = target["mig_devices"]
        if devices is None or devices:
            offered = profiles.get(index)
            if not offered or devices is None or None in devices.values():
                steps.append(
                    {
                        "gpu": index,
                        "action": "create-gpu-instances",
                        "argv": None,
                        "profiles_after_mode": True,
                        "devices": devices,
                        "why": "create the layout's GPU instances once MIG is on and the GPU "
                        "lists its profiles",
                    }
                )
                continue
            ids = _creation_order(target["mig_devices"], offered)
            steps.append(
                {
                    "gpu": index,
                    "action": "create-gpu-instances",
                    "argv": ["mig", "-i", gpu, "-cgi", ",".join(str(i) for i in ids), "-C"],
                    "devices": dict(target["mig_devices"]),
                    "why": "create %s, each with its default compute instance"
                    % _describe(target["mig_devices"]),
                }
            )
    return steps


def _describe(devices):
    if devices is None:
        return "all-balanced (its profiles are known once MIG is on)"
    if not devices:
        return "no MIG devices"
    return ", ".join(
        "%s x %s" % ("as many as it offers" if count is None else count, name)
        for name, count in sorted(devices.items())
    )


def describe_layout(state):
    """A layout per GPU as text lines, for --diff."""
    lines = []
    for index in sorted(state):
        entry = state[index]
        if entry is None:
            continue
        if not entry["mig_enabled"]:
            lines.append("GPU %d: MIG disabled" % index)
        else:
            lines.append("GPU %d: MIG enabled, %s" % (index, _describe(entry["mig_devices"])))
    return "".join(line + "\n" for line in lines)


QUERY_FIELDS = "index,name,pci.bus_id,mig.mode.current,mig.mode.pending"
APPS_FIELDS = "gpu_bus_id,pid,process_name"


def parse_query_gpu(text):
    """`nvidia-smi --query-gpu=index,name,pci.bus_id,mig.mode.current,mig.mode.pending
    --format=csv,noheader` -> [{"index", "name", "pci_bus_id", "mig": {"current", "pending"},
    "mig_capable"}]. A GPU without MIG reports [N/A] for both modes."""
    gpus = []
    for line in (text or "").splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 5 or not cells[0].isdigit():
            continue
        gpus.append(
            {
                "index": int(cells[0]),
                "name": cells[1],
                "pci_bus_id": cells[2],
                "mig": {"current": cells[3] == "Enabled", "pending": cells[4] == "Enabled"},
                "mig_capable": cells[3] in ("Enabled", "Disabled"),
            }
        )
    return gpus


def parse_compute_apps(text):
    """`nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name --format=csv,noheader`."""
    apps = []
    for line in (text or "").splitlines():
        cells = [c.strip() for c in line.split(",", 2)]
        if len(cells) == 3 and cells[1].isdigit():
            apps.append({"pci_bus_id": cells[0], "pid": int(cells[1]), "name": cells[2]})
    return apps


def _listing(run, argv, what):
    """A `nvidia-smi mig -l...` listing: its text, or '' when there is nothing to list."""
    rc, out, err = run(argv)
    text = "\n".join(x for x in (out, err) if x)
    if rc == 0:
        return out
    if any(marker in text for marker in NO_INSTANCES_MARKERS + NOT_ENABLED_MARKERS):
        return ""
    raise MigLayoutError(
        "%s failed (rc %d): %s" % (what, rc, (text.strip().splitlines() or [""])[-1])
    )


def read_state(run, nvidia_smi):
    """Read the MIG state of a host with nvidia-smi. run(argv) -> (rc, stdout, stderr).

    Returns {"gpus", "profiles", "placements", "state", "apps"}; raises MigLayoutError when
    nvidia-smi does not answer.
    """
    rc, out, err = run([nvidia_smi, "--query-gpu=" + QUERY_FIELDS, "--format=csv,noheader"])
    if rc != 0:
        raise MigLayoutError(
            "nvidia-smi --query-gpu failed (rc %d): %s"
            % (rc, "\n".join(x for x in (out, err) if x).strip())
        )
    gpus = parse_query_gpu(out)
    if not gpus:
        raise MigLayoutError("nvidia-smi --query-gpu listed no GPU: %r" % out[:200])
    profiles, placements, instances, compute = {}, {}, [], []
    if any(g["mig"]["current"] for g in gpus):
        profiles = parse_gi_profiles(_listing(run, [nvidia_smi, "mig", "-lgip"], "mig -lgip"))
        placements = parse_gi_placements(_listing(run, [nvidia_smi, "mig", "-lgipp"], "mig -lgipp"))
        instances = parse_gpu_instances(_listing(run, [nvidia_smi, "mig", "-lgi"], "mig -lgi"))
        compute = parse_compute_instances(_listing(run, [nvidia_smi, "mig", "-lci"], "mig -lci"))
    rc, out, _err = run(
        [nvidia_smi, "--query-compute-apps=" + APPS_FIELDS, "--format=csv,noheader"]
    )
    apps = parse_compute_apps(out) if rc == 0 else []
    return {
        "gpus": gpus,
        "profiles": profiles,
        "placements": placements,
        "state": current_layout(gpus, instances, compute),
        "apps": apps,
    }


def busy_gpus(steps, gpus, apps):
    """Processes on the GPUs the steps touch: ["GPU 0 (00000000:01:00.0): pid 42 python3"]."""
    touched = set(step["gpu"] for step in steps)
    bus = dict((g["pci_bus_id"].upper(), g["index"]) for g in gpus)
    found = []
    for app in apps:
        index = bus.get(app["pci_bus_id"].upper())
        if index in touched:
            found.append(
                "GPU %d (%s): pid %d %s" % (index, app["pci_bus_id"], app["pid"], app["name"])
            )
    return found


def unsupported(wanted, gpus):
    """GPUs a layout asks MIG of that have no MIG (mode [N/A])."""
    names = dict((g["index"], g) for g in gpus)
    return [
        "GPU %d (%s) has no MIG mode" % (index, names[index]["name"])
        for index in sorted(wanted)
        if wanted[index] and wanted[index]["mig_enabled"] and not names[index]["mig_capable"]
    ]
