"""What a testbed is made of (TestbedConfig), and the checks run before anything is created."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubegpu.testbed._proc import which
from kubegpu.testbed.errors import TestbedInputError
from kubegpu.testbed.image import SUITES
from kubegpu.testbed.network import Addressing, check_ifname, plan_addresses

DEFAULT_CACHE = Path("/var/cache/kubegpu/testbed")
DEFAULT_STATE = Path("/run/kubegpu-testbed")
DEFAULT_SUBNET = "10.213.0.0/24"
DEFAULT_BRIDGE = "kgtb0"
DEFAULT_NODES = 3
DEFAULT_PREFIX = "node"
DEFAULT_PROXY_PORT = 3142
DEFAULT_REPO_PORT = 8231

NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,22}[a-z0-9])?$")

# Host tools the testbed calls, and the Debian package that brings each.
TOOLS = {
    "systemd-nspawn": "systemd-container",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "apt-cacher-ng": "apt-cacher-ng",
    "gpg": "gnupg",
    "gpgconf": "gnupg",
    "dpkg-deb": "dpkg",
    "mount": "mount",
    "mkfs.ext4": "e2fsprogs",
}


def default_cache_dir() -> Path:
    return Path(os.environ.get("KUBEGPU_TESTBED_CACHE") or DEFAULT_CACHE)


def default_state_dir() -> Path:
    return Path(os.environ.get("KUBEGPU_TESTBED_STATE") or DEFAULT_STATE)


@dataclass(frozen=True)
class TestbedConfig:
    """One testbed: N Debian nodes on a private bridge, with an apt proxy and a vendor repo.

    `containers` names the nodes that get the extra settings containerd and kubelet need
    (writable v1 cgroup controllers, an ext4 /var/lib/containerd, /dev/kmsg with CAP_SYSLOG, the
    node's own copies of the host-global sysctls kubelet sets: nodes.FAKED_SYSCTLS);
    `simulate_gpu` maps node names to a real nvidia-smi capture that the node
    replays as a simulated GPU.
    """

    __test__ = False

    nodes: int = DEFAULT_NODES
    name_prefix: str = DEFAULT_PREFIX
    subnet: str = DEFAULT_SUBNET
    bridge: str = DEFAULT_BRIDGE
    suite: str = "bookworm"
    cache_dir: Path = field(default_factory=default_cache_dir)
    state_dir: Path = field(default_factory=default_state_dir)
    containers: tuple[str, ...] = ()
    simulate_gpu: tuple[tuple[str, str], ...] = ()
    proxy_port: int = DEFAULT_PROXY_PORT
    repo_port: int = DEFAULT_REPO_PORT
    mirror: str | None = None

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(f"{self.name_prefix}{i}" for i in range(1, self.nodes + 1))

    def to_dict(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "name_prefix": self.name_prefix,
            "subnet": self.subnet,
            "bridge": self.bridge,
            "suite": self.suite,
            "cache_dir": str(self.cache_dir),
            "state_dir": str(self.state_dir),
            "containers": list(self.containers),
            "simulate_gpu": [list(p) for p in self.simulate_gpu],
            "proxy_port": self.proxy_port,
            "repo_port": self.repo_port,
            "mirror": self.mirror,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TestbedConfig:
        return cls(
            nodes=int(data["nodes"]),
            name_prefix=str(data["name_prefix"]),
            subnet=str(data["subnet"]),
            bridge=str(data["bridge"]),
            suite=str(data["suite"]),
            cache_dir=Path(data["cache_dir"]),
            state_dir=Path(data["state_dir"]),
            containers=tuple(data.get("containers", ())),
            simulate_gpu=tuple((str(a), str(b)) for a, b in data.get("simulate_gpu", ())),
            proxy_port=int(data.get("proxy_port", DEFAULT_PROXY_PORT)),
            repo_port=int(data.get("repo_port", DEFAULT_REPO_PORT)),
            mirror=data.get("mirror"),
        )


def validate(config: TestbedConfig) -> Addressing:
    """Check the configuration itself (no host access); return the address plan."""
    if not isinstance(config.nodes, int) or isinstance(config.nodes, bool):
        raise TestbedInputError("nodes", f"{config.nodes!r} is not a whole number", "1 or more")
    if not re.match(r"^[a-z][a-z0-9-]{0,15}$", config.name_prefix):
        raise TestbedInputError(
            "name_prefix",
            f"{config.name_prefix!r} cannot start a host name",
            "1-16 of a-z, 0-9, '-', starting with a letter",
        )
    for name in config.node_names:
        if not NAME_RE.match(name):
            raise TestbedInputError("name_prefix", f"node name {name!r} is too long", "24 chars")
    check_ifname(config.bridge, "bridge")
    if config.suite not in SUITES:
        raise TestbedInputError("suite", f"{config.suite!r} is not supported", ", ".join(SUITES))
    names = set(config.node_names)
    for name in config.containers:
        if name not in names:
            raise TestbedInputError(
                "containers", f"{name!r} is not a node of this testbed", ", ".join(sorted(names))
            )
    seen: set[str] = set()
    for name, capture in config.simulate_gpu:
        if name not in names:
            raise TestbedInputError(
                "simulate_gpu", f"{name!r} is not a node of this testbed", ", ".join(sorted(names))
            )
        if name in seen:
            raise TestbedInputError("simulate_gpu", f"{name} is given twice", "one capture a node")
        seen.add(name)
        if not capture:
            raise TestbedInputError(
                "simulate_gpu", f"no capture given for {name}", "a capture name or XML file"
            )
    for variable, port in (("proxy_port", config.proxy_port), ("repo_port", config.repo_port)):
        if not 1024 <= port <= 65535:
            raise TestbedInputError(variable, f"{port} is out of range", "1024-65535")
    if config.proxy_port == config.repo_port:
        raise TestbedInputError("repo_port", "equals proxy_port", "two different ports")
    for variable, path in (("cache_dir", config.cache_dir), ("state_dir", config.state_dir)):
        if not path.is_absolute():
            raise TestbedInputError(variable, f"{path} is not absolute", "an absolute path")
    return plan_addresses(config.subnet, config.nodes)


def check_host(need_debootstrap: bool) -> None:
    """The host must let us do this: root, and every tool present (before touching anything)."""
    if os.geteuid() != 0:
        raise TestbedInputError(
            "user", "the testbed needs root (mounts, bridges, systemd-nspawn)", "run as root"
        )
    tools = dict(TOOLS)
    if need_debootstrap:
        tools["debootstrap"] = "debootstrap"
    missing = [f"{tool} (package {pkg})" for tool, pkg in tools.items() if which(tool) is None]
    if missing:
        raise TestbedInputError(
            "host tools", "missing " + ", ".join(missing), "apt-get install them"
        )
