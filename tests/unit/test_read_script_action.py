"""kubegpu.gpu.read_script: a read-only sh script, piped to one sh when the connection pipelines,
through ansible.builtin.command otherwise, with the same results either way.

Each test runs a real play on localhost (the local connection) through ansible-playbook and reads
the task's results. `ansible_pipelining` picks the path. The piped path is shown to need no Python
on the host by pointing the host's interpreter at a file that does not exist: the command module
cannot run there, the piped script does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_nvidia_driver_roles import host_results, run_playbook

# Positional parameters with spaces, quotes and a dollar sign; the environment; stderr; a command
# that reads stdin (it must get nothing, and the lines after it must still run); trailing blank
# lines, which both paths strip.
_SCRIPT = """\
printf 'argc %s\\n' "$#"
for arg in "$@"; do printf 'arg [%s]\\n' "$arg"; done
printf 'locale %s\\n' "${LC_ALL:-unset}"
cat
echo after-cat
echo to-stderr >&2
printf '\\n\\n'
"""
_ARGV = ["two words", 'it\'s "quoted" $HOME', ""]
_EXPECTED_LINES = [
    "argc 3",
    "arg [two words]",
    'arg [it\'s "quoted" $HOME]',
    "arg []",
    "locale C",
    "after-cat",
]
_COMPARED = ("rc", "stdout", "stdout_lines", "stderr", "stderr_lines", "changed", "failed", "msg")


def _run(
    tmp_path: Path,
    tasks: list[dict[str, Any]],
    *,
    pipelining: bool,
    host_vars: dict[str, Any] | None = None,
    args: tuple[str, ...] = (),
) -> tuple[int, list[tuple[str, dict[str, Any]]], str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    play = [{"name": "read_script", "hosts": "all", "gather_facts": False, "tasks": tasks}]
    hosts = {"h1": {"ansible_pipelining": pipelining, **(host_vars or {})}}
    rc, report, stderr = run_playbook(tmp_path, play, hosts, *args)
    return rc, host_results(report, "h1"), stderr


def _read_task(**extra: Any) -> dict[str, Any]:
    return {
        "name": "Read",
        "kubegpu.gpu.read_script": {"script": _SCRIPT, "argv": _ARGV},
        "environment": {"LC_ALL": "C"},
        **extra,
    }


def _compared(result: dict[str, Any]) -> dict[str, Any]:
    return {key: result.get(key) for key in _COMPARED}


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
def test_piped_and_command_module_runs_return_the_same(tmp_path: Path, check_mode: bool) -> None:
    args = ("--check",) if check_mode else ()
    results = {}
    for pipelining in (True, False):
        rc, tasks, stderr = _run(
            tmp_path / str(pipelining), [_read_task()], pipelining=pipelining, args=args
        )
        assert rc == 0, (tasks, stderr)
        [(_, result)] = tasks
        results[pipelining] = result
    piped = results[True]
    # It runs in check mode too (a read), and never reports a change.
    assert piped["stdout_lines"] == _EXPECTED_LINES
    assert piped["stdout"] == "\n".join(_EXPECTED_LINES)
    assert piped["stderr_lines"] == ["to-stderr"]
    assert piped["rc"] == 0
    assert piped["changed"] is False
    assert _compared(results[False]) == _compared(piped)


def test_the_piped_run_needs_no_python_on_the_host(tmp_path: Path) -> None:
    no_python = {"ansible_python_interpreter": str(tmp_path / "no-such-python")}
    rc, tasks, stderr = _run(
        tmp_path / "piped", [_read_task()], pipelining=True, host_vars=no_python
    )
    assert rc == 0, (tasks, stderr)
    assert tasks[0][1]["stdout_lines"] == _EXPECTED_LINES
    # The same host without pipelining runs the command module, which needs the interpreter.
    rc, tasks, _ = _run(tmp_path / "module", [_read_task()], pipelining=False, host_vars=no_python)
    assert rc != 0
    assert tasks[0][1]["failed"] is True
    assert "no-such-python" in str(tasks[0][1])


@pytest.mark.parametrize("pipelining", [True, False], ids=["piped", "module"])
def test_a_non_zero_exit_fails_unless_the_task_says_otherwise(
    tmp_path: Path, pipelining: bool
) -> None:
    script = "echo partial; echo why >&2; exit 3"
    tasks = [
        {
            "name": "Tolerated",
            "kubegpu.gpu.read_script": {"script": script},
            "failed_when": False,
            "register": "tolerated",
        },
        {
            "name": "Seen",
            "ansible.builtin.assert": {
                "that": ["tolerated.rc == 3", "tolerated.stdout == 'partial'"]
            },
        },
        {"name": "Failing", "kubegpu.gpu.read_script": {"script": script}},
    ]
    rc, results, stderr = _run(tmp_path, tasks, pipelining=pipelining)
    assert rc != 0
    names = [name for name, _ in results]
    assert names == ["Tolerated", "Seen", "Failing"], (results, stderr)
    failing = results[2][1]
    assert failing["failed"] is True
    assert failing["rc"] == 3
    assert failing["msg"] == "non-zero return code"
    assert failing["stderr"] == "why"
    assert failing["changed"] is False


@pytest.mark.parametrize(
    ("task_args", "named"),
    [
        ({"argv": ["x"]}, "script"),
        ({"script": "true", "argv": {"a": 1}}, "argv"),
        ({"script": "true", "args": ["x"]}, "args"),
        ({"script": "  \n"}, "script is empty"),
    ],
    ids=["no-script", "argv-not-list", "unknown-option", "empty-script"],
)
def test_bad_options_are_named_before_anything_runs(
    tmp_path: Path, task_args: dict[str, Any], named: str
) -> None:
    marker = tmp_path / "ran"
    tasks = [
        {"name": "Bad", "kubegpu.gpu.read_script": task_args},
        {"name": "Never", "kubegpu.gpu.read_script": {"script": f"touch {marker}"}},
    ]
    rc, results, _ = _run(tmp_path, tasks, pipelining=True)
    assert rc != 0
    [(name, result)] = results
    assert name == "Bad"
    assert result["failed"] is True
    assert named in result["msg"], result
    assert not marker.exists()


@pytest.mark.parametrize("pipelining", [True, False], ids=["piped", "module"])
def test_checks_see_the_read_under_its_register_name(tmp_path: Path, pipelining: bool) -> None:
    checks = [
        {"name": "always true", "that": ["read.stdout_lines == ['a', 'b']"], "msg": "unused"},
        {
            "name": "not applying",
            "that": ["false"],
            "msg": "{{ undefined_here }}",
            "when": "read.rc != 0",
        },
        {
            "name": "the second line",
            "that": ["read.stdout_lines[1] == 'a'"],
            "msg": "the second line is {{ read.stdout_lines[1] }}, after {{ first }}",
        },
    ]
    tasks = [
        {
            "name": "Read and check",
            "kubegpu.gpu.read_script": {"script": "echo a; echo b", "checks": checks},
            "vars": {"first": "{{ read.stdout_lines[0] }}"},
            "register": "read",
        },
    ]
    rc, results, stderr = _run(tmp_path, tasks, pipelining=pipelining)
    assert rc != 0, stderr
    [(_, result)] = results
    assert result["failed"] is True
    assert result["check"] == "the second line"
    assert result["msg"] == "the second line is b, after a"
    # The read is in the result as well.
    assert result["stdout_lines"] == ["a", "b"]


def test_passing_checks_count_and_an_empty_script_reads_nothing(tmp_path: Path) -> None:
    tasks = [
        {
            "name": "Checks alone",
            "kubegpu.gpu.read_script": {
                "script": "",
                "checks": [
                    {"that": ["read.stdout == ''", "read.rc == 0"], "msg": "no read"},
                    {"that": ["false"], "msg": "skipped", "when": ["false"]},
                ],
            },
            "register": "read",
        },
    ]
    rc, results, stderr = _run(tmp_path, tasks, pipelining=True)
    assert rc == 0, (results, stderr)
    [(_, result)] = results
    assert result["checked"] == 1
    assert result["changed"] is False


def test_a_failed_read_is_not_checked(tmp_path: Path) -> None:
    tasks = [
        {
            "name": "Failing read",
            "kubegpu.gpu.read_script": {
                "script": "exit 4",
                "checks": [{"that": ["false"], "msg": "never evaluated"}],
            },
        },
    ]
    rc, results, _ = _run(tmp_path, tasks, pipelining=True)
    assert rc != 0
    [(_, result)] = results
    assert result["rc"] == 4
    assert result["msg"] == "non-zero return code"
    assert "check" not in result


_UNITS = """\
Id=crio.service
LoadState=not-found
UnitFileState=
ActiveState=inactive

Id=containerd.service
LoadState=loaded
UnitFileState=enabled
ActiveState=active

Id=docker.service
LoadState=not-found
UnitFileState=
ActiveState=inactive

#dpkg
containerd ii """


@pytest.mark.parametrize("pipelining", [True, False], ids=["piped", "module"])
def test_a_plan_decides_over_what_the_read_printed(tmp_path: Path, pipelining: bool) -> None:
    plan_args = {
        "requested": "auto",
        "install": True,
        "packages": ["containerd"],
        "services": {"containerd": "containerd", "docker": "docker", "crio": "crio"},
        "detect_order": ["crio", "containerd", "docker"],
    }
    tasks = [
        {
            "name": "Read the units",
            "kubegpu.gpu.read_script": {
                "script": 'printf "%s" "$1"',
                "argv": [_UNITS],
                "plan": "container_runtime",
                "plan_args": plan_args,
                "checks": [
                    {
                        "that": ["units.plan.type == 'containerd'"],
                        "msg": "found {{ units.plan.type }}",
                    }
                ],
            },
            "register": "units",
        },
        {
            "name": "Missing plan arguments",
            "kubegpu.gpu.read_script": {
                "script": "true",
                "plan": "container_runtime",
                "plan_args": {"requested": "auto"},
            },
        },
    ]
    rc, results, stderr = _run(tmp_path, tasks, pipelining=pipelining)
    assert rc != 0
    (_, read), (_, missing) = results
    assert read.get("failed") is not True, (read, stderr)
    plan = read["plan"]
    assert plan["type"] == "containerd"
    assert plan["units_found"] == ["containerd.service"]
    assert plan["missing"] == plan["unsettled"] == []
    assert plan["install_work"] is False
    assert read["checked"] == 1
    assert missing["failed"] is True
    assert "plan_args lacks install, packages, services, detect_order" in missing["msg"]
