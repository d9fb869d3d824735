"""The `kubegpu` command: a thin layer that renders API results and maps them to exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from kubegpu import __version__, api, report
from kubegpu.errors import InputError
from kubegpu.progress import Progress
from kubegpu.result import RunResult

EXIT_OK = 0
EXIT_FAILED = 2
EXIT_UNREACHABLE = 3
EXIT_BAD_INPUT = 4


def exit_code(result: RunResult) -> int:
    if result.input_problems:
        return EXIT_BAD_INPUT
    if result.unreachable:
        return EXIT_UNREACHABLE
    if result.failed or result.status != "successful":
        return EXIT_FAILED
    return EXIT_OK


def _extra_vars(pairs: Sequence[str]) -> dict[str, Any]:
    import yaml

    values: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise InputError("--extra-var", f"{pair!r} is not NAME=VALUE", "NAME=VALUE, repeatable")
        name, _, raw = pair.partition("=")
        values[name.strip()] = yaml.safe_load(raw) if raw else ""
    return values


def _split(values: Sequence[str] | None) -> list[str]:
    return [t for v in values or [] for t in v.split(",") if t]


def _add_run_options(parser: argparse.ArgumentParser, *, changes: bool) -> None:
    parser.add_argument(
        "-i",
        "--inventory",
        required=True,
        action="append",
        help="inventory file or directory (repeatable: sources are merged in order)",
    )
    parser.add_argument("-l", "--limit", help="limit to hosts matching this pattern")
    parser.add_argument("-t", "--tags", action="append", help="only run tasks with these tags")
    parser.add_argument("--skip-tags", action="append", help="skip tasks with these tags")
    parser.add_argument(
        "-e",
        "--extra-var",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a variable (YAML value); secrets belong in vaulted inventory files",
    )
    if changes:
        parser.add_argument("-C", "--check", action="store_true", help="change nothing")
        parser.add_argument("-D", "--diff", action="store_true", help="show file differences")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="list passing checks too")
    parser.add_argument("--quiet", action="store_true", help="no progress while running")
    parser.add_argument(
        "--html", metavar="FILE", help="also write the readiness report as one HTML page"
    )
    parser.add_argument(
        "--markdown", metavar="FILE", help="also write the readiness report as Markdown"
    )
    parser.add_argument(
        "--no-accel",
        action="store_true",
        help="run ansible-core's own strategy, without the accelerator (KUBEGPU_ACCEL=0)",
    )


def _run_command(args: argparse.Namespace, func: Callable[..., RunResult], **extra: Any) -> int:
    if args.no_accel:
        # The runner passes KUBEGPU_ACCEL on to the run (runner.accel_environment).
        os.environ["KUBEGPU_ACCEL"] = "0"
    live = sys.stderr.isatty()
    progress = None if args.quiet or args.json else Progress(sys.stderr, live=live)
    kwargs: dict[str, Any] = {
        "limit": args.limit,
        "tags": _split(args.tags),
        "skip_tags": _split(args.skip_tags),
        "extra_vars": _extra_vars(args.extra_var),
        "on_event": progress,
        **extra,
    }
    if hasattr(args, "check"):
        kwargs.update(check=args.check, diff=args.diff)
    result = func(args.inventory, **kwargs)
    if args.json:
        print(report.to_json(result))
    elif result.input_problems:
        # Found before any host was contacted: the problems are the whole answer.
        for problem in result.input_problems:
            print(f"kubegpu: error: {problem}", file=sys.stderr)
    else:
        print(report.summary_table(result))
        if result.readiness or result.cluster_readiness or func is api.check:
            print()
            print(report.readiness_table(result.readiness, verbose=args.verbose))
            if result.cluster_readiness:
                print()
                print(report.readiness_table(result.cluster_readiness, verbose=args.verbose))
    write_reports(result, html=args.html, markdown=args.markdown)
    return exit_code(result)


def write_reports(result: RunResult, *, html: str | None, markdown: str | None) -> None:
    """The readiness report as a page a person can share, where asked for."""
    if html:
        Path(html).write_text(report.readiness_html(result.readiness), encoding="utf-8")
    if markdown:
        Path(markdown).write_text(report.readiness_markdown(result.readiness), encoding="utf-8")


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error; 2 means failed hosts here, so bad input exits 4."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"kubegpu: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kubegpu",
        description="Turn GPU servers into GPU-ready Kubernetes nodes, and prove each node ready.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("bootstrap", help="run site.yml: install, configure, then check")
    _add_run_options(p, changes=True)
    p.set_defaults(func=lambda a: _run_command(a, api.bootstrap))

    p = sub.add_parser("check", help="run the readiness checks only (changes nothing)")
    _add_run_options(p, changes=False)
    p.set_defaults(func=lambda a: _run_command(a, api.check))

    p = sub.add_parser("upgrade-driver", help="rolling NVIDIA driver upgrade")
    _add_run_options(p, changes=True)
    p.set_defaults(func=lambda a: _run_command(a, api.upgrade_driver))

    p = sub.add_parser("reset", help="remove what kubegpu installed")
    _add_run_options(p, changes=True)
    p.add_argument("--yes", action="store_true", help="confirm the removal")
    p.set_defaults(func=lambda a: _run_command(a, api.reset, confirm=a.yes))

    p = sub.add_parser("version", help="print the kubegpu version")
    p.set_defaults(func=lambda a: print(f"kubegpu {__version__}") or EXIT_OK)

    from kubegpu.artifacts import register as register_artifacts
    from kubegpu.smoke import register as register_smoke
    from kubegpu.testbed.cli import register as register_testbed

    register_artifacts(sub)
    register_smoke(sub)
    register_testbed(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except InputError as exc:
        print(f"kubegpu: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("kubegpu: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
