"""The testbed's Kubernetes repository (kubegpu.testbed.kubernetes_repo): the build's kubeadm,
kubelet and kubectl packaged as the Kubernetes project lays them out, in a flat repository that
the real apt reads through a deb822 source signed by its Release.key."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kubegpu.testbed import kubernetes_repo as kr
from tests.cluster import build

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> kr.KubernetesRepo:
    if shutil.which("go") is None:  # the ansible-core 2.21 leg's controller node has no Go
        pytest.skip("needs Go to build kubeadm, kubelet and kubectl (tests/cluster/build.py)")
    built = build.build(
        Path(os.environ.get("KUBEGPU_CLUSTER_CACHE", build.DEFAULT_CACHE)),
        Path(os.environ.get("KUBEGPU_GOMODCACHE", build.DEFAULT_GOMODCACHE)),
    )
    tmp = tmp_path_factory.mktemp("kubernetes-repo")
    return kr.publish(
        tmp / "www",
        tmp / "kubernetes-repo",
        built["bin"],  # type: ignore[arg-type]
        str(built["kubernetes_version"]),
    )


def _contents(deb: Path) -> dict[str, str]:
    """path -> mode string, as dpkg-deb lists the package's files."""
    listing = subprocess.run(
        ["dpkg-deb", "-c", str(deb)], check=True, capture_output=True, text=True
    ).stdout
    return {line.split()[-1].lstrip("."): line.split()[0] for line in listing.splitlines()}


def _field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), name], check=True, capture_output=True, text=True
    ).stdout.strip()


def test_the_repository_sits_where_the_projects_does(repo: kr.KubernetesRepo) -> None:
    assert repo.url_path == "kubernetes/core:/stable:/v1.37/deb/"
    assert repo.version == "1.37.2-1.1"
    for name in ("InRelease", "Release.gpg", "Release.key", "Packages", "Packages.gz"):
        assert (repo.flat / name).is_file(), name
    assert (
        (repo.flat / "Release.key").read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    )


def test_each_package_is_laid_out_as_the_projects(repo: kr.KubernetesRepo) -> None:
    kubeadm = _contents(repo.flat / "kubeadm_1.37.2-1.1_amd64.deb")
    assert kubeadm["/usr/bin/kubeadm"] == "-rwxr-xr-x"
    assert kubeadm["/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"] == "-rw-r--r--"
    assert _field(repo.flat / "kubeadm_1.37.2-1.1_amd64.deb", "Depends") == ""
    kubelet_deb = repo.flat / "kubelet_1.37.2-1.1_amd64.deb"
    kubelet = _contents(kubelet_deb)
    assert kubelet["/usr/bin/kubelet"] == "-rwxr-xr-x"
    assert kubelet["/usr/lib/systemd/system/kubelet.service"] == "-rw-------"
    assert "/etc/default/kubelet" in kubelet
    assert "/etc/kubernetes/manifests/.kubelet-keep" in kubelet
    depends = _field(kubelet_deb, "Depends")
    assert depends.startswith("kubernetes-cni (>= "), depends
    assert _field(kubelet_deb, "Recommends") == "iptables (>= 1.8.4)"
    conffiles = subprocess.run(
        ["dpkg-deb", "--ctrl-tarfile", str(kubelet_deb)], check=True, capture_output=True
    ).stdout
    assert b"/etc/default/kubelet" in conffiles
    assert "/usr/bin/kubectl" in _contents(repo.flat / "kubectl_1.37.2-1.1_amd64.deb")
    cni = _contents(next(repo.flat.glob("kubernetes-cni_*_amd64.deb")))
    assert {"/opt/cni/bin/bridge", "/opt/cni/bin/host-local", "/opt/cni/bin/loopback"} <= set(cni)
    # The binaries are the build's, and every package says who built it.
    for deb in repo.flat.glob("*.deb"):
        assert "kubegpu testbed" in _field(deb, "Description"), deb.name
        assert f"/usr/share/doc/{_field(deb, 'Package')}/{kr.MARKER}" in _contents(deb)


def _apt(tmp: Path, url: str, key: Path) -> tuple[list[str], list[str]]:
    """apt with a private state holding only this repository as a deb822 source."""
    for sub in ("lists/partial", "cache/archives/partial", "sources", "preferences"):
        (tmp / sub).mkdir(parents=True, exist_ok=True)
    (tmp / "sources/kubernetes.sources").write_text(
        f"Types: deb\nURIs: {url}\nSuites: /\nSigned-By: {key}\n"
    )
    options = [
        "-o",
        "Dir::Etc::sourcelist=/dev/null",
        "-o",
        f"Dir::Etc::sourceparts={tmp / 'sources'}",
        "-o",
        f"Dir::Etc::preferencesparts={tmp / 'preferences'}",
        "-o",
        f"Dir::State::Lists={tmp / 'lists'}",
        "-o",
        f"Dir::Cache={tmp / 'cache'}",
        "-o",
        "Debug::NoLocking=1",
        # pytest's folders are root's alone: apt's download user could not read them.
        "-o",
        "APT::Sandbox::User=root",
    ]
    env = dict(os.environ, LC_ALL="C")
    update = subprocess.run(
        ["apt-get", *options, "update"], capture_output=True, text=True, env=env, check=False
    )
    install = subprocess.run(
        [
            *("apt-get", *options, "install", "--simulate", "--no-install-recommends"),
            *("kubeadm=1.37.2-1.1", "kubelet=1.37.2-1.1", "kubectl=1.37.2-1.1"),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    return (update.stdout + update.stderr).splitlines(), (
        install.stdout + install.stderr
    ).splitlines()


def test_apt_installs_the_pinned_packages_from_the_signed_source(
    repo: kr.KubernetesRepo, tmp_path: Path
) -> None:
    key = tmp_path / "kubernetes.asc"
    key.write_bytes((repo.flat / "Release.key").read_bytes())
    update, install = _apt(tmp_path, f"file:{repo.flat}/", key)
    assert not [line for line in update if line.startswith(("W:", "E:"))], update
    installed = {line.split()[1] for line in install if line.startswith("Inst ")}
    assert installed == {"kubeadm", "kubelet", "kubectl", "kubernetes-cni"}, install


def test_apt_refuses_the_repository_under_another_key(
    repo: kr.KubernetesRepo, tmp_path: Path
) -> None:
    """signed-by is what admits the repository: the same source under a key that did not sign
    it is refused, and nothing can be installed from it."""
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    env = dict(os.environ, GNUPGHOME=str(other))
    gpg = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    subprocess.run([*gpg, "--quick-gen-key", "other <o@kubegpu.invalid>"], env=env, check=True)
    key = tmp_path / "other.asc"
    key.write_bytes(
        subprocess.run(
            [*gpg, "--armor", "--export"], env=env, check=True, capture_output=True
        ).stdout
    )
    subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False)
    update, install = _apt(tmp_path, f"file:{repo.flat}/", key)
    assert any("NO_PUBKEY" in line or "not signed" in line for line in update), update
    assert not [line for line in install if line.startswith("Inst ")], install
