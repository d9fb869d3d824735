# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The controller side of kubegpu.gpu.check_inputs: every layer's variables, for every GPU node
and for the cluster layer, against the roles' argument specs, before any host is contacted."""

from __future__ import annotations

import typing as t
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.kubegpu.gpu.plugins.module_utils.k8s_values import coerce_bool
from ansible_collections.kubegpu.gpu.plugins.plugin_utils import inputs, mirrors

# The collection's roles: plugins/action/ -> the collection (or the checkout) -> roles/.
ROLES = Path(__file__).resolve().parents[2] / "roles"
ALL_ROLES = inputs.NODE_ROLES + inputs.CLUSTER_ROLES


class ActionModule(ActionBase):
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        args = self._task.args
        unknown = sorted(set(args) - {"node_group", "scope"})
        if unknown:
            raise AnsibleActionFail(
                f"kubegpu.gpu.check_inputs: unknown option(s) {', '.join(unknown)}"
                " (allowed: node_group, scope)"
            )
        group = str(args.get("node_group", "gpu_nodes"))
        scope = str(args.get("scope", "all"))
        if scope not in ("all", "nodes"):
            raise AnsibleActionFail(
                f"kubegpu.gpu.check_inputs: scope is {scope!r}: it is 'all' (node and cluster"
                " layers) or 'nodes' (the node layers only)"
            )
        hostvars = task_vars.get("hostvars", {})
        nodes = list(task_vars.get("groups", {}).get(group, []))
        problems: list[str] = []
        unread: list[str] = []
        options = {role: inputs.load_options(ROLES, role) for role in ALL_ROLES}
        rules = {role: inputs.load_rules(ROLES, role) for role in ALL_ROLES}
        known = [name for role in ALL_ROLES for name in options[role]]
        # Each host's variables are read once (hostvars builds them anew on every access).
        by_role: dict[str, dict[str, list[str]]] = {role: {} for role in inputs.NODE_ROLES}
        misspelled = {}
        for host in nodes:
            given, others = self._given(hostvars[host], inputs.NODE_ROLES, unread)
            for role in inputs.NODE_ROLES:
                by_role[role][host] = inputs.role_problems(
                    role, options[role], given[role], rules[role]
                )
            # A misspelled prefix: a name under no role's prefix, close to a role's variable.
            misspelled[host] = inputs.misspelled(others, known)
        for role in inputs.NODE_ROLES:
            problems.extend(inputs.merge(by_role[role]))
        if scope == "all":
            given, others = self._given(task_vars, inputs.CLUSTER_ROLES, unread)
            for role in inputs.CLUSTER_ROLES:
                problems.extend(inputs.role_problems(role, options[role], given[role], rules[role]))
            globals_given = {
                n: self._templar.template(task_vars[n])
                for n in inputs.GLOBAL_CHOICES
                if n in task_vars
            }
            problems.extend(inputs.global_problems(globals_given))
            if globals_given.get("kubegpu_cluster_bootstrap") == "kubeadm":
                problems.extend(
                    inputs.control_plane_problems(
                        task_vars.get("groups", {}).get("kube_control_plane", []),
                        given["cluster_bootstrap"].get("cluster_bootstrap_control_plane_endpoint"),
                    )
                )
        problems.extend(inputs.merge(misspelled))
        if scope == "all":
            problems.extend(p for p in inputs.misspelled(others, known) if p not in problems)
        result.update(
            changed=False,
            problems=problems,
            nodes=len(nodes),
            # Values built from what only a host can tell (its facts): the roles check them.
            unread=sorted(set(unread)),
        )
        if scope == "nodes":
            self._controller_left_out(task_vars, group, result, problems)
        checked = "" if scope == "nodes" else " and the cluster layer"
        result["msg"] = (
            "\n".join(problems)
            if problems
            else f"the inputs of {len(nodes)} GPU node(s){checked} are valid"
        )
        return result

    def _controller_left_out(
        self,
        task_vars: t.Mapping[str, t.Any],
        group: str,
        result: dict[str, t.Any],
        problems: list[str],
    ) -> None:
        """When a --limit left out localhost, the play on the controller that checks every
        layer (and, with kubegpu_offline, the mirrors) did not run: say so, and ask the mirrors
        here. kubegpu's CLI and API keep localhost in a limit."""
        controller = task_vars.get("hostvars", {}).get("localhost") or {}
        if not task_vars.get("ansible_limit") or "__kubegpu_inputs" in controller:
            return
        result["warnings"] = [
            f"--limit {task_vars['ansible_limit']} leaves out localhost: the controller's plays"
            " (the inputs of the cluster layer, the cluster layer itself) do not run; add"
            " localhost to the limit to run them (kubegpu's CLI and API keep it)"
        ]
        if coerce_bool(self._templar.template(task_vars.get("kubegpu_offline", False))) is True:
            found = mirrors.check(task_vars, self._templar.template, group)
            problems.extend([found["msg"]] if found.get("failed") else found["problems"])

    def _given(
        self, variables: t.Mapping[str, t.Any], roles: t.Sequence[str], unread: list[str]
    ) -> tuple[dict[str, dict[str, t.Any]], list[str]]:
        """The variables with each role's prefix that the inventory or extra vars set, as
        templated values, and the names under no role's prefix. A value that cannot be
        templated yet (it uses a host's facts) is left to the role's own check on the host."""
        given: dict[str, dict[str, t.Any]] = {role: {} for role in roles}
        others = []
        for name in list(variables):
            role = next((r for r in ALL_ROLES if name.startswith(r + "_")), None)
            if role is None:
                others.append(name)
                continue
            if role not in given:
                continue
            if name in inputs.OUTPUTS:
                continue
            try:
                # A host's variables come templated from hostvars; the controller's own are
                # templated here.
                given[role][name] = self._templar.template(variables[name])
            except Exception:  # any templating error: the host check has it
                unread.append(name)
        return given, others
