"""`kubegpu testbed up|down|status|ssh`: thin rendering of kubegpu.testbed's API."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from kubegpu.testbed import api
from kubegpu.testbed.config import (
    DEFAULT_BRIDGE,
    DEFAULT_NODES,
    DEFAULT_PREFIX,
    DEFAULT_PROXY_PORT,
    DEFAULT_REPO_PORT,
    DEFAULT_SUBNET,
    TestbedConfig,
    default_cache_dir,
    default_state_dir,
)
from kubegpu.testbed.errors import TestbedError, TestbedInputError

EXIT_OK = 0
EXIT_FAILED = 2
EXIT_NOT_UP = 3
EXIT_BAD_INPUT = 4


def _split(values: list[str] | None) -> list[str]:
    return [item for value in values or [] for item in value.split(",") if item]


def _simulate_pairs(values: list[str] | None) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in _split(values):
        name, sep, capture = item.partition("=")
        if not sep or not name or not capture:
            raise TestbedInputError("--simulate-gpu", f"{item!r} is not NODE=CAPTURE", "NODE=FILE")
        pairs.append((name, capture))
    return tuple(pairs)


def _state_dir(args: argparse.Namespace) -> Path:
    return Path(args.state_dir) if args.state_dir else default_state_dir()


def cmd_up(args: argparse.Namespace) -> int:
    config = TestbedConfig(
        nodes=args.nodes,
        name_prefix=args.name_prefix,
        subnet=args.subnet,
        bridge=args.bridge,
        suite=args.suite,
        cache_dir=Path(args.cache_dir) if args.cache_dir else default_cache_dir(),
        state_dir=_state_dir(args),
        containers=tuple(_split(args.containers)),
        simulate_gpu=_simulate_pairs(args.simulate_gpu),
        proxy_port=args.proxy_port,
        repo_port=args.repo_port,
        mirror=args.mirror or os.environ.get("KUBEGPU_TESTBED_MIRROR") or None,
    )
    state = api.up(config, progress=lambda msg: print(f"testbed: {msg}", file=sys.stderr))
    _print_state(state)
    return EXIT_OK


def cmd_down(args: argparse.Namespace) -> int:
    report = api.down(_state_dir(args))
    if report.remaining:
        print("testbed down left: " + ", ".join(report.remaining), file=sys.stderr)
        return EXIT_FAILED
    if not report.found:
        print(f"no testbed in {report.state_dir}: nothing to take down")
        return EXIT_OK
    extra = f"; killed {len(report.killed)} process(es)" if report.killed else ""
    print(f"testbed in {report.state_dir} is down ({report.seconds} s{extra})")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    state = api.status(_state_dir(args))
    if state is None:
        print(f"no testbed in {_state_dir(args)}")
        return EXIT_NOT_UP
    if args.json:
        import json

        print(json.dumps(_as_dict(state), indent=2))
    else:
        _print_state(state)
    return EXIT_OK if state.running else EXIT_NOT_UP


def cmd_ssh(args: argparse.Namespace) -> int:
    state = api.status(_state_dir(args))
    if state is None:
        print(f"no testbed in {_state_dir(args)}", file=sys.stderr)
        return EXIT_NOT_UP
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    argv = state.ssh_argv(args.node, *command)
    if sys.stdin.isatty() and not command:
        argv.insert(1, "-t")
    os.execvp(argv[0], argv)
    return EXIT_FAILED  # not reached


def _as_dict(state: api.TestbedState) -> dict[str, Any]:
    return {
        "state_dir": str(state.state_dir),
        "phase": state.phase,
        "running": state.running,
        "bridge": state.bridge,
        "bridge_address": state.bridge_address,
        "inventory": str(state.inventory),
        "ssh_key": str(state.ssh_key),
        "known_hosts": str(state.known_hosts),
        "apt_proxy_url": state.apt_proxy_url,
        "vendor_repo_url": state.vendor_repo_url,
        "vendor_repo_key": str(state.vendor_repo_key),
        "services": state.services,
        "timings": state.timings,
        "nodes": [
            {
                "name": n.name,
                "address": n.address,
                "running": n.running,
                "containers": n.containers,
                "simulated_gpu": n.simulated_gpu,
                "launcher_pid": n.launcher_pid,
                "nspawn_pid": n.nspawn_pid,
                "boot_seconds": n.boot_seconds,
            }
            for n in state.nodes
        ],
    }


def _print_state(state: api.TestbedState) -> None:
    print(
        f"testbed {state.state_dir}: {state.phase}, bridge {state.bridge} ({state.bridge_address})"
    )
    for node in state.nodes:
        extras = [
            x
            for x, on in (("containers", node.containers), ("simulated GPU", node.simulated_gpu))
            if on
        ]
        mode = f" [{', '.join(extras)}]" if extras else ""
        running = "running" if node.running else "stopped"
        print(f"  {node.name:<12} {node.address:<15} {running}{mode}")
    for name, pid in state.services.items():
        print(f"  service {name}: {'running, pid ' + str(pid) if pid else 'stopped'}")
    print(f"inventory: {state.inventory}")
    print(f"vendor repo: {state.vendor_repo_url} (key {state.vendor_repo_key})")
    print(f"check the nodes: kubegpu check -i {state.inventory}")


def _add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        help="where the testbed keeps its state (default: $KUBEGPU_TESTBED_STATE or "
        "/run/kubegpu-testbed)",
    )


def register(subparsers: Any) -> None:
    """Add `testbed` and its subcommands to a parent parser's subparsers."""
    testbed = subparsers.add_parser(
        "testbed", help="local Debian test nodes (systemd-nspawn) reached over SSH"
    )
    sub = testbed.add_subparsers(dest="testbed_command", required=True)

    up = sub.add_parser("up", help="build the base image if needed and boot the nodes")
    up.add_argument("-n", "--nodes", type=int, default=DEFAULT_NODES, help="how many nodes")
    up.add_argument("--name-prefix", default=DEFAULT_PREFIX, help="nodes are PREFIX1..PREFIXn")
    up.add_argument("--subnet", default=DEFAULT_SUBNET, help="private IPv4 subnet of the bridge")
    up.add_argument("--bridge", default=DEFAULT_BRIDGE, help="name of the bridge to create")
    up.add_argument("--suite", default="bookworm", choices=("bookworm", "trixie"))
    up.add_argument("--cache-dir", help="base image cache ($KUBEGPU_TESTBED_CACHE)")
    up.add_argument(
        "--containers",
        action="append",
        metavar="NODE[,NODE]",
        help="nodes that must be able to run containerd",
    )
    up.add_argument(
        "--simulate-gpu",
        action="append",
        metavar="NODE=CAPTURE",
        help="give NODE a simulated GPU replaying a real nvidia-smi capture",
    )
    up.add_argument("--proxy-port", type=int, default=DEFAULT_PROXY_PORT)
    up.add_argument("--repo-port", type=int, default=DEFAULT_REPO_PORT)
    up.add_argument("--mirror", help="Debian archive URL (default: this host's apt sources)")
    _add_state_dir(up)
    up.set_defaults(func=_guarded(cmd_up))

    down = sub.add_parser("down", help="stop the nodes and remove everything the testbed made")
    _add_state_dir(down)
    down.set_defaults(func=_guarded(cmd_down))

    st = sub.add_parser("status", help="show the nodes and whether they run")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    _add_state_dir(st)
    st.set_defaults(func=_guarded(cmd_status))

    ssh = sub.add_parser("ssh", help="open a shell on a node, or run a command there")
    ssh.add_argument("node")
    ssh.add_argument("command", nargs=argparse.REMAINDER)
    _add_state_dir(ssh)
    ssh.set_defaults(func=_guarded(cmd_ssh))


def _guarded(func: Any) -> Any:
    def wrapper(args: argparse.Namespace) -> int:
        try:
            code: int = func(args)
        except TestbedInputError as exc:
            print(f"kubegpu testbed: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except TestbedError as exc:
            print(f"kubegpu testbed: {exc}", file=sys.stderr)
            return EXIT_FAILED
        return code

    return wrapper


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubegpu.testbed")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["testbed", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code
