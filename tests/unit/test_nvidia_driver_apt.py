"""plugins/module_utils/nvidia_driver_apt.py: the nvidia_driver role's Debian and Ubuntu
decisions, from what the action kubegpu.gpu.nvidia_driver_apt reads.

The versions and the package plan are proven by parity with an independent oracle: the Jinja
pipelines that decided them in the role before (kept verbatim below), rendered by ansible-core's
Templar, must give what plan() gives for the same read, on every case. The reads are what the
role's dpkg-query and apt-cache policy commands print on Debian 12 and Ubuntu 24.04, varied the
ways hosts differ. Direct tests cover the package names, the read's sections and the errors."""

from __future__ import annotations

import copy
import functools
import hashlib
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
from ansible_collections.kubegpu.gpu.plugins.filter import driver_packages
from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_driver_apt as apt

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "nvidia_driver"
FILTERS = driver_packages.FilterModule().filters()

# The two set_fact tasks that decided the versions and the package plan in the role's
# tasks/install-Debian.yml before plan() did, verbatim: the oracle.
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
)
# vars/main.yml's __nvidia_driver_version_changing as those tasks read it.
VERSION_CHANGING = """{{ __nvidia_driver_installed_version | length > 0
     and __nvidia_driver_target_version | length > 0
     and __nvidia_driver_installed_version != __nvidia_driver_target_version }}"""


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


def _trusted(value: Any) -> Any:
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: _trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    return value


# The role's value the old expressions read.
CANDIDATE_REGEX = r"Candidate: (\S+)"


def _role_vars() -> dict[str, Any]:
    data = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    return {
        **{name: data[name] for name in ROLE_VARS},
        "__nvidia_driver_candidate_regex": CANDIDATE_REGEX,
        "__nvidia_driver_version_changing": VERSION_CHANGING,
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

# Reads that failed the original expressions fail plan() too (the second read's
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


def _plan(variables: dict[str, Any]) -> dict[str, Any]:
    """plan() of the read the case's version read stands for (the version read inside the
    action's read, between its markers), with the case's settings, as the role's facts."""
    read = variables["__nvidia_driver_version_reads"]
    every = variables["__nvidia_driver_all_packages"]
    settings = {
        "source": "cuda_repo",
        "release": "bookworm",
        "helpers": [],
        "version_package": variables["__nvidia_driver_version_package"],
        "packages": variables["__nvidia_driver_versioned_packages"]
        + variables["__nvidia_driver_fm_packages"],
        "extra_packages": variables["__nvidia_driver_extra_packages"],
        "version": variables["nvidia_driver_version"],
        "branch": variables["nvidia_driver_branch"],
        "allow_version_change": variables["nvidia_driver_allow_version_change"] in (True, "yes"),
    }
    stdout = "\n".join(
        ["package-lists-age 10", apt.VERSION_READ, read["stdout"], apt.VERSION_READ_OK]
    )
    answer = apt.plan(stdout, settings, None if every.get("skipped") else every["stdout_lines"])
    return {
        "__nvidia_driver_installed_row": answer["row"],
        "__nvidia_driver_installed_version": answer["installed"],
        "__nvidia_driver_candidate": answer["candidate"],
        "__nvidia_driver_candidate_version": answer["candidate_version"],
        "__nvidia_driver_target_version": answer["target"],
        "__nvidia_driver_install_set": answer["install_set"],
        "__nvidia_driver_unheld": answer["unheld"],
        "__nvidia_driver_packages_at_target": answer["at_target"],
    }


def _both(variables: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The facts the two old tasks set, and what plan() decides."""
    before = _render(BEFORE_VERSIONS, variables)
    facts = {**variables, **before}
    return {**before, **_render(BEFORE_PLAN, facts)}, _plan(variables)


def _plain_type(value: Any) -> type:
    """The built-in type under Ansible's tagged subclasses of str, list and dict."""
    return next(base for base in type(value).__mro__ if base in (str, list, dict, bool, int))


@functools.cache
def _case(case: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return _both(CASES[case])


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.usefixtures("collection_loader")
def test_plan_decides_what_the_jinja_pipelines_decided(case: str) -> None:
    before, now = _case(case)
    assert set(now) == set(before)
    for name, value in before.items():
        assert now[name] == value, name
        assert _plain_type(now[name]) is _plain_type(value), name


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
def test_reads_the_jinja_pipelines_failed_on_fail_plan(case: str) -> None:
    with pytest.raises(AnsibleError):
        _render(BEFORE_PLAN, {**FAILING[case], **_render(BEFORE_VERSIONS, FAILING[case])})
    with pytest.raises(apt.AptPlanError, match="has no field"):
        _plan(FAILING[case])


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


# --- package names ---------------------------------------------------------------------------

NAMES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "debian archive, proprietary, persistenced": (
        {"distribution": "Debian", "os_family": "Debian", "source": "distribution"},
        {
            "version_package": "nvidia-driver",
            "versioned": DEBIAN,
            "extra": DEBIAN_EXTRA,
            "pin": [],
            "fabricmanager": "",
            "stream": "",
        },
    ),
    "debian archive, open, no persistenced": (
        {
            "distribution": "Debian",
            "os_family": "Debian",
            "source": "distribution",
            "module_type": "open",
            "persistenced": False,
        },
        {
            "version_package": "nvidia-driver",
            "versioned": ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-smi", "libcuda1"],
            "extra": ["firmware-misc-nonfree"],
            "pin": [],
            "fabricmanager": "",
            "stream": "",
        },
    ),
    "ubuntu archive, precompiled open": (
        {
            "distribution": "Ubuntu",
            "os_family": "Debian",
            "source": "distribution",
            "module_type": "open",
            "build": "precompiled",
            "branch": "580",
            "kernel": "6.8.0-45-generic",
        },
        {
            "version_package": "libnvidia-compute-580-server",
            "versioned": [
                "nvidia-headless-no-dkms-580-server-open",
                "nvidia-utils-580-server",
                "nvidia-compute-utils-580-server",
                "libnvidia-compute-580-server",
            ],
            "extra": [
                "linux-modules-nvidia-580-server-open-6.8.0-45-generic",
                "linux-modules-nvidia-580-server-open-generic",
            ],
            "pin": [],
            "fabricmanager": "nvidia-fabricmanager-580",
            "stream": "",
        },
    ),
    "nvidia's repository on debian, branch 580: pinned, unversioned": (
        {"distribution": "Debian", "os_family": "Debian", "source": "cuda_repo", "branch": "580"},
        {
            "version_package": "cuda-drivers",
            "versioned": ["cuda-drivers"],
            "extra": [],
            "pin": ["nvidia-driver-pinning-580"],
            "fabricmanager": "nvidia-fabricmanager-580",
            "stream": "",
        },
    ),
    "a mirror before branch 580: the names carry the branch": (
        {
            "distribution": "Ubuntu",
            "os_family": "Debian",
            "source": "mirror",
            "module_type": "open",
            "branch": "570",
        },
        {
            "version_package": "nvidia-open-570",
            "versioned": ["nvidia-open-570"],
            "extra": [],
            "pin": [],
            "fabricmanager": "nvidia-fabricmanager-570",
            "stream": "",
        },
    ),
    "rhel, dkms: the stream names the flavour": (
        {"distribution": "RedHat", "os_family": "RedHat", "source": "cuda_repo", "branch": "580"},
        {
            "version_package": "nvidia-driver",
            "versioned": ["cuda-drivers"],
            "extra": ["python3-dnf-plugin-versionlock"],
            "pin": [],
            "fabricmanager": "nvidia-fabric-manager",
            "stream": "580-dkms",
        },
    ),
    "packages and a fabric manager package given": (
        {
            "distribution": "Debian",
            "os_family": "Debian",
            "source": "cuda_repo",
            "branch": "580",
            "packages": ["my-driver", "my-utils"],
            "fabricmanager_package": "my-fm",
        },
        {
            "version_package": "my-driver",
            "versioned": ["my-driver", "my-utils"],
            "extra": [],
            "pin": [],
            "fabricmanager": "my-fm",
            "stream": "",
        },
    ),
}


@pytest.mark.parametrize("case", sorted(NAMES))
def test_the_package_names_follow_distribution_source_flavour_and_branch(case: str) -> None:
    given, expected = NAMES[case]
    settings = {
        "module_type": "proprietary",
        "branch": "535",
        "build": "dkms",
        "kernel": "6.1.0-27-amd64",
        "persistenced": True,
        **given,
    }
    packages = settings.pop("packages", [])
    assert FILTERS["nvidia_driver_packages"](packages, **settings) == expected


@pytest.mark.parametrize(
    ("packages", "persistenced", "message"),
    [("nvidia-driver", True, "is a list"), ([], "yes", "bool filter")],
)
def test_the_names_filter_refuses_what_it_cannot_use(
    packages: Any, persistenced: Any, message: str
) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        FILTERS["nvidia_driver_packages"](
            packages,
            "Debian",
            "Debian",
            "distribution",
            "proprietary",
            "535",
            "dkms",
            "k",
            persistenced,
        )


# --- the read --------------------------------------------------------------------------------

SETTINGS: dict[str, Any] = {
    "source": "distribution",
    "release": "bookworm",
    "helpers": ["python3-apt", "gpg"],
    "version_package": "nvidia-driver",
    "packages": DEBIAN,
    "extra_packages": DEBIAN_EXTRA,
    "version": "",
    "branch": "535",
    "allow_version_change": False,
    "own": "/etc/apt/sources.list.d/kubegpu-nvidia-distribution",
    "suites": ["bookworm", "bookworm-updates", "bookworm-security"],
    "components": ["contrib", "non-free"],
    "source_text": lambda entry: (
        f"{entry['name']} {entry['uri']} {' '.join(entry['components'])}\n"
    ),
}


def _read(head: list[str], version: list[str] | None, units: str = UNITS) -> str:
    lines = [*head, apt.VERSION_READ]
    if version is not None:
        lines += [*version, apt.UNITS_MARK, *units.splitlines(), apt.VERSION_READ_OK]
    return "\n".join(lines) + "\n"


SETTLED_VERSION = [
    f"hi |{D535}",
    *_policy("nvidia-driver", D535, D535).splitlines(),
    *_debian_rows(D535),
]


def test_a_settled_node_leaves_every_step_out() -> None:
    head = [
        "helper gpg ii ",
        "helper python3-apt ii ",
        "package-lists-age 120",
        "http://archive.example/debian/ bookworm main /etc/apt/sources.list.d/debian.sources:1",
        "http://archive.example/debian/ bookworm contrib /etc/apt/sources.list.d/debian.sources:1",
        "http://archive.example/debian/ bookworm non-free /etc/apt/sources.list.d/debian.sources:1",
    ]
    answer = apt.plan(_read(head, SETTLED_VERSION), SETTINGS)
    assert answer["helpers_missing"] == []
    assert answer["lists_age"] == 120
    assert answer["archive_ok"] is True
    assert answer["source_files"] == []
    assert answer["version_read_ok"] is True
    assert (answer["installed"], answer["target"], answer["changing"]) == (
        "535.216.01",
        "535.216.01",
        False,
    )
    assert answer["at_target"] is True
    assert answer["unheld"] == []
    assert answer["held"] == DEBIAN
    assert answer["needs_all_packages"] is False
    assert answer["units"] == UNITS.rstrip("\n")


def test_the_archive_and_the_own_sources_decide_the_source_files() -> None:
    own = "/etc/apt/sources.list.d/kubegpu-nvidia-distribution"
    entry = "/etc/apt/sources.list.d/debian.sources:1"
    head = [
        "helper python3-apt un ",
        f"http://archive.example/debian/ bookworm main {entry}",
        f"http://archive.example/debian/ bookworm-updates main {entry}",
        f"http://archive.example/debian/ bookworm contrib {own}-0a1b2c3d.sources:1",
        f"own-source {own}-0a1b2c3d.sources 00 644",
    ]
    answer = apt.plan(_read(head, None), SETTINGS)
    assert answer["helpers_missing"] == ["python3-apt", "gpg"]
    assert answer["lists_age"] == 999999
    assert answer["version_read_ok"] is False
    (wanted,) = apt.component_sources(head, SETTINGS["suites"], SETTINGS["components"], own)
    assert (wanted["uri"], wanted["suites"], wanted["components"]) == (
        "http://archive.example/debian/",
        ["bookworm", "bookworm-updates"],
        ["contrib", "non-free"],
    )
    assert answer["source_files"] == [
        {
            "path": f"/etc/apt/sources.list.d/{wanted['name']}.sources",
            "content": SETTINGS["source_text"](wanted),
            "mode": "0644",
        },
        {"path": f"{own}-0a1b2c3d.sources", "state": "absent"},
    ]


def test_an_archive_without_main_for_the_release_is_not_ok() -> None:
    head = ["http://archive.example/debian/ bullseye main /etc/apt/sources.list:1"]
    assert apt.plan(_read(head, SETTLED_VERSION), SETTINGS)["archive_ok"] is False
    other = dict(SETTINGS, source="cuda_repo")
    assert apt.plan(_read(head, SETTLED_VERSION), other)["archive_ok"] is True


def test_a_read_that_stopped_before_the_version_read_is_an_error() -> None:
    with pytest.raises(apt.AptPlanError, match="stopped early"):
        apt.plan("helper gpg ii \n", SETTINGS)


def test_the_read_arguments_name_each_package_once() -> None:
    assert apt.read_argv(
        "own", ["python3-apt"], "nvidia-driver", ["nvidia-driver", "libcuda1"]
    ) == ["own", "python3-apt", "--", "nvidia-driver", "libcuda1"]


def test_the_held_filter_reads_the_rows_after_the_install() -> None:
    rows = ["libcuda1:amd64|hi |1|hold", "nvidia-smi|ii |1|install", "junk"]
    assert FILTERS["nvidia_driver_held"](rows) == ["libcuda1"]
    with pytest.raises(AnsibleFilterError, match="a list"):
        FILTERS["nvidia_driver_held"]("libcuda1|hi |1|hold")


# --- settled, and the state the role records ----------------------------------------------------

HOST: dict[str, Any] = {
    "branch": "535",
    "source": "distribution",
    "build": "dkms",
    "module_type": "proprietary",
    "persistenced": True,
    "fabricmanager": False,
    "gpu_count": 1,
    "services": ["nvidia-persistenced.service"],
    "module_loaded": True,
    "nouveau_loaded": False,
    "loaded_driver": {"version": "535.216.01", "flavor": "proprietary"},
    "needs_headers": False,
    "files_in_place": True,
}


def _settled_answer() -> dict[str, Any]:
    head = ["helper python3-apt ii ", "package-lists-age 120"]
    answer = apt.plan(_read(head, SETTLED_VERSION), dict(SETTINGS, source="cuda_repo"))
    answer.update(packages=DEBIAN, pin=[])
    return answer


def _state() -> dict[str, Any]:
    return apt.driver_state(
        installed_version="535.216.01",
        branch="535",
        kernel_module_type="proprietary",
        build="dkms",
        source="distribution",
        packages=DEBIAN,
        persistenced=True,
        fabricmanager=False,
        gpu_count=1,
        reboot_pending=False,
        reboot_reasons=[],
    )


def _sha(state: dict[str, Any]) -> str:
    return hashlib.sha256(apt.fact_text(state).encode()).hexdigest()


def test_a_host_with_its_fact_in_place_is_settled() -> None:
    done = apt.settle(_settled_answer(), {**HOST, "fact_sha256": _sha(_state())})
    assert done == {"settled": True, "state": _state()}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"fact_sha256": None}, "no local fact yet"),
        ({"branch": "550"}, "another branch asked for"),
        ({"needs_headers": True}, "headers to check"),
        ({"files_in_place": False}, "the blacklist or the parameters differ"),
        ({"nouveau_loaded": True}, "a reboot is due"),
        (
            {"loaded_driver": {"version": "535.183.01", "flavor": "proprietary"}},
            "old module loaded",
        ),
        ({"loaded_driver": {"version": "535.216.01", "flavor": "open"}}, "other flavour loaded"),
        (
            {"services": ["nvidia-persistenced.service", "nvidia-fabricmanager.service"]},
            "ok: not installed",
        ),
    ],
)
def test_anything_left_to_change_unsettles_the_host(change: dict[str, Any], why: str) -> None:
    facts = {**HOST, "fact_sha256": _sha(_state()), **change}
    if "branch" in change:
        facts["fact_sha256"] = _sha({**_state(), "branch": change["branch"]})
    expected = why.startswith("ok")
    assert apt.settle(_settled_answer(), facts)["settled"] is expected, why


def test_a_service_not_enabled_or_not_running_is_changed() -> None:
    units = (
        "Id=nvidia-persistenced.service\nLoadState=loaded\nUnitFileState=enabled\n"
        "ActiveState=inactive\n\nId=nvidia-fabricmanager.service\nLoadState=loaded\n"
        "UnitFileState=disabled\nActiveState=inactive\n"
    )
    wanted = ["nvidia-persistenced.service", "nvidia-fabricmanager.service"]
    assert apt.services_to_change(units, wanted, True) == wanted
    assert apt.services_to_change(units, wanted, False) == ["nvidia-fabricmanager.service"]
    assert FILTERS["nvidia_driver_services_to_change"](units, wanted[:1], False) == []


def test_the_fact_text_is_what_to_nice_json_writes() -> None:
    """The role compares the local fact on the node with this text by its sha256."""
    from ansible.plugins.filter.core import to_nice_json

    state = _state()
    assert apt.fact_text(state) == to_nice_json(state, sort_keys=True) + "\n"
    assert FILTERS["nvidia_driver_fact_text"](state) == apt.fact_text(state)


def test_the_reboot_reasons_name_what_is_loaded() -> None:
    pci = {"modules": {"nouveau": True}, "loaded_driver": {"version": "535.1", "flavor": "open"}}
    assert FILTERS["nvidia_driver_reboot_reasons"](pci, "535.2", "proprietary") == [
        "nouveau is loaded",
        "the loaded nvidia module is 535.1, not the installed 535.2",
        "the loaded nvidia module is open, not proprietary",
    ]
    with pytest.raises(AnsibleFilterError, match="nvidia_pci"):
        FILTERS["nvidia_driver_reboot_reasons"]({}, "", "open")


def test_the_state_has_exactly_its_keys() -> None:
    with pytest.raises(AnsibleFilterError, match="needs installed_version"):
        FILTERS["nvidia_driver_state"]("535.216.01", branch="535")
