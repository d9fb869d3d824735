"""Kubernetes' packages for the testbed: kubeadm, kubelet and kubectl built from the official Go
module (tests/cluster/build.py), packaged as the Kubernetes project's deb repository lays them
out, in a signed flat repository served beside the vendor repository (aptrepo.py).

What the real packages hold (kubernetes/release, cmd/krel/templates/latest/*, for 1.32 and
newer), and so these:

- kubeadm: /usr/bin/kubeadm and kubelet's drop-in /usr/lib/systemd/system/kubelet.service.d/
  10-kubeadm.conf; no dependencies.
- kubelet: /usr/bin/kubelet, /usr/lib/systemd/system/kubelet.service (mode 0600),
  /etc/default/kubelet (a conffile, `KUBELET_EXTRA_ARGS=`), the folders /var/lib/kubelet and
  /etc/kubernetes/manifests; depends on kubernetes-cni, mount and util-linux, recommends
  iptables. Installing it enables and starts kubelet.service, which restarts until kubeadm
  gives it a configuration.
- kubectl: /usr/bin/kubectl.
- kubernetes-cni: the CNI plugins in /opt/cni/bin. Here they are Debian's
  containernetworking-plugins (its version, for example 1.1.1 on bookworm, where the project's
  kubelet asks for 1.2.0 or newer: the testbed's kubelet asks for Debian's version).

Versions are named as the project's repository names them (`1.37.2-1.1`), the repository lives
at `<root>/kubernetes/core:/stable:/v<minor>/deb/` with `Release.key` beside `InRelease`, so that
the cluster_bootstrap role installs from it exactly as from the project's repository. Every
package says it was built by the kubegpu testbed, not by the Kubernetes project.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from kubegpu.testbed import aptrepo
from kubegpu.testbed._proc import run, write_file

REVISION = "1.1"  # the project's repository's revision of a release (1.37.2-1.1)
REPO_DIR = "kubernetes"
MARKER = "KUBEGPU-TESTBED-BUILD"
NOTE = (
    " Built by the kubegpu testbed from the official Go module @MODULE@;\n"
    " laid out as the Kubernetes project's packages. Not the project's package: for tests only."
)
CNI_SOURCE = "containernetworking-plugins"

KUBELET_UNIT = """[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""
# kubeadm's drop-in: kubeadm's flags file, the operator's /etc/default/kubelet, the config file.
KUBEADM_DROP_IN = """# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""
RELOAD = """#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
fi
"""
KUBELET_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
    systemctl enable kubelet.service >/dev/null || true
    systemctl start kubelet.service >/dev/null || true
fi
"""
KUBELET_PRERM = """#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    systemctl stop kubelet.service >/dev/null || true
    systemctl disable kubelet.service >/dev/null || true
fi
"""


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    summary: str
    section: str
    files: dict[str, tuple[bytes, int]]  # path in the package -> (content, mode)
    depends: tuple[str, ...] = ()
    recommends: tuple[str, ...] = ()
    conffiles: tuple[str, ...] = ()
    scripts: dict[str, str] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class KubernetesRepo:
    url_path: str  # below the served root: kubernetes/core:/stable:/v1.37/deb/
    flat: Path
    keyring: Path  # binary keyring (signed-by)
    version: str  # the packages' version, 1.37.2-1.1


def minor_of(kubernetes_version: str) -> str:
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", kubernetes_version)
    if not match:
        raise ValueError(f"{kubernetes_version!r} is not a Kubernetes release vX.Y.Z")
    return f"{match.group(1)}.{match.group(2)}"


def cni_plugins(cache: Path) -> tuple[str, dict[str, bytes]]:
    """Debian's containernetworking-plugins (downloaded with apt-get, the machine's own
    sources, and kept in cache): its upstream version and its plugins by name."""
    cache.mkdir(parents=True, exist_ok=True)
    debs = sorted(cache.glob(f"{CNI_SOURCE}_*.deb"))
    if not debs:
        subprocess.run(
            ["apt-get", "download", "-q", CNI_SOURCE], cwd=cache, check=True, capture_output=True
        )
        debs = sorted(cache.glob(f"{CNI_SOURCE}_*.deb"))
    deb = debs[-1]
    version = subprocess.run(
        ["dpkg-deb", "--field", str(deb), "Version"], check=True, capture_output=True, text=True
    ).stdout.strip()
    unpacked = cache / f"{deb.stem}.unpacked"
    if not unpacked.is_dir():
        shutil.rmtree(cache / ".partial", ignore_errors=True)
        run(["dpkg-deb", "-x", deb, cache / ".partial"], what=f"unpacking {deb.name}")
        (cache / ".partial").rename(unpacked)
    plugins = {p.name: p.read_bytes() for p in sorted((unpacked / "usr/lib/cni").iterdir())}
    upstream = re.sub(r"^\d+:", "", version).split("+")[0].split("-")[0]
    return upstream, plugins


def packages(binaries: dict[str, str], kubernetes_version: str, cni_cache: Path) -> list[Package]:
    """The four packages, from the build's binaries (name -> path)."""
    version = f"{kubernetes_version.lstrip('v')}-{REVISION}"
    module = f"k8s.io/kubernetes@{kubernetes_version}"
    cni_version, plugins = cni_plugins(cni_cache)

    def binary(name: str) -> tuple[bytes, int]:
        return Path(binaries[name]).read_bytes(), 0o755

    return [
        Package(
            "kubeadm",
            version,
            "Command-line utility for administering a Kubernetes cluster",
            "admin",
            {
                "usr/bin/kubeadm": binary("kubeadm"),
                "usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": (
                    KUBEADM_DROP_IN.encode(),
                    0o644,
                ),
            },
            scripts={"postinst": RELOAD, "postrm": RELOAD},
            source=module,
        ),
        Package(
            "kubelet",
            version,
            "Node agent for Kubernetes clusters",
            "net",
            {
                "usr/bin/kubelet": binary("kubelet"),
                "usr/lib/systemd/system/kubelet.service": (KUBELET_UNIT.encode(), 0o600),
                "etc/default/kubelet": (b"KUBELET_EXTRA_ARGS=\n", 0o644),
                "var/lib/kubelet/.kubelet-keep": (b"", 0o644),
                "etc/kubernetes/manifests/.kubelet-keep": (b"", 0o644),
            },
            depends=(f"kubernetes-cni (>= {cni_version})", "mount", "util-linux"),
            recommends=("iptables (>= 1.8.4)",),
            conffiles=("/etc/default/kubelet",),
            scripts={"postinst": KUBELET_POSTINST, "prerm": KUBELET_PRERM, "postrm": RELOAD},
            source=module,
        ),
        Package(
            "kubectl",
            version,
            "Command-line utility for interacting with a Kubernetes cluster",
            "utils",
            {"usr/bin/kubectl": binary("kubectl")},
            source=module,
        ),
        Package(
            "kubernetes-cni",
            f"{cni_version}-{REVISION}",
            "Binaries required to provision kubernetes container networking",
            "net",
            {f"opt/cni/bin/{name}": (data, 0o755) for name, data in plugins.items()},
            source=f"Debian's {CNI_SOURCE} {cni_version}",
        ),
    ]


def build_deb(package: Package, out_dir: Path, work: Path) -> Path:
    root = work / f"{package.name}_{package.version}"
    shutil.rmtree(root, ignore_errors=True)
    (root / "DEBIAN").mkdir(parents=True)
    for path, (content, mode) in package.files.items():
        write_file(root / path, content, mode)
    write_file(
        root / "usr/share/doc" / package.name / MARKER,
        f"{package.name} {package.version}: built by the kubegpu testbed from {package.source};"
        " not the Kubernetes project's package.\n",
    )
    control = [
        f"Package: {package.name}",
        f"Version: {package.version}",
        "Architecture: amd64",
        "Maintainer: kubegpu testbed <testbed@kubegpu.invalid>",
        f"Section: {package.section}",
        "Priority: optional",
        "Homepage: https://kubernetes.io",
    ]
    if package.depends:
        control.append("Depends: " + ", ".join(package.depends))
    if package.recommends:
        control.append("Recommends: " + ", ".join(package.recommends))
    control.append(f"Description: {package.summary}\n{NOTE.replace('@MODULE@', package.source)}")
    write_file(root / "DEBIAN/control", "\n".join(control) + "\n")
    if package.conffiles:
        write_file(root / "DEBIAN/conffiles", "".join(f"{c}\n" for c in package.conffiles))
    for name, text in package.scripts.items():
        write_file(root / "DEBIAN" / name, text, 0o755)
    deb = out_dir / f"{package.name}_{package.version}_amd64.deb"
    run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, deb],
        what=f"building {deb.name}",
    )
    shutil.rmtree(root)
    return deb


def publish(
    served_root: Path, folder: Path, binaries: dict[str, str], kubernetes_version: str
) -> KubernetesRepo:
    """Build, index and sign the repository under served_root (its own signing key, made in
    folder), replacing an earlier one."""
    minor = minor_of(kubernetes_version)
    url_path = f"{REPO_DIR}/core:/stable:/v{minor}/deb/"
    flat = served_root / url_path
    shutil.rmtree(flat, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    flat.mkdir(parents=True)
    work = folder / "build"
    work.mkdir(parents=True)
    debs = [
        build_deb(p, flat, work)
        for p in packages(binaries, kubernetes_version, folder.parent / "cni-cache")
    ]
    aptrepo.write_release(flat, debs, f"Kubernetes v{minor} packages built by the kubegpu testbed")
    keyring = aptrepo._sign(folder, flat)
    # The project publishes its key ASCII-armoured beside InRelease.
    armored = run(
        ["gpg", "--batch", "--homedir", folder / "gnupg", "--armor", "--export"],
        what="exporting the repository key",
        env={"GNUPGHOME": str(folder / "gnupg")},
    )
    write_file(flat / "Release.key", armored.stdout)
    run(
        ["gpgconf", "--kill", "all"],
        what="stopping gpg-agent",
        env={"GNUPGHOME": str(folder / "gnupg")},
        check=False,
    )
    os.chmod(keyring, 0o644)
    shutil.rmtree(work)
    return KubernetesRepo(
        url_path=url_path,
        flat=flat,
        keyring=keyring,
        version=f"{kubernetes_version.lstrip('v')}-{REVISION}",
    )
