"""Start the test Kubernetes API server by hand: ``python -m tests.apiserver.run``.

Prints the kubeconfig path (and an ``export KUBECONFIG=...`` line), then serves until interrupted
(Ctrl-C or SIGTERM), stopping etcd and the server on the way out. The data lives in --workdir
(a fresh temporary folder by default, removed on exit unless --keep).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.apiserver.fixture import APIServerError, start
from tests.processes import serve_by_hand


def describe(server: Any, workdir: Path) -> list[str]:
    return [
        f"kubeconfig: {server.kubeconfig}",
        f"url: {server.url} (Kubernetes {server.version}, allow-all, loopback only)",
        f"logs: {workdir / 'apiserver.log'} {workdir / 'etcd.log'}",
        f"export KUBECONFIG={server.kubeconfig}",
    ]


if __name__ == "__main__":
    sys.exit(serve_by_hand(__doc__, "kubegpu-apiserver-", start, APIServerError, describe))
