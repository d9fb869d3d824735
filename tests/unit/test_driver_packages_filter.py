"""kubegpu.gpu.nvidia_driver_versions and kubegpu.gpu.nvidia_driver_package_plan, the Python
filters that replaced the Jinja pipelines of two set_fact tasks of the nvidia_driver role's
tasks/install-Debian.yml ("Work out the installed, offered and target driver versions" and
"Decide which packages move to the new driver version").

The proof is parity: ansible-core's Templar renders each task's arguments twice, as the task
file has them now (read from the file, with its task vars) and as they were before the filters
(kept verbatim below), with the role's own vars/main.yml values they read, and every fact must
have the same value and type. The reads are what the role's dpkg-query and apt-cache policy
commands print on Debian 12 and Ubuntu 24.04, varied the ways hosts differ. Direct calls cover
the filters' errors."""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleError, AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
from ansible.utils.collection_loader import AnsibleCollectionConfig
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
from ansible_collections.kubegpu.gpu.plugins.filter import driver_packages, driver_versions

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "nvidia_driver"
VERSIONS_TASK = "Work out the installed, offered and target driver versions"
PLAN_TASK = "Decide which packages move to the new driver version"

nvidia_driver_versions = driver_versions.FilterModule().filters()["nvidia_driver_versions"]
nvidia_driver_package_plan = driver_packages.FilterModule().filters()["nvidia_driver_package_plan"]

# The two tasks' arguments and vars before the filters, verbatim.
BEFORE_VERSIONS = yaml.safe_load(r"""
args:
  __nvidia_driver_installed_row: "{{ __nvidia_driver_row }}"
  __nvidia_driver_installed_version: "{{ __nvidia_driver_installed_now }}"
  __nvidia_driver_candidate: "{{ __nvidia_driver_candidate_now }}"
  __nvidia_driver_candidate_version: "{{ __nvidia_driver_candidate_upstream }}"
  __nvidia_driver_target_version: >-
    {{ nvidia_driver_version if nvidia_driver_version | length > 0
       else (__nvidia_driver_installed_now
             if (__nvidia_driver_installed_now.split('.') | first) == nvidia_driver_branch
                and not nvidia_driver_allow_version_change | bool
             else __nvidia_driver_candidate_upstream) }}
vars:
  # dpkg's row (status|version) of the version package: the read's first line.
  __nvidia_driver_row: "{{ __nvidia_driver_version_reads.stdout_lines | first | default('') }}"
  __nvidia_driver_installed_now: >-
    {{ (__nvidia_driver_row.split('|') | last)
       | regex_replace(__nvidia_driver_upstream_regex, __nvidia_driver_first_group)
       if __nvidia_driver_row is match('^.i') else '' }}
  __nvidia_driver_candidate_now: >-
    {{ (__nvidia_driver_version_reads.stdout | regex_search(__nvidia_driver_candidate_regex, __nvidia_driver_first_group) or ['(none)']) | first }}
  # The offered upstream version, '' when the candidate is none or not a driver version.
  __nvidia_driver_candidate_upstream: >-
    {{ __nvidia_driver_candidate_now
       | regex_replace(__nvidia_driver_upstream_regex, __nvidia_driver_first_group)
       if __nvidia_driver_candidate_now is match('^([0-9]+:)?[0-9]{3}[.]') else '' }}
""")
BEFORE_PLAN = yaml.safe_load(r"""
args:
  __nvidia_driver_install_set: "{{ __nvidia_driver_set }}"
  # Held already, by the first read: the hold step leaves these alone.
  __nvidia_driver_unheld: >-
    {{ __nvidia_driver_set
       | reject('in', __nvidia_driver_rows | selectattr('3', 'equalto', 'hold')
                      | map(attribute='0') | map('regex_replace', ':.*$', '') | list)
       | list }}
  __nvidia_driver_packages_at_target: >-
    {{ not __nvidia_driver_version_changing | bool
       and __nvidia_driver_target_version | length > 0
       and (__nvidia_driver_versioned_packages + __nvidia_driver_fm_packages)
           | reject('in', __nvidia_driver_rows_at_target) | list | length == 0
       and __nvidia_driver_extra_packages | reject('in', __nvidia_driver_rows_installed) | list | length == 0 }}
vars:
  __nvidia_driver_set: >-
    {{ (__nvidia_driver_versioned_packages + __nvidia_driver_fm_packages
        + (__nvidia_driver_companions if __nvidia_driver_version_changing | bool else []))
       | unique }}
  __nvidia_driver_rows: >-
    {{ __nvidia_driver_version_reads.stdout_lines | map('split', '|') | selectattr('3', 'defined') | list }}
  __nvidia_driver_rows_installed: >-
    {{ __nvidia_driver_rows | selectattr('1', 'match', '^.i') | map(attribute='0')
       | map('regex_replace', ':.*$', '') | list }}
  # apt's "<package>=<target>-*" takes exactly these versions.
  __nvidia_driver_rows_at_target: >-
    {{ __nvidia_driver_rows | selectattr('1', 'match', '^.i')
       | selectattr('2', 'match', (__nvidia_driver_target_version | regex_escape) ~ '-')
       | map(attribute='0') | map('regex_replace', ':.*$', '') | list }}
  # Every installed package of the driver's source package at the installed version:
  # apt moves a driver only when all of them move together.
  __nvidia_driver_installed_rows: >-
    {{ (__nvidia_driver_all_packages.stdout_lines | default([]))
       | select('match', '^.i. ') | map('split') | list }}
  __nvidia_driver_source_package: >-
    {{ (__nvidia_driver_installed_rows
        | selectattr('1', 'match', '^' ~ __nvidia_driver_version_package ~ '(:.*)?$')
        | map(attribute='3') | list + ['']) | first }}
  __nvidia_driver_companions: >-
    {{ __nvidia_driver_installed_rows
       | selectattr('2', 'equalto', __nvidia_driver_installed_row.split('|') | last)
       | selectattr('3', 'equalto', __nvidia_driver_source_package)
       | map(attribute='1') | map('regex_replace', ':.*$', '') | list }}
""")
# What the tasks read from the role's vars/main.yml.
ROLE_VARS = (
    "__nvidia_driver_upstream_regex",
    "__nvidia_driver_first_group",
    "__nvidia_driver_version_changing",
    "__nvidia_driver_version_output",
)


def _collection_modules() -> list[str]:
    return [
        name
        for name in sys.modules
        if name == "ansible_collections" or name.startswith("ansible_collections.")
    ]


@pytest.fixture(scope="module")
def collection_loader() -> Iterator[None]:
    """ansible-core's collection loader, as ansible-playbook installs it, so that Templar finds
    kubegpu.gpu's filters. The modules of ansible_collections that test modules imported from
    sys.path (not through the loader, which cannot then load the collection's plugins) are put
    aside meanwhile, and back afterwards."""
    plain = {name: sys.modules.pop(name) for name in _collection_modules()}
    had_finder = AnsibleCollectionConfig.collection_finder is not None
    if not had_finder:
        init_plugin_loader()
    try:
        yield
    finally:
        for name in _collection_modules():
            del sys.modules[name]
        sys.modules.update(plain)
        if not had_finder:
            _AnsibleCollectionFinder._remove()


def _task(name: str) -> dict[str, Any]:
    """The task of install-Debian.yml with this name, wherever its blocks put it."""
    found: list[dict[str, Any]] = []

    def walk(tasks: list[dict[str, Any]]) -> None:
        for task in tasks:
            if task.get("name") == name:
                found.append(task)
            walk(task.get("block", []))

    walk(yaml.safe_load((ROLE / "tasks" / "install-Debian.yml").read_text()))
    assert len(found) == 1, f"{name!r}: {len(found)} tasks"
    return found[0]


def _now(name: str) -> dict[str, Any]:
    task = _task(name)
    return {"args": task["ansible.builtin.set_fact"], "vars": task.get("vars", {})}


def _trusted(value: Any) -> Any:
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: _trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    return value


# The role's value the old expressions read, before plugins/filter/driver_versions.py took it
# over as _CANDIDATE.
CANDIDATE_REGEX = r"Candidate: (\S+)"


def _role_vars() -> dict[str, Any]:
    data = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    return {
        **{name: data[name] for name in ROLE_VARS},
        "__nvidia_driver_candidate_regex": CANDIDATE_REGEX,
    }


def _render(task: dict[str, Any], variables: dict[str, Any]) -> dict[str, Any]:
    """What set_fact sets: the task's arguments rendered with its vars over the others."""
    merged = {**_trusted(_role_vars()), **copy.deepcopy(variables), **_trusted(task["vars"])}
    rendered = Templar(loader=DataLoader(), variables=merged).template(_trusted(task["args"]))
    assert isinstance(rendered, dict)
    return rendered


def _result(stdout: str) -> dict[str, Any]:
    """A registered read_script result."""
    return {"changed": False, "rc": 0, "stdout": stdout, "stdout_lines": stdout.splitlines()}


SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}

# --- The reads -----------------------------------------------------------------------------
# The version read prints dpkg's STATUS|VERSION of the version package (an empty line when it
# is not installed), apt-cache policy, one PACKAGE|STATUS|VERSION|SELECTION row per package,
# an empty line, then systemctl show of the NVIDIA services. dpkg's status is three characters,
# the selection first: "hi " is a held installed package, "ii " one that is not held.

UNITS = """Id=nvidia-persistenced.service
LoadState=loaded
UnitFileState=enabled
ActiveState=active

Id=nvidia-fabricmanager.service
LoadState=not-found
UnitFileState=
ActiveState=inactive
"""


def _policy(package: str, installed: str, candidate: str) -> str:
    return (
        f"{package}:\n  Installed: {installed}\n  Candidate: {candidate}\n  Version table:\n"
        f" *** {candidate} 500\n"
        "        500 http://deb.debian.org/debian bookworm/non-free amd64 Packages\n"
        "        100 /var/lib/dpkg/status\n"
    )


def _version_read(first: str, policy: str, rows: list[str]) -> dict[str, Any]:
    return _result(first + "\n" + policy + "".join(row + "\n" for row in rows) + "\n" + UNITS)


D535 = "535.216.01-1~deb12u1"
D535_OLD = "535.183.01-1~deb12u1"
DEBIAN = ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "libcuda1"]
DEBIAN_EXTRA = ["firmware-misc-nonfree", "nvidia-persistenced"]


def _debian_rows(version: str, selection: str = "hold") -> list[str]:
    status = "hi " if selection == "hold" else "ii "
    return [f"{name}|{status}|{version}|{selection}" for name in DEBIAN] + [
        "firmware-misc-nonfree|ii |20230210-5|install",
        "nvidia-persistenced|ii |535.171.04-1|install",
    ]


# dpkg-query --show --showformat='${db:Status-Abbrev} ${Package} ${Version} ${source:Package}\n'
# (every package of the host; the status is three characters, so two spaces follow it).
def _all_packages(version: str) -> dict[str, Any]:
    lines = [
        "ii  base-files 12.4+deb12u8 base-files",
        "ii  firmware-misc-nonfree 20230210-5 firmware-nonfree",
        f"ii  firmware-nvidia-gsp {version} firmware-nvidia-gsp",
        f"ii  libcuda1:amd64 {version} nvidia-graphics-drivers",
        f"ii  libnvidia-ml1:amd64 {version} nvidia-graphics-drivers",
        f"ii  nvidia-driver {version} nvidia-graphics-drivers",
        f"ii  nvidia-driver-bin {version} nvidia-graphics-drivers",
        f"ii  nvidia-kernel-dkms {version} nvidia-graphics-drivers",
        f"hi  nvidia-kernel-support {version} nvidia-graphics-drivers",
        f"iiR nvidia-smi {version} nvidia-graphics-drivers",
        "ii  nvidia-persistenced 535.171.04-1 nvidia-persistenced",
        "ii  nvidia-alternative 535.161.08-1~deb12u1 nvidia-graphics-drivers",
        f"rc  nvidia-vdpau-driver:amd64 {version} nvidia-graphics-drivers",
        f"iU  libnvidia-rtcore:amd64 {version} nvidia-graphics-drivers",
        "un  nvidia-cuda-mps <none> <none>",
        # Not a line of this format (a two-character status): left out.
        f"ii nvidia-egl-common {version} nvidia-graphics-drivers",
    ]
    return _result("\n".join(lines) + "\n")


U580 = "580.95.05-0ubuntu0.24.04.2"
UBUNTU = [
    "nvidia-headless-580-server",
    "nvidia-utils-580-server",
    "nvidia-compute-utils-580-server",
    "libnvidia-compute-580-server",
]


def _ubuntu_rows(version: str) -> list[str]:
    return [
        f"nvidia-headless-580-server|hi |{version}|hold",
        f"nvidia-utils-580-server|hi |{version}|hold",
        f"nvidia-compute-utils-580-server|ii |{version}|install",
        f"libnvidia-compute-580-server:amd64|hi |{version}|hold",
        f"nvidia-fabricmanager-580|ii |{version}|install",
    ]


def _inputs(
    read: dict[str, Any],
    version: str = "",
    branch: Any = "535",
    allow: Any = False,
    packages: list[Any] | None = None,
    fm: list[str] | None = None,
    extra: list[str] | None = None,
    version_package: str = "nvidia-driver",
    all_packages: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "__nvidia_driver_version_reads": read,
        "nvidia_driver_version": version,
        "nvidia_driver_branch": branch,
        "nvidia_driver_allow_version_change": allow,
        "__nvidia_driver_versioned_packages": DEBIAN if packages is None else packages,
        "__nvidia_driver_fm_packages": fm or [],
        "__nvidia_driver_extra_packages": DEBIAN_EXTRA if extra is None else extra,
        "__nvidia_driver_version_package": version_package,
        "__nvidia_driver_all_packages": SKIPPED if all_packages is None else all_packages,
    }


# A host with 535.183.01 installed and held, 535.216.01 offered.
OLD_READ = _version_read(
    f"hi |{D535_OLD}", _policy("nvidia-driver", D535_OLD, D535), _debian_rows(D535_OLD)
)


def _held_at(version: str) -> dict[str, Any]:
    """Version 535.216.01 asked, every package held at this package version."""
    return _inputs(
        _version_read(
            f"ii |{D535}",
            _policy("nvidia-driver", D535, D535),
            [f"{name}|hi |{version}|hold" for name in DEBIAN],
        ),
        version="535.216.01",
        extra=[],
    )


CASES: dict[str, dict[str, Any]] = {
    "debian second run, all at the target and held": _inputs(
        _version_read(f"hi |{D535}", _policy("nvidia-driver", D535, D535), _debian_rows(D535))
    ),
    "debian second run, not held yet": _inputs(
        _version_read(
            f"ii |{D535}", _policy("nvidia-driver", D535, D535), _debian_rows(D535, "install")
        )
    ),
    "debian first install: nothing installed": _inputs(
        _version_read(
            "",
            _policy("nvidia-driver", "(none)", D535),
            [f"{name}|un ||unknown" for name in DEBIAN],
        )
    ),
    "debian first install, an extra package missing": _inputs(
        _version_read(
            f"ii |{D535}",
            _policy("nvidia-driver", D535, D535),
            [*_debian_rows(D535)[:-1], "nvidia-persistenced|rc |535.171.04-1|deinstall"],
        )
    ),
    "debian version change asked, with companions": _inputs(
        OLD_READ,
        version="535.216.01",
        allow=True,
        all_packages=_all_packages(D535_OLD),
    ),
    "debian version change to the candidate, with companions": _inputs(
        OLD_READ,
        allow=True,
        all_packages=_all_packages(D535_OLD),
    ),
    "debian version change, the version package not in the second read": _inputs(
        OLD_READ,
        version="535.216.01",
        allow=True,
        version_package="nvidia-driver-full",
        all_packages=_all_packages(D535_OLD),
    ),
    "debian version change, nothing installed in the second read": _inputs(
        OLD_READ,
        version="535.216.01",
        allow=True,
        all_packages=_result(""),
    ),
    "no version change, with a second read all the same": _inputs(
        _version_read(f"hi |{D535}", _policy("nvidia-driver", D535, D535), _debian_rows(D535)),
        all_packages=_all_packages(D535),
    ),
    "debian installed, change not allowed: the installed version stays": _inputs(
        OLD_READ,
    ),
    "debian installed on another branch: the candidate": _inputs(
        OLD_READ,
        branch="550",
    ),
    "the branch given as a number does not compare equal": _inputs(
        OLD_READ,
        branch=535,
    ),
    "allow_change as a string": _inputs(
        _version_read(f"ii |{D535}", _policy("nvidia-driver", D535, D535), _debian_rows(D535)),
        allow="yes",
    ),
    "the version package removed, configuration left": _inputs(
        _version_read(f"rc |{D535}", _policy("nvidia-driver", "(none)", D535), _debian_rows(D535))
    ),
    "no candidate: empty target": _inputs(
        _version_read("", _policy("nvidia-driver", "(none)", "(none)"), [])
    ),
    "apt-cache knows no such package: no Candidate line": _inputs(
        _version_read("", "", ["nvidia-driver|un ||unknown"])
    ),
    "the candidate is not a driver version": _inputs(
        _version_read("", _policy("nvidia-driver", "(none)", "1.0-1"), [])
    ),
    "the candidate has an epoch": _inputs(
        _version_read("", _policy("nvidia-driver", "(none)", "1:580.95.05-1"), []),
        branch="580",
    ),
    "the installed version is not a driver version": _inputs(
        _version_read("ii |1.2-3", _policy("nvidia-driver", "1.2-3", D535), _debian_rows("1.2-3"))
    ),
    "an empty read": _inputs(_result("")),
    "rows with too few and too many fields": _inputs(
        _version_read(
            f"ii |{D535}",
            _policy("nvidia-driver", D535, D535),
            [
                f"nvidia-driver|ii |{D535}",
                f"nvidia-kernel-dkms|hi |{D535}|hold|extra",
                f"nvidia-smi:amd64|hi |{D535}|hold",
                f"libcuda1|hi |{D535}|hold",
            ],
        ),
        extra=[],
    ),
    "a target version that differs only where a regex dot would match": _held_at("535x216x01-1"),
    "a target version without the revision dash": _held_at("535.216.01"),
    "packages that differ in case, repeated by the fabric manager": _inputs(
        _version_read(f"ii |{D535}", _policy("nvidia-driver", D535, D535), _debian_rows(D535)),
        packages=["nvidia-driver", "NVIDIA-Driver", "libcuda1"],
        fm=["libcuda1"],
    ),
    "ubuntu 24.04 second run, with arch suffixes and fabric manager": _inputs(
        _version_read(
            f"hi |{U580}", _policy("libnvidia-compute-580-server", U580, U580), _ubuntu_rows(U580)
        ),
        branch="580",
        packages=UBUNTU,
        fm=["nvidia-fabricmanager-580"],
        extra=[],
        version_package="libnvidia-compute-580-server",
    ),
    "ubuntu version change within the branch": _inputs(
        _version_read(
            "hi |580.82.07-0ubuntu0.24.04.1",
            _policy("libnvidia-compute-580-server", "580.82.07-0ubuntu0.24.04.1", U580),
            _ubuntu_rows("580.82.07-0ubuntu0.24.04.1"),
        ),
        branch="580",
        allow=True,
        packages=UBUNTU,
        extra=[],
        version_package="libnvidia-compute-580-server",
        all_packages=_result(
            "ii  libnvidia-compute-580-server:amd64 580.82.07-0ubuntu0.24.04.1"
            " nvidia-graphics-drivers-580-server\n"
            "ii  libnvidia-decode-580-server:amd64 580.82.07-0ubuntu0.24.04.1"
            " nvidia-graphics-drivers-580-server\n"
            "ii  nvidia-utils-580-server 580.82.07-0ubuntu0.24.04.1"
            " nvidia-graphics-drivers-580-server\n"
            "ii  nvidia-kernel-common-580-server 580.82.07-0ubuntu0.24.04.1"
            " nvidia-graphics-drivers-580-server\n"
        ),
    ),
    "nvidia's repository, a version asked on the same branch": _inputs(
        _version_read(
            "hi |580.82.07-1",
            _policy("nvidia-open", "580.82.07-1", "580.95.05-1"),
            ["nvidia-open|hi |580.82.07-1|hold"],
        ),
        version="580.95.05",
        branch="580",
        packages=["nvidia-open"],
        extra=[],
        version_package="nvidia-open",
        all_packages=_result(
            "ii  nvidia-open 580.82.07-1 nvidia-open\n"
            "ii  nvidia-kernel-open-dkms 580.82.07-1 nvidia-graphics-drivers\n"
        ),
    ),
}

# Inputs that fail the original expressions fail the filters too (the second read's
# installed lines with too few fields, when the version changes).
FAILING: dict[str, dict[str, Any]] = {
    "an installed line of the second read without its source": _inputs(
        OLD_READ,
        version="535.216.01",
        allow=True,
        all_packages=_result(f"ii  nvidia-driver {D535_OLD}\n"),
    ),
    "an installed line of the second read with a status only": _inputs(
        OLD_READ,
        version="535.216.01",
        allow=True,
        all_packages=_result("ii  \n"),
    ),
}


def _both(variables: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The facts of both tasks, before and now; the second task reads the first's facts (the
    ones from before, so both renders of the second task have the same inputs)."""
    before = _render(BEFORE_VERSIONS, variables)
    now = _render(_now(VERSIONS_TASK), variables)
    facts = {**variables, **before}
    return {**before, **_render(BEFORE_PLAN, facts)}, {**now, **_render(_now(PLAN_TASK), facts)}


def _plain_type(value: Any) -> type:
    """The built-in type under Ansible's tagged subclasses of str, list and dict."""
    return next(base for base in type(value).__mro__ if base in (str, list, dict, bool, int))


@functools.cache
def _case(case: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return _both(CASES[case])


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.usefixtures("collection_loader")
def test_the_filters_set_what_the_jinja_pipelines_set(case: str) -> None:
    before, now = _case(case)
    assert set(now) == set(before)
    for name, value in before.items():
        assert now[name] == value, name
        assert _plain_type(now[name]) is _plain_type(value), name
        if isinstance(value, list):
            assert [_plain_type(item) for item in now[name]] == [
                _plain_type(item) for item in value
            ], name


def _folded(variables: dict[str, Any]) -> dict[str, Any]:
    """The same inputs when the first APT read made the version read (between its markers,
    after lines of its own part) and the version read task was left out."""
    read = variables["__nvidia_driver_version_reads"]
    first = [
        "helper gpg ii ",
        "helper python3-apt ii ",
        "package-lists-age 120",
        "http://archive.example/debian/ bookworm main /etc/apt/sources.list.d/debian.sources:1",
        "#version-read",
        *read["stdout_lines"],
        "#version-read-ok",
    ]
    return {
        **variables,
        "__nvidia_driver_version_reads": SKIPPED,
        "__nvidia_driver_apt_read": _result("\n".join(first) + "\n"),
    }


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.usefixtures("collection_loader")
def test_the_first_reads_version_part_sets_what_the_version_read_sets(case: str) -> None:
    """tasks/install-Debian.yml leaves the version read out when the first APT read made it."""
    now = _case(case)[1]
    variables = _folded(CASES[case])
    versions = _render(_now(VERSIONS_TASK), variables)
    folded = {**versions, **_render(_now(PLAN_TASK), {**variables, **versions})}
    assert folded == now


@pytest.mark.usefixtures("collection_loader")
def test_the_cases_cover_what_the_tasks_decide() -> None:
    """The table reaches every outcome: a version change with companions, packages at the
    target and not, held and unheld packages, an empty target."""
    seen = [_case(case)[0] for case in CASES]
    assert {fact["__nvidia_driver_packages_at_target"] for fact in seen} == {True, False}
    assert any(fact["__nvidia_driver_target_version"] == "" for fact in seen)
    assert any(len(fact["__nvidia_driver_install_set"]) > len(DEBIAN) for fact in seen), (
        "no case moves companions"
    )
    assert any(fact["__nvidia_driver_unheld"] == [] for fact in seen)
    assert any(
        0 < len(fact["__nvidia_driver_unheld"]) < len(fact["__nvidia_driver_install_set"])
        for fact in seen
    )


@pytest.mark.parametrize("case", sorted(FAILING))
@pytest.mark.usefixtures("collection_loader")
def test_inputs_the_jinja_pipelines_fail_on_fail_the_filters(case: str) -> None:
    with pytest.raises(AnsibleError):
        _both(FAILING[case])
    before = _render(BEFORE_VERSIONS, FAILING[case])
    with pytest.raises(AnsibleError, match="has no field"):
        _render(_now(PLAN_TASK), {**FAILING[case], **before})


@pytest.mark.usefixtures("collection_loader")
def test_the_companions_are_the_source_packages_at_the_installed_version() -> None:
    _, now = _case("debian version change asked, with companions")
    assert now["__nvidia_driver_install_set"] == [
        *DEBIAN,
        "libnvidia-ml1",
        "nvidia-driver-bin",
        "nvidia-kernel-support",
    ]
    assert now["__nvidia_driver_target_version"] == "535.216.01"
    assert now["__nvidia_driver_packages_at_target"] is False


@pytest.mark.parametrize(
    ("read", "arguments", "message"),
    [
        ("text", ("", "535", False), "registered version read"),
        ({"skipped": True}, ("", "535", False), "no stdout"),
        (_result(""), (None, "535", False), "version is None"),
        (_result(""), ("", "535", "false"), "bool filter"),
    ],
)
def test_the_versions_filter_refuses_what_it_cannot_read(
    read: Any, arguments: tuple[Any, ...], message: str
) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        nvidia_driver_versions(read, *arguments)


PLAN_ARGUMENTS: dict[str, Any] = {
    "packages": ["nvidia-driver"],
    "extra_packages": [],
    "version_package": "nvidia-driver",
    "installed_row": "",
    "target_version": "",
    "changing": False,
}


@pytest.mark.parametrize(
    ("lines", "changes", "message"),
    [
        ("text", {}, "the input"),
        ([1], {}, "not a string"),
        ([], {"packages": "nvidia-driver"}, "packages is a list"),
        ([], {"all_packages": [None]}, "all_packages has an item"),
        ([], {"target_version": None}, "target_version is None"),
        ([], {"changing": "true"}, "bool filter"),
    ],
)
def test_the_plan_filter_refuses_what_it_cannot_read(
    lines: Any, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        nvidia_driver_package_plan(lines, **{**PLAN_ARGUMENTS, **changes})
