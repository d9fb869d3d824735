# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""kubeadm's configuration for the cluster_bootstrap role: the settings checked, and the
InitConfiguration, ClusterConfiguration, KubeletConfiguration and JoinConfiguration rendered
from them (kubeadm.k8s.io/v1beta4, which kubeadm 1.33 to 1.37 read). Pure functions over data;
runs on the node's Python (3.8+) and on the controller (plugin_utils/inputs.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import ipaddress
import re

PREFIX = "cluster_bootstrap_"
KUBEADM_API = "kubeadm.k8s.io/v1beta4"
KUBELET_API = "kubelet.config.k8s.io/v1beta1"
# The Kubernetes minors kubegpu bootstraps (kubeadm.k8s.io/v1beta4 is read by all of them).
MIN_MINOR = 33
MAX_MINOR = 37
VERSION_RE = re.compile(r"^v?1\.([0-9]+)\.([0-9]+)$")
# A DNS name (RFC 1123 labels) or an IPv4 address; an IPv6 address goes in brackets.
HOSTNAME_RE = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
# registry host[:port] and an optional path, as image names take it (no scheme, no tag).
IMAGE_REPOSITORY_RE = re.compile(
    r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$"
)
REPO_URL_RE = re.compile(r"^(https?|file)://[^\s]+/$")
# kube-apiserver refuses a larger IPv4 service range than /12 (IPv6: /108).
SERVICE_MIN_PREFIX = {4: 12, 6: 108}
# The controller manager cuts a /24 (IPv4) or /64 (IPv6) per node out of the pod CIDR.
NODE_MASK = {4: 24, 6: 64}
CGROUP_DRIVERS = ("systemd", "cgroupfs")
# `kubeadm certs certificate-key`: 32 random bytes, hex; it encrypts the control-plane
# certificates kubeadm uploads for further control-plane hosts.
CERTIFICATE_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
CRI_SOCKET = "unix:///run/containerd/containerd.sock"


def minor_of(version):
    """1.37.2 -> 37; None when the text is not a release X.Y.Z."""
    match = VERSION_RE.match(str(version or ""))
    return int(match.group(1)) if match else None


def _network(value):
    try:
        return ipaddress.ip_network(str(value), strict=True)
    except ValueError:
        return None


def split_endpoint(endpoint):
    """'host:port' or '[v6]:port' -> (host, port); None when malformed."""
    text = str(endpoint)
    match = re.match(r"^\[([0-9A-Fa-f:.]+)\]:([0-9]{1,5})$", text) or re.match(
        r"^([^:\[\]]+):([0-9]{1,5})$", text
    )
    if not match:
        return None
    host, port = match.group(1), int(match.group(2))
    if not 1 <= port <= 65535:
        return None
    if text.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return None
    elif not HOSTNAME_RE.match(host):
        return None
    return host, port


def validate(settings):
    """One line per problem with the role's settings (keys without the role's prefix), each
    naming the inventory variable, what was wrong and what is allowed."""
    problems = []
    version = settings.get("kubernetes_version")
    minor = minor_of(version)
    if version is not None and (minor is None or not MIN_MINOR <= minor <= MAX_MINOR):
        found = "not a release X.Y.Z" if minor is None else "Kubernetes 1.%d" % minor
        problems.append(
            "%skubernetes_version is %r (%s): kubegpu bootstraps Kubernetes 1.%d to 1.%d; give"
            ' the release as X.Y.Z, quoted (for example "1.%d.2")'
            % (PREFIX, version, found, MIN_MINOR, MAX_MINOR, MAX_MINOR)
        )
    networks = {}
    for name in ("pod_cidr", "service_cidr"):
        value = settings.get(name)
        if value is None:
            continue
        network = _network(value)
        if network is None:
            problems.append(
                "%s%s is %r: not a network address with its prefix length (host bits must be"
                ' zero), for example "10.244.0.0/16"' % (PREFIX, name, value)
            )
            continue
        networks[name] = network
    pod, service = networks.get("pod_cidr"), networks.get("service_cidr")
    if pod is not None and pod.prefixlen > NODE_MASK[pod.version]:
        problems.append(
            "%spod_cidr is %r: each node gets a /%d of it, so its prefix must be /%d or shorter"
            % (PREFIX, str(pod), NODE_MASK[pod.version], NODE_MASK[pod.version])
        )
    if service is not None and service.prefixlen < SERVICE_MIN_PREFIX[service.version]:
        problems.append(
            "%sservice_cidr is %r: kube-apiserver allows a service range of /%d or smaller"
            ' (a longer prefix, for example "10.96.0.0/12")'
            % (PREFIX, str(service), SERVICE_MIN_PREFIX[service.version])
        )
    if (
        pod is not None
        and service is not None
        and pod.version == service.version
        and pod.overlaps(service)
    ):
        problems.append(
            "%spod_cidr %s and %sservice_cidr %s overlap: pod and service addresses must come"
            " from separate ranges" % (PREFIX, pod, PREFIX, service)
        )
    endpoint = settings.get("control_plane_endpoint")
    if endpoint and split_endpoint(endpoint) is None:
        problems.append(
            "%scontrol_plane_endpoint is %r: give host:port (a DNS name or IPv4 address, an IPv6"
            ' address in brackets, a port 1-65535), for example "k8s-api.example.internal:6443",'
            " or leave it empty for the first control-plane host's address and port 6443"
            % (PREFIX, endpoint)
        )
    repository = settings.get("image_repository")
    if repository is not None and not IMAGE_REPOSITORY_RE.match(str(repository)):
        problems.append(
            "%simage_repository is %r: give a registry as image names start with it, host[:port]"
            ' and an optional path, without a scheme or tag (for example "registry.k8s.io" or'
            ' "mirror.example.internal:5000/k8s")' % (PREFIX, repository)
        )
    for name in ("repo_url",):
        value = settings.get(name)
        if value and not REPO_URL_RE.match(str(value)):
            problems.append(
                "%s%s is %r: give the repository's URL (http, https or file) ending in '/', as"
                " a deb822 URIs field takes it, or leave it empty for the Kubernetes"
                " repository of the minor" % (PREFIX, name, value)
            )
    return problems


def endpoint_resolution_problem(endpoint, source, resolve):
    """The endpoint's host must resolve on the node (a name only the controller knows, or a
    typo, would fail kubeadm half-way). ``resolve(host)`` raises OSError when it cannot;
    ``source`` names where the endpoint came from (the variable)."""
    parts = split_endpoint(endpoint)
    if parts is None:
        return None  # validate() names a malformed endpoint
    host = parts[0]
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    try:
        resolve(host)
    except OSError as exc:
        return (
            "%s gives the control-plane endpoint %s, but %s does not resolve on this node (%s):"
            " every node reaches the API through it; give a name every node resolves, or an"
            " address" % (source, endpoint, host, exc.strerror or exc)
        )
    return None


def control_plane_hosts_problem(hosts, endpoint):
    """More than one control-plane host needs an endpoint they all stand behind: with none, every
    node would reach the API through the first host only, and kubeadm refuses to join further
    control-plane hosts to a cluster made without controlPlaneEndpoint."""
    hosts = list(hosts or [])
    if len(hosts) < 2 or endpoint:
        return None
    return (
        "%scontrol_plane_endpoint is empty but kube_control_plane has %d hosts (%s): several"
        " control-plane hosts need one stable address in front of them all (a load balancer or"
        ' DNS name, host:port, for example "k8s-api.example.internal:6443"); set it, or keep one'
        " host in kube_control_plane" % (PREFIX, len(hosts), ", ".join(str(h) for h in hosts))
    )


def systemd_cgroup_problem(cgroup_driver, systemd_cgroup, where):
    """The kubelet's cgroup driver against containerd's SystemdCgroup: they must agree."""
    runtime_driver = "systemd" if systemd_cgroup else "cgroupfs"
    if runtime_driver == cgroup_driver:
        return None
    return (
        "%scgroup_driver is %r but containerd's %s is %s (the %s driver): kubelet and the runtime"
        " must use the same cgroup driver; set %scgroup_driver to %r, or let the runtime layer"
        " set containerd's SystemdCgroup (container_runtime_cgroup_driver, which follows"
        " %scgroup_driver unless set)"
        % (
            PREFIX,
            cgroup_driver,
            where,
            str(bool(systemd_cgroup)).lower(),
            runtime_driver,
            PREFIX,
            runtime_driver,
            PREFIX,
        )
    )


def default_endpoint(address, port=6443):
    host = str(address)
    if ":" in host:
        host = "[%s]" % host
    return "%s:%d" % (host, port)


def _kubelet_args(node_ip):
    return [{"name": "node-ip", "value": str(node_ip)}] if node_ip else []


def _node_registration(settings, node_name, node_ip, taints=None):
    registration = {
        "name": node_name,
        "criSocket": settings.get("cri_socket") or CRI_SOCKET,
        "imagePullPolicy": "IfNotPresent",
        "kubeletExtraArgs": _kubelet_args(node_ip),
    }
    ignore = list(settings.get("ignore_preflight_errors") or [])
    if ignore:
        registration["ignorePreflightErrors"] = ignore
    if taints is not None:
        registration["taints"] = taints
    return registration


def kubelet_configuration(settings):
    """The KubeletConfiguration kubeadm writes to /var/lib/kubelet/config.yaml on every node:
    the cgroup driver, then the operator's settings merged over it."""
    config = {
        "apiVersion": KUBELET_API,
        "kind": "KubeletConfiguration",
        "cgroupDriver": settings.get("cgroup_driver") or "systemd",
    }
    return deep_merge(config, settings.get("kubelet_settings") or {})


def deep_merge(base, override):
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def cluster_configuration(settings, endpoint):
    version = str(settings["kubernetes_version"])
    config = {
        "apiVersion": KUBEADM_API,
        "kind": "ClusterConfiguration",
        "clusterName": settings.get("cluster_name") or "kubernetes",
        "kubernetesVersion": version if version.startswith("v") else "v" + version,
        "controlPlaneEndpoint": endpoint,
        "imageRepository": settings.get("image_repository") or "registry.k8s.io",
        "networking": {
            "podSubnet": str(settings["pod_cidr"]),
            "serviceSubnet": str(settings["service_cidr"]),
            "dnsDomain": settings.get("dns_domain") or "cluster.local",
        },
    }
    return config


def init_documents(settings, node_name, node_ip, endpoint, certificate_key=None):
    """InitConfiguration, ClusterConfiguration and KubeletConfiguration for `kubeadm init` on
    the first control-plane host. kubeadm makes the bootstrap token itself; its lifetime is
    ours (cluster_bootstrap_token_ttl). With ``certificate_key`` (a secret: the caller writes
    the file 0600 and removes it), for `kubeadm init phase upload-certs`, which refuses the key
    as an argument beside --config."""
    init = {
        "apiVersion": KUBEADM_API,
        "kind": "InitConfiguration",
        "bootstrapTokens": [
            {
                "ttl": settings.get("token_ttl") or "15m0s",
                "description": "kubegpu cluster_bootstrap: joins the inventory's nodes",
            }
        ],
        "localAPIEndpoint": {
            "advertiseAddress": str(node_ip),
            "bindPort": int(settings.get("api_port") or 6443),
        },
        "nodeRegistration": _node_registration(settings, node_name, node_ip),
    }
    skip = list(settings.get("skip_phases") or [])
    if skip:
        init["skipPhases"] = skip
    if settings.get("timeouts"):
        init["timeouts"] = dict(settings["timeouts"])
    if certificate_key:
        init["certificateKey"] = str(certificate_key)
    return [init, cluster_configuration(settings, endpoint), kubelet_configuration(settings)]


def join_documents(
    settings, node_name, node_ip, endpoint, token, ca_cert_hash, certificate_key=None
):
    """The JoinConfiguration: the token and the CA's public key hash it trusts; with
    ``certificate_key``, of a further control-plane host (its own API server on its address,
    the control-plane certificates fetched with the key). Token and key are secrets: the caller
    writes the file 0600 and removes it after the join."""
    join = {
        "apiVersion": KUBEADM_API,
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": endpoint,
                "token": token,
                "caCertHashes": [ca_cert_hash],
            },
        },
        "timeouts": dict({"discovery": "5m0s"}, **(settings.get("timeouts") or {})),
        "nodeRegistration": _node_registration(settings, node_name, node_ip),
    }
    if certificate_key:
        join["controlPlane"] = {
            "localAPIEndpoint": {
                "advertiseAddress": str(node_ip),
                "bindPort": int(settings.get("api_port") or 6443),
            },
            "certificateKey": str(certificate_key),
        }
    return [join]


def parse_join_command(text):
    """(token, CA public key hash) from `kubeadm token create --print-join-command`; None when
    either is missing. The token is a secret: never put it in a message."""
    token = re.search(r"--token\s+([a-z0-9]{6}\.[a-z0-9]{16})\b", str(text))
    ca_hash = re.search(r"--discovery-token-ca-cert-hash\s+(sha256:[0-9a-f]{64})\b", str(text))
    if not token or not ca_hash:
        return None
    return token.group(1), ca_hash.group(1)
