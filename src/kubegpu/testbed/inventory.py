"""The Ansible inventory and known_hosts file the testbed writes for its nodes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from kubegpu.testbed._proc import write_file


def ssh_common_args(known_hosts: Path) -> str:
    # Host key checking stays on: the testbed made the host keys, so it knows them.
    return (
        f"-o UserKnownHostsFile={known_hosts} -o GlobalKnownHostsFile=/dev/null "
        "-o StrictHostKeyChecking=yes -o IdentitiesOnly=yes"
    )


def write_known_hosts(path: Path, entries: Sequence[tuple[str, str, str]]) -> None:
    """entries: (name, address, public host key 'type base64 [comment]')."""
    lines = []
    for name, address, pubkey in entries:
        keytype, key = pubkey.split()[:2]
        lines.append(f"{address},{name} {keytype} {key}\n")
    write_file(path, "".join(lines), 0o644)


def inventory_data(
    nodes: Sequence[dict[str, Any]],
    *,
    key: Path,
    known_hosts: Path,
    group_vars: dict[str, Any],
) -> dict[str, Any]:
    """nodes: dicts with name, address, and optional host vars under 'vars'."""
    hosts = {n["name"]: {"ansible_host": n["address"], **n.get("vars", {})} for n in nodes}
    first = nodes[0]["name"] if nodes else None
    return {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(key),
                "ansible_ssh_common_args": ssh_common_args(known_hosts),
                "ansible_python_interpreter": "/usr/bin/python3",
                **group_vars,
            },
            "children": {
                "k8s_cluster": {
                    "children": {
                        "kube_control_plane": {"hosts": {first: None} if first else {}},
                        "gpu_nodes": {"hosts": hosts},
                    }
                }
            },
        }
    }


def write_inventory(path: Path, data: dict[str, Any]) -> None:
    header = (
        "# Written by the kubegpu testbed (`kubegpu testbed up`); removed by `down`.\n"
        "# Nodes are systemd-nspawn containers on a private bridge; see DESIGN.md.\n"
    )
    write_file(path, header + yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
