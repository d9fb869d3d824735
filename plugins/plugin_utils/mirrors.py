# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Every artifact the inventory pulls, asked of its mirrors (registry manifest by digest, apt
index), on the controller: kubegpu.gpu.artifacts_check, and kubegpu.gpu.check_inputs when a
--limit left the controller's play out."""

from __future__ import annotations

import typing as t
import urllib.request
from pathlib import Path

from ansible_collections.kubegpu.gpu.plugins.module_utils import artifacts

# The collection's roles: plugins/plugin_utils/ -> the collection (or the checkout) -> roles/.
ROLES = Path(__file__).resolve().parents[2] / "roles"


def check(
    task_vars: t.Mapping[str, t.Any], template: t.Callable[[t.Any], t.Any], group: str
) -> dict[str, t.Any]:
    """The check's result (missing, images, packages, problems, msg), or failed and msg for a
    variable that picks no artifact. ``template`` templates the controller's own values; the
    hosts' come templated from hostvars."""
    defaults = artifacts.picking_defaults(ROLES)
    hostvars = task_vars.get("hostvars", {})
    hosts = {"localhost": _variables(task_vars, defaults, template)}
    for host in task_vars.get("groups", {}).get(group, []):
        hosts[host] = _variables(hostvars[host], defaults, None)
    try:
        listing = artifacts.select(artifacts.load(), hosts)
    except artifacts.ArtifactInputError as exc:
        return {"failed": True, "msg": f"{exc.variable}: {exc} (allowed: {exc.allowed})"}
    missing = artifacts.check(listing, hosts, urllib.request.urlopen)
    problems = [f"missing {m['kind']} {m['name']}: {m['reason']}" for m in missing]
    return {
        "missing": missing,
        "images": [i["reference"] for i in listing["images"]],
        "packages": len(listing["packages"]),
        "problems": problems,
        "msg": "\n".join([artifacts.summary(listing, missing), *problems]),
    }


def _variables(
    variables: t.Mapping[str, t.Any],
    defaults: dict[str, t.Any],
    template: t.Callable[[t.Any], t.Any] | None,
) -> dict[str, t.Any]:
    """The roles' defaults with the inventory's values over them, and the node's OS."""
    out = dict(defaults)
    for name in defaults:
        if name in variables:
            value = variables[name]
            out[name] = template(value) if template is not None else value
    facts = variables.get("ansible_facts") or {}
    out["os_family"] = facts.get("os_family") or "Debian"
    out["distribution"] = facts.get("distribution") or "Debian"
    return out
