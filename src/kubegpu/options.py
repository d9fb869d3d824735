"""The options every kubegpu run takes, declared once: the API's entry points and the runner
take them as keyword arguments (`**options: Unpack[RunOptions]`), and `check_options` refuses a
name that is not one of them, as a function with these parameters spelled out would."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypedDict

from kubegpu.events import Event

EventCallback = Callable[[Event], None]


class ReadOptions(TypedDict, total=False):
    """What any run takes, including one that changes nothing (kubegpu.check)."""

    # Ansible's --limit: a host pattern.
    limit: str | None
    # Only the layers with these tags (content.KNOWN_TAGS), or all but those of skip_tags.
    tags: Iterable[str] | None
    skip_tags: Iterable[str] | None
    # Variables on top of the inventory's; names that look like secrets are refused.
    extra_vars: Mapping[str, Any] | None
    # Called with each normalised event (kubegpu.events.Event) as the run goes.
    on_event: EventCallback | None
    # Set it to stop the run.
    cancel: threading.Event | None
    # Keep ansible-runner's private folder (RunResult.artifacts_dir), without env files.
    keep_artifacts: bool


class RunOptions(ReadOptions, total=False):
    """What a run that may change hosts takes as well: Ansible's --check and --diff."""

    check: bool
    diff: bool


RUN_OPTIONS = frozenset(RunOptions.__annotations__)
READ_OPTIONS = frozenset(ReadOptions.__annotations__)


def check_options(
    entry_point: str, options: Mapping[str, Any], allowed: frozenset[str] = RUN_OPTIONS
) -> None:
    """TypeError for a keyword the entry point does not take, naming what it takes."""
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(
            f"{entry_point}() got unexpected keyword argument(s) {', '.join(unknown)} "
            f"(it takes {', '.join(sorted(allowed))})"
        )
