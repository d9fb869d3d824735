"""The molecule scenario of each node role, run as `molecule test -s <scenario>` (what a role
developer runs), bottom layer first: preflight, driver, toolkit, runtime, kubelet.

Each scenario converges its role on testbed nodes, converges again (molecule's idempotence
step fails on any change), and verifies the nodes' real state with testinfra
(molecule/<scenario>/tests). All five share one testbed of two nodes (.config/molecule/config.yml:
prefix mol, bridge kgmol0, 10.233.0.0/24, /run/kubegpu-molecule), apart from this suite's own:
KUBEGPU_MOLECULE_KEEP=1 makes each scenario's destroy leave it up for the next, and this module
takes it down before the first scenario (fresh nodes) and after the last. The wall time of each
scenario is recorded (record_property) and printed, never asserted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubegpu.testbed import down

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE_CONFIG = REPO_ROOT / ".config" / "molecule" / "config.yml"
SCENARIOS = ("preflight", "driver", "toolkit", "runtime", "kubelet")
# Steps whose success molecule must report: a verify that found no tests, or an idempotence
# step left out of the sequence, would not say "Executed: Successful".
REQUIRED_STEPS = ("create", "converge", "idempotence", "verify", "destroy")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def state_dir(env: dict[str, str]) -> Path:
    """The scenarios' state folder: the environment's, else the base config's default."""
    if env.get("KUBEGPU_MOLECULE_STATE"):
        return Path(env["KUBEGPU_MOLECULE_STATE"])
    found = re.search(r"\$\{KUBEGPU_MOLECULE_STATE:-([^}]+)\}", BASE_CONFIG.read_text())
    assert found, f"{BASE_CONFIG} gives no default for KUBEGPU_MOLECULE_STATE"
    return Path(found.group(1))


@pytest.fixture(scope="module")
def molecule_env() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("the testbed needs root (mounts, a bridge, systemd-nspawn)")
    bin_dir = str(Path(sys.executable).parent)
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ.get('PATH', '')}",
        KUBEGPU_MOLECULE_KEEP="1",
        NO_COLOR="1",
        PY_COLORS="0",
        ANSIBLE_FORCE_COLOR="0",
    )
    state = state_dir(env)
    down(state)  # a testbed left by an interrupted run: start on fresh nodes
    try:
        yield env
    finally:
        down(state)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(molecule_env: dict[str, str], scenario: str, record_property) -> None:
    started = time.monotonic()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "molecule"), "test", "-s", scenario],
        cwd=REPO_ROOT,
        env=molecule_env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    seconds = time.monotonic() - started
    record_property("seconds", round(seconds, 1))
    print(f"\nmolecule test -s {scenario}: rc {proc.returncode}, {seconds:.1f} s")
    output = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, output[-6000:]
    for step in REQUIRED_STEPS:
        # "[driver > verify] Executed: Successful" (plain), "driver ➜ verify: Executed: ..."
        done = rf"(\[{scenario} > {step}\]|{scenario} ➜ {step}:) Executed: Successful"
        assert re.search(done, output), (step, output[-3000:])
