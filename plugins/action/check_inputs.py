# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.check_inputs: every layer's variables, for every GPU node
and for the cluster layer, against the roles' argument specs, before any host is contacted."""

from __future__ import annotations

import typing as t
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.kubegpu.gpu.plugins.plugin_utils import inputs

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
                f"kubegpu.gpu.check_inputs: unknown option(s) {', '.join(unknown)}"
                " (allowed: node_group)"
            )
        group = str(args.get("node_group", "gpu_nodes"))
        hostvars = task_vars.get("hostvars", {})
        nodes = list(task_vars.get("groups", {}).get(group, []))
        problems: list[str] = []
        unread: list[str] = []
        roles = inputs.NODE_ROLES + inputs.CLUSTER_ROLES
        options = {role: inputs.load_options(ROLES, role) for role in roles}
        rules = {role: inputs.load_rules(ROLES, role) for role in roles}
        known = [name for role in roles for name in options[role]]
        prefixes = tuple(role + "_" for role in roles)
        for role in inputs.NODE_ROLES:
            by_host = {}
            for host in nodes:
                given = self._given(role, hostvars[host], unread)
                by_host[host] = inputs.role_problems(role, options[role], given, rules[role])
            problems.extend(inputs.merge(by_host))
        for role in inputs.CLUSTER_ROLES:
            given = self._given(role, task_vars, unread)
            problems.extend(inputs.role_problems(role, options[role], given, rules[role]))
        # A misspelled prefix: set for a node or for the controller, under no role's prefix.
        others = {
            host: inputs.misspelled(
                [n for n in hostvars[host] if not n.startswith(prefixes)], known
            )
            for host in nodes
        }
        problems.extend(inputs.merge(others))
        problems.extend(
            p
            for p in inputs.misspelled([n for n in task_vars if not n.startswith(prefixes)], known)
            if p not in problems
        )
        result.update(
            changed=False,
            problems=problems,
            nodes=len(nodes),
            # Values built from what only a host can tell (its facts): the roles check them.
            unread=sorted(set(unread)),
        )
        result["msg"] = (
            "\n".join(problems)
            if problems
            else f"the inputs of {len(nodes)} GPU node(s) and the cluster layer are valid"
        )
        return result

    def _given(
        self, role: str, variables: t.Mapping[str, t.Any], unread: list[str]
    ) -> dict[str, t.Any]:
        """The variables with the role's prefix that the inventory or extra vars set, as
        templated values. A value that cannot be templated yet (it uses a host's facts) is left
        to the role's own check on the host."""
        given = {}
        for name in list(variables):
            if not name.startswith(role + "_") or name in inputs.OUTPUTS:
                continue
            try:
                # A host's variables come templated from hostvars; the controller's own are
                # templated here.
                given[name] = self._templar.template(variables[name])
            except Exception:  # any templating error: the host check has it
                unread.append(name)
        return given
