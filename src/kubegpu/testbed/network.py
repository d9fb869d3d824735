"""The private bridge the nodes live on, and the addresses handed out on it.

Nothing is routed anywhere else: the host does not forward packets that arrive on the bridge,
and nodes reach Debian's mirror only through the apt proxy bound to the bridge address.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import Path

from kubegpu.testbed._proc import run
from kubegpu.testbed.errors import TestbedInputError

IFNAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")
PRIVATE_NETS = tuple(
    ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)


@dataclass(frozen=True)
class Addressing:
    """The bridge address (first host) and one address per node (the hosts after it)."""

    network: ipaddress.IPv4Network
    bridge: ipaddress.IPv4Address
    nodes: tuple[ipaddress.IPv4Address, ...]

    @property
    def prefixlen(self) -> int:
        return self.network.prefixlen


def parse_subnet(subnet: str) -> ipaddress.IPv4Network:
    try:
        network = ipaddress.ip_network(subnet, strict=True)
    except ValueError as exc:
        raise TestbedInputError(
            "subnet", f"{subnet!r} is not an IPv4 network ({exc})", "e.g. 10.213.0.0/24"
        ) from None
    if not isinstance(network, ipaddress.IPv4Network):
        raise TestbedInputError("subnet", f"{subnet} is not IPv4", "an IPv4 private network")
    if not any(network.subnet_of(p) for p in PRIVATE_NETS):
        raise TestbedInputError(
            "subnet", f"{subnet} is not a private range", "inside 10/8, 172.16/12 or 192.168/16"
        )
    if network.prefixlen > 29:
        raise TestbedInputError("subnet", f"{subnet} is too small", "a prefix of /29 or shorter")
    return network


def plan_addresses(subnet: str, count: int) -> Addressing:
    """Bridge on the first host address, nodes on the following ones."""
    network = parse_subnet(subnet)
    usable = network.num_addresses - 3  # network, broadcast and the bridge itself
    if count < 1:
        raise TestbedInputError("nodes", f"{count} nodes asked for", "at least 1")
    if count > usable:
        raise TestbedInputError(
            "nodes", f"{count} nodes do not fit in {subnet}", f"at most {usable} in this subnet"
        )
    first = network.network_address + 1
    return Addressing(
        network=network,
        bridge=first,
        nodes=tuple(first + i for i in range(1, count + 1)),
    )


def check_ifname(name: str, variable: str = "bridge") -> None:
    if not IFNAME_RE.match(name):
        raise TestbedInputError(
            variable,
            f"{name!r} is not a valid interface name",
            "1 to 15 characters: letters, digits, '_', '.', '-'",
        )


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def host_networks() -> list[tuple[str, ipaddress.IPv4Network]]:
    """(interface, network) for every IPv4 address configured on this host."""
    proc = run(["ip", "-j", "-4", "addr", "show"], what="listing host addresses")
    result = []
    for link in json.loads(proc.stdout or "[]"):
        for info in link.get("addr_info", []):
            net = ipaddress.ip_network(f"{info['local']}/{info['prefixlen']}", strict=False)
            if isinstance(net, ipaddress.IPv4Network):
                result.append((link["ifname"], net))
    return result


def check_subnet_free(network: ipaddress.IPv4Network, own_bridge: str) -> None:
    """The subnet must not overlap an address the host already has (except on our bridge)."""
    for ifname, net in host_networks():
        if ifname != own_bridge and net.overlaps(network):
            raise TestbedInputError(
                "subnet",
                f"{network} overlaps {net} already configured on {ifname}",
                "a private subnet this host does not use",
            )


def create_bridge(name: str, addressing: Addressing) -> None:
    """Create the bridge with its address; packets arriving on it are never forwarded."""
    run(["ip", "link", "add", name, "type", "bridge"], what=f"creating bridge {name}")
    _sysctl(f"net/ipv6/conf/{name}/disable_ipv6", "1")
    _sysctl(f"net/ipv4/conf/{name}/forwarding", "0")
    run(
        ["ip", "addr", "add", f"{addressing.bridge}/{addressing.prefixlen}", "dev", name],
        what=f"addressing bridge {name}",
    )
    run(["ip", "link", "set", name, "up"], what=f"bringing bridge {name} up")


def delete_link(name: str) -> None:
    if link_exists(name):
        run(["ip", "link", "delete", name], what=f"deleting {name}", check=False)


def _sysctl(key: str, value: str) -> None:
    path = Path("/proc/sys", key)
    if path.exists():
        path.write_text(value)
