"""Start the test Kubernetes API server by hand: ``python -m tests.apiserver.run``.

Prints the kubeconfig path (and an ``export KUBECONFIG=...`` line), then serves until interrupted
(Ctrl-C or SIGTERM), stopping etcd and the server on the way out. The data lives in --workdir
(a fresh temporary folder by default, removed on exit unless --keep).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
from pathlib import Path

from tests.apiserver.fixture import APIServerError, default_workdir, start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="folder for etcd data, certificates, logs")
    parser.add_argument("--keep", action="store_true", help="keep --workdir on exit")
    args = parser.parse_args(argv)
    workdir = args.workdir or default_workdir()
    # SIGTERM ends the run like Ctrl-C does, also while starting (start() cleans up after itself).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started in the background
    try:
        server = start(workdir)
    except APIServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, SystemExit):
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        return 0
    print(f"kubeconfig: {server.kubeconfig}")
    print(f"url: {server.url} (Kubernetes {server.version}, allow-all, loopback only)")
    print(f"logs: {workdir / 'apiserver.log'} {workdir / 'etcd.log'}")
    print(f"export KUBECONFIG={server.kubeconfig}", flush=True)
    try:
        signal.pause()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        # A second signal must not cut the clean-up short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        server.stop()
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
