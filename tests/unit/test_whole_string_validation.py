"""Every validator checks the whole value (issue #36).

Python's "$" matches before a final line break, so `re.match("^...$")` took "true\\n" for a label
value and the line break went on into files and command lines (KUBELET_EXTRA_ARGS,
/etc/modprobe.d). Ansible's `match` test is re.match as well. Each validator below is called
through its public entry point with a valid value, which must pass, and with hostile variants of
it, each of which must be refused with a message naming the variable: line breaks (trailing,
embedded, CRLF), NUL, shell metacharacters, an oversize value (where the format has a length
limit), and Unicode look-alikes (a Cyrillic letter, fullwidth digits, a zero-width space), which
"\\d", str.isdigit() and str.isidentifier() take.

The role checks (tasks/validate.yml, the upgrade playbook's assert) are evaluated as
kubegpu.gpu.checks evaluates them (plugin_utils/checks.py), with ansible-core's Templar and the
role's own variables: no play runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.kubegpu.gpu.plugins.module_utils import cluster_settings as cs
from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd_params as cp
from ansible_collections.kubegpu.gpu.plugins.module_utils import deb822, toml_text
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubelet as kl
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubelet_labels as kll
from ansible_collections.kubegpu.gpu.plugins.module_utils import nvidia_driver as nd
from ansible_collections.kubegpu.gpu.plugins.module_utils import tenancy_settings as ts
from ansible_collections.kubegpu.gpu.plugins.modules import gpu_node_readiness
from ansible_collections.kubegpu.gpu.plugins.plugin_utils import checks, inputs

from kubegpu.errors import InputError
from kubegpu.runner import run_playbook

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
BIG = 10_000

# Latin letters and the Cyrillic letters that look the same.
CYRILLIC = {"a": "\u0430", "c": "\u0441", "e": "\u0435", "o": "\u043e", "p": "\u0440"}
CYRILLIC.update({"x": "\u0445", "y": "\u0443", "s": "\u0455", "i": "\u0456", "k": "\u043a"})
# What reaches an options line in /etc/modprobe.d, or starts a line of its own.
LINE_BREAKS = ("trailing_newline", "embedded_newline", "crlf", "nul")


def _middle(text: str, insert: str) -> str:
    half = max(1, len(text) // 2)
    return text[:half] + insert + text[half:]


def _cyrillic(text: str) -> str | None:
    for index, char in enumerate(text):
        if char in CYRILLIC:
            return text[:index] + CYRILLIC[char] + text[index + 1 :]
    return None


def _fullwidth(text: str) -> str | None:
    if not any(c in "0123456789" for c in text):
        return None
    return "".join(chr(ord(c) + 0xFEE0) if c in "0123456789" else c for c in text)


def hostile_variants(valid: str) -> dict[str, str]:
    """The variants of a valid value that every validator must refuse (oversize aside)."""
    found = {
        "trailing_newline": valid + "\n",
        "embedded_newline": _middle(valid, "\n"),
        "crlf": valid + "\r\n",
        "nul": _middle(valid, "\x00"),
        "semicolon": valid + ";id",
        "command_substitution": valid + "$(id)",
        "backtick": valid + "`id`",
        "pipe": valid + "|id",
        "ampersand": valid + "&id",
        "zero_width_space": _middle(valid, "\u200b"),
    }
    cyrillic, fullwidth = _cyrillic(valid), _fullwidth(valid)
    if cyrillic is not None:
        found["cyrillic_lookalike"] = cyrillic
    if fullwidth is not None:
        found["fullwidth_digits"] = fullwidth
    return found


@dataclass(frozen=True)
class Validator:
    """A validator's entry point: check(value) gives the problem text, empty when it passes."""

    name: str
    variable: str
    check: Callable[[str], str]
    valid: tuple[str, ...]
    # A valid-looking value over the format's length limit; None where the format has none.
    oversize: str | None
    # Only these variants (a value's alphabet that legitimately holds the others).
    only: tuple[str, ...] | None = None


# --- entry points ---------------------------------------------------------------------------------


def cluster(settings: dict[str, Any]) -> str:
    """gpu_cluster: cluster_settings.validate_config, as gpu_manifests and check_inputs call it."""
    return "\n".join(cs.validate_config(settings)[1])


def tenancy(settings: dict[str, Any]) -> str:
    return "\n".join(ts.validate_settings(settings)[1])


_OPTIONS: dict[str, Any] = {}


def check_inputs(role: str, given: dict[str, Any]) -> str:
    """kubegpu.gpu.check_inputs: a role's inventory variables against its specs and rules."""
    if role not in _OPTIONS:
        _OPTIONS[role] = (inputs.load_options(ROLES, role), inputs.load_rules(ROLES, role))
    options, rules = _OPTIONS[role]
    return "\n".join(inputs.role_problems(role, options, given, rules))


def raised(call: Callable[[], Any], *errors: type[Exception]) -> str:
    try:
        call()
    except errors as exc:
        return str(exc)
    return ""


class _Failed(Exception):
    pass


class _Module:
    """What gpu_node_readiness.validate reads of its AnsibleModule: params and fail_json."""

    def __init__(self, **params: Any) -> None:
        self.params = {"expected_gpu_count": None, "host_root": "/", **params}

    def fail_json(self, msg: str) -> None:
        raise _Failed(msg)


def readiness_branch(value: str) -> str:
    return raised(lambda: gpu_node_readiness.validate(_Module(driver_branch=value)), _Failed)


def extra_var_name(name: str) -> str:
    """kubegpu.run_playbook refuses bad extra vars before anything runs; forks=0 is refused
    just after them, so that a good name stops there too."""
    try:
        run_playbook("site.yml", {}, forks=0, extra_vars={name: 1})
    except InputError as exc:
        return str(exc) if exc.variable.startswith("extra_vars") else ""
    raise AssertionError("run_playbook ran")


def runtime_name(value: str) -> str:
    params = {
        "record_path": "",
        "state": "present",
        "runtime_name": value,
        "runtime_binary": "/usr/bin/nvidia-container-runtime",
        "validate_timeout": 30,
    }
    return cp.param_problem(params) or ""


def deb822_name(value: str) -> str:
    options = {"name": value, "types": ["deb"], "uris": ["https://example.com/"], "suites": ["/"]}
    return raised(lambda: deb822.deb822_source(options), deb822.Deb822Error)


def feature_gates_version(value: str) -> str:
    found = kl.validate_feature_gates({"DevicePluginCDIDevices": True}, value)
    return "\n".join(m for m in found if m.startswith("kubernetes_version"))


# --- the role checks, as kubegpu.gpu.checks evaluates them ---------------------------------------


def _trusted(data: Any) -> Any:
    """Playbook text as ansible-core loads it: its strings may be templates."""
    if isinstance(data, str):
        return trust_as_template(data)
    if isinstance(data, dict):
        return {key: _trusted(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_trusted(item) for item in data]
    return data


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _role_values(role: str) -> dict[str, Any]:
    """The role's defaults and vars as plain data (the checks below use only plain ones)."""
    found: dict[str, Any] = {}
    for part in ("defaults", "vars"):
        found.update(_load(ROLES / role / part / "main.yml") or {})
    return found


def _role_check(role: str, check_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The check of that name in the role's tasks/validate.yml, and its task's own vars."""
    for task in _load(ROLES / role / "tasks" / "validate.yml"):
        for args in task.values():
            if isinstance(args, dict) and isinstance(args.get("checks"), list):
                for check in args["checks"]:
                    if check.get("name") == check_name:
                        return check, task.get("vars") or {}
    raise AssertionError(f"no check {check_name!r} in role {role}")


def role_check(
    role: str, check_name: str, build: Callable[[str], dict[str, Any]]
) -> Callable[[str], str]:
    """check(value): the message of the role's check with the variables build(value) gives,
    empty when it passes."""
    check, task_vars = _role_check(role, check_name)
    base = {**_role_values(role), **_trusted(task_vars)}

    def run(value: str) -> str:
        templar = Templar(loader=DataLoader(), variables={**base, **build(value)})
        result = checks.evaluate(templar, [_trusted(check)])
        return str(result["msg"]) if result.get("failed") else ""

    return run


def upgrade_check(variable: str) -> Callable[[str], str]:
    """The assert of playbooks/upgrade_driver.yml that checks the upgrade settings."""
    plays = _load(REPO / "playbooks" / "upgrade_driver.yml")
    task = next(
        task
        for play in plays
        for task in play.get("tasks", [])
        if task["name"] == "Check the batch size, failure threshold and drain settings"
    )
    assertion = task["ansible.builtin.assert"]
    check = {"name": task["name"], "that": assertion["that"], "msg": assertion["fail_msg"]}

    def run(value: str) -> str:
        templar = Templar(loader=DataLoader(), variables={variable: value})
        result = checks.evaluate(templar, [_trusted(check)])
        return str(result["msg"]) if result.get("failed") else ""

    return run


def _modprobe(name: str, value: Any) -> dict[str, Any]:
    return {"nvidia_driver_module_parameters": {"nvidia": {name: value}}}


PARAMETER = "NVreg_OpenRmEnableUnsupportedGpus"
# NVIDIA's registry keys: ';' and '=' belong in the value.
DWORDS = "RMUseSwI2c=0x01;RMI2cSpeed=100"
SHA = "0123456789abcdef" * 4
FINGERPRINT = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"

VALIDATORS = [
    # gpu_cluster (k8s_values and cluster_settings): what gpu_manifests and check_inputs check.
    Validator(
        "cluster_label_value",
        "gpu_cluster_gpu_node_label_value",
        lambda v: cluster({"gpu_node_label_value": v}),
        ("true",),
        "t" * BIG,
    ),
    Validator(
        "cluster_label_key",
        "gpu_cluster_gpu_node_label",
        lambda v: cluster({"gpu_node_label": v}),
        ("nvidia.com/gpu.present",),
        "nvidia.com/" + "g" * BIG,
    ),
    Validator(
        "cluster_taint_value",
        "gpu_cluster_node_taints.gpu-1[0].value",
        lambda v: cluster(
            {
                "node_taints": {
                    "gpu-1": [{"key": "nvidia.com/gpu", "value": v, "effect": "NoSchedule"}]
                }
            }
        ),
        ("dedicated",),
        "d" * BIG,
    ),
    Validator(
        "cluster_namespace",
        "gpu_cluster_namespace",
        lambda v: cluster({"namespace": v}),
        ("kube-system",),
        "k" * BIG,
    ),
    Validator(
        "cluster_runtime_class_name",
        "gpu_cluster_runtime_class_name",
        lambda v: cluster({"runtime_class_name": v}),
        ("nvidia",),
        "n" * BIG,
    ),
    Validator(
        "cluster_quota_quantity",
        "gpu_cluster_quotas[0].gpus",
        lambda v: cluster({"quotas": [{"namespace": "team-a", "gpus": v}]}),
        ("4",),
        "4" * BIG,
    ),
    Validator(
        "cluster_resources_quantity",
        "gpu_cluster_device_plugin_resources.requests.cpu",
        lambda v: cluster({"device_plugin_resources": {"requests": {"cpu": v}}}),
        ("100m", "1.5"),
        "1" * BIG,
    ),
    Validator(
        "cluster_image_registry",
        "gpu_cluster_image_registry",
        lambda v: cluster({"image_registry": v}),
        ("nvcr.io", "registry.example.com:5000/mirror"),
        "r" * BIG,
    ),
    Validator(
        "cluster_image_path",
        "gpu_cluster_device_plugin_image",
        lambda v: cluster({"device_plugin_image": v}),
        ("nvidia/k8s-device-plugin",),
        "nvidia/" + "k" * BIG,
    ),
    Validator(
        "cluster_image_tag",
        "gpu_cluster_device_plugin_version",
        lambda v: cluster({"device_plugin_version": v}),
        ("v0.20.0",),
        "v" + "0" * BIG,
    ),
    Validator(
        "cluster_image_digest",
        "gpu_cluster_dcgm_exporter_digest",
        lambda v: cluster({"dcgm_exporter_digest": v}),
        ("sha256:" + SHA,),
        "sha256:" + "a" * BIG,
    ),
    Validator(
        "cluster_default_config_name",
        "gpu_cluster_device_plugin_default_config",
        lambda v: cluster({"device_plugin_default_config": v}),
        ("default",),
        "d" * BIG,
    ),
    Validator(
        "cluster_config_name",
        "gpu_cluster_device_plugin_configs",
        lambda v: cluster({"device_plugin_configs": {v: {"mig_strategy": "single"}}}),
        ("a100-mig",),
        "a" * BIG,
    ),
    # Go's time.ParseDuration takes a duration of any length ("1s1s1s...").
    Validator(
        "cluster_duration",
        "gpu_cluster_gfd_sleep_interval",
        lambda v: cluster({"gfd_sleep_interval": v}),
        ("60s", "1h30m"),
        None,
    ),
    # gpu_tenancy (tenancy_settings).
    Validator(
        "tenant_name",
        "gpu_tenancy_tenants[0]",
        lambda v: tenancy({"tenants": [{"name": v, "gpus": {"nvidia.com/gpu": "1"}}]}),
        ("team-a",),
        "t" * BIG,
    ),
    Validator(
        "tenant_gpu_quantity",
        "gpu_tenancy_tenants[0] (team-a).gpus.nvidia.com/gpu",
        lambda v: tenancy({"tenants": [{"name": "team-a", "gpus": {"nvidia.com/gpu": v}}]}),
        ("4",),
        "4" * BIG,
    ),
    Validator(
        "tenant_dra_device_class",
        "gpu_tenancy_tenants[0] (team-a).devices.",
        lambda v: tenancy({"tenants": [{"name": "team-a", "devices": {v: "1"}}]}),
        ("gpu.nvidia.com",),
        "g" * BIG + ".nvidia.com",
    ),
    Validator(
        "tenant_dra_device_count",
        "gpu_tenancy_tenants[0] (team-a).devices.gpu.nvidia.com",
        lambda v: tenancy({"tenants": [{"name": "team-a", "devices": {"gpu.nvidia.com": v}}]}),
        ("2",),
        "2" * BIG,
    ),
    Validator(
        "tenancy_pod_security_version",
        "gpu_tenancy_pod_security_version",
        lambda v: tenancy({"pod_security_version": v}),
        ("latest", "v1.31"),
        "v1." + "3" * BIG,
    ),
    # Prometheus takes label names of any length.
    Validator(
        "tenancy_prometheus_label",
        "gpu_tenancy_monitoring_namespace_label",
        lambda v: tenancy({"monitoring_namespace_label": v}),
        ("namespace",),
        None,
    ),
    Validator(
        "tenancy_mig_resource",
        "gpu_tenancy_workload_mig_resource",
        lambda v: tenancy({"workload_mig_resource": v}),
        ("nvidia.com/mig-1g.10gb",),
        "nvidia.com/mig-1g.10gb" + "-a" * (BIG // 2),
    ),
    # kubelet_gpu (kubelet_labels, kubelet): what kubelet_config checks before it merges labels
    # and taints into KUBELET_EXTRA_ARGS or config.yaml.
    Validator(
        "kubelet_label_value",
        "node_labels",
        lambda v: "\n".join(kll.validate_node_labels({"example.com/gpu-pool": v})),
        ("true",),
        "t" * BIG,
    ),
    Validator(
        "kubelet_label_key",
        "node_labels",
        lambda v: "\n".join(kll.validate_node_labels({v: "true"})),
        ("example.com/gpu-pool",),
        "example.com/" + "g" * BIG,
    ),
    Validator(
        "kubelet_taint_value",
        "node_taints[0]",
        lambda v: "\n".join(
            kll.validate_taints([{"key": "nvidia.com/gpu", "value": v, "effect": "NoSchedule"}])
        ),
        ("present",),
        "p" * BIG,
    ),
    Validator(
        "kubelet_taint_key",
        "node_taints[0]",
        lambda v: "\n".join(kll.validate_taints([{"key": v, "effect": "NoSchedule"}])),
        ("nvidia.com/gpu",),
        "nvidia.com/" + "g" * BIG,
    ),
    # KubeletConfiguration field names are checked by form: the kubelet knows the names.
    Validator(
        "kubelet_settings_field",
        "settings",
        lambda v: "\n".join(kl.validate_settings({v: 110})),
        ("maxPods",),
        None,
    ),
    Validator(
        "kubelet_version",
        "kubernetes_version",
        feature_gates_version,
        ("1.35", "v1.35.2"),
        "1." + "3" * BIG,
    ),
    # The inventory variables as check_inputs checks them on the controller.
    Validator(
        "check_inputs_kubelet_label_value",
        "kubelet_gpu_node_labels",
        lambda v: check_inputs("kubelet_gpu", {"kubelet_gpu_node_labels": {"example.com/pool": v}}),
        ("true",),
        "t" * BIG,
    ),
    Validator(
        "check_inputs_driver_branch",
        "nvidia_driver_branch",
        lambda v: check_inputs("nvidia_driver", {"nvidia_driver_branch": v}),
        ("580",),
        "5" * BIG,
    ),
    # A kernel module parameter's name is any C identifier.
    Validator(
        "check_inputs_modprobe_name",
        "nvidia_driver_module_parameters",
        lambda v: check_inputs("nvidia_driver", _modprobe(v, 1)),
        (PARAMETER,),
        None,
    ),
    Validator(
        "check_inputs_modprobe_value",
        "nvidia_driver_module_parameters",
        lambda v: check_inputs("nvidia_driver", _modprobe("NVreg_RegistryDwords", v)),
        (DWORDS, "1"),
        None,
        only=LINE_BREAKS,
    ),
    # The collection's own checks.
    Validator(
        "driver_branch",
        "nvidia_driver_branch",
        lambda v: raised(lambda: nd.parse_branch(v), nd.DriverInputError),
        ("580",),
        "5" * BIG,
    ),
    Validator(
        "readiness_driver_branch",
        "driver_branch",
        readiness_branch,
        ("580", "580.95.05"),
        "5" * BIG,
    ),
    Validator(
        "containerd_runtime_name",
        "runtime_name",
        runtime_name,
        ("nvidia", "nvidia-cdi"),
        "n" * BIG,
    ),
    # The name of a deb822 source the roles write (their own names): no length rule.
    Validator("deb822_name", "name", deb822_name, ("nvidia-container-toolkit",), None),
    # Ansible takes variable names of any length.
    Validator(
        "extra_var_name", "extra_vars", extra_var_name, ("gpu_pool", "kubegpu_upgrade_serial"), None
    ),
    # The roles' own checks (tasks/validate.yml), before the host changes.
    Validator(
        "role_driver_branch",
        "nvidia_driver_branch",
        role_check(
            "nvidia_driver",
            "Check the format of nvidia_driver_branch",
            lambda v: {"nvidia_driver_branch": v},
        ),
        ("580",),
        "5" * BIG,
    ),
    Validator(
        "role_modprobe_name",
        "nvidia_driver_module_parameters",
        role_check(
            "nvidia_driver",
            "Check the shape of nvidia_driver_module_parameters",
            lambda v: _modprobe(v, 1),
        ),
        (PARAMETER,),
        None,
    ),
    Validator(
        "role_modprobe_value",
        "nvidia_driver_module_parameters",
        role_check(
            "nvidia_driver",
            "Check the shape of nvidia_driver_module_parameters",
            lambda v: _modprobe("NVreg_RegistryDwords", v),
        ),
        (DWORDS, "1"),
        None,
        only=LINE_BREAKS,
    ),
    Validator(
        "role_runtime_name",
        "container_runtime_nvidia_runtime_name",
        role_check(
            "container_runtime",
            "Check the nvidia runtime's name and binary",
            lambda v: {"container_runtime_nvidia_runtime_name": v},
        ),
        ("nvidia",),
        "n" * BIG,
    ),
    Validator(
        "role_containerd_drop_in_name",
        "container_runtime_containerd_drop_in_name",
        role_check(
            "container_runtime",
            "Check the containerd paths",
            lambda v: {"container_runtime_containerd_drop_in_name": v},
        ),
        ("99-nvidia.toml",),
        "9" * BIG + ".toml",
    ),
    Validator(
        "role_crio_drop_in",
        "container_runtime_crio_drop_in",
        role_check(
            "container_runtime",
            "Check the docker and CRI-O paths",
            lambda v: {"container_runtime_crio_drop_in": v},
        ),
        ("/etc/crio/crio.conf.d/99-nvidia.conf",),
        "/etc/crio/" + "c" * BIG,
    ),
    Validator(
        "role_toolkit_key_checksum",
        "nvidia_container_toolkit_repo_key_checksum",
        role_check(
            "nvidia_container_toolkit",
            "Check the format of the key's checksum and fingerprint",
            lambda v: {
                "nvidia_container_toolkit_repo_manage": True,
                "nvidia_container_toolkit_repo_key_checksum": v,
            },
        ),
        ("sha256:" + SHA, "sha1:" + SHA[:40]),
        "sha256:" + "a" * BIG,
    ),
    Validator(
        "role_toolkit_key_fingerprint",
        "nvidia_container_toolkit_repo_key_fingerprint",
        role_check(
            "nvidia_container_toolkit",
            "Check the format of the key's checksum and fingerprint",
            lambda v: {
                "nvidia_container_toolkit_repo_manage": True,
                "nvidia_container_toolkit_repo_key_fingerprint": v,
            },
        ),
        (FINGERPRINT,),
        "C" * BIG,
    ),
    Validator(
        "role_toolkit_cdi_output",
        "nvidia_container_toolkit_cdi_output",
        role_check(
            "nvidia_container_toolkit",
            "Check where the CDI spec goes",
            lambda v: {"nvidia_container_toolkit_cdi_output": v},
        ),
        ("/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.json"),
        "/etc/cdi/" + "n" * BIG + ".yaml",
    ),
    # The upgrade playbook's settings: whole numbers, which have no length rule.
    Validator(
        "upgrade_serial",
        "kubegpu_upgrade_serial",
        upgrade_check("kubegpu_upgrade_serial"),
        ("1", "25%"),
        None,
    ),
    Validator(
        "upgrade_max_fail_percentage",
        "kubegpu_upgrade_max_fail_percentage",
        upgrade_check("kubegpu_upgrade_max_fail_percentage"),
        ("0", "100"),
        "1" * BIG,
    ),
    Validator(
        "upgrade_drain_timeout",
        "kubegpu_upgrade_drain_timeout",
        upgrade_check("kubegpu_upgrade_drain_timeout"),
        ("600",),
        None,
    ),
]


def _hostile_cases() -> list[Any]:
    cases = []
    for validator in VALIDATORS:
        variants: dict[str, str] = {}
        for valid in validator.valid:
            for kind, value in hostile_variants(valid).items():
                variants.setdefault(kind, value)
        if validator.oversize is not None:
            variants["oversize"] = validator.oversize
        for kind, value in variants.items():
            if validator.only is None or kind in validator.only:
                cases.append(pytest.param(validator, value, id=f"{validator.name}-{kind}"))
    return cases


def _valid_cases() -> list[Any]:
    return [
        pytest.param(validator, valid, id=f"{validator.name}-valid-{index}")
        for validator in VALIDATORS
        for index, valid in enumerate(validator.valid)
    ]


@pytest.mark.parametrize(("validator", "value"), _valid_cases())
def test_a_valid_value_passes(validator: Validator, value: str) -> None:
    assert validator.check(value) == ""


@pytest.mark.parametrize(("validator", "value"), _hostile_cases())
def test_a_hostile_value_is_refused_naming_the_variable(validator: Validator, value: str) -> None:
    problem = validator.check(value)
    assert problem, f"{validator.name} took {value[:80]!r}"
    assert validator.variable in problem


def test_every_variant_kind_is_tried() -> None:
    """The table covers every kind of hostile value somewhere, the look-alikes included."""
    kinds = {case.id.rsplit("-", 1)[1] for case in _hostile_cases()}
    assert kinds >= {
        "trailing_newline",
        "embedded_newline",
        "crlf",
        "nul",
        "semicolon",
        "command_substitution",
        "backtick",
        "pipe",
        "ampersand",
        "oversize",
        "cyrillic_lookalike",
        "fullwidth_digits",
        "zero_width_space",
    }


# --- a TOML key is written bare only when all of it may be ------------------------------------


@pytest.mark.parametrize(
    "key",
    ["nvidia\n", "nvidia\nBinaryName = '/bin/sh'", "nvidia\r\n", "nvidia\x00", "nvid\u0430"],
    ids=["trailing_newline", "embedded_newline", "crlf", "nul", "cyrillic_lookalike"],
)
def test_a_toml_key_that_is_not_all_bare_is_quoted(key: str) -> None:
    text = toml_text.quote_key(key)
    assert text.startswith('"') and "\n" not in text and "\r" not in text


def test_a_bare_toml_key_stays_bare() -> None:
    assert toml_text.quote_key("nvidia-cdi_2") == "nvidia-cdi_2"


# --- what reaches the kubelet's environment file or containerd's import glob -------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("config_dir", "/etc/kubernetes/kubelet.conf.d\nKUBELET_X=1"),
        ("config_dir", "/etc/kubelet.d --v=9"),
        ("config_dir", "relative/kubelet.d"),
        ("config_dir", "/etc/kubelet\x00.d"),
        ("dropin_name", "50-kubegpu.conf\n"),
        ("dropin_name", "50 kubegpu.conf"),
        ("dropin_name", ".hidden.conf"),
    ],
)
def test_kubelet_paths_that_reach_its_files_are_whole_plain_paths(option: str, value: str) -> None:
    from ansible_collections.kubegpu.gpu.plugins.module_utils.kubelet_node import input_problems

    params = {
        "settings": {},
        "node_labels": {},
        "node_taints": [],
        "dropin_name": "50-kubegpu.conf",
        "config_dir": "/etc/kubernetes/kubelet.conf.d",
        option: value,
    }
    problems = input_problems(params, "kubeadm")
    assert len(problems) == 1 and problems[0].startswith(f"{option}: {value!r}"), problems
    assert (
        input_problems(
            dict(params, **{option: {"config_dir": "/etc/k.d", "dropin_name": "a.conf"}[option]}),
            "kubeadm",
        )
        == []
    )


@pytest.mark.parametrize(
    "name", ["99-nvidia.toml\n", "99 nvidia.toml", "../99-nvidia.toml", "x.toml\x00"]
)
def test_containerd_drop_in_names_are_whole_plain_file_names(name: str, tmp_path) -> None:
    from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd as c

    with pytest.raises(c.ContainerdConfigError, match=r"must be a file name ending in \.toml"):
        c.plan(
            None,
            "/usr/bin/containerd",
            str(tmp_path / "config.toml"),
            str(tmp_path / "conf.d"),
            name,
            "nvidia",
            "/usr/bin/nvidia-container-runtime",
            False,
            tmp_root=str(tmp_path),
        )


# --- host paths of the component pods and image references of the workloads -----------------------


@pytest.mark.parametrize(
    ("variable", "good"),
    [("mps_root", "/run/nvidia/mps"), ("driver_root", "/run/nvidia/driver")],
)
@pytest.mark.parametrize(
    "bad",
    ["/run/nvidia\n/mps", "/run/nvidia/mps\x00", "/run/nvidia mps", "/run/nv\u0456dia", "run/x"],
)
def test_host_paths_of_the_pods_are_whole_plain_paths(variable: str, good: str, bad: str) -> None:
    assert f"{variable}:" not in cluster({variable: good})
    assert f"{variable}: {bad!r}" in cluster({variable: bad})


@pytest.mark.parametrize(
    ("variable", "good"),
    [
        ("workload_pytorch_image", "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"),
        ("workload_image_registry", "registry.example.test:5000/mirror"),
    ],
)
@pytest.mark.parametrize(
    "bad", ["pytorch/pytorch:2.7.1\x00", "pytorch/pyt\u043erch:2.7.1", "a\tb:1"]
)
def test_workload_images_are_printable_ascii(variable: str, good: str, bad: str) -> None:
    assert f"{variable}:" not in tenancy({"tenants": [], variable: good})
    assert f"{variable}: {bad!r}" in tenancy({"tenants": [], variable: bad})
