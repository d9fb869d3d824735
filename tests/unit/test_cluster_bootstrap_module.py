"""kubegpu.gpu.kubeadm_config run by ansible on this machine, with this machine's real containerd
(`containerd config dump` of a configuration written per test): the checks, the configuration
written in normal, check and diff mode, and a node already in a cluster left alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration import ansible_json

SETTINGS = {
    "kubernetes_version": "1.37.2",
    "pod_cidr": "10.244.0.0/16",
    "service_cidr": "10.96.0.0/12",
    "cgroup_driver": "systemd",
}
CONTAINERD_CONFIG = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = {value}
"""

pytestmark = pytest.mark.skipif(
    shutil.which("containerd") is None, reason="needs containerd (Debian's) on this machine"
)


def run_module(repo_root: Path, args: dict[str, Any], *flags: str) -> dict[str, Any]:
    argv = ["localhost", "-c", "local", "-m", "kubegpu.gpu.kubeadm_config", "-a", json.dumps(args)]
    _, report = ansible_json.run("ansible", [*argv, *flags])
    result: dict[str, Any] = report["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return result


def args_for(tmp_path: Path, systemd_cgroup: bool = True, **more: Any) -> dict[str, Any]:
    config = tmp_path / "config.toml"
    config.write_text(CONTAINERD_CONFIG.format(value=str(systemd_cgroup).lower()))
    return {
        "settings": SETTINGS,
        "containerd_config": str(config),
        "kubelet_conf": str(tmp_path / "kubelet.conf"),
        "path": str(tmp_path / "kubeadm.yaml"),
        **more,
    }


INIT = {"mode": "init", "node_name": "cp1", "node_ip": "192.0.2.10", "endpoint": "192.0.2.10:6443"}


def test_check_reads_containerd_and_writes_nothing(repo_root: Path, tmp_path: Path) -> None:
    result = run_module(repo_root, args_for(tmp_path))
    assert not result.get("failed"), result
    assert result["changed"] is False
    assert result["joined"] is False
    assert result["systemd_cgroup"] == {
        "value": True,
        "where": "runtimes.runc.options.SystemdCgroup",
    }
    # Where this containerd looks for CNI plugins (Debian's: /usr/lib/cni), for the bridge CNI.
    assert result["cni_bin_dirs"] and all(d.startswith("/") for d in result["cni_bin_dirs"])
    assert not (tmp_path / "kubeadm.yaml").exists()


def test_a_cgroup_driver_mismatch_fails_naming_the_variable(
    repo_root: Path, tmp_path: Path
) -> None:
    result = run_module(repo_root, args_for(tmp_path, systemd_cgroup=False, **INIT))
    assert result["failed"] is True
    assert result["msg"].startswith(
        "cluster_bootstrap_cgroup_driver is 'systemd' but containerd's"
        " runtimes.runc.options.SystemdCgroup is false (the cgroupfs driver)"
    )
    assert not (tmp_path / "kubeadm.yaml").exists()


def test_bad_settings_fail_before_anything_is_written(repo_root: Path, tmp_path: Path) -> None:
    args = args_for(tmp_path, **INIT)
    args["settings"] = dict(SETTINGS, kubernetes_version="1.30.1", pod_cidr="10.96.0.0/16")
    result = run_module(repo_root, args)
    assert result["failed"] is True
    assert len(result["problems"]) == 2, result["problems"]
    assert not (tmp_path / "kubeadm.yaml").exists()


def test_no_containerd_is_named(repo_root: Path, tmp_path: Path) -> None:
    result = run_module(repo_root, args_for(tmp_path, containerd="/nonexistent/containerd"))
    assert result["failed"] is True
    assert "no containerd on this host (/nonexistent/containerd)" in result["msg"]
    assert "the bootstrap play's runtime layer installs it where missing" in result["msg"]
    # Check mode: the bootstrap play's runtime layer would install containerd first, so the
    # check says what it cannot compare yet instead of failing.
    checked = run_module(
        repo_root, args_for(tmp_path, containerd="/nonexistent/containerd"), "--check"
    )
    assert not checked.get("failed"), checked
    assert checked["joined"] is False and checked["systemd_cgroup"] == {}
    assert any(
        "check mode cannot compare containerd's cgroup driver" in w for w in checked["warnings"]
    ), checked


def test_init_config_written_once_check_and_diff_touch_nothing(
    repo_root: Path, tmp_path: Path
) -> None:
    args = args_for(tmp_path, **INIT)
    checked = run_module(repo_root, args, "--check", "--diff")
    assert checked["changed"] is True
    assert "ClusterConfiguration" in checked["diff"]["after"]
    assert not (tmp_path / "kubeadm.yaml").exists()
    first = run_module(repo_root, args)
    assert first["changed"] is True
    documents = list(yaml.safe_load_all((tmp_path / "kubeadm.yaml").read_text()))
    assert [d["kind"] for d in documents] == [
        "InitConfiguration",
        "ClusterConfiguration",
        "KubeletConfiguration",
    ]
    assert run_module(repo_root, args)["changed"] is False


def join_args(tmp_path: Path, node_name: str, node_ip: str, **more: Any) -> dict[str, Any]:
    return args_for(
        tmp_path,
        mode="join",
        node_name=node_name,
        node_ip=node_ip,
        endpoint="192.0.2.10:6443",
        token="abcdef.0123456789abcdef",
        ca_cert_hash="sha256:" + "0" * 64,
        **more,
    )


def test_join_writes_the_token_0600_and_a_joined_node_is_left_alone(
    repo_root: Path, tmp_path: Path
) -> None:
    args = join_args(tmp_path, "gpu1", "192.0.2.21")
    result = run_module(repo_root, args, "--diff")
    assert result["changed"] is True
    # The token never comes back in the result or a diff.
    assert "0123456789abcdef" not in json.dumps(result)
    path = tmp_path / "kubeadm.yaml"
    assert (path.stat().st_mode & 0o777) == 0o600
    path.unlink()
    (tmp_path / "kubelet.conf").write_text("apiVersion: v1\nkind: Config\n")
    joined = run_module(repo_root, args)
    assert joined["joined"] is True
    assert joined["changed"] is False
    assert not path.exists()


def test_a_control_plane_join_and_the_upload_keep_the_key_0600_and_out_of_the_output(
    repo_root: Path, tmp_path: Path
) -> None:
    key = "0f" * 32
    path = tmp_path / "kubeadm.yaml"
    upload = run_module(repo_root, args_for(tmp_path, certificate_key=key, **INIT), "--diff")
    assert upload["changed"] is True
    assert key not in json.dumps(upload)
    assert "diff" not in upload
    assert (path.stat().st_mode & 0o777) == 0o600
    assert next(yaml.safe_load_all(path.read_text()))["certificateKey"] == key
    path.unlink()
    join = join_args(tmp_path, "cp2", "192.0.2.11", certificate_key=key)
    joined = run_module(repo_root, join, "--diff")
    assert joined["changed"] is True
    assert key not in json.dumps(joined)
    assert (path.stat().st_mode & 0o777) == 0o600
    assert next(yaml.safe_load_all(path.read_text()))["controlPlane"]["certificateKey"] == key


def test_a_bad_key_and_several_control_planes_without_an_endpoint_are_refused(
    repo_root: Path, tmp_path: Path
) -> None:
    refused = run_module(
        repo_root,
        args_for(tmp_path, certificate_key="0F" * 32, control_plane_hosts=["cp1", "cp2"], **INIT),
    )
    assert refused["failed"] is True
    assert refused["problems"][0].startswith(
        "cluster_bootstrap_control_plane_endpoint is empty but kube_control_plane has 2 hosts"
    )
    assert refused["problems"][1].startswith("certificate_key is not what")
    assert "0F0F" not in json.dumps(refused)
    assert not (tmp_path / "kubeadm.yaml").exists()


def test_documentation_matches_argument_spec() -> None:
    from ansible_collections.kubegpu.gpu.plugins.modules import kubeadm_config

    options = yaml.safe_load(kubeadm_config.DOCUMENTATION)["options"]
    assert set(options) == set(kubeadm_config.ARGUMENT_SPEC)
    for name, spec in kubeadm_config.ARGUMENT_SPEC.items():
        assert options[name]["type"] == spec["type"], name
        assert options[name].get("default") == spec.get("default"), name
        assert options[name].get("choices") == spec.get("choices"), name
    for section in ("EXAMPLES", "RETURN"):
        assert yaml.safe_load(getattr(kubeadm_config, section))
