"""What a run returns: overall status, per-host stats, failures, and the readiness report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class HostStats:
    ok: int = 0
    changed: int = 0
    failures: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass(frozen=True)
class HostFailure:
    """The task that failed (or found the host unreachable), and what it said."""

    host: str
    task: str
    message: str


@dataclass(frozen=True)
class RunResult:
    """The outcome of one playbook run through the API."""

    playbook: str
    status: str  # ansible-runner's status: successful, failed, canceled, timeout
    rc: int
    hosts: dict[str, HostStats] = field(default_factory=dict)
    failed: list[HostFailure] = field(default_factory=list)
    unreachable: list[HostFailure] = field(default_factory=list)
    readiness: dict[str, Any] = field(default_factory=dict)
    cluster_readiness: dict[str, Any] = field(default_factory=dict)
    # Bad input found on the controller before any host was contacted, one line per problem.
    input_problems: list[str] = field(default_factory=list)
    # Layers the run left out, and why (no kubeconfig, nothing to do).
    skipped_layers: dict[str, str] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    artifacts_dir: Path | None = None

    @property
    def ok(self) -> bool:
        return self.status == "successful" and not self.failed and not self.unreachable

    @property
    def failed_hosts(self) -> list[str]:
        return sorted({f.host for f in self.failed})

    @property
    def unreachable_hosts(self) -> list[str]:
        return sorted({f.host for f in self.unreachable})

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "playbook": self.playbook,
            "status": self.status,
            "rc": self.rc,
            "ok": self.ok,
            "hosts": {name: vars(stats) for name, stats in self.hosts.items()},
            "failed": [vars(f) for f in self.failed],
            "unreachable": [vars(f) for f in self.unreachable],
            "readiness": self.readiness,
            "cluster_readiness": self.cluster_readiness,
            "input_problems": self.input_problems,
            "skipped_layers": self.skipped_layers,
        }
