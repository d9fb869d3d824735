# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Whether the accelerator runs: only on the ansible-core minors it was tested on, and only
while KUBEGPU_ACCEL does not turn it off. Anywhere else its strategy is ansible-core's linear
and its callbacks do nothing, after one warning line."""

from __future__ import annotations

import os

from ansible.release import __version__ as ANSIBLE_VERSION
from ansible.utils.display import Display

display = Display()

# The ansible-core minors whose internals the accelerator was ported to and tested on
# (tests/unit/test_linear_strategy.py compares its results with ansible-core's linear there).
TESTED_MINORS = ("2.19", "2.20", "2.21")
ENV = "KUBEGPU_ACCEL"
ON = ("", "1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")

_told = False


def minor(version: str = ANSIBLE_VERSION) -> str:
    return ".".join(version.split(".")[:2])


def why_off(version: str = ANSIBLE_VERSION) -> str | None:
    """None where the accelerator runs; else why it does not (for one warning line), or ''
    where KUBEGPU_ACCEL turned it off (nothing to warn about)."""
    setting = os.environ.get(ENV, "").strip().lower()
    if setting in OFF:
        return ""
    if setting not in ON:
        return f"{ENV} is {setting!r} (allowed: 1 or 0, true or false, yes or no, on or off)"
    if minor(version) not in TESTED_MINORS:
        return (
            f"ansible-core {version} is not a release it was tested on ({', '.join(TESTED_MINORS)})"
        )
    return None


def active() -> bool:
    """Whether the accelerator runs in this process; warns once where it steps aside."""
    why = why_off()
    if why is None:
        return True
    if why:
        step_aside(why)
    return False


def step_aside(why: str) -> None:
    """One warning line per process: what runs instead, and why."""
    global _told
    if _told:
        return
    _told = True
    display.warning(
        f"kubegpu.accel steps aside: {why}; the run goes on with ansible-core's own linear"
        " strategy (same results, slower)"
    )
