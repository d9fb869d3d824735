"""kubegpu.accel.linear: ansible-core's linear strategy, except that a task whose condition is false
for a host is skipped in the main process instead of a forked worker, and the controller-only
actions (set_fact, debug, assert, fail, include_vars, the includes, argument validation,
kubegpu.gpu.checks) run there whole. Every result must be what ansible-core's own linear strategy
gives, so each test runs the same playbook under both and compares the results host by host and
task by task.

include_vars in the main process parses a file once for all hosts while the file is unchanged;
the vars-file tests show a host never gets another's values or a file's earlier text.

bench/bench_node_plays.py measures what it saves on the testbed's node plays.
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.parsing.vault import VaultLib, VaultSecret
from ansible_collections.kubegpu.accel.plugins.plugin_utils import gate

from tests.accel import TESTED, only_where_it_runs

if TESTED:
    from ansible._internal._datatag._tags import SourceWasEncrypted
    from ansible_collections.kubegpu.accel.plugins.plugin_utils import fast_linear as linear

REPO = Path(__file__).resolve().parents[2]
HOSTS = {"h1": {"level": 9}, "h2": {"level": 1}, "h3": {"level": 6}}
# Enough hosts for two helper processes (each takes two hosts at least) beside the main one.
MORE_HOSTS = {**HOSTS, "h4": {"level": 3}, "h5": {"level": 8}, "h6": {"level": 2}}
LOGS = ("pid_log", "run_log", "probe_log", "throttle_log")

ROLE_VARS = {
    # A role var over a host var: rendered per host, so a value cached for one host and served
    # to another would show in the results.
    "probe_high": "{{ level | int > 5 }}",
}
ROLE_TASKS: list[dict[str, Any]] = [
    {
        "name": "Runs where the role var holds",
        "ansible.builtin.debug": {"msg": "high {{ level }}"},
        "when": "probe_high | bool",
    },
    {
        "name": "Sets a fact where the level is low",
        "ansible.builtin.set_fact": {"probe_low": True},
        "when": "level | int < 5",
    },
    {
        "name": "Registers a skip",
        "ansible.builtin.command": "false",
        "register": "probe_skipped",
        "when": "level | int > 100",
    },
    {"name": "Shows the registered skip", "ansible.builtin.debug": {"var": "probe_skipped"}},
    {
        "name": "A block whose condition its tasks inherit",
        "when": "level | int > 7",
        "block": [
            {"name": "Inside the block", "ansible.builtin.debug": {"msg": "in"}},
            {
                "name": "Inside, with its own condition too",
                "ansible.builtin.debug": {"msg": "in too"},
                "when": "probe_low is defined",
            },
        ],
    },
    {
        "name": "An include skipped everywhere",
        "ansible.builtin.include_tasks": "never.yml",
        "when": "level | int > 100",
    },
    {
        "name": "A loop, each item with the condition",
        "ansible.builtin.debug": {"msg": "{{ item }}"},
        "loop": [1, 7],
        "when": "item < level | int",
    },
    {
        "name": "A condition on a play context value the task sets",
        "ansible.builtin.debug": {"msg": "user"},
        "remote_user": "probe-user",
        "when": "ansible_user | default('') == 'probe-user' and level | int > 5",
    },
    {
        "name": "A condition on a variable no host has",
        "block": [
            {
                "name": "Fails on the undefined variable",
                "ansible.builtin.debug": {"msg": "never"},
                "when": "probe_nowhere | bool",
            }
        ],
        "rescue": [{"name": "Rescued", "ansible.builtin.debug": {"msg": "rescued"}}],
    },
    {
        # False on the first host, so that helpers share the rest, and true on some of theirs.
        "name": "Runs a module where the level is low",
        "ansible.builtin.command": "echo low {{ level }}",
        "changed_when": False,
        "when": "level | int < 5",
    },
    {
        "name": "Notifies where the level is high",
        "ansible.builtin.command": "true",
        "changed_when": True,
        "notify": "Probe handler",
        "when": "level | int > 5",
    },
    {
        "name": "Sets a fact, recording which process runs it",
        "ansible.builtin.set_fact": {
            "probe_fact": "{{ lookup('ansible.builtin.pipe', 'echo $PPID >> ' ~ run_log ~ '; echo set') }}",
        },
    },
    {
        "name": "Sets a fact one host at a time, recording which process runs it",
        "ansible.builtin.set_fact": {
            "probe_throttled": "{{ lookup('ansible.builtin.pipe', 'echo $PPID >> ' ~ throttle_log ~ '; echo set') }}",
        },
        "throttle": 1,
    },
    {
        "name": "Caches a fact",
        "ansible.builtin.set_fact": {"probe_cached": "{{ level }}", "cacheable": True},
    },
    {
        "name": "Updates the cached fact where the level is high",
        "ansible.builtin.set_fact": {"probe_cached": "{{ level | int + 1 }}", "cacheable": True},
        "when": "level | int > 5",
    },
    {
        "name": "Reads the cached fact",
        "ansible.builtin.debug": {"msg": "{{ probe_cached }} {{ ansible_facts['probe_cached'] }}"},
    },
    {
        "name": "Registers a set_fact",
        "ansible.builtin.set_fact": {"probe_two": 2},
        "register": "probe_set",
    },
    {"name": "Shows the registered set_fact", "ansible.builtin.debug": {"var": "probe_set"}},
    {
        "name": "Loads values for each item",
        "ansible.builtin.include_vars": {"file": "{{ item }}.yml"},
        "loop": ["one", "two"],
    },
    {
        "name": "Shows the loaded values",
        "ansible.builtin.debug": {"msg": "{{ probe_one }} {{ probe_three }}"},
    },
    {
        "name": "Asserts per host",
        "ansible.builtin.assert": {"that": ["level | int > 5"], "quiet": True},
        "ignore_errors": True,
    },
    {
        "name": "Fails on one host",
        "ansible.builtin.fail": {"msg": "low {{ level }}"},
        "when": "level | int == 1",
        "ignore_errors": True,
    },
    {
        "name": "Checks in one task",
        "kubegpu.gpu.checks": {
            "checks": [
                {"name": "positive", "that": "level | int > 0", "msg": "no level"},
                {
                    "name": "high",
                    "that": "level | int > 5",
                    "msg": "low",
                    "when": "level | int > 8",
                },
            ]
        },
    },
    {
        "name": "Includes tasks for each item",
        "ansible.builtin.include_tasks": "item.yml",
        "loop": [1, 2],
    },
    {
        "name": "Includes a role with an argument spec",
        "ansible.builtin.include_role": {"name": "probe_inner"},
    },
    {
        # The executor templates the task's and its parents' fields in place: a per-host value
        # written into a task or block shared by all hosts would show in the next host's result.
        "name": "A block whose no_log differs per host",
        "no_log": "{{ level | int > 5 }}",
        "block": [
            {
                "name": "Shows under the block's no_log",
                "ansible.builtin.debug": {"msg": "secret {{ level }}"},
            }
        ],
    },
    {
        "name": "A loop that pauses, which goes to a worker",
        "ansible.builtin.debug": {"msg": "{{ item }}"},
        "loop": [1],
        "loop_control": {"pause": 0.01},
    },
    {
        "name": "Records which process evaluates a false condition",
        "ansible.builtin.debug": {"msg": "never"},
        "when": "lookup('ansible.builtin.pipe', 'echo $PPID >> ' ~ pid_log ~ '; echo false') | bool",
    },
    {
        "name": "Records which process evaluates a false condition of a module task",
        "ansible.builtin.command": "false",
        "when": "lookup('ansible.builtin.pipe', 'echo $PPID >> ' ~ probe_log ~ '; echo false') | bool",
    },
]
# The same vars file for every host and task, rewritten between two steps in place (the same size
# and inode, a second later); an encrypted one next to it.
SHARED_VARS = {"probe_shared": {"level": "{{ level }}", "text": "before", "nested": {"n": 1}}}
SECRET_VARS = {"probe_secret": "hidden {{ level }}"}
VAULT_PASSWORD = "probe-password"
REWRITE = """
import os, sys
path = sys.argv[1]
found = os.stat(path)
with open(path, "r+") as file:
    text = file.read().replace("before", "after_")
    file.seek(0)
    file.write(text)
os.utime(path, ns=(found.st_atime_ns, found.st_mtime_ns + 1_000_000_000))
"""
VARS_TASKS: list[dict[str, Any]] = [
    {"name": "Loads the shared values", "ansible.builtin.include_vars": {"file": "shared.yml"}},
    {
        "name": "Merges onto the loaded values where the level is high",
        "ansible.builtin.set_fact": {
            "probe_shared": "{{ probe_shared | combine({'nested': {'m': level}}, recursive=True) }}"
        },
        "when": "level | int > 5",
    },
    {"name": "Shows the merged values", "ansible.builtin.debug": {"var": "probe_shared"}},
    {
        "name": "Loads the shared values again",
        "ansible.builtin.include_vars": {"file": "shared.yml"},
    },
    {"name": "Shows the values loaded again", "ansible.builtin.debug": {"var": "probe_shared"}},
    {
        "name": "Rewrites the shared values",
        "ansible.builtin.command": {
            "argv": ["{{ ansible_python_interpreter }}", "-c", REWRITE, "{{ shared_vars }}"]
        },
        "run_once": True,
        "changed_when": True,
    },
    {
        "name": "Loads the rewritten values",
        "ansible.builtin.include_vars": {"file": "shared.yml"},
    },
    {"name": "Shows the rewritten values", "ansible.builtin.debug": {"var": "probe_shared"}},
    {
        "name": "Loads the encrypted values",
        "ansible.builtin.include_vars": {"file": "secret.yml"},
        "register": "probe_secret_loaded",
    },
    {"name": "Shows a decrypted value", "ansible.builtin.debug": {"msg": "{{ probe_secret }}"}},
    {
        "name": "Shows the registered load of the encrypted values",
        "ansible.builtin.debug": {"var": "probe_secret_loaded"},
    },
]
HANDLERS = [
    {
        "name": "Probe handler",
        "ansible.builtin.debug": {"msg": "handled"},
        "when": "level | int > 8",
    }
]


def playbook(
    tmp: Path, hosts: dict[str, dict[str, Any]], env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook ARGS TMP/play.yml on these hosts (local connections) under the
    repository's ansible.cfg, with these environment settings on top (KUBEGPU_MAIN_HELPERS
    and KUBEGPU_HELPER_MIN_MS only if given)."""
    inventory = {
        "all": {
            "hosts": hosts,
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        }
    }
    (tmp / "inventory.yml").write_text(yaml.safe_dump(inventory))
    environment = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    environment.pop("KUBEGPU_MAIN_HELPERS", None)
    environment.pop("KUBEGPU_HELPER_MIN_MS", None)
    return subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            str(tmp / "inventory.yml"),
            *args,
            str(tmp / "play.yml"),
        ],
        cwd=tmp,
        env=dict(environment, **env),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def run(
    tmp: Path,
    strategy: str,
    *flags: str,
    tasks: list[dict[str, Any]] = ROLE_TASKS,
    hosts: dict[str, dict[str, Any]] = HOSTS,
    helpers: int | None = None,
    helper_min_ms: str = "0",
    extra_env: dict[str, str] | None = None,
    stderr: list[str] | None = None,
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The play's JSON report, and which processes wrote each log (pid_log: the debug task's
    false condition, run_log: a set_fact, probe_log: a module task's false condition,
    throttle_log: a set_fact with throttle 1). With helpers, a helper takes any share
    (KUBEGPU_HELPER_MIN_MS=0: these tasks are too small for the default) unless told
    otherwise."""
    role = tmp / "roles" / "probe"
    for folder, data in (
        ("vars", ROLE_VARS),
        ("tasks", tasks),
        ("handlers", HANDLERS),
    ):
        (role / folder).mkdir(parents=True, exist_ok=True)
        (role / folder / "main.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    (role / "tasks" / "never.yml").write_text(
        yaml.safe_dump([{"ansible.builtin.fail": {"msg": "never"}}])
    )
    (role / "tasks" / "item.yml").write_text(
        yaml.safe_dump([{"name": "Included", "ansible.builtin.debug": {"msg": "item {{ item }}"}}])
    )
    (role / "vars" / "one.yml").write_text(yaml.safe_dump({"probe_one": "{{ level }}"}))
    (role / "vars" / "two.yml").write_text(yaml.safe_dump({"probe_three": 3}))
    (role / "vars" / "shared.yml").write_text(yaml.safe_dump(SHARED_VARS))
    vault = VaultLib([("default", VaultSecret(VAULT_PASSWORD.encode()))])
    (role / "vars" / "secret.yml").write_bytes(vault.encrypt(yaml.safe_dump(SECRET_VARS)))
    (tmp / "vault-password").write_text(VAULT_PASSWORD)
    inner = tmp / "roles" / "probe_inner"
    for folder, data in (
        ("tasks", [{"name": "Inner", "ansible.builtin.debug": {"msg": "inner {{ probe_size }}"}}]),
        ("defaults", {"probe_size": 4}),
        ("meta", {"argument_specs": {"main": {"options": {"probe_size": {"type": "int"}}}}}),
    ):
        (inner / folder).mkdir(parents=True, exist_ok=True)
        name = "argument_specs.yml" if folder == "meta" else "main.yml"
        (inner / folder / name).write_text(yaml.safe_dump(data, sort_keys=False))
    logs = {name: tmp / f"{name}-{strategy}.log" for name in LOGS}
    for log in logs.values():
        log.unlink(missing_ok=True)
    play = [{"hosts": "all", "gather_facts": False, "roles": ["probe"]}]
    (tmp / "play.yml").write_text(yaml.safe_dump(play))
    env = {
        "ANSIBLE_ROLES_PATH": str(tmp / "roles"),
        "ANSIBLE_STRATEGY": strategy,
        # The fact cache of this run alone (the plays cache facts).
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp / f"facts-{strategy}"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
    }
    if helpers is not None:
        env["KUBEGPU_MAIN_HELPERS"] = str(helpers)
        env["KUBEGPU_HELPER_MIN_MS"] = helper_min_ms
    env.update(extra_env or {})
    done = playbook(
        tmp,
        hosts,
        env,
        *(arg for name, log in logs.items() for arg in ("-e", f"{name}={log}")),
        "-e",
        f"shared_vars={role / 'vars' / 'shared.yml'}",
        "--vault-password-file",
        str(tmp / "vault-password"),
        *flags,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    if stderr is not None:
        stderr.append(done.stderr)
    logged = {name: log.read_text().split() if log.exists() else [] for name, log in logs.items()}
    return json.loads(done.stdout), logged


def results(report: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(task, host, result) in order, without what differs from run to run."""
    varying = {"start", "end", "delta", "_ansible_no_log", "invocation"}
    found = []
    for play in report["plays"]:
        for task in play["tasks"]:
            for host, result in sorted(task["hosts"].items()):
                kept = {k: v for k, v in result.items() if k not in varying}
                found.append((task["task"]["name"].rpartition(" : ")[2], host, kept))
    return found


@only_where_it_runs
@pytest.mark.parametrize("helpers", [None, 2], ids=["main", "helpers"])
@pytest.mark.parametrize("flags", [(), ("--check",)], ids=["run", "check"])
def test_every_result_is_linear_s_and_controller_work_stays_in_the_main_process(
    tmp_path: Path, flags: tuple[str, ...], helpers: int | None
) -> None:
    # Three hosts: too few for a helper (whatever the CPUs); six with two helpers allowed.
    hosts = MORE_HOSTS if helpers else HOSTS
    theirs, their_logs = run(tmp_path, "linear", *flags, hosts=hosts)
    ours, our_logs = run(tmp_path, "kubegpu.accel.linear", *flags, hosts=hosts, helpers=helpers)
    assert results(ours) == results(theirs)
    assert ours["stats"] == theirs["stats"]
    by_task = {(task, host): result for task, host, result in results(ours)}
    # The results say what the play does, so that the comparison covers each path.
    assert by_task[("Runs where the role var holds", "h1")]["msg"] == "high 9"
    assert by_task[("Runs where the role var holds", "h2")]["skipped"] is True
    assert by_task[("Shows the registered skip", "h1")]["probe_skipped"]["skipped"] is True
    assert by_task[("Inside, with its own condition too", "h2")]["skipped"] is True
    assert by_task[("A condition on a play context value the task sets", "h1")]["msg"] == "user"
    assert by_task[("Rescued", "h2")]["msg"] == "rescued"
    assert by_task[("Runs a module where the level is low", "h1")]["skipped"] is True
    for host, level in (("h2", "1"), ("h6", "2")) if helpers else (("h2", "1"),):
        # The module ran (in check mode it says it would have run the command).
        assert by_task[("Runs a module where the level is low", host)]["cmd"] == [
            "echo",
            "low",
            level,
        ]
    assert by_task[("Fails on the undefined variable", "h2")]["failed"] is True
    assert len(by_task[("A loop, each item with the condition", "h1")]["results"]) == 2
    assert ours["stats"]["h1"]["skipped"] > 0 and ours["stats"]["h2"]["changed"] == 0
    assert by_task[("Shows the registered set_fact", "h3")]["probe_set"]["ansible_facts"] == {
        "probe_two": 2
    }
    assert by_task[("Shows the loaded values", "h1")]["msg"] == "9 3"
    assert by_task[("Reads the cached fact", "h1")]["msg"] == "10 10"
    assert by_task[("Reads the cached fact", "h2")]["msg"] == "1 1"
    assert len(by_task[("Loads values for each item", "h2")]["results"]) == 2
    assert by_task[("Asserts per host", "h2")]["failed"] is True
    assert by_task[("Asserts per host", "h1")].get("failed") is not True
    assert by_task[("Fails on one host", "h2")]["msg"] == "low 1"
    assert by_task[("Fails on one host", "h1")]["skipped"] is True
    assert by_task[("Checks in one task", "h1")]["checked"] == 2
    assert by_task[("Checks in one task", "h3")]["checked"] == 1
    assert [r["msg"] for t, h, r in results(ours) if t == "Included" and h == "h1"] == [
        "item 1",
        "item 2",
    ]
    assert by_task[("Inner", "h2")]["msg"] == "inner 4"
    assert by_task[("Shows under the block's no_log", "h2")]["msg"] == "secret 1"
    assert "secret" not in json.dumps(by_task[("Shows under the block's no_log", "h1")])
    # ansible-core's linear runs each of these in a worker per host.
    for name in LOGS:
        assert len(their_logs[name]) == len(our_logs[name]) == len(hosts)
        assert len(set(their_logs[name])) == len(hosts)
        assert not set(their_logs[name]) & set(our_logs[name])
    pids, runs, probes, throttled = (set(our_logs[name]) for name in LOGS)
    # A throttled task: in the main process alone, helpers or not.
    assert throttled == pids & runs & probes
    if not helpers:
        # Ours: in the one main process, for all three hosts.
        assert len(pids) == 1 and pids == runs == probes
    else:
        # Ours: the main process runs the first two hosts' controller-only work, and two
        # helpers two hosts' each; it evaluates the module task's condition for the first
        # three, and one helper for the other three (the first host's false condition is
        # what lets a helper share the rest).
        main = pids & runs & probes
        assert len(main) == 1
        assert len(pids) == len(runs) == 3 and len(probes) == 2
        assert [our_logs["run_log"].count(pid) for pid in sorted(runs - main)] == [2, 2]
        assert our_logs["probe_log"].count(next(iter(main))) == 3


@only_where_it_runs
def test_a_task_whose_share_is_too_small_for_a_helper_stays_in_the_main_process(
    tmp_path: Path,
) -> None:
    # Two helpers allowed and six hosts, as in the test above, but no share of these tasks
    # comes to 100 s of CPU: no helper is forked, and the main process does every host's.
    ours, logs = run(
        tmp_path, "kubegpu.accel.linear", hosts=MORE_HOSTS, helpers=2, helper_min_ms="100000"
    )
    by_task = {(task, host): result for task, host, result in results(ours)}
    assert by_task[("Shows the registered set_fact", "h6")]["probe_set"]["ansible_facts"] == {
        "probe_two": 2
    }
    for name in LOGS:
        assert len(logs[name]) == len(MORE_HOSTS)
    assert len(set().union(*(set(logs[name]) for name in LOGS))) == 1


@only_where_it_runs
def test_a_vars_file_is_parsed_once_yet_each_host_gets_its_own_and_the_latest_values(
    tmp_path: Path,
) -> None:
    theirs, _ = run(tmp_path, "linear", tasks=VARS_TASKS, hosts=MORE_HOSTS)
    # Two helpers load the last four hosts' files, a helper per task for each two hosts.
    ours, _ = run(tmp_path, "kubegpu.accel.linear", tasks=VARS_TASKS, hosts=MORE_HOSTS, helpers=2)
    assert results(ours) == results(theirs)
    assert ours["stats"] == theirs["stats"]
    by_task = {(task, host): result for task, host, result in results(ours)}
    loaded = by_task[("Loads the shared values", "h2")]
    assert loaded["ansible_facts"]["probe_shared"]["text"] == "before"
    assert loaded["ansible_included_var_files"] == [
        str(tmp_path / "roles" / "probe" / "vars" / "shared.yml")
    ]
    # One host's merge onto the values stays its own (and outranks include_vars there).
    assert by_task[("Shows the merged values", "h1")]["probe_shared"]["nested"] == {"n": 1, "m": 9}
    assert by_task[("Shows the merged values", "h2")]["probe_shared"]["nested"] == {"n": 1}
    assert by_task[("Shows the values loaded again", "h1")]["probe_shared"]["nested"]["m"] == 9
    # Every load gives every host the file's text of the time.
    for host in MORE_HOSTS:
        for task, text in (
            ("Loads the shared values", "before"),
            ("Loads the shared values again", "before"),
            ("Loads the rewritten values", "after_"),
        ):
            assert by_task[(task, host)]["ansible_facts"] == {
                "probe_shared": {"level": "{{ level }}", "text": text, "nested": {"n": 1}}
            }
    assert by_task[("Shows the rewritten values", "h2")]["probe_shared"] == {
        "level": 1,
        "text": "after_",
        "nested": {"n": 1},
    }
    # An encrypted file's values are loaded, and the load's result hidden, as ansible-core does.
    assert by_task[("Shows a decrypted value", "h3")]["msg"] == "hidden 6"
    assert set(by_task[("Loads the encrypted values", "h3")]) == {"action", "censored", "changed"}
    registered = by_task[("Shows the registered load of the encrypted values", "h3")]
    assert registered["probe_secret_loaded"]["ansible_included_var_files"] == [
        str(tmp_path / "roles" / "probe" / "vars" / "secret.yml")
    ]


@only_where_it_runs
@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "vault"])
def test_each_load_of_a_vars_file_is_a_copy_of_its_one_parse(
    tmp_path: Path, encrypted: bool
) -> None:
    text = yaml.safe_dump(SHARED_VARS)
    secret = VaultSecret(VAULT_PASSWORD.encode())
    path = tmp_path / "shared.yml"
    path.write_bytes(VaultLib([("default", secret)]).encrypt(text) if encrypted else text.encode())
    real = DataLoader()
    real.set_vault_secrets([("default", secret)])
    parses = []
    load = real.load

    def counted(*args: Any, **kwargs: Any) -> Any:
        parses.append(kwargs.get("file_name"))
        return load(*args, **kwargs)

    real.load = counted  # type: ignore[method-assign]
    loader = linear._ParsedVarsFiles(real)
    first = loader.load_from_file(str(path), cache="none", trusted_as_template=True)
    first["probe_shared"]["nested"]["n"] = 2
    second = loader.load_from_file(str(path), cache="none", trusted_as_template=True)
    assert second == SHARED_VARS
    assert parses == [str(path)]
    # include_vars hides what it loaded from an encrypted file by this mark.
    shown = real.load_from_file(str(path), cache="none", trusted_as_template=True)
    assert SourceWasEncrypted.is_tagged_on(second) is encrypted
    assert SourceWasEncrypted.is_tagged_on(shown) is encrypted
    # Other loads, and the rest of the loader, are the real loader's.
    assert loader.path_dwim("x.yml") == real.path_dwim("x.yml")
    loader.load_from_file(str(path))
    assert len(parses) == 3


def test_the_repository_ansible_cfg_uses_it() -> None:
    config = configparser.ConfigParser(interpolation=None)
    config.read(REPO / "ansible.cfg")
    assert config.get("defaults", "strategy") == "kubegpu.accel.linear"


# The last host's job kills the process it runs in: a helper, which holds the last hosts' jobs.
KILL = "lookup('ansible.builtin.pipe', 'kill -9 $PPID' if inventory_hostname == 'h6' else 'true')"


@only_where_it_runs
@pytest.mark.parametrize(
    "task",
    [
        {"ansible.builtin.set_fact": {"probe_killed": "{{ " + KILL + " }}"}},
        {"ansible.builtin.command": "false", "when": KILL + " == 'never'"},
    ],
    ids=["runs", "conditions"],
)
def test_a_helper_that_dies_fails_the_run_and_says_so(tmp_path: Path, task: dict[str, Any]) -> None:
    play = [{"hosts": "all", "gather_facts": False, "tasks": [{"name": "Dies on h6", **task}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    facts = str(tmp_path / "facts")
    done = playbook(
        tmp_path,
        MORE_HOSTS,
        {
            "ANSIBLE_CACHE_PLUGIN_CONNECTION": facts,
            "KUBEGPU_MAIN_HELPERS": "1",
            "KUBEGPU_HELPER_MIN_MS": "0",
        },
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0, said[-3000:]
    if "ansible.builtin.set_fact" in task:
        # ansible-core's own check of its workers, which watches the helpers too.
        assert "A worker was found in a dead state" in said, said[-3000:]
    else:
        assert "the helper process" in said and "ended without its answers" in said, said[-3000:]


@only_where_it_runs
def test_a_wrong_number_of_helpers_is_refused_before_any_host_is_touched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for wrong in ("-1", "two", "1.5"):
        monkeypatch.setenv("KUBEGPU_MAIN_HELPERS", wrong)
        with pytest.raises(AnsibleError, match=r"KUBEGPU_MAIN_HELPERS is .*allowed are 0"):
            linear._helpers_allowed()
    monkeypatch.setenv("KUBEGPU_MAIN_HELPERS", "3")
    assert linear._helpers_allowed() == 3
    monkeypatch.delenv("KUBEGPU_MAIN_HELPERS")
    assert linear._helpers_allowed() == len(os.sched_getaffinity(0)) - 1


@only_where_it_runs
def test_a_wrong_least_share_for_a_helper_is_refused_before_any_host_is_touched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for wrong in ("-1", "ten", "nan", "inf", "20ms"):
        monkeypatch.setenv("KUBEGPU_HELPER_MIN_MS", wrong)
        with pytest.raises(AnsibleError, match=r"KUBEGPU_HELPER_MIN_MS is .*allowed are a number"):
            linear._helper_min_ms()
    for allowed, value in (("0", 0.0), ("2.5", 2.5), (" 40 ", 40.0)):
        monkeypatch.setenv("KUBEGPU_HELPER_MIN_MS", allowed)
        assert linear._helper_min_ms() == value
    monkeypatch.delenv("KUBEGPU_HELPER_MIN_MS")
    assert linear._helper_min_ms() == linear.HELPER_MIN_MS == 20.0


@only_where_it_runs
def test_a_wrong_vars_wrap_setting_is_refused_before_any_host_is_touched(tmp_path: Path) -> None:
    # The strategy puts plugin_utils/lazy_vars.py in place when it starts (its own tests:
    # tests/unit/test_lazy_vars.py), and refuses a value it does not know there.
    touched = tmp_path / "touched"
    task = {"ansible.builtin.file": {"path": str(touched), "state": "touch"}}
    play = [{"hosts": "all", "gather_facts": False, "tasks": [task]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")}
    done = playbook(tmp_path, HOSTS, {**env, "KUBEGPU_VARS_WRAP_REUSE": "yes"})
    said = done.stdout + done.stderr
    assert done.returncode != 0, said[-3000:]
    assert "KUBEGPU_VARS_WRAP_REUSE='yes': allowed are 1" in said, said[-3000:]
    assert not touched.exists()
    for allowed in ("0", "1"):
        done = playbook(tmp_path, HOSTS, {**env, "KUBEGPU_VARS_WRAP_REUSE": allowed})
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert touched.exists()
        touched.unlink()


STEPS_ASIDE = "kubegpu.accel steps aside"
# On an ansible-core it was not tested on, the gate steps aside before anything else.
UNTESTED = (
    f"ansible-core {gate.ANSIBLE_VERSION} is not a release it was tested on "
    f"({', '.join(gate.TESTED_MINORS)})"
)


@pytest.mark.parametrize(
    ("setting", "warning"),
    [
        # An ansible-core minor the accelerator was not tested on: one warning line, and the
        # stock strategy. On a tested one, the run's ansible-core reports 2.99.0 (through a
        # sitecustomize); on any other, it is this very ansible-core.
        (
            {"PRETEND": "2.99.0"} if TESTED else {},
            (
                "ansible-core 2.99.0 is not a release it was tested on "
                f"({', '.join(gate.TESTED_MINORS)})"
            )
            if TESTED
            else UNTESTED,
        ),
        # Its strategy's code fails to import (None in sys.modules makes the import raise); on
        # an untested ansible-core the gate steps aside before the import.
        (
            {"BREAK": "ansible_collections.kubegpu.accel.plugins.plugin_utils.fast_linear"},
            "its strategy failed to load (ModuleNotFoundError" if TESTED else UNTESTED,
        ),
        ({"KUBEGPU_ACCEL": "0"}, None),
        ({"KUBEGPU_ACCEL": "perhaps"}, "KUBEGPU_ACCEL is 'perhaps' (allowed: 1 or 0"),
    ],
    ids=["unknown-ansible-core", "import-fails", "turned-off", "wrong-setting"],
)
def test_the_accelerator_steps_aside_to_ansible_core_s_linear(
    tmp_path: Path, setting: dict[str, str], warning: str | None
) -> None:
    extra = dict(setting)
    pretend, broken = extra.pop("PRETEND", None), extra.pop("BREAK", None)
    if pretend or broken:
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(
            f"import ansible.release\nansible.release.__version__ = {pretend!r}\n"
            if pretend
            else f"import sys\nsys.modules[{broken!r}] = None\n"
        )
        extra["PYTHONPATH"] = str(site)
    theirs, _ = run(tmp_path, "linear")
    stderr: list[str] = []
    ours, logs = run(tmp_path, "kubegpu.accel.linear", extra_env=extra, stderr=stderr)
    assert results(ours) == results(theirs)
    assert ours["stats"] == theirs["stats"]
    # Every host's controller-only work ran in a worker of its own, as under ansible-core's.
    for name in LOGS:
        assert len(set(logs[name])) == len(HOSTS), name
    lines = [line for line in stderr[0].splitlines() if STEPS_ASIDE in line]
    if warning is None:
        assert lines == []
    else:
        assert len(lines) == 1, stderr[0]
        assert warning in lines[0]
