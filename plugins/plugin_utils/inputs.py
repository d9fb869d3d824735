# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""Every layer's inputs against its role's argument specs, on the controller, before any host
is contacted (kubegpu.gpu.check_inputs). Pure functions: the action gathers the values."""

from __future__ import annotations

import difflib
import re
import typing as t
from pathlib import Path

import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubelet as kl

# The roles whose variables are set per GPU node, and those of the cluster layer, which runs
# on the controller.
NODE_ROLES = (
    "nvidia_driver",
    "cuda_toolkit",
    "nvidia_container_toolkit",
    "container_runtime",
    "kubelet_gpu",
)
CLUSTER_ROLES = ("gpu_cluster", "gpu_tenancy")
# Variables with a role's prefix that a role sets for the roles after it: not inputs.
OUTPUTS = frozenset(("nvidia_driver_installed",))
# The kubelet checks' parameter names, as the inventory variables they come from.
KUBELET_VARIABLES = {
    "feature_gates": "kubelet_gpu_feature_gates",
    "settings": "kubelet_gpu_settings",
    "node_labels": "kubelet_gpu_node_labels",
    "node_taints": "kubelet_gpu_node_taints",
    "taints": "kubelet_gpu_node_taints",
}
# What the role specs say beside the validation rules.
_DOC_KEYS = ("description", "version_added", "required")


def load_options(roles_dir: Path, role: str) -> dict[str, t.Any]:
    """The options of the role's main entry point (meta/argument_specs.yml)."""
    data = yaml.safe_load((roles_dir / role / "meta" / "argument_specs.yml").read_text())
    return dict(data["argument_specs"]["main"]["options"])


def _rules(options: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The options as ArgumentSpecValidator takes them, without `required`: only what the
    inventory sets is checked here, and the role's defaults give the rest."""
    rules = {}
    for name, option in options.items():
        rule = {k: v for k, v in option.items() if k not in _DOC_KEYS}
        if isinstance(rule.get("options"), dict):
            rule["options"] = _rules(rule["options"])
        rules[name] = rule
    return rules


def role_problems(role: str, options: t.Mapping[str, t.Any], given: dict[str, t.Any]) -> list[str]:
    """One line per problem with the variables set for one role on one host: an unknown name
    (with the closest known one), then what the argument specs refuse, then (kubelet_gpu) the
    label, taint, settings and feature-gate checks that need no host."""
    problems = []
    for name in sorted(set(given) - set(options)):
        close = difflib.get_close_matches(name, list(options), n=1)
        hint = (
            f"; did you mean {close[0]}?"
            if close
            else f"; its variables: {', '.join(sorted(options))}"
        )
        problems.append(f"{name}: role {role} has no such variable (a misspelling?){hint}")
    known = {name: value for name, value in given.items() if name in options}
    if known:
        rules = _rules({name: options[name] for name in known})
        result = ArgumentSpecValidator(rules).validate(known)
        problems.extend(result.error_messages)
        if role == "kubelet_gpu" and not result.error_messages:
            problems.extend(kubelet_problems(known))
    return problems


def kubelet_problems(given: dict[str, t.Any]) -> list[str]:
    """The kubelet checks that need no host, naming the inventory variables."""
    found = []
    found += kl.validate_node_labels(given.get("kubelet_gpu_node_labels"))
    found += kl.validate_taints(given.get("kubelet_gpu_node_taints"))
    found += kl.validate_settings(given.get("kubelet_gpu_settings"))
    version = given.get("kubelet_gpu_kubernetes_version")
    if version and given.get("kubelet_gpu_feature_gates"):
        found += kl.validate_feature_gates(
            given["kubelet_gpu_feature_gates"],
            str(version),
            given.get("kubelet_gpu_unchecked_feature_gates") or (),
        )
    return [_as_variable(message) for message in found]


_PARAMETER = re.compile(r"^(%s)\b" % "|".join(KUBELET_VARIABLES))


def _as_variable(message: str) -> str:
    return _PARAMETER.sub(lambda m: KUBELET_VARIABLES[m.group(1)], message, count=1)


def misspelled(names: t.Iterable[str], known: t.Iterable[str]) -> list[str]:
    """Variables with no role's prefix whose name is close to a role's variable (a misspelled
    prefix, nvidia_drivr_branch): one line each, with the name meant."""
    known = sorted(set(known))
    problems = []
    for name in sorted(set(names) - set(known)):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if close:
            problems.append(
                f"{name}: no role has such a variable (a misspelling?); did you mean {close[0]}?"
            )
    return problems


def merge(by_host: t.Mapping[str, t.Iterable[str]]) -> list[str]:
    """Each problem once, with the hosts it was found for when it is not every host's."""
    hosts_of: dict[str, list[str]] = {}
    for host, problems in by_host.items():
        for problem in problems:
            hosts_of.setdefault(problem, []).append(host)
    everyone = len(by_host)
    return [
        problem if len(hosts) == everyone else f"{problem} (hosts: {', '.join(hosts)})"
        for problem, hosts in hosts_of.items()
    ]
