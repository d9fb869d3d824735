"""The typed entry points: each runs one kubegpu playbook and returns a RunResult."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from kubegpu.content import find_content
from kubegpu.errors import InputError
from kubegpu.result import RunResult
from kubegpu.runner import EventCallback, InventoryArg, run_playbook

Inventory = InventoryArg


def _run(
    entry_point: str,
    inventory: Inventory,
    *,
    limit: str | None,
    tags: Iterable[str] | None,
    skip_tags: Iterable[str] | None,
    extra_vars: Mapping[str, Any] | None,
    check: bool,
    diff: bool,
    on_event: EventCallback | None,
    cancel: threading.Event | None,
    keep_artifacts: bool,
) -> RunResult:
    content = find_content()
    return run_playbook(
        content.playbook(entry_point),
        inventory,
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        extra_vars=extra_vars,
        check=check,
        diff=diff,
        on_event=on_event,
        cancel=cancel,
        keep_artifacts=keep_artifacts,
        content=content,
    )


def bootstrap(
    inventory: Inventory,
    *,
    limit: str | None = None,
    tags: Iterable[str] | None = None,
    skip_tags: Iterable[str] | None = None,
    extra_vars: Mapping[str, Any] | None = None,
    check: bool = False,
    diff: bool = False,
    on_event: EventCallback | None = None,
    cancel: threading.Event | None = None,
    keep_artifacts: bool = False,
) -> RunResult:
    """Run site.yml: preflight, node layers, cluster layer, then the readiness checks."""
    return _run(
        "bootstrap",
        inventory,
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        extra_vars=extra_vars,
        check=check,
        diff=diff,
        on_event=on_event,
        cancel=cancel,
        keep_artifacts=keep_artifacts,
    )


def check(
    inventory: Inventory,
    *,
    limit: str | None = None,
    tags: Iterable[str] | None = None,
    skip_tags: Iterable[str] | None = None,
    extra_vars: Mapping[str, Any] | None = None,
    on_event: EventCallback | None = None,
    cancel: threading.Event | None = None,
    keep_artifacts: bool = False,
) -> RunResult:
    """Run the readiness checks only (validate.yml); changes nothing on the hosts."""
    return _run(
        "check",
        inventory,
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        extra_vars=extra_vars,
        check=False,
        diff=False,
        on_event=on_event,
        cancel=cancel,
        keep_artifacts=keep_artifacts,
    )


def upgrade_driver(
    inventory: Inventory,
    *,
    limit: str | None = None,
    tags: Iterable[str] | None = None,
    skip_tags: Iterable[str] | None = None,
    extra_vars: Mapping[str, Any] | None = None,
    check: bool = False,
    diff: bool = False,
    on_event: EventCallback | None = None,
    cancel: threading.Event | None = None,
    keep_artifacts: bool = False,
) -> RunResult:
    """Run the rolling driver upgrade (upgrade_driver.yml)."""
    return _run(
        "upgrade_driver",
        inventory,
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        extra_vars=extra_vars,
        check=check,
        diff=diff,
        on_event=on_event,
        cancel=cancel,
        keep_artifacts=keep_artifacts,
    )


def reset(
    inventory: Inventory,
    *,
    confirm: bool = False,
    limit: str | None = None,
    tags: Iterable[str] | None = None,
    skip_tags: Iterable[str] | None = None,
    extra_vars: Mapping[str, Any] | None = None,
    check: bool = False,
    diff: bool = False,
    on_event: EventCallback | None = None,
    cancel: threading.Event | None = None,
    keep_artifacts: bool = False,
) -> RunResult:
    """Remove what kubegpu installed (reset.yml). Needs confirm=True."""
    if not confirm:
        raise InputError("confirm", "reset removes what kubegpu installed and needs confirm=True")
    variables = dict(extra_vars or {})
    variables["kubegpu_reset_confirm"] = True
    return _run(
        "reset",
        inventory,
        limit=limit,
        tags=tags,
        skip_tags=skip_tags,
        extra_vars=variables,
        check=check,
        diff=diff,
        on_event=on_event,
        cancel=cancel,
        keep_artifacts=keep_artifacts,
    )
