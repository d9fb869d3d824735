"""Verify of scenario kubelet: the kubelet's files on every node, read from the node.

prepare.yml put a kubeadm node's files in place; the role must have merged the scenario's GPU
settings into them and kept every setting of the node's own (maxPods is overridden on purpose).
"""

from __future__ import annotations

import shlex

import yaml

CONFIG = "/var/lib/kubelet/config.yaml"
EXTRA_ARGS = "/etc/default/kubelet"


def extra_args(host) -> list[str]:
    for line in host.file(EXTRA_ARGS).content_string.splitlines():
        if line.startswith("KUBELET_EXTRA_ARGS="):
            return shlex.split(shlex.split(line.partition("=")[2])[0])
    raise AssertionError(f"no KUBELET_EXTRA_ARGS in {EXTRA_ARGS}")


def test_the_kubelet_configuration_holds_ours_and_the_nodes_settings(host) -> None:
    config_file = host.file(CONFIG)
    assert (config_file.user, config_file.group, config_file.mode) == ("root", "root", 0o644)
    config = yaml.safe_load(config_file.content_string)
    assert config["kind"] == "KubeletConfiguration"
    assert config["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
    # Ours.
    assert config["maxPods"] == 150
    assert config["featureGates"]["DynamicResourceAllocation"] is True
    # The node's own, kept.
    assert config["featureGates"]["GracefulNodeShutdown"] is True
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["clusterDNS"] == ["10.96.0.10"]
    assert config["clusterDomain"] == "cluster.local"


def test_the_extra_args_carry_the_labels_and_taint_and_keep_the_nodes_flags(host) -> None:
    args = extra_args(host)
    address = host.ansible.get_variables()["ansible_host"]
    assert f"--node-ip={address}" in args
    assert "--max-pods" in args  # the node's own flag, left as it was
    labels = [a.partition("=")[2] for a in args if a.startswith("--node-labels=")]
    assert len(labels) == 1
    assert set(labels[0].split(",")) == {
        "nvidia.com/gpu.present=true",
        "kubegpu.io/molecule=kubelet",
    }
    assert "--register-with-taints=nvidia.com/gpu=present:NoSchedule" in args


def test_the_yaml_library_the_role_needs_is_installed(host) -> None:
    assert host.package("python3-yaml").is_installed
