"""kubegpu: turn GPU servers into GPU-ready Kubernetes nodes, and prove each node ready."""

from __future__ import annotations

from kubegpu.api import bootstrap, check, reset, upgrade_driver
from kubegpu.errors import InputError
from kubegpu.events import Event
from kubegpu.result import HostFailure, HostStats, RunResult

__version__ = "0.1.0"

__all__ = [
    "Event",
    "HostFailure",
    "HostStats",
    "InputError",
    "RunResult",
    "__version__",
    "bootstrap",
    "check",
    "reset",
    "upgrade_driver",
]
