"""Run one of this environment's ansible commands on the testbed, from the repository and with
kubegpu's ansible.cfg, and read its ansible.posix.json report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(
    tool: str, args: Sequence[str], extra_env: Mapping[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """`tool` (ansible, ansible-playbook) with `args`: its exit code and its JSON report. Facts
    stay in memory (ANSIBLE_CACHE_PLUGIN=memory); extra_env comes on top."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_CACHE_PLUGIN="memory",
        **(extra_env or {}),
    )
    proc = subprocess.run(
        [str(Path(sys.executable).parent / tool), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    try:
        report: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"no JSON from {tool}: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    return proc.returncode, report
