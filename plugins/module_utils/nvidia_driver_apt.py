# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""How the nvidia_driver role picks and moves its Debian and Ubuntu packages: the one read of
the node it needs and every decision made from that read.

The action kubegpu.gpu.nvidia_driver_apt runs READ_SCRIPT on the node and calls plan(); the
role's tasks only act on the answer. Pure functions over text, standard library only.

- package_names(...): the packages of a driver for a distribution, source, flavour and branch.
- READ_SCRIPT, read_argv(...): the read (APT helpers, package-list age, the host's APT sources,
  the role's own sources, the version package, apt-cache policy, the package rows, the NVIDIA
  services).
- plan(stdout, settings): what the read means for the role (see plan's docstring).
- package_plan(...), versions(...), component_sources(...): the parts of plan().
- settle(answer, facts): whether a host has nothing left to change, and the state the role
  records then; services_to_change(), reboot_reasons(), driver_state() and fact_text(), its
  parts, serve the role's later steps too (through the filters of plugins/filter/driver_packages.py).
"""

from __future__ import absolute_import, division, print_function

import hashlib
import json
import os
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils.nvidia_driver import upstream_version

__metaclass__ = type


class AptPlanError(ValueError):
    """The read or the settings cannot be used; the message says which and why."""


# --- package names -----------------------------------------------------------------------------


def package_names(
    distribution,
    os_family,
    source,
    module_type,
    branch,
    build,
    kernel,
    persistenced,
    packages=(),
    fabricmanager_package="",
):
    """The driver packages for a distribution, source, kernel module flavour and branch:

    {"version_package": NAME (its version is the driver's), "versioned": [...] (installed at
    the driver version, held), "extra": [...] (installed at any version), "pin": [...]
    (NVIDIA's branch pinning package), "fabricmanager": NAME, "stream": the dnf module stream
    (RedHat family)}.

    source 'distribution' is the OS archive (Debian's non-free, Ubuntu's restricted), any other
    NVIDIA's CUDA repository (a mirror carries the same names). packages, when given, replaces
    the versioned packages (the first is the version package; no extra or pin packages);
    fabricmanager_package, when given, the Fabric Manager package."""
    branch = str(branch)
    is_open = module_type == "open"
    stream = ""
    if os_family == "RedHat":
        # NVIDIA's RHEL repository: a dnf module stream per branch and flavour, the unversioned
        # meta packages, and the versionlock plugin that holds them.
        found = {
            "version_package": "nvidia-driver",
            "versioned": ["nvidia-open" if is_open else "cuda-drivers"],
            "extra": ["python3-dnf-plugin-versionlock"],
            "pin": [],
            "fabricmanager": "nvidia-fabric-manager",
        }
        stream = branch + ("-open" if is_open else ("" if build == "precompiled" else "-dkms"))
    elif source == "distribution" and distribution == "Ubuntu":
        # Ubuntu's server packages carry the branch; the precompiled, signed modules come as
        # linux-modules-nvidia-BRANCH-server[-open]-KERNEL and -FLAVOUR (generic, aws, ...).
        suffix = "-server" + ("-open" if is_open else "")
        headless = "nvidia-headless-no-dkms-" if build == "precompiled" else "nvidia-headless-"
        flavour = re.sub(r"^[0-9.]+-[0-9]+-", "", kernel)
        modules = "linux-modules-nvidia-" + branch + suffix + "-"
        found = {
            "version_package": "libnvidia-compute-%s-server" % branch,
            "versioned": [
                headless + branch + suffix,
                "nvidia-utils-%s-server" % branch,
                "nvidia-compute-utils-%s-server" % branch,
                "libnvidia-compute-%s-server" % branch,
            ],
            "extra": [modules + kernel, modules + flavour] if build == "precompiled" else [],
            "pin": [],
            "fabricmanager": "nvidia-fabricmanager-%s" % branch,
        }
    elif source == "distribution":
        # Debian's non-free: nvidia-driver pulls the userspace; nvidia-smi and libcuda1 (which
        # the container toolkit needs) are separate packages of the same source package, and
        # nvidia-persistenced has a version of its own. Debian has no Fabric Manager package.
        found = {
            "version_package": "nvidia-driver",
            "versioned": [
                "nvidia-driver",
                "nvidia-open-kernel-dkms" if is_open else "nvidia-kernel-dkms",
                "nvidia-smi",
                "libcuda1",
            ],
            "extra": ["firmware-misc-nonfree"] + (["nvidia-persistenced"] if persistenced else []),
            "pin": [],
            "fabricmanager": "",
        }
    else:
        # NVIDIA's Debian and Ubuntu repository: from branch 580 on it pins a branch with
        # nvidia-driver-pinning-BRANCH and installs the unversioned nvidia-open or cuda-drivers;
        # before, the names carry the branch.
        newer = int(branch) >= 580
        name = ("nvidia-open" if is_open else "cuda-drivers") + ("" if newer else "-" + branch)
        found = {
            "version_package": name,
            "versioned": [name],
            "extra": [],
            "pin": ["nvidia-driver-pinning-" + branch] if newer else [],
            "fabricmanager": "nvidia-fabricmanager-" + branch,
        }
    if packages:
        found.update(version_package=packages[0], versioned=list(packages), extra=[], pin=[])
    if fabricmanager_package:
        found["fabricmanager"] = fabricmanager_package
    found["stream"] = stream
    return found


# --- the read --------------------------------------------------------------------------------

# dpkg-query's row of a driver package: NAME|STATUS|VERSION|SELECTION. The role's read after the
# install runs ROWS_QUERY (the action answers it), so held() parses both reads.
ROWS_FORMAT = "--showformat=${Package}|${db:Status-Abbrev}|${Version}|${db:Status-Want}\\n"
ROWS_QUERY = ["dpkg-query", "--show", ROWS_FORMAT]
ALL_PACKAGES_FORMAT = "--showformat=${db:Status-Abbrev} ${Package} ${Version} ${source:Package}\\n"
UNITS = ("nvidia-persistenced.service", "nvidia-fabricmanager.service")
VERSION_READ = "#version-read"
VERSION_READ_OK = "#version-read-ok"
UNITS_MARK = "#units"
LISTS_MAX_AGE = 3600

# $1 the role's own source prefix ('' unless the source is the OS archive), then the APT helpers
# up to "--", then the version package and the packages of the install step. Prints:
#   helper NAME STATUS          dpkg's status of each helper
#   package-lists-age N         seconds since the lists were refreshed (apt's cache_valid_time)
#   URI SUITE COMPONENT ENTRY   the host's APT sources (source 'distribution' only; apt-get
#                               indextargets failing fails the read)
#   own-source PATH SHA256 MODE the sources this role wrote before
#   #version-read               then dpkg's STATUS|VERSION of the version package (an empty line
#                               when it is not installed), apt-cache policy of it, the package
#                               rows NAME|STATUS|VERSION|SELECTION,
#   #units                      then systemctl show of the NVIDIA services,
#   #version-read-ok            when apt-cache policy answered.
READ_SCRIPT = (
    r"""own=$1
shift
helpers=
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do helpers="$helpers $1"; shift; done
[ "$#" -gt 0 ] && shift
[ -z "$helpers" ] || dpkg-query --show --showformat='helper ${Package} ${db:Status-Abbrev}\n' $helpers
stamp=/var/lib/apt/periodic/update-success-stamp
[ -e "$stamp" ] || stamp=/var/lib/apt/lists
echo "package-lists-age $(( $(date +%s) - $(stat -c %Y "$stamp" 2>/dev/null || echo 0) ))"
if [ -n "$own" ]; then
  apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(SOURCESENTRY)' \
    'Identifier: Packages' || exit
  for f in /etc/apt/sources.list.d/"$own"-*.sources; do
    if [ -e "$f" ]; then echo "own-source $f $(sha256sum < "$f" | cut -d' ' -f1) $(stat -c %a "$f")"; fi
  done
fi
echo '#version-read'
(
  dpkg-query --show --showformat='${db:Status-Abbrev}|${Version}' "$1" 2>/dev/null
  echo
  apt-cache policy "$1" || exit
  dpkg-query --show '"""
    + ROWS_FORMAT
    + r"""' "$@"
  echo '#units'
  systemctl show --property=Id,LoadState,UnitFileState,ActiveState """
    + " ".join(UNITS)
    + r"""
  exit 0
) && echo '#version-read-ok'
exit 0
"""
)

# Every installed package with its source package: read only when the driver version changes
# (apt moves a driver only when every package of its source package moves with it).
ALL_PACKAGES_SCRIPT = "exec dpkg-query --show '" + ALL_PACKAGES_FORMAT + "'\n"


def read_argv(own_prefix, helpers, version_package, packages):
    """The read's arguments: the own source prefix, the helpers, "--", then the packages."""
    names = [version_package]
    for name in packages:
        if name not in names:
            names.append(name)
    return [own_prefix, *helpers, "--", *names]


# --- what the read means ---------------------------------------------------------------------

_CANDIDATE = re.compile(r"Candidate: (\S+)")
_INSTALLED = re.compile(r"^.i")
_INSTALLED_LINE = re.compile(r"^.i. ")
_DRIVER_VERSION = re.compile(r"^([0-9]+:)?[0-9]{3}[.]")
_ARCH = re.compile(r":.*$")


def upstream(version):
    """'535.216.01-1~deb12u1' and '3:580.95.05-1.el9' -> the driver version part; a version
    that carries none is kept as it is."""
    return upstream_version(version) or version


def _name(package):
    """The package name without its architecture suffix (libcuda1:amd64 -> libcuda1)."""
    return _ARCH.sub("", package)


def _unique(items):
    seen = set()
    kept = []
    for item in items:
        if item.lower() not in seen:
            seen.add(item.lower())
            kept.append(item)
    return kept


def versions(lines, version, branch, allow_change):
    """From the version read's lines (the version package's STATUS|VERSION row first, then
    apt-cache policy): the row, the installed and offered versions and the target.

    The target is the version asked for; else the installed one where it is of the branch and a
    change is not allowed; else what the package manager offers."""
    row = lines[0] if lines else ""
    installed = upstream(row.split("|")[-1]) if _INSTALLED.match(row) else ""
    found = _CANDIDATE.search("\n".join(lines))
    candidate = found.group(1) if found else "(none)"
    candidate_version = upstream(candidate) if _DRIVER_VERSION.match(candidate) else ""
    if version:
        target = version
    elif installed.split(".")[0] == str(branch) and not allow_change:
        target = installed
    else:
        target = candidate_version
    return {
        "row": row,
        "installed": installed,
        "candidate": candidate,
        "candidate_version": candidate_version,
        "target": target,
        "changing": bool(installed and target and installed != target),
    }


def package_rows(lines):
    """NAME|STATUS|VERSION|SELECTION rows (a line of four '|'-separated fields or more)."""
    return [row for row in (line.split("|") for line in lines) if len(row) >= 4]


def held(lines):
    """The packages the rows show held."""
    return [_name(row[0]) for row in package_rows(lines) if row[3] == "hold"]


def _field(row, index):
    if index >= len(row):
        raise AptPlanError(
            "the installed package line %r has no field %d (STATUS PACKAGE VERSION SOURCE)"
            % (" ".join(row), index + 1)
        )
    return row[index]


def companions(all_packages, version_package, installed_row):
    """The installed packages of the version package's source package at its installed version."""
    rows = [line.split() for line in all_packages if _INSTALLED_LINE.match(line)]
    if not rows:
        return []
    own = re.compile("^" + re.escape(version_package) + "(:.*)?$")
    sources = [_field(row, 3) for row in rows if own.match(_field(row, 1))]
    source = sources[0] if sources else ""
    version = installed_row.split("|")[-1]
    return [_name(row[1]) for row in rows if _field(row, 2) == version and _field(row, 3) == source]


def package_plan(
    lines,
    packages,
    extra_packages,
    version_package,
    installed_row,
    target,
    changing,
    all_packages=(),
):
    """The install set (the versioned and Fabric Manager packages and, when the version changes,
    every installed package of the driver's source package at the installed version), those of
    it not held yet, and whether every package is installed, the versioned ones at the target
    version (then the apt step has nothing to do); and the packages the rows show held."""
    rows = package_rows(lines)
    moving = list(packages) + (
        companions(all_packages, version_package, installed_row) if changing else []
    )
    install_set = _unique(moving)
    on_hold = held(lines)
    at_target = False
    if not changing and target:
        installed = [row for row in rows if _INSTALLED.match(row[1])]
        at_version = re.compile(re.escape(target) + "-")
        versioned = [_name(row[0]) for row in installed if at_version.match(row[2])]
        present = [_name(row[0]) for row in installed]
        at_target = all(name in versioned for name in packages) and all(
            name in present for name in extra_packages
        )
    return {
        "install_set": install_set,
        "unheld": [name for name in install_set if name not in on_hold],
        "held": on_hold,
        "at_target": at_target,
    }


def component_sources(lines, suites, components, own):
    """The sources the driver's archive components need: for each URI of the host's sources
    whose suite is one of suites and that carries main, the components it lacks; one source per
    URI and set of missing components, named OWN-NAME-<sha1 of both, 8 hex digits>. Lines of the
    role's own sources (their entry starts with own) are left out."""
    have = {}
    for line in lines:
        fields = line.split(" ")
        if len(fields) >= 4 and fields[1] in suites and not fields[3].startswith(own):
            have.setdefault(fields[0] + " " + fields[1], []).append(fields[2])
    groups = {}
    for key, found in sorted(have.items()):
        missing = [component for component in components if component not in found]
        if "main" in found and missing:
            uri, suite = key.split(" ")
            entry = groups.setdefault(
                uri + " " + ",".join(missing), {"uri": uri, "components": missing, "suites": []}
            )
            entry["suites"].append(suite)
    prefix = os.path.basename(own)
    return [
        dict(entry, name="%s-%s" % (prefix, hashlib.sha1(key.encode("utf-8")).hexdigest()[:8]))
        for key, entry in sorted(groups.items())
    ]


def _sections(stdout):
    """The read's lines before "#version-read", the version read's, and the units' text."""
    lines = stdout.splitlines()
    if VERSION_READ not in lines:
        raise AptPlanError("the read printed no %r line: it stopped early" % VERSION_READ)
    start = lines.index(VERSION_READ)
    head, rest = lines[:start], lines[start + 1 :]
    ok = VERSION_READ_OK in rest
    if ok:
        rest = rest[: rest.index(VERSION_READ_OK)]
    units = []
    if UNITS_MARK in rest:
        mark = rest.index(UNITS_MARK)
        rest, units = rest[:mark], rest[mark + 1 :]
    return head, rest, "\n".join(units), ok


def plan(stdout, settings, all_packages=None):
    """What the read (READ_SCRIPT's stdout) means for the role, with settings:

    source, release, helpers, version_package, packages (versioned and Fabric Manager),
    extra_packages, version, branch, allow_version_change, and for source 'distribution'
    suites, components, own (the own sources' path prefix) and source_text (name, uri, suites,
    components -> the deb822 text the role writes).

    Returns helpers_missing, lists_age, archive_ok (the host's sources carry RELEASE main;
    always true for other sources), source_files (file_set's files: the own sources to write
    or remove), version_read_ok, units (systemctl's text) and, from the version read: row,
    installed, candidate, candidate_version, target, changing, install_set, unheld, at_target,
    held and needs_all_packages (the version changes and all_packages was not given)."""
    head, version_lines, units, ok = _sections(stdout)
    installed_helpers = set()
    lists_age = None
    for line in head:
        fields = line.split(" ")
        if fields[0] == "helper" and len(fields) >= 3 and _INSTALLED.match(fields[2]):
            installed_helpers.add(fields[1])
        elif (
            fields[0] == "package-lists-age"
            and len(fields) == 2
            and lists_age is None
            and re.match(r"^-?[0-9]+$", fields[1])
        ):
            lists_age = int(fields[1])
    answer = {
        "helpers_missing": [name for name in settings["helpers"] if name not in installed_helpers],
        "lists_age": 999999 if lists_age is None else lists_age,
        "archive_ok": True,
        "source_files": [],
        "version_read_ok": ok,
        "units": units,
    }
    if settings["source"] == "distribution":
        answer["archive_ok"] = any((" %s main " % settings["release"]) in line for line in head)
        answer["source_files"] = _source_files(head, settings)
    found = versions(
        version_lines, settings["version"], settings["branch"], settings["allow_version_change"]
    )
    answer.update(found)
    answer["needs_all_packages"] = found["changing"] and all_packages is None
    answer.update(
        package_plan(
            version_lines,
            settings["packages"],
            settings["extra_packages"],
            settings["version_package"],
            found["row"],
            found["target"],
            found["changing"],
            all_packages or (),
        )
    )
    return answer


def _source_files(head, settings):
    """Each wanted source whose text or mode differs from what the read's own-source lines
    show, and each own source no longer wanted (state absent)."""
    own_lines = [line[len("own-source ") :] for line in head if line.startswith("own-source ")]
    files = []
    wanted = []
    for entry in component_sources(
        head, settings["suites"], settings["components"], settings["own"]
    ):
        path = "/etc/apt/sources.list.d/%s.sources" % entry["name"]
        content = settings["source_text"](entry)
        wanted.append(path)
        digest = hashlib.sha256(content.encode("utf-8")).hexdigest()
        if "%s %s 644" % (path, digest) not in own_lines:
            files.append({"path": path, "content": content, "mode": "0644"})
    for line in own_lines:
        path = line.split(" ")[0]
        if path not in wanted:
            files.append({"path": path, "state": "absent"})
    return files


# --- the state the role records ---------------------------------------------------------------


def systemd_units(text):
    """What `systemctl show` printed: unit Id -> its properties (the first of each name)."""
    units = {}
    for block in text.replace("\r\n", "\n").split("\n\n"):
        props = {}
        for line in block.splitlines():
            name, sep, value = line.partition("=")
            if sep and name and name not in props:
                props[name] = value
        if props.get("Id"):
            units[props["Id"]] = props
    return units


def services_to_change(units_text, wanted, module_loaded):
    """The wanted services that are installed (LoadState is not not-found) but not enabled or,
    with the nvidia module loaded, not running."""
    units = systemd_units(units_text)
    names = []
    for name in wanted:
        unit = units.get(name, {})
        if unit.get("LoadState", "not-found") != "not-found" and (
            unit.get("UnitFileState", "") != "enabled"
            or (module_loaded and unit.get("ActiveState", "") != "active")
        ):
            names.append(name)
    return names


def reboot_reasons(nouveau_loaded, loaded_driver, target, module_type):
    """Why the node needs a reboot for the installed driver: nouveau loaded, or an nvidia module
    of another version or flavour loaded (loaded_driver: nvidia_pci's, None when none is)."""
    reasons = ["nouveau is loaded"] if nouveau_loaded else []
    if loaded_driver is not None and target and loaded_driver.get("version") != target:
        reasons.append(
            "the loaded nvidia module is %s, not the installed %s"
            % (loaded_driver.get("version"), target)
        )
    flavor = None if loaded_driver is None else loaded_driver.get("flavor")
    if flavor is not None and flavor != module_type:
        reasons.append("the loaded nvidia module is %s, not %s" % (flavor, module_type))
    return reasons


STATE_KEYS = (
    "installed_version",
    "branch",
    "kernel_module_type",
    "build",
    "source",
    "packages",
    "persistenced",
    "fabricmanager",
    "gpu_count",
    "reboot_pending",
    "reboot_reasons",
)


def driver_state(**values):
    """The driver state the role records (nvidia_driver_installed, and the local fact
    kubegpu_driver): exactly STATE_KEYS."""
    missing = [key for key in STATE_KEYS if key not in values]
    unknown = sorted(set(values) - set(STATE_KEYS))
    if missing or unknown:
        raise AptPlanError(
            "the driver state needs %s; unknown: %s"
            % (", ".join(STATE_KEYS), ", ".join(unknown) or "none")
        )
    return dict(values)


def fact_text(state):
    """The local fact's text, as ansible's to_nice_json(sort_keys=true) writes it, and a line end."""
    return json.dumps(state, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def settle(answer, facts):
    """Whether the host has nothing left to change after plan()'s answer, and the state the role
    records then: {"settled": bool, "state": dict}.

    facts: branch, source, build, module_type, persistenced, fabricmanager (bools: wanted),
    gpu_count, services (the wanted ones), module_loaded, nouveau_loaded, loaded_driver,
    needs_headers, files_in_place (the nouveau blacklist and the module parameters as the role
    writes them), fact_sha256 (the local fact's, None when it is missing or not root's)."""
    target = answer["target"]
    state = driver_state(
        installed_version=target,
        branch=facts["branch"],
        kernel_module_type=facts["module_type"],
        build=facts["build"],
        source=facts["source"],
        packages=list(answer["packages"]),
        persistenced=facts["persistenced"],
        fabricmanager=facts["fabricmanager"],
        gpu_count=facts["gpu_count"],
        reboot_pending=False,
        reboot_reasons=[],
    )
    settled = bool(
        target
        and target.split(".")[0] == str(facts["branch"])
        and answer["version_read_ok"]
        and answer["at_target"]
        and not answer["pin"]
        and not answer["unheld"]
        and not facts["needs_headers"]
        and facts["files_in_place"]
        and not services_to_change(answer["units"], facts["services"], facts["module_loaded"])
        and not reboot_reasons(
            facts["nouveau_loaded"], facts["loaded_driver"], target, facts["module_type"]
        )
        and facts["fact_sha256"] == hashlib.sha256(fact_text(state).encode("utf-8")).hexdigest()
    )
    return {"settled": settled, "state": state}
