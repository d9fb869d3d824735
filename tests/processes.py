"""What the test control plane (tests/cluster) and the other test services use: child processes
that die with the test run, free loopback ports, logs' tails, and serving by hand until
interrupted."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Run in the child before exec: the kernel sends it ``sig`` when its parent dies.

    So a test run that is killed (timeout, SIGKILL) leaves no child behind. It is tied to the
    thread that started the child: start children from a thread that outlives them.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        found.setdefault(ppid, []).append(int(entry.name))
    return found


def kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and every process descended from it, also those in a session of their
    own (ansible-playbook's workers start one, so a kill of the process group misses them): a
    controller killed whole. Stopped first, level by level, so that none forks or is orphaned
    on the way. Returns the PIDs."""
    tree: list[int] = []
    todo = [pid]
    while todo:
        for member in todo:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, signal.SIGSTOP)
        tree += todo
        children = _children()
        todo = [c for member in todo for c in children.get(member, []) if c not in tree]
    for member in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, signal.SIGKILL)
    return tree


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    """Poll ``probe`` until it returns something true; that value, or AssertionError naming
    ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s")


def serve_by_hand(
    doc: str,
    prefix: str,
    start: Callable[[Path], Any],
    error: type[Exception],
    describe: Callable[[Any, Path], list[str]],
    argv: list[str] | None = None,
) -> int:
    """``python -m ...run``: start, print ``describe``'s lines, serve until Ctrl-C or SIGTERM.

    The data lives in --workdir (a fresh temporary folder by default, removed on exit unless
    --keep); ``start(workdir)`` returns something with ``.stop()``.
    """
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="folder for etcd data, certificates, logs")
    parser.add_argument("--keep", action="store_true", help="keep --workdir on exit")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=prefix))
    # SIGTERM ends the run like Ctrl-C does, also while starting (start cleans up after itself).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started in the background
    try:
        running = start(workdir)
    except error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, SystemExit):
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        return 0
    print("\n".join(describe(running, workdir)), flush=True)
    try:
        signal.pause()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        # A second signal must not cut the clean-up short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        running.stop()
        if not args.keep and args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0
