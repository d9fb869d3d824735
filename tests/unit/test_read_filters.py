"""The first reads of the nvidia_driver and nvidia_container_toolkit roles: what the roles make of
them must be what the Jinja pipelines that decided it before made of them.

The proof is parity: one play, on one localhost pretend host per case, loads the role's own vars
files and renders both the role's values and the Jinja expressions they replaced (kept verbatim
below, the oracle), through ansible-playbook, and every pair must be equal. The driver's values
come from what kubegpu.gpu.nvidia_driver_apt answers for the read (module_utils
nvidia_driver_apt.plan(), computed here); the toolkit's from the kubegpu.gpu.matching_fields
filter. The cases start from a real read of a testbed node (data/apt/SOURCES.md) and vary it the
ways hosts differ. Direct calls cover the filter's errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.kubegpu.gpu.plugins.filter import lines
from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_driver_apt as apt
from ansible_collections.kubegpu.gpu.plugins.module_utils.deb822 import deb822_source

from tests.unit.test_nvidia_driver_roles import (
    OS_FACTS,
    failure_message,
    host_results,
    pretend_os_task,
    run_playbook,
)

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
READ = (
    Path(__file__).parent / "data" / "apt" / "driver-read-debian12-distribution.txt"
).read_text()
REAL = READ.splitlines()

matching_fields = lines.FilterModule().filters()["matching_fields"]

# The expressions of the driver role's vars/main.yml before the action, verbatim.
BEFORE = {
    "__nvidia_driver_helpers_missing": """{{ (['python3-apt']
      + (['gpg'] if (nvidia_driver_source != 'distribution' and __nvidia_driver_repo_key_fingerprint | length > 0) else []))
     | reject('in', __nvidia_driver_apt_read.stdout_lines | select('match', '^helper [^ ]+ .i')
                    | map('split', ' ') | map(attribute=1) | list)
     | list }}""",
    "__nvidia_driver_lists_age": """{{ (__nvidia_driver_apt_read.stdout_lines | select('match', '^package-lists-age -?[0-9]+$')
      | map('split', ' ') | map('last') | list + ['999999']) | first | int }}""",
    "__nvidia_driver_distribution_sources": """
  {%- set own = '/etc/apt/sources.list.d/' ~ __nvidia_driver_distribution_repo_name -%}
  {%- set have = {} -%}
  {%- for line in __nvidia_driver_apt_read.stdout_lines -%}
  {%- set f = line.split(' ') -%}
  {%- if f | length >= 4 and f[1] in __nvidia_driver_distribution_suites and not f[3].startswith(own) -%}
  {%- set key = f[0] ~ ' ' ~ f[1] -%}
  {%- set _ = have.update({key: have.get(key, []) + [f[2]]}) -%}
  {%- endif -%}
  {%- endfor -%}
  {%- set groups = {} -%}
  {%- for key, components in have.items() | sort -%}
  {%- set missing = __nvidia_driver_distribution_components | reject('in', components) | list -%}
  {%- if 'main' in components and missing | length > 0 -%}
  {%- set uri, suite = key.split(' ') -%}
  {%- set gkey = uri ~ ' ' ~ missing | join(',') -%}
  {%- set entry = groups.get(gkey, {'uri': uri, 'components': missing, 'suites': []}) -%}
  {%- set _ = entry['suites'].append(suite) -%}
  {%- set _ = groups.update({gkey: entry}) -%}
  {%- endif -%}
  {%- endfor -%}
  {%- set out = [] -%}
  {%- for gkey, entry in groups.items() | sort -%}
  {%- set _ = out.append(entry | combine({'name': own | basename ~ '-' ~ (gkey | hash('sha1'))[:8]})) -%}
  {%- endfor -%}
  {{ out }}""",
    "__nvidia_driver_source_files": """
{%- set files = [] -%}
{%- set own = __nvidia_driver_apt_read.stdout_lines | select('match', '^own-source ')
              | map('regex_replace', '^own-source ', '') | list -%}
{%- set wanted = [] -%}
{%- for entry in __nvidia_driver_distribution_sources -%}
{%- set path = '/etc/apt/sources.list.d/' ~ entry['name'] ~ '.sources' -%}
{%- set content = {'name': entry['name'], 'types': ['deb'], 'uris': [entry['uri']],
                   'suites': entry['suites'], 'components': entry['components'],
                   'signed_by': __nvidia_driver_distribution_keyring} | kubegpu.gpu.deb822_source -%}
{%- set _ = wanted.append(path) -%}
{%- if (path ~ ' ' ~ content | hash('sha256') ~ ' 644') not in own -%}
{%- set _ = files.append({'path': path, 'content': content, 'mode': '0644'}) -%}
{%- endif -%}
{%- endfor -%}
{%- for line in own if (line.split(' ') | first) not in wanted -%}
{%- set _ = files.append({'path': line.split(' ') | first, 'state': 'absent'}) -%}
{%- endfor -%}
{{ files }}""",
}

OWN = "/etc/apt/sources.list.d/kubegpu-nvidia-distribution-ef5c2992.sources:1"


def _target(uri: str, suite: str, component: str, entry: str) -> list[str]:
    # indextargets prints each target once per architecture (amd64 and all here).
    return [f"{uri} {suite} {component} {entry}"] * 2


ARCHIVE = "http://archive.example/debian/"
SECURITY = "http://archive.example/debian-security/"
FRESH = [
    "helper gpg ii ",
    "helper python3-apt ii ",
    "package-lists-age 86400",
    *_target(ARCHIVE, "bookworm", "main", "/etc/apt/sources.list.d/debian.sources:1"),
    *_target(ARCHIVE, "bookworm-updates", "main", "/etc/apt/sources.list.d/debian.sources:1"),
    *_target(SECURITY, "bookworm-security", "main", "/etc/apt/sources.list.d/debian.sources:2"),
]

# case -> (stdout_lines of the read, host variables)
CASES: dict[str, tuple[list[str], dict[str, Any]]] = {
    "real_converged": (REAL, {}),
    "fresh_host_main_only": (FRESH, {}),
    "archive_has_contrib_already": (
        [
            *FRESH,
            *_target(ARCHIVE, "bookworm", "contrib", "/etc/apt/sources.list.d/debian.sources:1"),
            *_target(
                ARCHIVE, "bookworm-updates", "contrib", "/etc/apt/sources.list.d/debian.sources:1"
            ),
        ],
        {},
    ),
    # Two sources for one URI, in an order other than the suites'.
    "only_release_has_contrib": (
        [
            *FRESH,
            *_target(ARCHIVE, "bookworm", "contrib", "/etc/apt/sources.list.d/debian.sources:1"),
        ],
        {},
    ),
    "two_mirrors_mixed_case_and_other_suites": (
        [
            *FRESH,
            *_target(
                "HTTP://Mirror.Example/debian/", "bookworm", "main", "/etc/apt/sources.list:3"
            ),
            *_target("http://a.example/debian/", "bookworm", "main", "/etc/apt/sources.list:4"),
            *_target("http://a.example/debian/", "bookworm", "non-free", "/etc/apt/sources.list:4"),
            *_target("http://a.example/debian/", "bullseye", "main", "/etc/apt/sources.list:5"),
            *_target("http://a.example/debian/", "sid", "main", "/etc/apt/sources.list:6"),
        ],
        {},
    ),
    "suite_without_main": (
        [
            "package-lists-age -5",
            *_target(ARCHIVE, "bookworm", "contrib", "/etc/apt/sources.list.d/x.sources:1"),
            *_target(ARCHIVE, "bookworm-updates", "main", OWN),
        ],
        {},
    ),
    "helpers_missing_and_no_age": (
        ["helper python3-apt un ", "helper gpg rc ", "somethingelse"],
        {"nvidia_driver_source": "cuda_repo", "fake_fingerprint": "ABCD"},
    ),
    "helper_half_installed_and_odd_lines": (
        [
            "helper python3-apt hi ",
            "helper gpg iU ",
            "helper  ii ",
            "helpergpg ii ",
            "package-lists-age 12x",
            "package-lists-age 7",
            "package-lists-age 9",
            "a b c",
            "",
        ],
        {"nvidia_driver_source": "mirror", "fake_fingerprint": "ABCD"},
    ),
    "nothing_read": ([], {}),
}


def render_both(
    tmp_path: Path,
    vars_dir: Path,
    before: dict[str, str],
    names: list[str],
    hosts: dict[str, dict[str, Any]],
    task_vars: dict[str, Any],
    before_tasks: tuple[dict[str, Any], ...] = (),
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Render `names` on every host twice, each through ansible-playbook: with the role's
    vars/main.yml as it is, and with a copy whose `before` values are the old expressions
    (before_tasks run first on both sides). Returns case -> (values before, values now)."""
    old = yaml.safe_load((vars_dir / "main.yml").read_text())
    old.update(before)
    old_file = tmp_path / "main-before.yml"
    old_file.write_text(yaml.safe_dump(old, sort_keys=False))
    sides = {"before": str(old_file), "now": str(vars_dir / "main.yml")}
    inventory = {
        f"{case}__{side}": {**settings, "main_vars": path, "fake_os": OS_FACTS["debian12"]}
        for case, settings in hosts.items()
        for side, path in sides.items()
    }
    play = [
        {
            "name": "Render the role's read values with the old and the new expressions",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                pretend_os_task(),
                {
                    "name": "Load the role's values",
                    "ansible.builtin.include_vars": {"file": "{{ path }}"},
                    "loop": ["{{ main_vars }}"]
                    + (
                        [str(vars_dir / "Debian.yml")]
                        if (vars_dir / "Debian.yml").is_file()
                        else []
                    ),
                    "loop_control": {"loop_var": "path"},
                },
                *before_tasks,
                {
                    "name": "Render",
                    "ansible.builtin.set_fact": {
                        "rendered": {name: "{{ " + name + " }}" for name in names}
                    },
                    "vars": task_vars,
                },
            ],
        }
    ]
    rc, result, stderr = run_playbook(tmp_path, play, inventory)
    failures = {host: failure_message(result, host) for host in inventory}
    assert rc == 0, {h: m for h, m in failures.items() if m} or stderr[-3000:]

    def rendered(host: str) -> dict[str, Any]:
        (found,) = [r for name, r in host_results(result, host) if name == "Render"]
        return found["ansible_facts"]["rendered"]

    return {case: (rendered(f"{case}__before"), rendered(f"{case}__now")) for case in hosts}


@pytest.fixture(scope="module")
def driver(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    hosts = {
        name: {
            "read_lines": read,
            "nvidia_driver_source": settings.get("nvidia_driver_source", "distribution"),
            # What __nvidia_driver_repo_key_fingerprint (vars/main.yml) reads.
            "nvidia_driver_mirror_key_fingerprint": settings.get("fake_fingerprint", ""),
            "nvidia_driver_cuda_repo_key_fingerprint": settings.get("fake_fingerprint", ""),
            "apt_answer": _answer(read, settings),
        }
        for name, (read, settings) in CASES.items()
    }
    rendered = render_both(
        tmp_path_factory.mktemp("driver-reads"),
        ROLES / "nvidia_driver" / "vars",
        BEFORE,
        list(BEFORE),
        hosts,
        {
            "__nvidia_driver_apt_read": {"stdout_lines": "{{ read_lines }}"},
            "__nvidia_driver_apt": "{{ apt_answer }}",
            # Stands in on the side now, which has no such value: the action's sources.
            "__nvidia_driver_distribution_sources": "{{ apt_answer.sources }}",
        },
    )
    return rendered


def _answer(read: list[str], settings: dict[str, Any]) -> dict[str, Any]:
    """What kubegpu.gpu.nvidia_driver_apt answers for the read on a Debian 12 host, with the
    role's Debian values, and the archive sources component_sources() found."""
    source = settings.get("nvidia_driver_source", "distribution")
    keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
    own = "/etc/apt/sources.list.d/kubegpu-nvidia-distribution"
    suites = ["bookworm", "bookworm-updates", "bookworm-security"]
    components = ["contrib", "non-free", "non-free-firmware"]
    given = {
        "source": source,
        "release": "bookworm",
        "helpers": ["python3-apt"]
        + (["gpg"] if source != "distribution" and settings.get("fake_fingerprint") else []),
        "version_package": "nvidia-driver",
        "packages": [],
        "extra_packages": [],
        "version": "",
        "branch": "535",
        "allow_version_change": False,
        "own": own,
        "suites": suites,
        "components": components,
        "source_text": lambda entry: deb822_source(
            {
                "name": entry["name"],
                "types": ["deb"],
                "uris": [entry["uri"]],
                "suites": entry["suites"],
                "components": entry["components"],
                "signed_by": keyring,
            }
        ),
    }
    answer = apt.plan("\n".join([*read, apt.VERSION_READ]), given)
    answer["sources"] = apt.component_sources(read, suites, components, own)
    return answer


def test_the_driver_cases_reach_every_branch(
    driver: dict[str, tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    values = {case: now for case, (_before, now) in driver.items()}
    sources = "__nvidia_driver_distribution_sources"
    # The real converged node: the role's own sources do not count, so every URI still lacks
    # the three components, one source per URI with its suites.
    # ("debian-security/" sorts before "debian/").
    assert [(s["uri"], s["suites"]) for s in values["real_converged"][sources]] == [
        (SECURITY, ["bookworm-security"]),
        (ARCHIVE, ["bookworm", "bookworm-updates"]),
    ]
    assert values["real_converged"]["__nvidia_driver_lists_age"] == 1410
    assert values["real_converged"]["__nvidia_driver_helpers_missing"] == []
    # The own sources of the capture are named after the real archive URI (data/apt/SOURCES.md):
    # here they are no longer wanted, and the two for archive.example are.
    files = values["real_converged"]["__nvidia_driver_source_files"]
    assert [f.get("state", f.get("mode")) for f in files] == ["0644", "0644", "absent", "absent"]
    assert len(values["fresh_host_main_only"]["__nvidia_driver_source_files"]) == 2
    grouped = values["archive_has_contrib_already"][sources]
    assert [(s["uri"], s["components"]) for s in grouped] == [
        (SECURITY, ["contrib", "non-free", "non-free-firmware"]),
        (ARCHIVE, ["non-free", "non-free-firmware"]),
    ]
    # Sorted as Python sorts strings (upper case first); suites other than the release's are
    # not counted.
    mixed = [
        (s["uri"], s["components"], s["suites"])
        for s in values["two_mirrors_mixed_case_and_other_suites"][sources]
    ]
    assert mixed == [
        (
            "HTTP://Mirror.Example/debian/",
            ["contrib", "non-free", "non-free-firmware"],
            ["bookworm"],
        ),
        ("http://a.example/debian/", ["contrib", "non-free-firmware"], ["bookworm"]),
        (SECURITY, ["contrib", "non-free", "non-free-firmware"], ["bookworm-security"]),
        (ARCHIVE, ["contrib", "non-free", "non-free-firmware"], ["bookworm", "bookworm-updates"]),
    ]
    assert [
        (s["uri"], s["suites"], s["components"])
        for s in values["only_release_has_contrib"][sources]
    ] == [
        (SECURITY, ["bookworm-security"], ["contrib", "non-free", "non-free-firmware"]),
        (ARCHIVE, ["bookworm-updates"], ["contrib", "non-free", "non-free-firmware"]),
        (ARCHIVE, ["bookworm"], ["non-free", "non-free-firmware"]),
    ]
    assert values["suite_without_main"][sources] == []
    assert values["suite_without_main"]["__nvidia_driver_lists_age"] == -5
    assert values["helpers_missing_and_no_age"]["__nvidia_driver_helpers_missing"] == [
        "python3-apt",
        "gpg",
    ]
    assert values["helpers_missing_and_no_age"]["__nvidia_driver_lists_age"] == 999999
    assert values["helper_half_installed_and_odd_lines"]["__nvidia_driver_helpers_missing"] == [
        "gpg"
    ]
    assert values["helper_half_installed_and_odd_lines"]["__nvidia_driver_lists_age"] == 7
    assert values["nothing_read"][sources] == []


# The nvidia_container_toolkit role's values from its reads, as Jinja pipelines decided them
# before kubegpu.gpu.read_script's plan (module_utils/nvidia_container_toolkit_read.py), verbatim;
# setup_work is the conditions of the two includes it replaced.
TOOLKIT_BEFORE = {
    "__nvidia_container_toolkit_first_rows": """{{ __nvidia_container_toolkit_query
   if __nvidia_container_toolkit_query is defined and __nvidia_container_toolkit_query is not skipped
   else __nvidia_container_toolkit_repo_read }}""",
    "__nvidia_container_toolkit_rows": """{{ __nvidia_container_toolkit_first_rows.stdout_lines | kubegpu.gpu.matching_fields('^[^ |]+[|]', sep='|') }}""",
    "__nvidia_container_toolkit_installed": """{{ __nvidia_container_toolkit_rows | selectattr('1', 'match', '^.[^nc]')
   | map(attribute='0') | unique | list }}""",
    "__nvidia_container_toolkit_rows_at_version": """{{ __nvidia_container_toolkit_rows
   | selectattr('2', 'match', __nvidia_container_toolkit_version_match) | list }}""",
    "__nvidia_container_toolkit_outdated": """{{ nvidia_container_toolkit_packages
   | reject('in', __nvidia_container_toolkit_rows_at_version | selectattr('1', 'match', '^.[^nc]')
                  | map(attribute='0') | list)
   | list }}""",
    "__nvidia_container_toolkit_unsettled": """{{ nvidia_container_toolkit_packages
   | reject('in', __nvidia_container_toolkit_rows_at_version | selectattr('1', 'match', '^.i')
                  | map(attribute='0') | list)
   | list }}""",
    "__nvidia_container_toolkit_unselected": """{{ nvidia_container_toolkit_packages
   | reject('in', __nvidia_container_toolkit_rows
                  | selectattr('3', 'defined')
                  | selectattr('3', 'equalto', 'hold' if nvidia_container_toolkit_hold | bool else 'install')
                  | map(attribute='0') | list)
   | list }}""",
    "__nvidia_container_toolkit_helpers_missing": """{{ (['gpg'] if nvidia_container_toolkit_repo_key_fingerprint | length > 0 else [])
   | reject('in', __nvidia_container_toolkit_repo_read.stdout_lines
                  | kubegpu.gpu.matching_fields('^pkg [^ ]+ .i', field=1))
   | list }}""",
    "__nvidia_container_toolkit_keyring_dir_stale": """{{ 'dir directory 755 root root' not in __nvidia_container_toolkit_repo_read.stdout_lines
   or __nvidia_container_toolkit_repo_read.stdout_lines | kubegpu.gpu.matching_fields('^other ') | length > 0 }}""",
    "__nvidia_container_toolkit_keyring_row": """{{ (__nvidia_container_toolkit_repo_read.stdout_lines | kubegpu.gpu.matching_fields('^keyring ') + [['keyring']]) | first }}""",
    "__nvidia_container_toolkit_key_stale": """{{ (__nvidia_container_toolkit_keyring_row[2:] != ['644', 'root', 'root']
    or (nvidia_container_toolkit_repo_key_checksum | default('', true) | length > 0
        and nvidia_container_toolkit_repo_key_checksum != 'sha256:' ~ __nvidia_container_toolkit_keyring_row[1]))
   if nvidia_container_toolkit_repo_key_file | length == 0
   else __nvidia_container_toolkit_keyring_row[1:]
        != [lookup('kubegpu.gpu.file_sha256', nvidia_container_toolkit_repo_key_file), '644', 'root', 'root'] }}""",
    "__nvidia_container_toolkit_pin_in_place": """{{ nvidia_container_toolkit_repo_manage | bool
   and ['pin', __nvidia_container_toolkit_pin_content | hash('sha256'), '644', 'root', 'root']
       in __nvidia_container_toolkit_repo_read.stdout_lines | map('split', ' ') | list }}""",
    "__nvidia_container_toolkit_packages_work": """{{ __nvidia_container_toolkit_outdated | length > 0
   or __nvidia_container_toolkit_unsettled | length > 0
   or '*' in nvidia_container_toolkit_version
   or (__nvidia_container_toolkit_repo | default({})) is changed
   or __nvidia_container_toolkit_unselected | length > 0 }}""",
    "__nvidia_container_toolkit_install_work": """{{ ansible_facts['os_family'] != 'Debian'
   or not nvidia_container_toolkit_repo_manage | bool
   or not __nvidia_container_toolkit_pin_in_place | bool
   or __nvidia_container_toolkit_packages_work | bool }}""",
    "__nvidia_container_toolkit_source_stale": """{{ __nvidia_container_toolkit_repo_read.stdout_lines
   | select('match', '^own ' ~ (__nvidia_container_toolkit_source | hash('sha256')) ~ ' 644 ')
   | list | length == 0 }}""",
    # Added with the plan: a pinned keyring not yet checked against its fingerprint.
    "__nvidia_container_toolkit_key_unverified": """{{ __nvidia_container_toolkit_key_fingerprint | length > 0
   and __nvidia_container_toolkit_keyring_row | length > 1
   and ['verified', __nvidia_container_toolkit_keyring_row[1],
        __nvidia_container_toolkit_key_fingerprint | replace(' ', '') | upper]
       not in __nvidia_container_toolkit_repo_read.stdout_lines | map('split', ' ') | list }}""",
    "__nvidia_container_toolkit_setup_work": """{{ __nvidia_container_toolkit_install_work | bool
     or (nvidia_container_toolkit_repo_manage | bool
         and (__nvidia_container_toolkit_helpers_missing | length > 0
              or __nvidia_container_toolkit_keyring_dir_stale | bool
              or __nvidia_container_toolkit_key_stale | bool
              or __nvidia_container_toolkit_key_unverified | bool
              or __nvidia_container_toolkit_source_stale | bool)) }}""",
}
# The values the role takes from the plan, compared with the oracle's.
TOOLKIT_NAMES = [
    "__nvidia_container_toolkit_installed",
    "__nvidia_container_toolkit_outdated",
    "__nvidia_container_toolkit_unsettled",
    "__nvidia_container_toolkit_unselected",
    "__nvidia_container_toolkit_helpers_missing",
    "__nvidia_container_toolkit_keyring_dir_stale",
    "__nvidia_container_toolkit_key_stale",
    "__nvidia_container_toolkit_key_unverified",
    "__nvidia_container_toolkit_pin_in_place",
    "__nvidia_container_toolkit_source_stale",
    "__nvidia_container_toolkit_packages_work",
    "__nvidia_container_toolkit_install_work",
    "__nvidia_container_toolkit_setup_work",
]
TOOLKIT_READ = (
    (Path(__file__).parent / "data" / "apt" / "toolkit-read-debian12.txt").read_text().splitlines()
)
_ROWS = [line for line in TOOLKIT_READ if "|" in line]
TOOLKIT_CASES: dict[str, tuple[list[str], dict[str, Any]]] = {
    "real_held": (TOOLKIT_READ, {}),
    # The same node after the role checked its keyring against the fingerprint.
    "real_verified": (
        [*TOOLKIT_READ, "verified " + TOOLKIT_READ[1].split(" ")[1] + " ABCD"],
        {},
    ),
    "real_not_held_wanted": (TOOLKIT_READ, {"nvidia_container_toolkit_hold": False}),
    "other_version_wanted": (TOOLKIT_READ, {"nvidia_container_toolkit_version": "1.17.8-1"}),
    "glob_version": (TOOLKIT_READ, {"nvidia_container_toolkit_version": "1.18.*"}),
    "fresh_host": (
        ["pkg gpg un ", "other /etc/apt/keyrings/kubegpu-nvidia-container-toolkit.asc"],
        {},
    ),
    "partly_installed": (
        [
            "pkg gpg iU ",
            "keyring 00ff 600 root root",
            "dir directory 700 root root",
            "source /etc/apt/sources.list.d/nvidia-container-toolkit.list",
            _ROWS[0].replace("|hi |", "|rc |"),
            _ROWS[1].replace("1.18.0-1", "1.17.8-1"),
            _ROWS[2].replace("|hold", "|install"),
            "nvidia-container-toolkit-base|iU |1.18.0-1",
            "|x|y|z",
            "with space|ii |1|hold",
        ],
        {"nvidia_container_toolkit_repo_key_checksum": "sha256:00ff"},
    ),
    "no_fingerprint": (TOOLKIT_READ, {"nvidia_container_toolkit_repo_key_fingerprint": ""}),
    "nothing_read": ([], {}),
}


@pytest.fixture(scope="module")
def toolkit(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    defaults = yaml.safe_load(
        (ROLES / "nvidia_container_toolkit" / "defaults" / "main.yml").read_text()
    )
    hosts = {
        name: {
            **defaults,
            "read_lines": read,
            "nvidia_container_toolkit_version": "1.18.0-1",
            "nvidia_container_toolkit_hold": True,
            "nvidia_container_toolkit_repo_key_fingerprint": "ABCD",
            "nvidia_container_toolkit_repo_key_checksum": "",
            "nvidia_container_toolkit_repo_key_file": "",
            **settings,
        }
        for name, (read, settings) in TOOLKIT_CASES.items()
    }
    # The read itself is the case's lines printed by sh, through kubegpu.gpu.read_script with
    # the role's own plan arguments: the plan is the action's.
    read = {
        "name": "Read",
        "kubegpu.gpu.read_script": {
            "script": 'for line in "$@"; do printf "%s\\n" "$line"; done',
            "argv": "{{ read_lines }}",
            "plan": "nvidia_container_toolkit",
            "plan_args": "{{ __nvidia_container_toolkit_plan_args }}",
        },
        "register": "__nvidia_container_toolkit_repo_read",
    }
    return render_both(
        tmp_path_factory.mktemp("toolkit-reads"),
        ROLES / "nvidia_container_toolkit" / "vars",
        TOOLKIT_BEFORE,
        TOOLKIT_NAMES,
        hosts,
        {"__nvidia_container_toolkit_query": {"skipped": True, "changed": False}},
        (read,),
    )


@pytest.mark.parametrize(
    ("role", "case"),
    [("driver", case) for case in CASES] + [("toolkit", case) for case in TOOLKIT_CASES],
)
def test_the_values_are_what_the_jinja_gave(
    request: pytest.FixtureRequest, role: str, case: str
) -> None:
    before, now = request.getfixturevalue(role)[case]
    names = {"driver": set(BEFORE), "toolkit": set(TOOLKIT_NAMES)}[role]
    assert set(before) == set(now) == names
    for name in before:
        assert now[name] == before[name], name
        assert type(now[name]) is type(before[name]), name


def test_the_toolkit_cases_reach_every_branch(
    toolkit: dict[str, tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    values = {case: now for case, (_before, now) in toolkit.items()}
    prefix = "__nvidia_container_toolkit_"
    real = values["real_held"]
    assert len(real[prefix + "installed"]) == 4
    assert real[prefix + "outdated"] == real[prefix + "unselected"] == []
    assert real[prefix + "helpers_missing"] == []
    assert real[prefix + "keyring_dir_stale"] is False
    assert real[prefix + "key_stale"] is False
    assert real[prefix + "packages_work"] is False
    # Pinned, never checked: checked once, then remembered.
    assert real[prefix + "key_unverified"] is True and real[prefix + "setup_work"] is True
    verified = values["real_verified"]
    assert verified[prefix + "key_unverified"] is False
    assert len(values["real_not_held_wanted"][prefix + "unselected"]) == 4
    assert len(values["other_version_wanted"][prefix + "outdated"]) == 4
    assert values["other_version_wanted"][prefix + "setup_work"] is True
    assert values["glob_version"][prefix + "outdated"] == []
    assert values["glob_version"][prefix + "packages_work"] is True
    fresh = values["fresh_host"]
    assert fresh[prefix + "helpers_missing"] == ["gpg"]
    assert fresh[prefix + "keyring_dir_stale"] is True
    assert fresh[prefix + "key_stale"] is True
    assert fresh[prefix + "source_stale"] is True
    assert fresh[prefix + "setup_work"] is True
    partly = values["partly_installed"]
    # Row 1 is removed with its config files left (rc), row 2 installed at another version,
    # row 4 half installed; the row without a name and the name with a space are no rows.
    assert partly[prefix + "installed"] == [
        "libnvidia-container1",
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
    ]
    assert partly[prefix + "outdated"] == ["libnvidia-container-tools", "libnvidia-container1"]
    assert "nvidia-container-toolkit-base" in partly[prefix + "unsettled"]
    assert partly[prefix + "unselected"] == [
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
    ]
    assert partly[prefix + "helpers_missing"] == ["gpg"]
    assert partly[prefix + "keyring_dir_stale"] is True
    assert partly[prefix + "key_stale"] is True
    assert values["no_fingerprint"][prefix + "helpers_missing"] == []
    assert values["nothing_read"][prefix + "installed"] == []
    assert values["nothing_read"][prefix + "pin_in_place"] is False


def test_matching_fields_picks_fields_of_matching_lines() -> None:
    assert matching_fields(REAL, "^helper [^ ]+ .i", field=1) == ["gpg", "python3-apt"]
    assert matching_fields(["a|b|c", "x y", "d|e"], "^[^ |]+[|]", sep="|") == [
        ["a", "b", "c"],
        ["d", "e"],
    ]
    assert matching_fields(["k 1", "k", "k 2 3"], "^k", field=-1) == ["1", "k", "3"]
    assert matching_fields(["k 1", "k"], "^k", field=1) == ["1"]
    assert matching_fields([], "^x") == []
    # Matched at the start of the line, as the match test does (not searched for).
    assert matching_fields(["xa 1", "a 2"], "a") == [["a", "2"]]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("text", "^x"), {}, "list of lines"),
        ((["a"], "("), {}, "not a regular expression"),
        ((["a"], "^a"), {"sep": ""}, "non-empty string"),
        ((["a"], "^a"), {"field": "1"}, "index of one field"),
        (([1], "^a"), {}, "each line is a string"),
    ],
)
def test_matching_fields_refuses_what_it_cannot_read(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        matching_fields(*args, **kwargs)
