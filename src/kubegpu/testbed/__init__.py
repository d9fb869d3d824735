"""The kubegpu testbed: real Debian nodes (systemd-nspawn, systemd as PID 1) reached over SSH.

`up()` builds (or reuses) a cached base image, starts N nodes on a private bridge with an apt
proxy and a signed vendor repository of test doubles, and writes an Ansible inventory;
`down()` removes all of it; `status()` reports what is running. See DESIGN.md, "The testbed".
"""

from __future__ import annotations

from kubegpu.testbed.api import NodeState, TestbedState, down, load_state, status, up
from kubegpu.testbed.config import TestbedConfig
from kubegpu.testbed.errors import TestbedError, TestbedInputError

__all__ = [
    "NodeState",
    "TestbedConfig",
    "TestbedError",
    "TestbedInputError",
    "TestbedState",
    "down",
    "load_state",
    "status",
    "up",
]
