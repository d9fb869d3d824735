"""The execution strategy switch (KUBEGPU_STRATEGY): ansible.cfg's kubegpu.gpu.linear by
default, ansible-core's linear or mitogen's on request, anything else refused before a run
starts."""

from __future__ import annotations

import importlib.util

import pytest

from kubegpu.errors import InputError
from kubegpu.runner import run_playbook, strategy_environment


def test_the_default_is_ansible_cfg_s_and_linear_is_ansible_core_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBEGPU_STRATEGY", raising=False)
    assert strategy_environment() == {}  # ansible.cfg's kubegpu.gpu.linear
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
