"""The typed entry points: each runs one kubegpu playbook and returns a RunResult. They take the
inventory and the run options of kubegpu.options (limit, tags, skip_tags, extra_vars, check,
diff, on_event, cancel, keep_artifacts) as keyword arguments."""

from __future__ import annotations

from typing import Unpack

from kubegpu.content import find_content
from kubegpu.errors import InputError
from kubegpu.options import READ_OPTIONS, ReadOptions, RunOptions, check_options
from kubegpu.result import RunResult
from kubegpu.runner import InventoryArg, run_playbook

Inventory = InventoryArg


def _run(entry_point: str, inventory: Inventory, options: RunOptions) -> RunResult:
    content = find_content()
    return run_playbook(content.playbook(entry_point), inventory, content=content, **options)


def bootstrap(inventory: Inventory, **options: Unpack[RunOptions]) -> RunResult:
    """Run site.yml: preflight, node layers, cluster layer, then the readiness checks."""
    check_options("bootstrap", options)
    return _run("bootstrap", inventory, options)


def check(inventory: Inventory, **options: Unpack[ReadOptions]) -> RunResult:
    """Run the readiness checks only (validate.yml); changes nothing on the hosts."""
    check_options("check", options, READ_OPTIONS)
    return _run("check", inventory, RunOptions(**options, check=False, diff=False))


def upgrade_driver(inventory: Inventory, **options: Unpack[RunOptions]) -> RunResult:
    """Run the rolling driver upgrade (upgrade_driver.yml)."""
    check_options("upgrade_driver", options)
    return _run("upgrade_driver", inventory, options)


def reset(
    inventory: Inventory, *, confirm: bool = False, **options: Unpack[RunOptions]
) -> RunResult:
    """Remove what kubegpu installed (reset.yml). Needs confirm=True."""
    check_options("reset", options)
    if not confirm:
        raise InputError("confirm", "reset removes what kubegpu installed and needs confirm=True")
    variables = dict(options.pop("extra_vars", None) or {})
    variables["kubegpu_reset_confirm"] = True
    return _run("reset", inventory, RunOptions(**options, extra_vars=variables))
