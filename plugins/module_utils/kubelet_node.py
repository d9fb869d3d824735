# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""What kubegpu.gpu.kubelet_config decides on a node, through a node interface.

decide() checks the inputs, finds the kubelet's layout, binary and version, and plans the files
to write; it reads the node only through `node`. LocalNode is this machine (the module, on the
node, which then writes the plan). The module's action plugin passes a node that answers from
what one sh script read, so that the same code gives the same result on the controller.
Runs on the target's Python (3.8+) too.
"""

from __future__ import absolute_import, division, print_function

import os
import re

from ansible_collections.kubegpu.gpu.plugins.module_utils.files import PLAIN_ABSOLUTE_PATH
from ansible_collections.kubegpu.gpu.plugins.module_utils.redact import redact_diff
from ansible_collections.kubegpu.gpu.plugins.module_utils.kubelet import (
    DEFAULT_PATHS,
    DROPIN_ENV_UNTIL,
    DROPIN_SINCE,
    KubeletConfigError,
    parse_kubernetes_version,
    plan_kubelet_files,
    validate_feature_gates,
    validate_settings,
)
from ansible_collections.kubegpu.gpu.plugins.module_utils.kubelet_labels import (
    split_node_labels,
    validate_node_labels,
    validate_taints,
)

__metaclass__ = type

BINARIES = {"kubeadm": "kubelet", "k3s": "k3s", "rke2": "rke2"}
EXTRA_DIRS = ["/usr/local/bin", "/usr/bin", "/opt/bin"]
# Where the kubeadm packages keep KUBELET_EXTRA_ARGS (Debian's, then RHEL's), and the folder
# whose presence makes the second the default.
EXTRA_ARGS_PATHS = ("/etc/default/kubelet", "/etc/sysconfig/kubelet")
SYSCONFIG_DIR = "/etc/sysconfig"
# flavor auto: the first of these whose /etc/rancher folder or binary is there, else kubeadm.
AUTO_FLAVORS = ("rke2", "k3s")
RANCHER_DIR = "/etc/rancher/"


ARGUMENT_SPEC = dict(
    flavor=dict(type="str", default="auto", choices=["auto", "kubeadm", "k3s", "rke2"]),
    kubelet_version=dict(type="str"),
    feature_gates=dict(type="dict", default={}),
    unchecked_feature_gates=dict(type="list", elements="str", default=[]),
    settings=dict(type="dict", default={}),
    node_labels=dict(type="dict", default={}),
    node_taints=dict(type="list", elements="raw", default=[]),
    config_path=dict(type="path"),
    extra_args_path=dict(type="path"),
    config_dir=dict(type="path"),
    dropin_name=dict(type="str", default="50-kubegpu.conf"),
    binary=dict(type="path"),
    validate_only=dict(type="bool", default=False),
    without_pyyaml=dict(type="str", default="fail", choices=["fail", "report"]),
    backup=dict(type="bool", default=True),
    restart_marker=dict(type="str", default=""),
    state=dict(type="str", default="present", choices=["present", "absent"]),
    record_path=dict(type="str", default="/etc/ansible/facts.d/kubegpu_kubelet.fact"),
)


class LocalNode(object):
    """This machine, as the module reads it."""

    def __init__(self, module):
        self._module = module

    def exists(self, path):
        return os.path.exists(path)

    def isdir(self, path):
        return os.path.isdir(path)

    def read_text(self, path):
        """The text of the file at path, which exists; one that cannot be read raises."""
        with open(path) as handle:
            return handle.read()

    def bin_path(self, name, opt_dirs):
        return self._module.get_bin_path(name, opt_dirs=opt_dirs)

    def version_output(self, binary):
        """(rc, stdout, stderr) of `binary --version`."""
        return self._module.run_command([binary, "--version"], environ_update={"LC_ALL": "C"})

    def find_yaml(self):
        """Whether this Python can find PyYAML (without importing it)."""
        import importlib.util

        return importlib.util.find_spec("yaml") is not None

    def import_yaml(self):
        """PyYAML as this Python imports it, or None."""
        try:
            import yaml
        except ImportError:
            return None
        return yaml

    def warn(self, message):
        self._module.warn(message)


def detect_flavor(node):
    for flavor in AUTO_FLAVORS:
        if node.isdir(RANCHER_DIR + flavor) or node.bin_path(flavor, EXTRA_DIRS):
            return flavor
    return "kubeadm"


def binary_version(node, binary):
    """(printed version text, (major, minor)) from `binary --version`, or (None, None)."""
    if not binary:
        return None, None
    rc, out, err = node.version_output(binary)
    if rc != 0:
        node.warn("%s --version exited %d: %s" % (binary, rc, (err or out).strip()))
        return None, None
    return out.strip(), parse_kubernetes_version(out, printed=True)


def default_extra_args_path(node):
    """Where KUBELET_EXTRA_ARGS lives when extra_args_path is not given."""
    debian, redhat = EXTRA_ARGS_PATHS
    if node.exists(debian):
        return debian
    if node.exists(redhat) or node.isdir(SYSCONFIG_DIR):
        return redhat
    return debian


# Matched against the whole value (fullmatch), at most 255 characters per path component.
_DROPIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,249}[.]conf")


def input_problems(p, flavor):
    """The problems with the inputs that do not need the kubelet's version."""
    problems = []
    problems.extend(validate_settings(p["settings"]))
    problems.extend(validate_node_labels(p["node_labels"]))
    problems.extend(validate_taints(p["node_taints"]))
    name = p["dropin_name"]
    if not _DROPIN_NAME.fullmatch(name):
        problems.append(
            "dropin_name: %r must be a plain file name ending in .conf (letters, digits, '.', "
            "'_' and '-'; the kubelet reads only *.conf files in its drop-in directory), for "
            "example 50-kubegpu.conf" % name
        )
    # It goes into KUBELET_EXTRA_ARGS (--config-dir=...): a line break or a space there would
    # write another line or another flag into the kubelet's environment file.
    if p["config_dir"] and not PLAIN_ABSOLUTE_PATH.fullmatch(p["config_dir"]):
        problems.append(
            "config_dir: %r must be an absolute path of letters, digits, '.', '_', '-' and '/' "
            "(no spaces, line breaks or other characters), for example "
            "/etc/kubernetes/kubelet.conf.d" % p["config_dir"]
        )
    if flavor != "kubeadm" and p["settings"] and not p["config_dir"]:
        problems.append(
            "settings: %s has no KubeletConfiguration file to merge settings into; give "
            "config_dir (a kubelet drop-in directory) to use settings with %s" % (flavor, flavor)
        )
    return problems


def needs_version(p):
    """Whether the inputs need the kubelet's version: for gates and for the drop-in directory."""
    return bool(p["feature_gates"]) or bool(p["config_dir"])


def check_version(p, node, flavor, result, problems):
    """The release the inputs are checked against (None when none), from kubelet_version or the
    binary; sets kubelet_found and version_source in result, adds problems."""
    binary = p["binary"] or node.bin_path(BINARIES[flavor], EXTRA_DIRS)
    result["kubelet_found"] = bool(binary and node.exists(binary))
    need_version = needs_version(p)
    release = None
    if p["kubelet_version"]:
        release = parse_kubernetes_version(p["kubelet_version"])
        if release is None:
            problems.append(
                "kubelet_version: %r is not a Kubernetes version; write it as 1.31 or v1.31.2"
                % p["kubelet_version"]
            )
        else:
            result["version_source"] = "given"
            if need_version and result["kubelet_found"]:
                printed, found = binary_version(node, binary)
                if found and found != release:
                    node.warn(
                        "kubelet_version %s was given but %s --version says %r; the inputs "
                        "were checked against %s"
                        % (p["kubelet_version"], binary, printed, p["kubelet_version"])
                    )
    elif need_version:
        printed, release = binary_version(node, binary if result["kubelet_found"] else None)
        if release is None:
            problems.append(
                "kubelet_version: not given, and no %s binary on this host could tell its "
                'version%s; set kubelet_version (for example "1.35") to the version of the '
                "kubelet that will read these settings"
                % (BINARIES[flavor], " (it printed %r)" % printed if printed else "")
            )
        else:
            result["version_source"] = "binary"
    return release


def release_problems(p, flavor, release):
    """The problems with the inputs against the kubelet's release."""
    version = "%d.%d" % release
    problems = validate_feature_gates(p["feature_gates"], version, p["unchecked_feature_gates"])
    if p["config_dir"] and release < DROPIN_SINCE:
        problems.append(
            "config_dir: the kubelet of %s has no drop-in directory (--config-dir came in "
            "1.28); leave config_dir empty" % version
        )
    elif p["config_dir"] and flavor != "kubeadm" and release <= DROPIN_ENV_UNTIL:
        problems.append(
            "config_dir: the kubelet of %s reads a drop-in directory only with "
            "KUBELET_CONFIG_DROPIN_DIR_ALPHA in its environment, which kubegpu does not "
            "manage for %s; leave config_dir empty or use Kubernetes 1.30 or later"
            % (version, flavor)
        )
    return problems


def decide(p, node, diff=False):
    """What kubelet_config does with parameters p on a node: (result, msg, plans).

    msg is None, or the message the task fails with (and result); plans are the files to write
    (plan_kubelet_files' dicts), none with validate_only or without PyYAML. result is what the
    module returns after writing them, diff included when asked.
    """
    flavor = p["flavor"] if p["flavor"] != "auto" else detect_flavor(node)
    result = dict(
        changed=False,
        flavor=flavor,
        kubelet_version=None,
        version_source="none",
        kubelet_found=False,
        files=[],
        restart_needed=False,
        backup_files=[],
        problems=[],
        self_labels={},
    )
    problems = input_problems(p, flavor)
    for option in ("restart_marker", "record_path"):
        if p.get(option) and not PLAIN_ABSOLUTE_PATH.fullmatch(p[option]):
            problems.append(
                "%s: %r must be a plain absolute path (or empty to keep none)" % (option, p[option])
            )
    release = check_version(p, node, flavor, result, problems)
    if release is not None:
        result["kubelet_version"] = "%d.%d" % release
        problems.extend(release_problems(p, flavor, release))

    result["problems"] = problems
    if problems:
        msg = "kubelet_config: %d problem(s) with the inputs; nothing was changed:\n- %s" % (
            len(problems),
            "\n- ".join(problems),
        )
        return result, msg, []
    result["self_labels"] = split_node_labels(p["node_labels"])[0]
    if p["validate_only"]:
        result["python_yaml"] = node.find_yaml()
        return result, None, []

    yaml = node.import_yaml()
    result["python_yaml"] = yaml is not None
    if yaml is None:
        if p["without_pyyaml"] == "report":
            return result, None, []
        msg = (
            "kubelet_config needs PyYAML on the target to read and write the kubelet's YAML "
            "files: install python3-yaml (Debian, Ubuntu) or python3-pyyaml (RHEL)"
        )
        return result, msg, []

    def dump(data):
        return yaml.safe_dump(data, default_flow_style=False, sort_keys=False)

    extra_args_path = p["extra_args_path"]
    if flavor == "kubeadm" and not extra_args_path:
        extra_args_path = default_extra_args_path(node)

    def read(path):
        return node.read_text(path) if path and node.exists(path) else None

    try:
        plans = plan_kubelet_files(
            flavor,
            read,
            yaml.safe_load,
            dump,
            p["config_path"] or DEFAULT_PATHS[flavor],
            extra_args_path,
            p["feature_gates"],
            p["settings"],
            p["node_labels"],
            p["node_taints"],
            p["config_dir"],
            p["dropin_name"],
            release,
        )
    except (KubeletConfigError, IOError, OSError) as exc:
        return result, "Nothing was changed: %s" % exc, []

    result["files"] = [plan["path"] for plan in plans]
    result["changed"] = result["restart_needed"] = bool(plans)
    marker = p.get("restart_marker")
    if marker and not plans and result["kubelet_found"] and node.exists(marker):
        # An earlier run changed the files and was interrupted before the kubelet restarted.
        result.update(changed=True, restart_needed=True, restart_pending=True)
    if diff:
        result["diff"] = redact_diff(
            [
                dict(
                    before_header=plan["path"] if plan["before"] is not None else "/dev/null",
                    after_header=plan["path"],
                    before=plan["before"] or "",
                    after=plan["after"],
                )
                for plan in plans
            ]
        )
    return result, None, plans
