"""Normalised run events: what a renderer or a caller's callback sees while a run goes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# ansible-runner event name -> our kind.
_KINDS = {
    "playbook_on_start": "playbook_start",
    "playbook_on_play_start": "play_start",
    "playbook_on_task_start": "task_start",
    "runner_on_start": "host_task_start",
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable",
    "runner_item_on_ok": "item_ok",
    "runner_item_on_failed": "item_failed",
    "runner_item_on_skipped": "item_skipped",
    "runner_on_async_failed": "failed",
    "playbook_on_stats": "stats",
    "warning": "warning",
    "deprecated": "deprecated",
    "error": "error",
}

HOST_RESULT_KINDS = frozenset({"ok", "failed", "skipped", "unreachable"})


@dataclass(frozen=True)
class Event:
    """One thing that happened in a run, reduced to what callers use."""

    kind: str
    play: str = ""
    task: str = ""
    host: str = ""
    changed: bool = False
    ignored: bool = False
    message: str = ""
    counter: int = 0
    data: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


def _message(res: dict[str, Any]) -> str:
    msg = res.get("msg")
    if isinstance(msg, str) and msg:
        return msg
    parts = [str(res[key]).strip() for key in ("stderr", "module_stderr") if res.get(key)]
    if res.get("results"):
        parts += [_message(item) for item in res["results"] if isinstance(item, dict)]
    return "; ".join(p for p in parts if p)


def normalize(raw: dict[str, Any]) -> Event | None:
    """Turn an ansible-runner event dict into an Event, or None for events we do not surface."""
    kind = _KINDS.get(str(raw.get("event", "")))
    if kind is None:
        return None
    data = raw.get("event_data") or {}
    res_value = data.get("res")
    res: dict[str, Any] = res_value if isinstance(res_value, dict) else {}
    message = _message(res) if res else ""
    if kind in {"warning", "deprecated", "error"}:
        message = str(raw.get("stdout", "")).strip()
    return Event(
        kind=kind,
        play=str(data.get("play", "")),
        task=str(data.get("task", "")),
        host=str(data.get("host", "")),
        changed=bool(res.get("changed", False)),
        ignored=bool(data.get("ignore_errors") or False),
        message=message,
        counter=int(raw.get("counter", 0) or 0),
        data=data,
    )
