"""kubegpu.gpu.checks: many asserts in one task, with the semantics of a chain of quiet asserts.

Each test runs a real play on localhost through ansible-playbook (the JSON callback) and reads
the task's result: the first failed check's message, templated only then; checks whose `when`
is false are neither evaluated nor templated; bad shapes of `checks` are named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_nvidia_driver_roles import host_results, run_playbook


def _run(tmp_path: Path, checks: Any, extra_vars: dict[str, Any] | None = None) -> dict[str, Any]:
    play = [
        {
            "name": "checks",
            "hosts": "all",
            "gather_facts": False,
            "vars": {"size": 3, "name_var": "gpu", **(extra_vars or {})},
            "tasks": [{"name": "The checks", "kubegpu.gpu.checks": {"checks": checks}}],
        }
    ]
    rc, report, stderr = run_playbook(tmp_path, play, {"h1": {}})
    results = host_results(report, "h1")
    assert len(results) == 1, (results, stderr)
    result = results[0][1]
    assert (rc == 0) == (not result.get("failed", False)), (rc, result, stderr)
    return result


def test_all_applying_checks_pass(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        [
            {"name": "size", "that": ["size > 0", "size is number"], "msg": "bad size {{ size }}"},
            {"name": "skipped", "when": "size > 10", "that": "size > 100", "msg": "never"},
            {"name": "name", "that": "name_var == 'gpu'", "msg": "bad name"},
        ],
    )
    assert not result.get("failed", False)
    assert result["checked"] == 2
    assert result["changed"] is False


def test_the_first_failed_check_fails_with_its_templated_message(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        [
            {"name": "size", "that": ["size > 0"], "msg": "never"},
            {
                "name": "size is small",
                "that": ["size is number", "size < 2"],
                "msg": "size is {{ size }}: below 2",
            },
            # Not reached: the chain stops at the first failure, as assert tasks do.
            {"name": "later", "that": "undefined_variable > 0", "msg": "{{ undefined_variable }}"},
        ],
    )
    assert result["failed"] is True
    assert result["msg"] == "size is 3: below 2"
    assert result["check"] == "size is small"
    assert result["assertion"] == "size < 2"


def test_a_check_that_does_not_apply_is_not_templated(tmp_path: Path) -> None:
    # The message and condition use a variable that exists only when the check applies.
    result = _run(
        tmp_path,
        [
            {
                "name": "optional",
                "when": ["optional_var is defined"],
                "that": "optional_var > 0",
                "msg": "optional_var is {{ optional_var }}",
            }
        ],
    )
    assert not result.get("failed", False)
    assert result["checked"] == 0


@pytest.mark.parametrize(
    ("checks", "fragment"),
    [
        ([], "non-empty list"),
        ([{"that": "size > 0"}], "checks[0] must be a mapping with that and msg"),
        ([{"that": "size > 0", "msg": "m", "fail_msg": "x"}], "checks[0] must be a mapping"),
        ([{"name": "n", "that": {"a": 1}, "msg": "m"}], "checks[0].that (n) must be a condition"),
    ],
)
def test_bad_shapes_are_named(tmp_path: Path, checks: Any, fragment: str) -> None:
    result = _run(tmp_path, checks)
    assert result["failed"] is True
    assert fragment in result["msg"]
