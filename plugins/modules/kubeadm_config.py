#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kubeadm_config
short_description: Check a node for kubeadm and write kubeadm's configuration for it
version_added: "0.1.0"
description:
  - Checks the cluster_bootstrap settings (Kubernetes release 1.33 to 1.37, pod and service
    networks that do not overlap, the control-plane endpoint, the image repository) and, on the
    node, that containerd's SystemdCgroup agrees with the kubelet's cgroup driver; fails with
    every problem, naming the variable, before anything changes.
  - Tells whether the node is already in a cluster (C(/etc/kubernetes/kubelet.conf) exists), so
    that it is never joined twice. Whether the first control-plane host is initialised is the
    role's to decide (admin.conf and the kubeadm-config ConfigMap its API server holds), since
    kubeadm init writes kubelet.conf before the control plane is up.
  - Refuses more than one host in O(control_plane_hosts) without a control-plane endpoint, and,
    with O(mode=check), an O(endpoint) whose host name does not resolve on the node (naming
    O(endpoint_source)).
  - With O(mode=init), writes the InitConfiguration, ClusterConfiguration and
    KubeletConfiguration (kubeadm.k8s.io/v1beta4) for C(kubeadm init --config) to O(path)
    (with O(certificate_key), for C(kubeadm init phase upload-certs), mode 0600 and no diff);
    with O(mode=join), the JoinConfiguration with the bootstrap token (and with
    O(certificate_key), of a further control-plane host), mode 0600, which the caller removes
    after the join. With O(mode=check), writes nothing.
  - Written as JSON documents separated by C(---), which kubeadm reads as YAML, so that the node
    needs no PyYAML. Computes the change first, writes atomically only when the content differs.
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  settings:
    description: The role's variables without the C(cluster_bootstrap_) prefix.
    type: dict
    required: true
  mode:
    description: C(init), C(join) or C(check).
    type: str
    choices: [init, join, check]
    default: check
  node_name:
    description: The node's name in Kubernetes.
    type: str
  node_ip:
    description: The node's address (the kubelet's C(--node-ip), the API server's advertise address).
    type: str
  endpoint:
    description: The control-plane endpoint, host:port.
    type: str
  token:
    description: The bootstrap token (O(mode=join)).
    type: str
    no_log: true
  ca_cert_hash:
    description: C(sha256:<hex>) of the cluster CA's public key (O(mode=join)).
    type: str
  endpoint_source:
    description: Where O(endpoint) came from (the variable), for the message when it does not resolve.
    type: str
    default: cluster_bootstrap_control_plane_endpoint
  certificate_key:
    description:
      - The key C(kubeadm certs certificate-key) made, which encrypts the uploaded control-plane
        certificates (O(mode=init) for the upload, O(mode=join) for a control-plane host).
    type: str
  control_plane_hosts:
    description: The inventory's control-plane hosts, checked against the endpoint.
    type: list
    elements: str
    default: []
  join_command:
    description:
      - The output of C(kubeadm token create --print-join-command), instead of O(token) and
        O(ca_cert_hash) (O(mode=join)).
    type: str
  path:
    description: Where the configuration goes.
    type: path
    default: /etc/kubernetes/kubegpu-kubeadm.yaml
  containerd:
    description: The containerd binary, for C(containerd config dump).
    type: str
    default: containerd
  containerd_config:
    description: containerd's main configuration file.
    type: path
    default: /etc/containerd/config.toml
  kubelet_conf:
    description: The kubelet's kubeconfig; a node that has it is in a cluster.
    type: path
    default: /etc/kubernetes/kubelet.conf
author:
  - kubegpu contributors
"""

EXAMPLES = r"""
- name: Write kubeadm's init configuration
  kubegpu.gpu.kubeadm_config:
    settings:
      kubernetes_version: "1.37.2"
      pod_cidr: 10.244.0.0/16
      service_cidr: 10.96.0.0/12
      cgroup_driver: systemd
    mode: init
    node_name: cp1
    node_ip: 192.0.2.10
    endpoint: 192.0.2.10:6443
"""

RETURN = r"""
joined:
  description: Whether the node is already in a cluster (its kubelet kubeconfig exists).
  type: bool
  returned: always
systemd_cgroup:
  description: containerd's SystemdCgroup for the runtime pods use, and where it was read.
  type: dict
  returned: always
cni_bin_dirs:
  description: The folders containerd looks for CNI plugins in.
  type: list
  elements: str
  returned: when containerd was read
path:
  description: The configuration file (absent with O(mode=check)).
  type: str
  returned: when mode is not check
"""

import json
import os
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.kubegpu.gpu.plugins.module_utils import containerd as ctd
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubeadm_bootstrap as kb
from ansible_collections.kubegpu.gpu.plugins.module_utils.files import write_atomic


class _Schema:
    def __init__(self, effective_plugin_id):
        self.effective_plugin_id = effective_plugin_id


def render(documents):
    return "".join("---\n" + json.dumps(doc, indent=2) + "\n" for doc in documents)


def cni_bin_dirs(cri):
    """Where containerd's CRI plugin looks for CNI plugins (bin_dir on 1.x, bin_dirs on 2.x)."""
    cni = cri.get("cni") or {}
    found = cni.get("bin_dirs") or ([cni["bin_dir"]] if cni.get("bin_dir") else [])
    return list(found) or ["/opt/cni/bin"]


def read_systemd_cgroup(module, containerd, config):
    """containerd's SystemdCgroup for the runtime the kubelet's pods use, and its CNI plugin
    folders."""
    binary = module.get_bin_path(containerd) if "/" not in containerd else containerd
    if not binary or not os.path.exists(binary):
        return None, "no containerd on this host (%s)" % containerd, []
    env = {"LC_ALL": "C"}
    rc, out, err = module.run_command([binary, "--version"], environ_update=env)
    if rc != 0:
        return None, "`containerd --version` failed: %s" % (err or out).strip(), []
    version = ctd.parse_containerd_version(out)
    rc, out, err = module.run_command(
        [binary] + (["--config", config] if os.path.exists(config) else []) + ["config", "dump"],
        environ_update=env,
    )
    if rc != 0:
        return None, "`containerd config dump` failed: %s" % (err or out).strip(), []
    plugin = "io.containerd.cri.v1.runtime" if version[0] >= 2 else "io.containerd.grpc.v1.cri"
    effective = ctd.toml_loads(out, "containerd config dump")
    schema = _Schema(plugin)
    dirs = cni_bin_dirs(ctd.effective_cri(effective, schema))
    return ctd.source_systemd_cgroup(effective, schema, ""), None, dirs


ARGUMENT_SPEC = dict(
    settings=dict(type="dict", required=True),
    mode=dict(type="str", choices=["init", "join", "check"], default="check"),
    node_name=dict(type="str"),
    node_ip=dict(type="str"),
    endpoint=dict(type="str"),
    endpoint_source=dict(type="str", default="cluster_bootstrap_control_plane_endpoint"),
    token=dict(type="str", no_log=True),
    ca_cert_hash=dict(type="str"),
    certificate_key=dict(type="str", no_log=True),
    control_plane_hosts=dict(type="list", elements="str", default=[]),
    join_command=dict(type="str", no_log=True),
    path=dict(type="path", default="/etc/kubernetes/kubegpu-kubeadm.yaml"),
    containerd=dict(type="str", default="containerd"),
    containerd_config=dict(type="path", default="/etc/containerd/config.toml"),
    kubelet_conf=dict(type="path", default="/etc/kubernetes/kubelet.conf"),
)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[
            ("mode", "init", ("node_name", "node_ip", "endpoint")),
            ("mode", "join", ("node_name", "node_ip", "endpoint")),
        ],
        supports_check_mode=True,
    )
    p = module.params
    settings = p["settings"]
    problems = list(kb.validate(settings))
    many = kb.control_plane_hosts_problem(
        p["control_plane_hosts"], settings.get("control_plane_endpoint")
    )
    if many:
        problems.append(many)
    if p["mode"] == "check" and p["endpoint"]:
        unresolved = kb.endpoint_resolution_problem(
            p["endpoint"], p["endpoint_source"], lambda host: socket.getaddrinfo(host, None)
        )
        if unresolved:
            problems.append(unresolved)
    key = p["certificate_key"]
    if key is not None and not kb.CERTIFICATE_KEY_RE.match(key):
        problems.append(
            "certificate_key is not what `kubeadm certs certificate-key` prints (64 hex digits)"
        )
    found, missing, cni_dirs = read_systemd_cgroup(module, p["containerd"], p["containerd_config"])
    systemd_cgroup = {}
    if missing and module.check_mode and p["mode"] == "check":
        # The bootstrap play's runtime layer installs containerd first; in check mode it only
        # says it would.
        module.warn(
            "%s: check mode cannot compare containerd's cgroup driver with the kubelet's; a real"
            " run installs containerd first (the bootstrap play's runtime layer) and checks it then"
            % missing
        )
    elif missing:
        problems.append(
            "%s: kubeadm needs a running container runtime; install and configure containerd"
            " first (the bootstrap play's runtime layer installs it where missing)" % missing
        )
    else:
        systemd_cgroup = {"value": found[0], "where": found[1]}
        mismatch = kb.systemd_cgroup_problem(
            settings.get("cgroup_driver") or "systemd", found[0], found[1]
        )
        if mismatch:
            problems.append(mismatch)
    joined = os.path.exists(p["kubelet_conf"])
    result = dict(
        changed=False, joined=joined, systemd_cgroup=systemd_cgroup, cni_bin_dirs=cni_dirs
    )
    if problems:
        module.fail_json(msg="\n".join(problems), problems=problems, **result)
    if p["mode"] == "check" or (p["mode"] == "join" and joined):
        module.exit_json(**result)
    if p["mode"] == "init":
        documents = kb.init_documents(
            settings, p["node_name"], p["node_ip"], p["endpoint"], certificate_key=key
        )
        mode = 0o600 if key else 0o644
    else:
        token, ca_hash = p["token"], p["ca_cert_hash"]
        if p["join_command"]:
            parsed = kb.parse_join_command(p["join_command"])
            if parsed is None:
                module.fail_json(
                    msg="join_command holds no --token and --discovery-token-ca-cert-hash (the"
                    " output of kubeadm token create --print-join-command was expected)",
                    **result,
                )
            token, ca_hash = parsed
        if not token or not ca_hash:
            module.fail_json(
                msg="mode=join needs token and ca_cert_hash, or join_command", **result
            )
        documents = kb.join_documents(
            settings, p["node_name"], p["node_ip"], p["endpoint"], token, ca_hash, key
        )
        mode = 0o600
    after = render(documents)
    before = ""
    if os.path.exists(p["path"]):
        with open(p["path"], encoding="utf-8") as handle:
            before = handle.read()
    result.update(changed=before != after, path=p["path"])
    if result["changed"] and module._diff and p["mode"] == "init" and not key:
        result["diff"] = {"before": before, "after": after, "before_header": p["path"]}
    if result["changed"] and not module.check_mode:
        write_atomic(module, p["path"], after, mode)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
