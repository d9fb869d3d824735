"""The README's first command: bootstrap a local testbed and print its readiness report.

Brings up (or reuses) three testbed nodes, all able to run containerd, node2 with a SIMULATED
GPU replaying a real nvidia-smi capture. Runs site.yml on them through the API, prints the
summary and the readiness report, and leaves the nodes up.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kubegpu import api, report
from kubegpu.content import find_content
from kubegpu.progress import Progress
from kubegpu.result import RunResult
from kubegpu.testbed import api as testbed
from kubegpu.testbed.config import TestbedConfig, default_cache_dir, default_state_dir

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

    state_dir = default_state_dir()
    state = testbed.status(state_dir)
    if state is None or not state.running:
        config = TestbedConfig(
            nodes=3,
            cache_dir=default_cache_dir(),
            state_dir=state_dir,
            containers=("node1", "node2", "node3"),
            simulate_gpu=(("node2", args.capture),),
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
    print(
        "\nThe nodes are left up: `kubegpu testbed ssh node2` to look around, "
        "`kubegpu testbed down` to remove them."
    )
    if result.ok:
        return 0
    if only_readiness_failed(result):
        print(
            "Every layer was installed and configured; the readiness checks report what a node "
            "without a GPU and without a kubelet really lacks (node2's GPU is simulated)."
        )
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
