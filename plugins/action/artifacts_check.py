# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.artifacts_check: every artifact the inventory pulls, asked
of its mirrors (registry manifest by digest, apt index), before any host is contacted."""

from __future__ import annotations

import typing as t
import urllib.request
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.kubegpu.gpu.plugins.module_utils import artifacts

# The collection's roles: plugins/action/ -> the collection (or the checkout) -> roles/.
ROLES = Path(__file__).resolve().parents[2] / "roles"


class ActionModule(ActionBase):
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = self._task.args
        unknown = sorted(set(args) - {"node_group"})
        if unknown:
            raise AnsibleActionFail(
                f"kubegpu.gpu.artifacts_check: unknown option(s) {', '.join(unknown)}"
                " (allowed: node_group)"
            )
        group = str(args.get("node_group", "gpu_nodes"))
        defaults = artifacts.picking_defaults(ROLES)
        hostvars = task_vars.get("hostvars", {})
        hosts = {"localhost": self._variables(task_vars, defaults, template=True)}
        for host in task_vars.get("groups", {}).get(group, []):
            hosts[host] = self._variables(hostvars[host], defaults, template=False)
        try:
            listing = artifacts.select(artifacts.load(), hosts)
        except artifacts.ArtifactInputError as exc:
            result.update(failed=True, msg=f"{exc.variable}: {exc} (allowed: {exc.allowed})")
            return result
        missing = artifacts.check(listing, hosts, urllib.request.urlopen)
        result.update(
            changed=False,
            missing=missing,
            images=[i["reference"] for i in listing["images"]],
            packages=len(listing["packages"]),
            problems=[f"missing {m['kind']} {m['name']}: {m['reason']}" for m in missing],
        )
        result["msg"] = "\n".join([artifacts.summary(listing, missing), *result["problems"]])
        return result

    def _variables(
        self, variables: t.Mapping[str, t.Any], defaults: dict[str, t.Any], template: bool
    ) -> dict[str, t.Any]:
        """The roles' defaults with the inventory's values over them (a host's come templated
        from hostvars; the controller's own are templated here), and the node's OS."""
        out = dict(defaults)
        for name in defaults:
            if name in variables:
                value = variables[name]
                out[name] = self._templar.template(value) if template else value
        facts = variables.get("ansible_facts") or {}
        out["os_family"] = facts.get("os_family") or "Debian"
        out["distribution"] = facts.get("distribution") or "Debian"
        return out
