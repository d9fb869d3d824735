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
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_settings as cs
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubeadm_bootstrap as kb
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubelet as kl
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubelet_labels as kll

# The roles whose variables are set per GPU node, and those of the cluster layer, which runs
# on the controller.
NODE_ROLES = (
    "nvidia_driver",
    "gpu_mig",
    "cuda_toolkit",
    "nvidia_container_toolkit",
    "container_runtime",
    "kubelet_gpu",
)
CLUSTER_ROLES = ("cluster_bootstrap", "gpu_cluster", "gpu_tenancy")
# kubegpu_* globals with a fixed set of values: name -> (allowed, default).
GLOBAL_CHOICES = {"kubegpu_cluster_bootstrap": (("none", "kubeadm"), "none")}
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


def _spec(options: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The options as ArgumentSpecValidator takes them, without `required`: only what the
    inventory sets is checked here, and the role's defaults give the rest."""
    rules = {}
    for name, option in options.items():
        rule = {k: v for k, v in option.items() if k not in _DOC_KEYS}
        if isinstance(rule.get("options"), dict):
            rule["options"] = _spec(rule["options"])
        rules[name] = rule
    return rules


def load_rules(roles_dir: Path, role: str) -> dict[str, t.Any]:
    """The role's own format rules (its vars/main.yml: the regexes and least versions that
    its validate.yml checks on the host too), and its defaults (defaults/main.yml)."""
    found: dict[str, t.Any] = {}
    for part in ("defaults", "vars"):
        path = roles_dir / role / part / "main.yml"
        if path.is_file():
            found.update(yaml.safe_load(path.read_text()) or {})
    return found


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"[0-9]+", text)[:2])


def _parameter_value_ok(value: t.Any) -> bool:
    """A module parameter's value as /etc/modprobe.d takes it on an options line (the role's
    validate.yml checks the same): a scalar whose text has no whitespace (a line break would
    start a line of its own) and no NUL."""
    if value is None or isinstance(value, (dict, list, tuple, set)):
        return False
    text = str(value)
    return bool(text) and not re.search(r"[\s\x00]", text)


def format_problems(role: str, given: dict[str, t.Any], rules: t.Mapping[str, t.Any]) -> list[str]:
    """The formats a value must have whatever the host (the same rules as the role's
    validate.yml, which checks them again where the role runs alone)."""
    problems = []
    if role == "nvidia_driver":
        branch = given.get("nvidia_driver_branch")
        if branch is not None and not (
            isinstance(branch, str)
            and re.search(rules["__nvidia_driver_branch_regex"], branch)
            and int(branch) >= int(rules["__nvidia_driver_min_branch"])
        ):
            problems.append(
                f"nvidia_driver_branch is {branch!r}: a driver branch is three digits, quoted as"
                f' a string, {rules["__nvidia_driver_min_branch"]} or newer (for example "535",'
                ' "570", "580")'
            )
        version = given.get("nvidia_driver_version")
        effective = branch if branch is not None else rules.get("nvidia_driver_branch")
        if version and not (
            isinstance(version, str)
            and re.search(rules["__nvidia_driver_version_regex"], version)
            and version.split(".")[0] == str(effective)
        ):
            problems.append(
                f"nvidia_driver_version is {version!r}: it must be an exact driver version such"
                f' as "{effective}.95.05" that belongs to nvidia_driver_branch ({effective!r}),'
                " or empty to take the newest of the branch"
            )
        parameters = given.get("nvidia_driver_module_parameters")
        bad = [
            f"{module}.{name!r}"
            for module, params in (parameters.items() if isinstance(parameters, dict) else ())
            if isinstance(params, dict)
            for name in params
            if not (
                isinstance(name, str)
                and re.search(rules["__nvidia_driver_parameter_name_regex"], name)
            )
        ]
        if bad:
            problems.append(
                f"nvidia_driver_module_parameters: {', '.join(bad)} (not a parameter name): each"
                " parameter name is letters, digits and '_', not starting with a digit"
            )
        bad_values = [
            f"{module}.{name}"
            for module, params in (parameters.items() if isinstance(parameters, dict) else ())
            if isinstance(params, dict)
            for name, value in params.items()
            if isinstance(name, str)
            and re.search(rules["__nvidia_driver_parameter_name_regex"], name)
            and not _parameter_value_ok(value)
        ]
        if bad_values:
            problems.append(
                f"nvidia_driver_module_parameters: {', '.join(bad_values)} (not a parameter"
                " value): each value is a number, boolean or non-empty string without spaces,"
                " line breaks or NUL characters"
            )
    elif role == "cuda_toolkit":
        version = given.get("cuda_toolkit_version")
        majors = rules["__cuda_toolkit_min_driver_branch"]
        if version is not None and not (
            isinstance(version, str)
            and re.search(rules["__cuda_toolkit_version_regex"], version)
            and version.split(".")[0] in majors
        ):
            problems.append(
                f"cuda_toolkit_version is {version!r}: it is a CUDA release as major.minor, quoted"
                f' as a string, of CUDA {", ".join(majors)} (for example "12.8" or "13.0")'
            )
    elif role == "container_runtime":
        # No `choices` in the spec: its default is a template (it follows the bootstrap).
        driver = given.get("container_runtime_cgroup_driver")
        if driver is not None and driver not in rules["__container_runtime_cgroup_drivers"]:
            problems.append(
                f"container_runtime_cgroup_driver is {driver!r}: one of"
                f" {', '.join(rules['__container_runtime_cgroup_drivers'])} (it follows"
                " cluster_bootstrap_cgroup_driver where kubegpu bootstraps the cluster)"
            )
    elif role == "nvidia_container_toolkit":
        version = given.get("nvidia_container_toolkit_version")
        least = str(rules["__nvidia_container_toolkit_min_version"])
        if version is not None and not (
            isinstance(version, str)
            and re.search(rules["__nvidia_container_toolkit_version_regex"], version)
            and _version_key(version) >= _version_key(least)
        ):
            problems.append(
                f"nvidia_container_toolkit_version is {version!r}: give the package version as"
                f' the repository names it, {least} or newer, exact ("1.18.0-1") or with a glob'
                ' ("1.18.0-*", "1.18.*")'
            )
    return problems


def role_problems(
    role: str,
    options: t.Mapping[str, t.Any],
    given: dict[str, t.Any],
    rules: t.Mapping[str, t.Any] | None = None,
) -> list[str]:
    """One line per problem with the variables set for one role on one host: an unknown name
    (with the closest known one), then what the argument specs refuse, then the checks that
    need no host: kubelet_gpu's labels, taints, settings and feature gates, gpu_cluster's
    settings as gpu_manifests checks them."""
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
        spec = _spec({name: options[name] for name in known})
        result = ArgumentSpecValidator(spec).validate(known)
        problems.extend(result.error_messages)
        if not result.error_messages and rules is not None:
            problems.extend(format_problems(role, known, rules))
        if role == "kubelet_gpu" and not result.error_messages:
            problems.extend(kubelet_problems(known))
        if role == "gpu_cluster" and not result.error_messages:
            problems.extend(cluster_problems(known))
        if role == "cluster_bootstrap" and not result.error_messages:
            problems.extend(bootstrap_problems(known, rules or {}))
    return problems


def bootstrap_problems(given: dict[str, t.Any], rules: t.Mapping[str, t.Any]) -> list[str]:
    """kubeadm's settings as the cluster_bootstrap role renders them: the values given over the
    role's defaults, so that a pod network given alone is checked against the default service
    network."""
    settings = {
        name[len(kb.PREFIX) :]: value
        for name, value in {**rules, **given}.items()
        if name.startswith(kb.PREFIX)
    }
    return list(kb.validate(settings))


def control_plane_problems(hosts: t.Sequence[str], endpoint: t.Any) -> list[str]:
    """Where kubeadm bootstraps the cluster: several control-plane hosts need an endpoint."""
    problem = kb.control_plane_hosts_problem(hosts, endpoint)
    return [problem] if problem else []


def global_problems(given: t.Mapping[str, t.Any]) -> list[str]:
    """The kubegpu_* globals that take one of a few values."""
    problems = []
    for name, (allowed, default) in GLOBAL_CHOICES.items():
        value = given.get(name, default)
        if value not in allowed:
            problems.append(
                f"{name} is {value!r}: it is one of {', '.join(allowed)} (default {default})"
            )
    return problems


def cluster_problems(given: dict[str, t.Any]) -> list[str]:
    """What gpu_manifests refuses of the gpu_cluster settings before it reads the cluster (the
    device plugin's rules: sharing, MIG, quotas, ...), each naming the inventory variable."""
    prefix = "gpu_cluster_"
    _, errors = cs.validate_config({name[len(prefix) :]: value for name, value in given.items()})
    return list(errors)


def kubelet_problems(given: dict[str, t.Any]) -> list[str]:
    """The kubelet checks that need no host, naming the inventory variables."""
    found = []
    found += kll.validate_node_labels(given.get("kubelet_gpu_node_labels"))
    found += kll.validate_taints(given.get("kubelet_gpu_node_taints"))
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
    # A name with a leading underscore is a role's own (its vars, set_fact and registered
    # results, which a host's variables hold once a role ran on it in the same run), never an
    # input.
    for name in sorted(set(names) - set(known)):
        if name.startswith("_"):
            continue
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
