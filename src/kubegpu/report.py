"""Renders a run's readiness report and summary as text tables or JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubegpu.result import RunResult

_STATUS_ORDER = {"fail": 0, "warn": 1, "pass": 2, "skip": 3}


def _cell(value: Any, width: int) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, sort_keys=True)
    else:
        text = str(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


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


def readiness_table(readiness: Mapping[str, Any], *, verbose: bool = False) -> str:
    """One row per check per host; passing and skipped checks only when verbose."""
    rows: list[list[str]] = []
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
            rows.append(
                [
                    host,
                    _cell(check.get("layer"), 18),
                    _cell(check.get("name"), 28),
                    status.upper(),
                    _cell(check.get("observed"), 40),
                    _cell(check.get("remedy") or check.get("expected"), 70),
                ]
            )
    if not readiness:
        return "No readiness report was produced by this run."
    text = "Readiness: " + "; ".join(verdicts)
    if rows:
        header = ["HOST", "LAYER", "CHECK", "STATUS", "OBSERVED", "REMEDY / EXPECTED"]
        text += "\n" + table(rows, header)
    else:
        text += "\nEvery check passed or was skipped (use --verbose to list them)."
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
    return text


def to_json(result: RunResult) -> str:
    return json.dumps(result.to_dict(), indent=2, sort_keys=True)
