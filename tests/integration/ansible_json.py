"""Run one of this environment's ansible commands from the repository, with kubegpu's
ansible.cfg: the one place the integration tests start ansible and ansible-playbook, and read
their ansible.posix.json report."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
_vars_files = itertools.count()


def environment(json_report: bool = False, **extra: str) -> dict[str, str]:
    """The environment of a run: kubegpu's ansible.cfg, no colour, and with json_report the
    ansible.posix.json stdout callback; extra on top."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    if json_report:
        env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.posix.json"
    env.update(extra)
    return env


def playbook(
    path: str | Path,
    *args: str,
    extra_vars: Mapping[str, Any] | None = None,
    vars_dir: Path | None = None,
    json_report: bool = False,
    env: Mapping[str, str] | None = None,
    timeout: int = 600,
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook PATH ARGS... from the repository (PATH relative to it), extra_vars
    passed as a JSON file written to vars_dir (each run its own file)."""
    argv = [str(BIN / "ansible-playbook"), str(REPO / path), *args]
    if extra_vars is not None:
        if vars_dir is None:
            raise ValueError("extra_vars needs vars_dir, the folder its file is written to")
        vars_file = vars_dir / f"extra-vars-{next(_vars_files)}.json"
        vars_file.write_text(json.dumps(dict(extra_vars)))
        argv += ["-e", f"@{vars_file}"]
    return subprocess.run(
        argv,
        cwd=REPO,
        env=environment(json_report, **(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def report(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The ansible.posix.json report a run printed (after any warning lines before it)."""
    try:
        parsed: dict[str, Any] = json.loads(proc.stdout[proc.stdout.index("{") :])
    except ValueError:
        pytest.fail(
            f"no JSON from ansible (rc {proc.returncode}):\n{proc.stdout[-5000:]}\n"
            f"{proc.stderr[-5000:]}"
        )
    return parsed


def run(
    tool: str, args: Sequence[str], extra_env: Mapping[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """`tool` (ansible, ansible-playbook) with `args`: its exit code and its JSON report. Facts
    stay in memory (ANSIBLE_CACHE_PLUGIN=memory); extra_env comes on top."""
    env = environment(
        True, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_CACHE_PLUGIN="memory", **(extra_env or {})
    )
    proc = subprocess.run(
        [str(BIN / tool), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.returncode, report(proc)
