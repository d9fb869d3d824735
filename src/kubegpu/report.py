"""Renders a run's readiness report and summary as text tables or JSON."""

from __future__ import annotations

import html
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


def summary_table(result: RunResult, width: int | None = None) -> str:
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
    lines = [table(rows, ["HOST", "OK", "CHANGED", "FAILED", "UNREACHABLE", "SKIPPED"])]
    notes = [f"FAILED {f.host}: [{f.task}] {f.message}" for f in result.failed]
    notes += [f"UNREACHABLE {f.host}: [{f.task}] {f.message}" for f in result.unreachable]
    notes += [
        f"SKIPPED layer {layer}: {why}" for layer, why in sorted(result.skipped_layers.items())
    ]
    width = width or _width()
    for note in notes:
        lines += textwrap.wrap(
            " ".join(note.split()), width=width, subsequent_indent="    ", break_on_hyphens=False
        )
    return "\n".join(lines)


def to_json(result: RunResult) -> str:
    return json.dumps(result.to_dict(), indent=2, sort_keys=True)


_WORST = ("fail", "warn", "pass", "skip")


def _layers(readiness: Mapping[str, Any]) -> list[str]:
    """The layers in the order the checks come (the readiness module's: bottom up)."""
    seen = [str(c.get("layer")) for r in readiness.values() for c in (r or {}).get("checks") or []]
    return list(dict.fromkeys(seen))


def _cell_status(checks: Sequence[Mapping[str, Any]]) -> str:
    """The worst status among a layer's checks on one host ('' where it has none)."""
    statuses = {str(c.get("status")) for c in checks}
    return next((s for s in _WORST if s in statuses), "")


def _problems(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    checks = report.get("checks") or []
    return sorted(
        (c for c in checks if c.get("status") in ("fail", "warn")),
        key=lambda c: (_STATUS_ORDER.get(str(c.get("status")), 9), str(c.get("layer"))),
    )


def _text(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def readiness_markdown(readiness: Mapping[str, Any]) -> str:
    """The readiness report as Markdown: a node x layer matrix, then every failure and
    warning with what was observed, what was expected and the remedy, whole."""
    if not readiness:
        return "# kubegpu readiness\n\nNo readiness report was produced by this run.\n"
    layers = _layers(readiness)
    lines = ["# kubegpu readiness", ""]
    lines += ["| node | verdict | " + " | ".join(layers) + " |"]
    lines += ["|---|---|" + "---|" * len(layers)]
    for host in sorted(readiness):
        report = readiness[host] or {}
        verdict = str(report.get("verdict", "unknown"))
        if report.get("simulated"):
            verdict += " (SIMULATED GPU)"
        checks = report.get("checks") or []
        cells = [
            _cell_status([c for c in checks if str(c.get("layer")) == layer]).upper() or "-"
            for layer in layers
        ]
        lines.append(f"| {host} | {verdict} | " + " | ".join(cells) + " |")
    for host in sorted(readiness):
        problems = _problems(readiness[host] or {})
        if not problems:
            continue
        lines += ["", f"## {host}", ""]
        for check in problems:
            lines.append(
                f"- **{str(check.get('status')).upper()}** {check.get('layer')} / "
                f"`{check.get('name')}`"
            )
            for label in ("observed", "expected", "remedy"):
                text = " ".join(_text(check.get(label)).split())
                if text:
                    lines.append(f"  - {label}: {text}")
    return "\n".join(lines) + "\n"


_CSS = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em; color: #1d2129; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; }
th, td { border: 1px solid #c9ccd1; padding: .35em .7em; text-align: left; white-space: nowrap; }
th { background: #f0f2f5; }
td.fail { background: #fbd5d5; color: #8a1111; font-weight: 600; }
td.warn { background: #fdf0c4; color: #6b4d00; font-weight: 600; }
td.pass { background: #d6f5dc; color: #145a24; }
td.skip { background: #eceef1; color: #5b6270; }
.ready { color: #145a24; font-weight: 600; } .not_ready { color: #8a1111; font-weight: 600; }
.simulated { background: #fff3bf; padding: 0 .3em; border-radius: 3px; font-size: .85em; }
.check { border-left: 4px solid #c9ccd1; padding: .3em .8em; margin: .7em 0; }
.check.fail { border-color: #d93025; } .check.warn { border-color: #e0a800; }
dt { font-weight: 600; float: left; width: 6.5em; clear: left; }
dd { margin-left: 7em; white-space: pre-wrap; overflow-wrap: anywhere; }
"""


def readiness_html(readiness: Mapping[str, Any], title: str = "kubegpu readiness") -> str:
    """The readiness report as one self-contained HTML page (no script, no outside file): a
    node x layer matrix coloured by status, then each node's failures and warnings whole."""
    esc = html.escape
    layers = _layers(readiness)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
    ]
    if not readiness:
        out.append("<p>No readiness report was produced by this run.</p></body></html>")
        return "\n".join(out) + "\n"
    out.append("<table><thead><tr><th>node</th><th>verdict</th>")
    out += [f"<th>{esc(layer)}</th>" for layer in layers]
    out.append("</tr></thead><tbody>")
    for host in sorted(readiness):
        report = readiness[host] or {}
        verdict = str(report.get("verdict", "unknown"))
        simulated = (
            ' <span class="simulated">SIMULATED GPU</span>' if report.get("simulated") else ""
        )
        checks = report.get("checks") or []
        out.append(
            f'<tr><th>{esc(host)}</th><td class="{esc(verdict)}">{esc(verdict)}{simulated}</td>'
        )
        for layer in layers:
            mine = [c for c in checks if str(c.get("layer")) == layer]
            status = _cell_status(mine)
            label = f"{status.upper()} ({len(mine)})" if status else "-"
            out.append(f'<td class="{esc(status)}">{esc(label)}</td>')
        out.append("</tr>")
    out.append("</tbody></table>")
    for host in sorted(readiness):
        problems = _problems(readiness[host] or {})
        if not problems:
            continue
        out.append(f"<h2>{esc(host)}</h2>")
        for check in problems:
            status = esc(str(check.get("status")))
            out.append(
                f'<div class="check {status}"><strong>{status.upper()}</strong> '
                f"{esc(str(check.get('layer')))} / <code>{esc(str(check.get('name')))}</code><dl>"
            )
            for label in ("observed", "expected", "remedy"):
                text = _text(check.get(label))
                if text:
                    out.append(f"<dt>{label}</dt><dd>{esc(text)}</dd>")
            out.append("</dl></div>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
