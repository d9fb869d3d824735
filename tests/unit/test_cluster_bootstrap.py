"""The cluster_bootstrap role's contract: its settings checked on the controller before any
host is contacted, and kubeadm's configuration rendered from them (kubeadm_bootstrap.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubeadm_bootstrap as kb
from ansible_collections.kubegpu.gpu.plugins.plugin_utils import inputs

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
KUBEGPU = Path(sys.executable).with_name("kubegpu")

DEFAULTS: dict[str, Any] = {
    name[len(kb.PREFIX) :]: value
    for name, value in yaml.safe_load(
        (ROLES / "cluster_bootstrap/defaults/main.yml").read_text()
    ).items()
}


def problems_of(**given: Any) -> list[str]:
    """What the controller's input check says of these cluster_bootstrap variables."""
    return inputs.role_problems(
        "cluster_bootstrap",
        inputs.load_options(ROLES, "cluster_bootstrap"),
        {kb.PREFIX + name: value for name, value in given.items()},
        inputs.load_rules(ROLES, "cluster_bootstrap"),
    )


def test_the_defaults_are_valid() -> None:
    assert kb.validate(DEFAULTS) == []
    assert problems_of(**DEFAULTS) == []


# (variables given, the start of the one line expected)
BAD = [
    (
        {"kubernetes_version": "1.32.9"},
        "cluster_bootstrap_kubernetes_version is '1.32.9' (Kubernetes 1.32): kubegpu bootstraps"
        ' Kubernetes 1.33 to 1.37; give the release as X.Y.Z, quoted (for example "1.37.2")',
    ),
    ({"kubernetes_version": "1.38.0"}, "cluster_bootstrap_kubernetes_version is '1.38.0'"),
    (
        {"kubernetes_version": "1.37"},
        "cluster_bootstrap_kubernetes_version is '1.37' (not a release X.Y.Z)",
    ),
    (
        # Overlapping the default service network, given alone.
        {"pod_cidr": "10.96.0.0/16"},
        "cluster_bootstrap_pod_cidr 10.96.0.0/16 and cluster_bootstrap_service_cidr 10.96.0.0/12"
        " overlap: pod and service addresses must come from separate ranges",
    ),
    (
        {"pod_cidr": "10.244.0.0/16", "service_cidr": "10.244.128.0/20"},
        "cluster_bootstrap_pod_cidr 10.244.0.0/16 and cluster_bootstrap_service_cidr"
        " 10.244.128.0/20 overlap",
    ),
    (
        {"pod_cidr": "10.244.0.1/16"},
        "cluster_bootstrap_pod_cidr is '10.244.0.1/16': not a network address with its prefix"
        " length (host bits must be zero)",
    ),
    (
        {"pod_cidr": "10.244.0.0/25"},
        "cluster_bootstrap_pod_cidr is '10.244.0.0/25': each node gets a /24 of it",
    ),
    (
        {"service_cidr": "172.0.0.0/8"},
        "cluster_bootstrap_service_cidr is '172.0.0.0/8': kube-apiserver allows a service range"
        " of /12 or smaller",
    ),
    (
        {"control_plane_endpoint": "k8s-api.example.internal"},
        "cluster_bootstrap_control_plane_endpoint is 'k8s-api.example.internal': give host:port",
    ),
    (
        {"control_plane_endpoint": "https://k8s-api:6443"},
        "cluster_bootstrap_control_plane_endpoint is 'https://k8s-api:6443': give host:port",
    ),
    (
        {"control_plane_endpoint": "k8s-api:70000"},
        "cluster_bootstrap_control_plane_endpoint is 'k8s-api:70000'",
    ),
    (
        {"control_plane_endpoint": "[fe80::zz]:6443"},
        "cluster_bootstrap_control_plane_endpoint is '[fe80::zz]:6443'",
    ),
    (
        {"image_repository": "https://mirror.example.internal/k8s"},
        "cluster_bootstrap_image_repository is 'https://mirror.example.internal/k8s': give a"
        " registry as image names start with it",
    ),
    (
        {"repo_url": "https://mirror.example.internal/kubernetes"},
        "cluster_bootstrap_repo_url is 'https://mirror.example.internal/kubernetes': give the"
        " repository's URL (http, https or file) ending in '/'",
    ),
    (
        {"cgroup_driver": "cgroupv2"},
        "value of cluster_bootstrap_cgroup_driver must be one of: systemd, cgroupfs, got: cgroupv2",
    ),
    (
        {"cni": "calico"},
        "value of cluster_bootstrap_cni must be one of: bridge, none, got: calico",
    ),
    (
        {"pod_cidrr": "10.244.0.0/16"},
        "cluster_bootstrap_pod_cidrr: role cluster_bootstrap has no such variable (a"
        " misspelling?); did you mean cluster_bootstrap_pod_cidr?",
    ),
]


@pytest.mark.parametrize(("given", "expected"), BAD, ids=[str(g) for g, _ in BAD])
def test_bad_settings_are_one_line_naming_the_variable(
    given: dict[str, Any], expected: str
) -> None:
    found = problems_of(**given)
    assert len(found) == 1, found
    assert found[0].startswith(expected), found[0]


@pytest.mark.parametrize(
    "endpoint",
    ["k8s-api.example.internal:6443", "192.0.2.10:6443", "[2001:db8::1]:443", "cp1:1"],
)
def test_good_endpoints(endpoint: str) -> None:
    assert kb.split_endpoint(endpoint) is not None
    assert problems_of(control_plane_endpoint=endpoint) == []


def test_an_ipv6_cluster_is_checked_with_ipv6_sizes() -> None:
    assert kb.validate({"pod_cidr": "fd00:10:244::/56", "service_cidr": "fd00:10:96::/108"}) == []
    assert kb.validate({"service_cidr": "fd00:10:96::/100"})[0].startswith(
        "cluster_bootstrap_service_cidr is 'fd00:10:96::/100': kube-apiserver allows a service"
        " range of /108 or smaller"
    )


def test_the_global_takes_none_or_kubeadm() -> None:
    assert inputs.global_problems({}) == []
    assert inputs.global_problems({"kubegpu_cluster_bootstrap": "kubeadm"}) == []
    assert inputs.global_problems({"kubegpu_cluster_bootstrap": "kubespray"}) == [
        "kubegpu_cluster_bootstrap is 'kubespray': it is one of none, kubeadm (default none)"
    ]


@pytest.mark.parametrize(
    ("driver", "systemd_cgroup", "expected"),
    [
        ("systemd", True, None),
        ("cgroupfs", False, None),
        (
            "systemd",
            False,
            "cluster_bootstrap_cgroup_driver is 'systemd' but containerd's"
            " runtimes.runc.options.SystemdCgroup is false (the cgroupfs driver): kubelet and the"
            " runtime must use the same cgroup driver; set cluster_bootstrap_cgroup_driver to"
            " 'cgroupfs', or let the runtime layer set containerd's SystemdCgroup"
            " (container_runtime_cgroup_driver, which follows cluster_bootstrap_cgroup_driver"
            " unless set)",
        ),
        ("cgroupfs", True, "cluster_bootstrap_cgroup_driver is 'cgroupfs' but containerd's"),
    ],
)
def test_the_cgroup_driver_must_match_containerd(
    driver: str, systemd_cgroup: bool, expected: str | None
) -> None:
    found = kb.systemd_cgroup_problem(driver, systemd_cgroup, "runtimes.runc.options.SystemdCgroup")
    if expected is None:
        assert found is None
    else:
        assert found is not None and found.startswith(expected)


SETTINGS = dict(
    DEFAULTS,
    kubernetes_version="1.37.2",
    cgroup_driver="cgroupfs",
    kubelet_settings={"failCgroupV1": False, "failSwapOn": False},
    ignore_preflight_errors=["SystemVerification"],
    skip_phases=["addon/coredns"],
    image_repository="mirror.example.internal:5000/k8s",
)


def test_init_documents_carry_every_setting() -> None:
    init, cluster, kubelet = kb.init_documents(SETTINGS, "cp1", "10.213.8.11", "10.213.8.11:6443")
    assert init["apiVersion"] == cluster["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert init["kind"] == "InitConfiguration"
    assert init["localAPIEndpoint"] == {"advertiseAddress": "10.213.8.11", "bindPort": 6443}
    assert init["nodeRegistration"] == {
        "name": "cp1",
        "criSocket": "unix:///run/containerd/containerd.sock",
        "imagePullPolicy": "IfNotPresent",
        "kubeletExtraArgs": [{"name": "node-ip", "value": "10.213.8.11"}],
        "ignorePreflightErrors": ["SystemVerification"],
    }
    assert init["skipPhases"] == ["addon/coredns"]
    # kubeadm makes the token; only its lifetime is ours.
    assert init["bootstrapTokens"][0]["ttl"] == "15m0s"
    assert "token" not in init["bootstrapTokens"][0]
    assert cluster == {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "ClusterConfiguration",
        "clusterName": "kubernetes",
        "kubernetesVersion": "v1.37.2",
        "controlPlaneEndpoint": "10.213.8.11:6443",
        "imageRepository": "mirror.example.internal:5000/k8s",
        "networking": {
            "podSubnet": "10.244.0.0/16",
            "serviceSubnet": "10.96.0.0/12",
            "dnsDomain": "cluster.local",
        },
    }
    # kubeadm writes this to /var/lib/kubelet/config.yaml, where kubelet_gpu merges its own.
    assert kubelet == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
    }


def test_the_defaults_set_no_preflight_exception_and_no_skipped_phase() -> None:
    init = kb.init_documents(DEFAULTS, "cp1", "192.0.2.10", "192.0.2.10:6443")[0]
    assert "ignorePreflightErrors" not in init["nodeRegistration"]
    assert "skipPhases" not in init
    assert kb.kubelet_configuration(DEFAULTS)["cgroupDriver"] == "systemd"


def test_the_operator_kubelet_settings_merge_deeply_over_ours() -> None:
    merged = kb.kubelet_configuration(
        {
            "cgroup_driver": "systemd",
            "kubelet_settings": {"evictionHard": {"memory.available": "1Gi"}},
        }
    )
    assert merged["evictionHard"] == {"memory.available": "1Gi"}
    assert merged["cgroupDriver"] == "systemd"


def test_join_documents_trust_the_ca_hash_and_carry_the_token() -> None:
    (join,) = kb.join_documents(
        SETTINGS, "gpu1", "10.213.8.12", "10.213.8.11:6443", "abcdef.0123456789abcdef", "sha256:00"
    )
    assert join["kind"] == "JoinConfiguration"
    assert join["discovery"]["bootstrapToken"] == {
        "apiServerEndpoint": "10.213.8.11:6443",
        "token": "abcdef.0123456789abcdef",
        "caCertHashes": ["sha256:00"],
    }
    assert join["timeouts"] == {"discovery": "5m0s"}
    assert join["nodeRegistration"]["name"] == "gpu1"


def test_an_ipv6_endpoint_is_bracketed() -> None:
    assert kb.default_endpoint("2001:db8::1") == "[2001:db8::1]:6443"
    assert kb.default_endpoint("192.0.2.10", 443) == "192.0.2.10:443"


def _inventory(tmp_path: Path) -> Path:
    node = {"ansible_host": "127.0.0.1", "ansible_port": 1}
    data = {
        "all": {
            "children": {
                "k8s_cluster": {
                    "children": {
                        "kube_control_plane": {"hosts": {"cp1": dict(node)}},
                        "gpu_nodes": {"hosts": {"n1": dict(node)}},
                    }
                }
            }
        }
    }
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            {
                "kubegpu_cluster_bootstrap": "kubeadm",
                "cluster_bootstrap_kubernetes_version": "1.32.0",
            },
            "cluster_bootstrap_kubernetes_version is '1.32.0' (Kubernetes 1.32)",
        ),
        (
            {"cluster_bootstrap_pod_cidr": "10.96.0.0/16"},
            "cluster_bootstrap_pod_cidr 10.96.0.0/16 and cluster_bootstrap_service_cidr",
        ),
        ({"kubegpu_cluster_bootstrap": "kubespray"}, "kubegpu_cluster_bootstrap is 'kubespray'"),
    ],
)
def test_bad_input_stops_the_run_before_any_host_is_contacted(
    tmp_path: Path, extra: dict[str, str], expected: str
) -> None:
    argv = [str(KUBEGPU), "bootstrap", "-i", str(_inventory(tmp_path)), "--json"]
    for name, value in extra.items():
        argv += ["-e", f"{name}={json.dumps(value)}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert len(result["input_problems"]) == 1, result["input_problems"]
    assert result["input_problems"][0].startswith(expected)
    assert set(result["hosts"]) == {"localhost"}


def test_the_join_command_gives_token_and_ca_hash() -> None:
    """The shape of `kubeadm token create --print-join-command`."""
    ca_hash = "sha256:" + "ab" * 32
    text = f"kubeadm join 10.213.83.2:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash {ca_hash} \n"
    assert kb.parse_join_command(text) == ("abcdef.0123456789abcdef", ca_hash)
    assert (
        kb.parse_join_command("kubeadm join 10.213.83.2:6443 --token abcdef.0123456789abcdef")
        is None
    )
    assert kb.parse_join_command("") is None


def test_kubeadm_timeouts_go_to_init_and_join() -> None:
    settings = dict(SETTINGS, timeouts={"kubernetesAPICall": "5m0s"})
    init = kb.init_documents(settings, "cp1", "192.0.2.10", "192.0.2.10:6443")[0]
    assert init["timeouts"] == {"kubernetesAPICall": "5m0s"}
    (join,) = kb.join_documents(settings, "n1", "192.0.2.21", "192.0.2.10:6443", "t", "h")
    assert join["timeouts"] == {"discovery": "5m0s", "kubernetesAPICall": "5m0s"}
    assert "timeouts" not in kb.init_documents(SETTINGS, "cp1", "192.0.2.10", "e:6443")[0]


def test_a_control_plane_join_carries_its_own_api_endpoint_and_the_key() -> None:
    key = "0f" * 32
    (join,) = kb.join_documents(
        SETTINGS, "cp2", "10.213.8.13", "k8s-api.example.internal:6443", "t", "h", key
    )
    assert join["controlPlane"] == {
        "localAPIEndpoint": {"advertiseAddress": "10.213.8.13", "bindPort": 6443},
        "certificateKey": key,
    }
    (worker,) = kb.join_documents(SETTINGS, "gpu1", "10.213.8.12", "e:6443", "t", "h")
    assert "controlPlane" not in worker
    init = kb.init_documents(SETTINGS, "cp1", "192.0.2.10", "e:6443", certificate_key=key)[0]
    assert init["certificateKey"] == key
    assert "certificateKey" not in kb.init_documents(SETTINGS, "cp1", "192.0.2.10", "e:6443")[0]


def test_several_control_plane_hosts_need_an_endpoint() -> None:
    problem = kb.control_plane_hosts_problem(["cp1", "cp2", "cp3"], "")
    assert problem is not None
    assert problem.startswith(
        "cluster_bootstrap_control_plane_endpoint is empty but kube_control_plane has 3 hosts"
        " (cp1, cp2, cp3)"
    )
    assert kb.control_plane_hosts_problem(["cp1", "cp2"], "k8s-api.example.internal:6443") is None
    assert kb.control_plane_hosts_problem(["cp1"], "") is None
    assert kb.control_plane_hosts_problem([], None) is None


def test_several_control_plane_hosts_without_an_endpoint_stop_the_run_before_any_host(
    tmp_path: Path,
) -> None:
    """The controller's check refuses it where kubeadm bootstraps the cluster, and only there
    (an existing cluster's control plane is not this layer's to judge)."""
    inventory = _inventory(tmp_path)
    data = yaml.safe_load(inventory.read_text())
    data["all"]["children"]["k8s_cluster"]["children"]["kube_control_plane"]["hosts"]["cp2"] = {
        "ansible_host": "127.0.0.1",
        "ansible_port": 1,
    }
    inventory.write_text(yaml.safe_dump(data))
    argv = [str(KUBEGPU), "bootstrap", "-i", str(inventory), "--json"]
    done = subprocess.run(
        [*argv, "-e", "kubegpu_cluster_bootstrap=kubeadm"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["input_problems"] == [
        "cluster_bootstrap_control_plane_endpoint is empty but kube_control_plane has 2 hosts"
        " (cp1, cp2): several control-plane hosts need one stable address in front of them all"
        ' (a load balancer or DNS name, host:port, for example "k8s-api.example.internal:6443");'
        " set it, or keep one host in kube_control_plane"
    ]
    assert set(result["hosts"]) == {"localhost"}
    assert inputs.control_plane_problems(["cp1", "cp2"], "k8s-api.example.internal:6443") == []


def test_an_endpoint_name_the_node_cannot_resolve_is_named_with_its_variable() -> None:
    import socket

    def unknown(host: str) -> None:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    seen: list[str] = []
    problem = kb.endpoint_resolution_problem(
        "k8s-api.example.internal:6443", "cluster_bootstrap_control_plane_endpoint", unknown
    )
    assert problem == (
        "cluster_bootstrap_control_plane_endpoint gives the control-plane endpoint"
        " k8s-api.example.internal:6443, but k8s-api.example.internal does not resolve on this"
        " node (Name or service not known): every node reaches the API through it; give a name"
        " every node resolves, or an address"
    )
    # Addresses are not looked up; a name that resolves passes.
    for endpoint in ("192.0.2.10:6443", "[2001:db8::1]:6443"):
        assert kb.endpoint_resolution_problem(endpoint, "x", unknown) is None
    assert kb.endpoint_resolution_problem("cp1.example:6443", "x", seen.append) is None
    assert seen == ["cp1.example"]
    # A malformed endpoint is validate()'s to name.
    assert kb.endpoint_resolution_problem("no-port", "x", unknown) is None
