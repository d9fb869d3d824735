"""The execution strategy switch (KUBEGPU_STRATEGY): ansible.cfg's kubegpu.accel.linear by
default, ansible-core's linear or mitogen's on request, anything else refused before a run
starts."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from kubegpu import api, cli
from kubegpu.errors import InputError
from kubegpu.runner import accel_environment, run_playbook, strategy_environment


def test_the_default_is_ansible_cfg_s_and_linear_is_ansible_core_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBEGPU_STRATEGY", raising=False)
    assert strategy_environment() == {}  # ansible.cfg's kubegpu.accel.linear
    assert strategy_environment("kubegpu") == {}
    assert strategy_environment("linear") == {"ANSIBLE_STRATEGY": "ansible.builtin.linear"}
    monkeypatch.setenv("KUBEGPU_STRATEGY", " linear ")
    assert strategy_environment() == {"ANSIBLE_STRATEGY": "ansible.builtin.linear"}


def test_an_unknown_strategy_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBEGPU_STRATEGY", "free")
    with pytest.raises(InputError) as caught:
        strategy_environment()
    assert str(caught.value) == (
        "KUBEGPU_STRATEGY: 'free' is not a known strategy (allowed: kubegpu, linear, mitogen)"
    )
    # The runner refuses it before any run directory or process exists.
    with pytest.raises(InputError, match="KUBEGPU_STRATEGY"):
        run_playbook("site.yml", {"all": {"hosts": {"localhost": {}}}})


@pytest.mark.skipif(
    importlib.util.find_spec("ansible_mitogen") is None, reason="mitogen is not installed"
)
def test_mitogen_points_ansible_at_its_strategy_plugins() -> None:
    env = strategy_environment("mitogen")
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert env["ANSIBLE_STRATEGY_PLUGINS"].endswith("plugins/strategy")


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("", {}),
        ("0", {"KUBEGPU_ACCEL": "0"}),
        ("Off", {"KUBEGPU_ACCEL": "0"}),
        ("yes", {"KUBEGPU_ACCEL": "1"}),
        ("1", {"KUBEGPU_ACCEL": "1"}),
    ],
)
def test_kubegpu_accel_goes_to_the_run(
    monkeypatch: pytest.MonkeyPatch, setting: str, expected: dict[str, str]
) -> None:
    monkeypatch.setenv("KUBEGPU_ACCEL", setting)
    assert accel_environment() == expected
    assert accel_environment(False) == {"KUBEGPU_ACCEL": "0"}


def test_a_wrong_kubegpu_accel_is_refused_before_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBEGPU_ACCEL", "fast")
    with pytest.raises(InputError) as caught:
        run_playbook("site.yml", {"all": {"hosts": {"localhost": {}}}})
    assert str(caught.value) == (
        "KUBEGPU_ACCEL: 'fast' is not on or off (allowed: 1 or 0, true or false, yes or no)"
    )


def test_the_cli_turns_the_accelerator_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, str | None] = {}

    def fake_check(inventory: object, **kwargs: object) -> object:
        seen["accel"] = os.environ.get("KUBEGPU_ACCEL")
        raise InputError("inventory", "stop here")

    # Set, so that the fixture puts the environment back after the CLI changed it.
    monkeypatch.setenv("KUBEGPU_ACCEL", "1")
    monkeypatch.setattr(api, "check", fake_check)
    assert cli.main(["check", "-i", str(tmp_path), "--no-accel", "--quiet"]) == 4
    assert seen == {"accel": "0"}
