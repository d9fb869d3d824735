"""Renders a run's readiness report and summary as text tables or JSON."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from kubegpu.result import RunResult

_STATUS_ORDER = {"fail": 0, "warn": 1, "pass": 2, "skip": 3}


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    return "\n".join(lines)


def _width() -> int:
    """The terminal's width, or 100 where output is not a terminal ($COLUMNS first)."""
    return max(60, shutil.get_terminal_size((100, 24)).columns)


def _wrapped(label: str, value: Any, width: int) -> list[str]:
    """`  label: value`, wrapped to width with the value's lines aligned; nothing for no value."""
    if value is None or value == "":
        return []
    text = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)
    head = f"    {label:<9} "
    return textwrap.wrap(
        " ".join(text.split()),
        width=max(width, len(head) + 20),
        initial_indent=head,
        subsequent_indent=" " * len(head),
        break_on_hyphens=False,
    )


def readiness_table(
    readiness: Mapping[str, Any], *, verbose: bool = False, width: int | None = None
) -> str:
    """One row per check per host (passing and skipped checks only when verbose), then each
    failure and warning whole: what was observed, what was expected and the remedy, wrapped to
    the width (the terminal's by default), never cut."""
    width = width or _width()
    rows: list[list[str]] = []
    details: list[str] = []
    verdicts: list[str] = []
    for host in sorted(readiness):
        report = readiness[host] or {}
        simulated = " (SIMULATED GPU)" if report.get("simulated") else ""
        verdicts.append(f"{host}: {report.get('verdict', 'unknown')}{simulated}")
        checks = sorted(
            report.get("checks") or [],
            key=lambda c: (_STATUS_ORDER.get(str(c.get("status")), 9), str(c.get("layer"))),
        )
        for check in checks:
            status = str(check.get("status", "?"))
            if not verbose and status in {"pass", "skip"}:
                continue
            layer, name = str(check.get("layer", "-")), str(check.get("name", "-"))
            rows.append([host, layer, name, status.upper()])
            if status in {"fail", "warn"}:
                details.append(f"{host} {layer} {name}: {status.upper()}")
                details += _wrapped("observed:", check.get("observed"), width)
                details += _wrapped("expected:", check.get("expected"), width)
                details += _wrapped("remedy:", check.get("remedy"), width)
    if not readiness:
        return "No readiness report was produced by this run."
    text = "Readiness: " + "; ".join(verdicts)
    if rows:
        text += "\n" + table(rows, ["HOST", "LAYER", "CHECK", "STATUS"])
    else:
        text += "\nEvery check passed or was skipped (use --verbose to list them)."
    if details:
        text += "\n\nWhat failed, and what to do:\n" + "\n".join(details)
    return text


def summary_table(result: RunResult) -> str:
    rows = [
        [
            host,
            str(s.ok),
            str(s.changed),
            str(s.failures),
            str(s.unreachable),
            str(s.skipped),
        ]
        for host, s in sorted(result.hosts.items())
    ]
    text = table(rows, ["HOST", "OK", "CHANGED", "FAILED", "UNREACHABLE", "SKIPPED"])
    for failure in result.failed:
        text += f"\nFAILED {failure.host}: [{failure.task}] {failure.message}"
    for failure in result.unreachable:
        text += f"\nUNREACHABLE {failure.host}: [{failure.task}] {failure.message}"
    for layer, why in sorted(result.skipped_layers.items()):
        text += f"\nSKIPPED layer {layer}: {why}"
    return text


def to_json(result: RunResult) -> str:
    return json.dumps(result.to_dict(), indent=2, sort_keys=True)
