"""The `testbed` fixture: real Debian nodes (systemd-nspawn, systemd as PID 1) over SSH.

One testbed per test session, brought up through kubegpu.testbed's Python API and taken down
at the end. With KUBEGPU_TESTBED_REUSE=1 a testbed that is already up (for example from
`kubegpu testbed up`) is used as it is and left up afterwards, which makes repeated runs fast.

The fixture yields kubegpu.testbed.TestbedState: `.inventory` (Ansible inventory path),
`.node_names`, `.addresses`, `.ssh_key`, `.known_hosts`, `.ssh_argv(node, *cmd)`,
`.vendor_repo_url`, `.vendor_repo_key`, `.apt_proxy_url`, and `.nodes` (NodeState: name,
address, containers, simulated_gpu).

Default layout (each overridable through the environment):
- KUBEGPU_TESTBED_NODES: 3 nodes, node1..node3;
- KUBEGPU_TESTBED_SIMULATE_GPU: node2 replays the real capture telegraf-tesla-t4-515
  (a SIMULATED GPU; "" for none); node1 stays a plain GPU-less node;
- KUBEGPU_TESTBED_CONTAINERS: node3 can run containerd ("" for none);
- KUBEGPU_TESTBED_STATE: the state folder (default /run/kubegpu-testbed);
- KUBEGPU_TESTBED_PREFIX, KUBEGPU_TESTBED_BRIDGE, KUBEGPU_TESTBED_SUBNET: node name prefix
  (node), bridge (kgtb0) and subnet (10.213.0.0/24), so two sessions on one machine can each
  have a testbed. Node names in the two lists above use the prefix's numbering (node2 is the
  second node whatever the prefix).

Under pytest-xdist every worker is a session of its own, with its own testbeds and test cluster:
worker gw0 keeps the settings above, and worker gwN (N > 0) gets them moved by
`worker_environment` before any fixture reads them.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from kubegpu.testbed import TestbedConfig, TestbedState, down, load_state, up
from kubegpu.testbed.config import (
    DEFAULT_BRIDGE,
    DEFAULT_PREFIX,
    DEFAULT_STATE,
    DEFAULT_SUBNET,
    default_state_dir,
)


def worker_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The testbed settings pytest-xdist's worker gwN (N > 0) runs with, derived from the
    session's: bridge <bridge>wN, the subnet's second octet plus N, prefix wN<prefix> and state
    <state>-wN. The derived testbeds (numbers 1 to 9, the bootstrap's) follow, so no two workers
    share a bridge, a subnet, a node name or a state folder; test_testbed's own small testbeds
    take their subnet from these (their fixed bridge and names stay with that file's worker).
    Empty for gw0 and for a run without xdist."""
    found = re.fullmatch(r"gw(\d+)", environ.get("PYTEST_XDIST_WORKER", ""))
    n = int(found.group(1)) if found else 0
    if n == 0:
        return {}
    subnet = ipaddress.ip_network(environ.get("KUBEGPU_TESTBED_SUBNET", DEFAULT_SUBNET))
    octets = str(subnet.network_address).split(".")
    octets[1] = str((int(octets[1]) + n) % 256)
    state = environ.get("KUBEGPU_TESTBED_STATE") or str(DEFAULT_STATE)
    return {
        "KUBEGPU_TESTBED_BRIDGE": environ.get("KUBEGPU_TESTBED_BRIDGE", DEFAULT_BRIDGE) + f"w{n}",
        "KUBEGPU_TESTBED_SUBNET": ".".join(octets) + f"/{subnet.prefixlen}",
        "KUBEGPU_TESTBED_PREFIX": f"w{n}" + environ.get("KUBEGPU_TESTBED_PREFIX", DEFAULT_PREFIX),
        "KUBEGPU_TESTBED_STATE": f"{state}-w{n}",
    }


os.environ.update(worker_environment(os.environ))


def toolkit_purge_script(vendor_repo_url: str, packages: Iterable[str]) -> str:
    """Shell that takes NVIDIA's container toolkit off a node the session shares: every APT
    source of the testbed's repository (apt refuses one repository under two keyrings), every
    pin of libnvidia-container, and the packages, through dpkg itself (apt refuses names it does
    not know, on a node that never had them; the selection 'purge' lifts a hold first)."""
    names = " ".join(packages)
    return (
        f"grep -l -r -F '{vendor_repo_url}' /etc/apt/sources.list.d | xargs -r rm -f; "
        "grep -l -r -F libnvidia-container /etc/apt/preferences.d | xargs -r rm -f; "
        f"printf '%s purge\\n' {names} | dpkg --set-selections 2>/dev/null; "
        f"dpkg --purge {names} >/dev/null 2>&1"
    )


DEFAULT_SIMULATED = "node2=telegraf-tesla-t4-515"
DEFAULT_CONTAINERS = "node3"


def _pairs(text: str) -> tuple[tuple[str, str], ...]:
    return tuple(
        (name, capture)
        for name, _, capture in (item.partition("=") for item in text.split(",") if item)
    )


def testbed_config() -> TestbedConfig:
    nodes = int(os.environ.get("KUBEGPU_TESTBED_NODES", "3"))
    prefix = os.environ.get("KUBEGPU_TESTBED_PREFIX", "node")
    # "node2" in the lists means the second node, whatever the prefix.
    rename = {f"node{i}": f"{prefix}{i}" for i in range(1, nodes + 1)}
    simulate = os.environ.get("KUBEGPU_TESTBED_SIMULATE_GPU", DEFAULT_SIMULATED)
    containers = os.environ.get("KUBEGPU_TESTBED_CONTAINERS", DEFAULT_CONTAINERS)
    extra: dict[str, str] = {}
    if "KUBEGPU_TESTBED_BRIDGE" in os.environ:
        extra["bridge"] = os.environ["KUBEGPU_TESTBED_BRIDGE"]
    if "KUBEGPU_TESTBED_SUBNET" in os.environ:
        extra["subnet"] = os.environ["KUBEGPU_TESTBED_SUBNET"]
    return TestbedConfig(
        nodes=nodes,
        name_prefix=prefix,
        containers=tuple(rename[n] for n in containers.split(",") if n in rename),
        simulate_gpu=tuple((rename[n], c) for n, c in _pairs(simulate) if n in rename),
        **extra,  # type: ignore[arg-type]
    )


def derived_testbed_config(number: int, name: str, suite: str) -> TestbedConfig:
    """A one-node testbed beside the session's, which may be up in the same run: bridge
    <bridge><number>, subnet with the third octet times ten plus ``number`` (never the session's
    own), prefix <prefix><name>, state <state>-<name>; the node can run containers. Numbers
    taken: 1 and 2 the runtime suites', 3 the bootstrap's, 4 the NVML double's GPU node, 5 the
    SIMULATED MIG GPU's node, 6 the node GFD labels through NFD (test_cluster_gfd_labels), 7 and 8
    the DRA kubelet plugin's nodes (containerd 1.7 and 2.1, test_cluster_dra_kubelet), 9 the node
    of NVIDIA's DRA kubelet plugin on the NVML double (test_cluster_nvidia_dra)."""
    bridge = os.environ.get("KUBEGPU_TESTBED_BRIDGE", DEFAULT_BRIDGE) + str(number)
    base = ipaddress.ip_network(os.environ.get("KUBEGPU_TESTBED_SUBNET", DEFAULT_SUBNET))
    octets = str(base.network_address).split(".")
    third = int(octets[2]) * 10 + number
    if base.prefixlen != 24 or third > 255 or len(bridge) > 15:
        pytest.skip(
            f"cannot derive testbed {name} from bridge {bridge[: -len(str(number))]} and subnet "
            f"{base}: needs a /24 with a third octet of at most {(255 - number) // 10} and a "
            f"bridge name of at most {15 - len(str(number))} characters"
        )
    prefix = os.environ.get("KUBEGPU_TESTBED_PREFIX", DEFAULT_PREFIX) + name
    return TestbedConfig(
        nodes=1,
        name_prefix=prefix,
        subnet=".".join([*octets[:2], str(third), "0"]) + "/24",
        bridge=bridge,
        suite=suite,
        state_dir=Path(f"{default_state_dir()}-{name}"),
        containers=(f"{prefix}1",),
    )


# The SIMULATED MIG GPU (a stateful nvidia-smi replaying a real H100 PCIe capture).
MIG_CAPTURE = "scaleway-h100-pcie-525-mig"


@pytest.fixture(scope="session")
def mig_testbed() -> Iterator[TestbedState]:
    """One bookworm node whose GPU is the SIMULATED MIG GPU, in a testbed of its own beside the
    session's (whose GPUs are not MIG-capable): derived number 5."""
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (mounts, a bridge, systemd-nspawn)")
    derived = derived_testbed_config(5, "mig", "bookworm")
    config = dataclasses.replace(
        derived, containers=(), simulate_gpu=((f"{derived.name_prefix}1", MIG_CAPTURE),)
    )
    state = up(config)
    try:
        yield state
    finally:
        if os.environ.get("KUBEGPU_TESTBED_REUSE") != "1":
            down(config.state_dir)


@pytest.fixture(scope="session")
def testbed() -> Iterator[TestbedState]:
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (mounts, a bridge, systemd-nspawn)")
    config = testbed_config()
    reuse = os.environ.get("KUBEGPU_TESTBED_REUSE") == "1"
    if reuse:
        current = load_state(config.state_dir)
        if current is not None and current.running:
            yield current
            return
    state = up(config)
    try:
        yield state
    finally:
        if not reuse:
            down(config.state_dir)


@pytest.fixture(scope="session")
def ansible_bin() -> Path:
    """The folder of the ansible commands that belong to this Python environment."""
    import sys

    return Path(sys.executable).parent
