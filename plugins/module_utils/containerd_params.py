# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The containerd_runtime module's parameters and result, shared by the module and its action
plugin (which runs plan() on the controller over one sh script's reads of the node).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils.containerd import plan, toml_parser_name
from ansible_collections.kubegpu.gpu.plugins.module_utils.containerd_hosts import mirror_problem


ARGUMENT_SPEC = dict(
    config_path=dict(type="path", default="/etc/containerd/config.toml"),
    drop_in_dir=dict(type="path", default="/etc/containerd/conf.d"),
    drop_in_name=dict(type="str", default="99-nvidia.toml"),
    runtime_name=dict(type="str", default="nvidia"),
    runtime_binary=dict(type="path", default="/usr/bin/nvidia-container-runtime"),
    default_runtime=dict(type="bool", default=False),
    cdi=dict(type="bool", default=True),
    nvidia_runtime=dict(type="bool", default=True),
    systemd_cgroup=dict(type="bool"),
    registry_mirrors=dict(type="dict", default={}),
    registry_config_path=dict(type="path", default="/etc/containerd/certs.d"),
    validate=dict(type="bool", default=True),
    validate_timeout=dict(type="int", default=30),
    containerd_binary=dict(type="path"),
    ctr_binary=dict(type="path"),
    backup=dict(type="bool", default=True),
    state=dict(type="str", default="present", choices=["present", "absent"]),
    record_path=dict(type="str", default="/etc/ansible/facts.d/kubegpu_containerd.fact"),
    restart_marker=dict(type="str", default=""),
)
# Where containerd and ctr are looked for before PATH (get_bin_path's opt_dirs).
BINARY_DIRS = ["/usr/local/bin", "/usr/bin"]
# The environment of the containerd commands the module runs.
COMMAND_ENVIRONMENT = {"LC_ALL": "C", "LANG": "C"}
# Matched against the whole name (fullmatch): "$" would let "nvidia\n" through.
RUNTIME_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def initial_result(params):
    """The module's result before anything is read."""
    return dict(
        changed=False,
        restart_required=False,
        drop_in_path=os.path.join(params["drop_in_dir"], params["drop_in_name"]),
        config_changed=False,
        drop_in_changed=False,
        validation={"dump": "not run", "daemon": "not run"},
        backup_files=[],
        toml_parser=toml_parser_name(),
    )


def param_problem(params):
    """The message for the first parameter the module refuses (state=absent uses only
    record_path), or None."""
    if params.get("restart_marker") and not os.path.isabs(params["restart_marker"]):
        return (
            "restart_marker %r must be an absolute path (or empty to keep no marker)"
            % params["restart_marker"]
        )
    if params["record_path"] and not os.path.isabs(params["record_path"]):
        return (
            "record_path %r must be an absolute path (or empty to keep no record)"
            % params["record_path"]
        )
    config_path = params.get("registry_config_path") or "/etc/containerd/certs.d"
    if not os.path.isabs(config_path):
        return (
            "registry_config_path %r must be an absolute path (containerd's certs.d folder)"
            % config_path
        )
    if params["state"] == "absent":
        return None
    if not RUNTIME_NAME.fullmatch(params["runtime_name"]):
        return (
            "runtime_name %r is not a valid RuntimeClass handler: lowercase letters, digits and "
            "'-', starting and ending with a letter or digit, at most 63 characters"
            % params["runtime_name"]
        )
    if not os.path.isabs(params["runtime_binary"]):
        return (
            "runtime_binary %r must be an absolute path (containerd runs BinaryName without a "
            "search path), for example /usr/bin/nvidia-container-runtime" % params["runtime_binary"]
        )
    if params["validate_timeout"] < 1:
        return "validate_timeout must be at least 1 second, got %d" % params["validate_timeout"]
    return mirror_problem(params.get("registry_mirrors") or {})


def not_installed_message(containerd):
    return (
        "containerd is not installed on this host (no containerd binary%s); install it first "
        "(container_runtime_install: true installs the distribution's package)"
        % (" at %s" % containerd if containerd else " on PATH")
    )


def plan_for(params, run, containerd, node=None):
    """plan() for the module's parameters."""
    return plan(
        run,
        containerd,
        params["config_path"],
        params["drop_in_dir"],
        params["drop_in_name"],
        params["runtime_name"],
        params["runtime_binary"],
        params["default_runtime"],
        node=node,
        cdi=params["cdi"],
        registry_config_path=(
            params["registry_config_path"] if params.get("registry_mirrors") else None
        ),
        nvidia=params["nvidia_runtime"],
        systemd_cgroup=params["systemd_cgroup"],
    )


def update_result(result, planned):
    """Put what plan() found into the result; returns whether anything changes."""
    config_changed = planned["main_before"] != planned["main_after"]
    drop_in_changed = planned["drop_in_before"] != planned["drop_in_after"]
    changed = config_changed or drop_in_changed
    result.update(
        containerd_version=planned["containerd_version"],
        config_version=planned["config_version"],
        schema=planned["schema"].as_dict(),
        systemd_cgroup=planned["systemd_cgroup"],
        systemd_cgroup_source=planned["systemd_cgroup_source"],
        cgroup_runtimes=planned["cgroup_runtimes"],
        cdi=planned["cdi"],
        changed=changed,
        restart_required=changed,
        config_changed=config_changed,
        drop_in_changed=drop_in_changed,
    )
    return changed
