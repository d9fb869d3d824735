"""The README's first command: bootstrap a local testbed and print its readiness report.

Brings up (or reuses) three testbed nodes, all able to run containerd, demo2 with a SIMULATED
GPU replaying a real nvidia-smi capture. Runs site.yml on them through the API, prints the
summary and the readiness report, and leaves the nodes up.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kubegpu import api, report
from kubegpu.cli import exit_code, write_reports
from kubegpu.content import find_content
from kubegpu.progress import Progress
from kubegpu.result import RunResult
from kubegpu.testbed import api as testbed
from kubegpu.testbed.config import TestbedConfig, default_cache_dir

# The demo's own testbed, apart from the one the tests bring up (the default state folder,
# bridge, subnet, ports and node names: nspawn names each node's host-side veth after it), so
# that `scripts/demo` then `scripts/test` never collide.
DEMO_PREFIX = "demo"
DEMO_STATE = Path("/run/kubegpu-demo")
DEMO_BRIDGE = "kgdemo0"
DEMO_SUBNET = "10.214.0.0/24"
DEMO_PROXY_PORT = 3143
DEMO_REPO_PORT = 8232

VALIDATE_TASK = "Fail the node when a check failed"


def only_readiness_failed(result: RunResult) -> bool:
    """True when the run got through every layer and only the readiness verdict failed."""
    return (
        not result.unreachable
        and bool(result.readiness)
        and all(f.task == VALIDATE_TASK for f in result.failed)
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/demo", description=__doc__)
    parser.add_argument("--capture", default="telegraf-tesla-t4-515", help="simulated GPU capture")
    parser.add_argument("--check", action="store_true", help="run site.yml in check mode")
    args = parser.parse_args(argv)

    state_dir = Path(os.environ.get("KUBEGPU_DEMO_STATE") or DEMO_STATE)
    state = testbed.status(state_dir)
    if state is None or not state.running:
        config = TestbedConfig(
            nodes=3,
            cache_dir=default_cache_dir(),
            state_dir=state_dir,
            bridge=DEMO_BRIDGE,
            subnet=DEMO_SUBNET,
            proxy_port=DEMO_PROXY_PORT,
            repo_port=DEMO_REPO_PORT,
            name_prefix=DEMO_PREFIX,
            containers=(f"{DEMO_PREFIX}1", f"{DEMO_PREFIX}2", f"{DEMO_PREFIX}3"),
            simulate_gpu=((f"{DEMO_PREFIX}2", args.capture),),
        )
        state = testbed.up(config, progress=lambda m: print(f"testbed: {m}", file=sys.stderr))
    print(f"testbed: nodes {', '.join(state.node_names)} up; inventory {state.inventory}")

    overlay = find_content().root / "inventories" / "testbed"
    result = api.bootstrap(
        [state.inventory, overlay],
        check=args.check,
        on_event=Progress(sys.stderr, live=sys.stderr.isatty()),
    )
    print(report.summary_table(result))
    print()
    print(report.readiness_table(result.readiness, verbose=True))
    page, markdown = state_dir / "report.html", state_dir / "report.md"
    write_reports(result, html=str(page), markdown=str(markdown))
    print(f"\nThe report to share: {page} (one HTML page) and {markdown}.")
    where = f"--state-dir {state_dir}"
    print(
        f"\nThe nodes are left up. Check them again: `.venv/bin/kubegpu check -i "
        f"{state.inventory}`; look around: `.venv/bin/kubegpu testbed ssh {where} {DEMO_PREFIX}2`; "
        f"remove them: `.venv/bin/kubegpu testbed down {where}`."
    )
    code = exit_code(result)
    if only_readiness_failed(result):
        print(
            "Every layer was installed and configured. The nodes are not ready, as expected on "
            f"this machine: no node has a real GPU ({DEMO_PREFIX}2's is SIMULATED) and none runs a "
            f"kubelet, and the report says what each lacks. Exit code {code}, as "
            "`kubegpu bootstrap` gives for nodes that are not ready."
        )
    return code


if __name__ == "__main__":
    sys.exit(main())
