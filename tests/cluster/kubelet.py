"""A real kubelet on a testbed node, joined to the test cluster's control plane.

The node runs the containerd that kubegpu's container_runtime role installed and wired; the
kubelet (tests/cluster/build.py's, the same release as the control plane) is laid out as kubeadm
lays it out, so kubegpu's kubelet role finds what it finds on a kubeadm node:

- /usr/bin/kubelet, /etc/systemd/system/kubelet.service with kubeadm's drop-in
  (`10-kubeadm.conf`: `/etc/default/kubelet` and its `KUBELET_EXTRA_ARGS`);
- /var/lib/kubelet/config.yaml, the KubeletConfiguration;
- /etc/kubernetes/kubelet.conf and the node's client certificate as `system:node:<name>`.

What this machine needs besides (tests/cluster/README.md): the cgroupfs driver (containerd's
runc has `SystemdCgroup = false` on these nodes), `failCgroupV1: false` (the host runs cgroup
v1), no swap check, and `restrict_oom_score_adj` in containerd's CRI settings, written into the
node's main containerd config as an operator would (no CAP_SYS_RESOURCE in a node). The
testbed gives such a node /dev/kmsg and its own copies of the sysctls kubelet sets.

Pod networking is the CNI bridge plugin (Debian's containernetworking-plugins) with host-local
addresses from the pod CIDR the controller manager allocated to the node.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Protocol

import yaml

from kubegpu.testbed import kubernetes_repo
from tests.processes import wait_for

KUBELET_BIN = "/usr/bin/kubelet"
CONFIG = "/var/lib/kubelet/config.yaml"
CNI_CONFIG = "/etc/cni/net.d/10-kubegpu-test.conflist"

UNIT = """[Unit]
Description=kubelet: The Kubernetes Node Agent (kubegpu test cluster)
Wants=network-online.target containerd.service
After=network-online.target containerd.service

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
RestartSec=2
StartLimitInterval=0

[Install]
WantedBy=multi-user.target
"""


def kubelet_configuration(cluster_dns: str = "10.96.0.10") -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDomain": "cluster.local",
        "clusterDNS": [cluster_dns],
        "resolvConf": "/etc/resolv.conf",
        "rotateCertificates": False,
        "serializeImagePulls": False,
        # The node's disk is a shared loop image: no image garbage collection mid-test.
        "imageGCHighThresholdPercent": 100,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%"},
    }


def files(node_ip: str) -> dict[str, str]:
    """The kubelet's files on the node, besides its credentials (KubeCluster.node_files)."""
    return {
        "/etc/systemd/system/kubelet.service": UNIT,
        # kubeadm's drop-in, as its deb packages ship it (the testbed's Kubernetes repository's).
        "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf": kubernetes_repo.KUBEADM_DROP_IN,
        CONFIG: yaml.safe_dump(kubelet_configuration(), sort_keys=False),
        "/var/lib/kubelet/kubeadm-flags.env": f'KUBELET_KUBEADM_ARGS="--node-ip={node_ip}"\n',
    }


def cni_conflist(pod_cidr: str) -> str:
    """The bridge plugin with addresses from the node's pod CIDR, and loopback."""
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "kubegpu-test",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": False,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": pod_cidr}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "loopback"},
            ],
        },
        indent=2,
    )


class NodeShell(Protocol):
    """What join needs of a testbed node: its name, its testbed, and commands and files on it."""

    name: str
    testbed: Any

    def ok(self, command: str) -> str: ...

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None: ...


def import_images(node: NodeShell, archives: list[Path]) -> None:
    """Import OCI archives (tests/cluster/images.py) into the node's containerd for the CRI."""
    for archive in archives:
        node.put("/root/image.tar", archive.read_bytes())
        node.ok("ctr -n k8s.io images import /root/image.tar >/dev/null && rm /root/image.tar")


def node_ready(core: Any, name: str) -> bool:
    conditions = core.read_node(name).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def join(node: NodeShell, cluster: Any, ready_timeout_s: float = 120.0) -> dict[str, float]:
    """Join ``node`` to ``cluster`` (a started controlplane.KubeCluster listening on the node's
    bridge) by a real kubelet: its credentials and kubeadm's layout, the build's kubelet,
    started; the bridge CNI over the pod CIDR the controller manager allocated to the node; the
    node Ready. The node's containerd must already run with the sandbox image imported.
    Returns the timings (seconds)."""
    from kubernetes import client

    address = node.testbed.addresses[node.name]
    for path, text in {**cluster.node_files(node.name), **files(address)}.items():
        node.put(path, text.encode(), 0o600)
    node.put(KUBELET_BIN, Path(cluster.binaries["kubelet"]).read_bytes(), 0o755)
    started = time.monotonic()
    node.ok("systemctl daemon-reload && systemctl enable --now kubelet")
    core = client.CoreV1Api(cluster.client())

    def pod_cidr() -> str | None:
        found = [n.spec.pod_cidr for n in core.list_node().items if n.metadata.name == node.name]
        return found[0] if found else None

    cidr = wait_for(f"the node {node.name} registered with a pod CIDR", pod_cidr)
    node.put(CNI_CONFIG, cni_conflist(cidr).encode(), 0o644)
    wait_for(f"the node {node.name} Ready", lambda: node_ready(core, node.name), ready_timeout_s)
    return {"kubelet_to_ready_s": round(time.monotonic() - started, 1)}
