"""Start the test cluster's control plane by hand: ``python -m tests.cluster.run``.

Prints the administrator's kubeconfig (and an ``export KUBECONFIG=...`` line), then serves until
interrupted (Ctrl-C or SIGTERM), stopping every process on the way out. The data lives in
--workdir (a fresh temporary folder by default, removed on exit unless --keep).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.cluster.controlplane import ClusterError, start
from tests.processes import serve_by_hand


def describe(cluster: Any, workdir: Path) -> list[str]:
    return [
        f"kubeconfig: {cluster.kubeconfig}",
        f"url: {cluster.url} (Kubernetes {cluster.version}, loopback only)",
        f"logs: {workdir}/*.log",
        f"export KUBECONFIG={cluster.kubeconfig}",
    ]


if __name__ == "__main__":
    sys.exit(serve_by_hand(__doc__, "kubegpu-cluster-", start, ClusterError, describe))
