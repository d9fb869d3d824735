"""kubeadm's configuration as the cluster_bootstrap role renders it, read by the real kubeadm of
the test cluster's build (tests/cluster/build.py): `kubeadm config validate` accepts it, and
`kubeadm config images list` names the images an air-gapped site must hold."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.kubegpu.gpu.plugins.module_utils import kubeadm_bootstrap as kb
from ansible_collections.kubegpu.gpu.plugins.modules.kubeadm_config import render

from tests.cluster import build

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
DEFAULTS: dict[str, Any] = {
    name[len(kb.PREFIX) :]: value
    for name, value in yaml.safe_load(
        (REPO / "roles/cluster_bootstrap/defaults/main.yml").read_text()
    ).items()
}
SETTINGS = dict(
    DEFAULTS,
    cgroup_driver="cgroupfs",
    kubelet_settings={"failCgroupV1": False, "failSwapOn": False},
    ignore_preflight_errors=["Swap"],
    skip_phases=["addon/coredns"],
    image_repository="mirror.example.internal:5000/k8s",
    timeouts={"kubernetesAPICall": "5m0s", "controlPlaneComponentHealthCheck": "8m0s"},
)


@pytest.fixture(scope="module")
def kubeadm() -> str:
    if shutil.which("go") is None:  # the ansible-core 2.21 leg's controller node has no Go
        pytest.skip("needs Go to build kubeadm, kubelet and kubectl (tests/cluster/build.py)")
    built = build.build(
        Path(build.os.environ.get("KUBEGPU_CLUSTER_CACHE", build.DEFAULT_CACHE)),
        Path(build.os.environ.get("KUBEGPU_GOMODCACHE", build.DEFAULT_GOMODCACHE)),
    )
    return str(built["bin"]["kubeadm"])  # type: ignore[index]


def _kubeadm(kubeadm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([kubeadm, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("settings", [DEFAULTS, SETTINGS], ids=["defaults", "testbed-like"])
def test_kubeadm_accepts_the_init_configuration(
    kubeadm: str, tmp_path: Path, settings: dict[str, Any]
) -> None:
    path = tmp_path / "init.yaml"
    path.write_text(render(kb.init_documents(settings, "cp1", "192.0.2.10", "192.0.2.10:6443")))
    done = _kubeadm(kubeadm, "config", "validate", "--config", str(path))
    assert done.returncode == 0, done.stderr
    # The release, the mirror and the version come through to the images kubeadm pulls.
    images = _kubeadm(kubeadm, "config", "images", "list", "--config", str(path))
    assert images.returncode == 0, images.stderr
    repository = settings["image_repository"]
    names = images.stdout.split()
    assert f"{repository}/kube-apiserver:v{settings['kubernetes_version']}" in names
    assert all(name.startswith(repository + "/") for name in names), names


def test_kubeadm_accepts_the_join_configuration(kubeadm: str, tmp_path: Path) -> None:
    path = tmp_path / "join.yaml"
    path.write_text(
        render(
            kb.join_documents(
                SETTINGS,
                "gpu1",
                "192.0.2.21",
                "192.0.2.10:6443",
                "abcdef.0123456789abcdef",
                "sha256:" + "0" * 64,
            )
        )
    )
    done = _kubeadm(kubeadm, "config", "validate", "--config", str(path))
    assert done.returncode == 0, done.stderr


def test_kubeadm_accepts_a_control_plane_join_and_the_upload_configuration(
    kubeadm: str, tmp_path: Path
) -> None:
    key = "0f" * 32
    join = tmp_path / "join.yaml"
    join.write_text(
        render(
            kb.join_documents(
                SETTINGS,
                "cp2",
                "192.0.2.11",
                "k8s-api.example.internal:6443",
                "abcdef.0123456789abcdef",
                "sha256:" + "0" * 64,
                key,
            )
        )
    )
    upload = tmp_path / "upload.yaml"
    upload.write_text(
        render(
            kb.init_documents(SETTINGS, "cp1", "192.0.2.10", "k8s-api.example.internal:6443", key)
        )
    )
    for path in (join, upload):
        done = _kubeadm(kubeadm, "config", "validate", "--config", str(path))
        assert done.returncode == 0, (path.name, done.stderr)
    # A key kubeadm would not take is refused by kubeadm too (so the module's check is kubeadm's).
    bad = tmp_path / "bad.yaml"
    bad.write_text(upload.read_text().replace(key, "not-hex"))
    assert _kubeadm(kubeadm, "config", "validate", "--config", str(bad)).returncode != 0


def test_overlapping_networks_pass_kubeadm_so_the_role_checks_them(
    kubeadm: str, tmp_path: Path
) -> None:
    """kubeadm 1.37's own validation lets a pod network inside the service network through
    (the cluster would route pods and ClusterIPs over each other): the controller's check
    is what stops it, before any host changes."""
    bad = dict(DEFAULTS, pod_cidr="10.96.0.0/16")
    path = tmp_path / "init.yaml"
    path.write_text(render(kb.init_documents(bad, "cp1", "192.0.2.10", "192.0.2.10:6443")))
    done = _kubeadm(kubeadm, "config", "validate", "--config", str(path))
    assert done.returncode == 0, done.stderr
    assert [p for p in kb.validate(bad) if "overlap" in p]
