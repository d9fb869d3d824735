"""Input validation of the testbed: every bad input fails with one clear line, before anything
on the host is created."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from kubegpu.testbed import api, config, network
from kubegpu.testbed.config import TestbedConfig, check_host, validate
from kubegpu.testbed.errors import TestbedInputError


def _config(tmp_path: Path, **changes: object) -> TestbedConfig:
    base = TestbedConfig(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    return replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "variable", "words"),
    [
        ({"nodes": 0}, "nodes", "at least 1"),
        ({"nodes": 6, "subnet": "10.213.0.0/29"}, "nodes", "at most 5"),
        ({"nodes": 254, "subnet": "10.213.0.0/24"}, "nodes", "at most 253"),
        ({"subnet": "10.213.0.1/24"}, "subnet", "not an IPv4 network"),
        ({"subnet": "banana"}, "subnet", "not an IPv4 network"),
        ({"subnet": "8.8.8.0/24"}, "subnet", "not a private range"),
        ({"subnet": "fd00::/64"}, "subnet", "not IPv4"),
        ({"subnet": "10.213.0.0/30"}, "subnet", "too small"),
        ({"bridge": "a-very-long-bridge-name"}, "bridge", "not a valid interface name"),
        ({"bridge": "br 0"}, "bridge", "not a valid interface name"),
        ({"name_prefix": "Node"}, "name_prefix", "cannot start a host name"),
        ({"name_prefix": "1node"}, "name_prefix", "cannot start a host name"),
        ({"suite": "jessie"}, "suite", "bookworm, trixie"),
        ({"containers": ("node9",)}, "containers", "not a node of this testbed"),
        ({"simulate_gpu": (("node7", "telegraf-tesla-t4-515"),)}, "simulate_gpu", "not a node"),
        (
            {"simulate_gpu": (("node1", "a"), ("node1", "b"))},
            "simulate_gpu",
            "given twice",
        ),
        ({"simulate_gpu": (("node1", ""),)}, "simulate_gpu", "no capture given"),
        ({"proxy_port": 80}, "proxy_port", "1024-65535"),
        ({"repo_port": 3142}, "repo_port", "two different ports"),
        ({"state_dir": Path("relative/state")}, "state_dir", "not absolute"),
    ],
)
def test_bad_config_is_refused_naming_the_variable(
    tmp_path: Path, changes: dict[str, object], variable: str, words: str
) -> None:
    with pytest.raises(TestbedInputError) as caught:
        validate(_config(tmp_path, **changes))
    assert caught.value.variable == variable
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("subnet", "count", "bridge", "first", "last"),
    [
        ("10.213.0.0/24", 3, "10.213.0.1", "10.213.0.2", "10.213.0.4"),
        ("192.168.77.0/29", 5, "192.168.77.1", "192.168.77.2", "192.168.77.6"),
        ("172.20.0.0/16", 253, "172.20.0.1", "172.20.0.2", "172.20.0.254"),
    ],
)
def test_addresses_follow_the_bridge(
    subnet: str, count: int, bridge: str, first: str, last: str
) -> None:
    plan = network.plan_addresses(subnet, count)
    assert str(plan.bridge) == bridge
    assert len(plan.nodes) == count
    assert (str(plan.nodes[0]), str(plan.nodes[-1])) == (first, last)
    assert all(a in plan.network for a in plan.nodes)
    assert plan.bridge not in plan.nodes


def test_good_config_passes_and_names_nodes(tmp_path: Path) -> None:
    cfg = _config(tmp_path, nodes=4, name_prefix="gpu", containers=("gpu2",))
    plan = validate(cfg)
    assert cfg.node_names == ("gpu1", "gpu2", "gpu3", "gpu4")
    assert len(plan.nodes) == 4


def test_config_round_trips_through_the_state_file_form(tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        nodes=2,
        containers=("node2",),
        simulate_gpu=(("node1", "telegraf-tesla-t4-515"),),
        mirror="http://mirror.invalid/debian",
    )
    assert TestbedConfig.from_dict(cfg.to_dict()) == cfg


def test_not_root_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(TestbedInputError, match="needs root"):
        check_host(need_debootstrap=False)


def test_missing_debootstrap_is_refused_only_when_a_build_is_needed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(config, "which", lambda tool: None if tool == "debootstrap" else "/x")
    check_host(need_debootstrap=False)
    with pytest.raises(TestbedInputError) as caught:
        check_host(need_debootstrap=True)
    assert "debootstrap (package debootstrap)" in str(caught.value)


def test_a_bridge_name_in_use_by_something_else_is_refused(tmp_path: Path) -> None:
    # The loopback interface exists on every host and is certainly not ours.
    cfg = _config(tmp_path, bridge="lo")
    with pytest.raises(TestbedInputError) as caught:
        api._check_bridge(cfg, None)
    assert caught.value.variable == "bridge"
    assert "not created by this testbed" in str(caught.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="up() checks for root before the bridge")
def test_up_with_bad_input_creates_nothing(tmp_path: Path) -> None:
    # A bridge name and subnet of this test's own: other testbeds may come and go meanwhile
    # (the 2.21 leg's beside a suite's), so only this one's links count.
    own = {"bridge": "kgtbunit0", "subnet": "10.239.254.0/24"}
    assert "kgtbunit0" not in os.listdir("/sys/class/net")
    for cfg in (
        _config(tmp_path, nodes=300, **own),
        _config(tmp_path, bridge="lo"),
        _config(tmp_path, simulate_gpu=(("node1", "no-such-capture"),), **own),
    ):
        with pytest.raises(TestbedInputError):
            api.up(cfg)
        assert not cfg.state_dir.exists()
        assert not cfg.cache_dir.exists()
    assert "kgtbunit0" not in os.listdir("/sys/class/net")


def test_subnet_overlapping_a_host_address_is_refused() -> None:
    # Whatever the host has on its first configured interface overlaps itself.
    nets = [(name, net) for name, net in network.host_networks() if name != "lo"]
    if not nets:
        pytest.skip("no non-loopback IPv4 address on this host")
    name, net = nets[0]
    with pytest.raises(TestbedInputError, match=f"already configured on {name}"):
        network.check_subnet_free(net, "kgtb-none")


def test_owned_processes_match_the_state_folder_not_a_longer_name() -> None:
    from kubegpu.testbed.nodes import mentions_path

    assert mentions_path(
        ["systemd-nspawn", "-D", "/run/kubegpu-testbed/node1/merged"], "/run/kubegpu-testbed"
    )
    assert mentions_path(["launcher", "--state=/run/kubegpu-testbed"], "/run/kubegpu-testbed")
    assert not mentions_path(
        ["systemd-nspawn", "-D", "/run/kubegpu-testbed-drv/n1"], "/run/kubegpu-testbed"
    )
