#!/usr/bin/env python3
"""Build the test cluster's Kubernetes and etcd from their official Go modules, cached.

The module in src/ (go.mod, go.sum) requires `k8s.io/kubernetes` at a release tag, with every
`k8s.io/*` staging module replaced by its matching `v0.x` release, the usual way to build
Kubernetes from its module; etcd's server comes at the release Kubernetes' own go.mod pins.
`go build -mod=readonly` then builds, from the Go module proxy's sources verified against go.sum:

    kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kubeadm etcd

with component-base's version set from the release (`kubectl version` and the API server's
`/version` say v1.37.x, as an official build does). The binaries are kept under a key that hashes
src/, this script and the shared build helper (src/kubegpu/testbed/gobuild.py); a run that finds
them answers in well under a second, and the binaries of the previous key are kept too.

Standard library only (the helper is loaded on its own when run without the venv). Progress goes to stderr; the result goes to stdout (`--json` for the
pytest fixture).

Environment:
  KUBEGPU_CLUSTER_CACHE   cache folder (default /var/cache/kubegpu/cluster): binaries, Go build cache
  KUBEGPU_GOMODCACHE      Go module cache (default /var/cache/kubegpu/gomod/pkg/mod, shared with
                          scripts/feature-gates)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

try:
    from kubegpu.testbed import gobuild
except ImportError:  # without the venv, whose packages kubegpu needs: the helper module alone
    sys.path.append(str(Path(__file__).resolve().parents[2] / "src" / "kubegpu" / "testbed"))
    import gobuild

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
DEFAULT_CACHE = "/var/cache/kubegpu/cluster"
DEFAULT_GOMODCACHE = gobuild.DEFAULT_GOMODCACHE
# name -> Go package; the names are the binaries' file names.
PROGRAMS = {
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubelet": "k8s.io/kubernetes/cmd/kubelet",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    "kubeadm": "k8s.io/kubernetes/cmd/kubeadm",
    "etcd": "./cmd/etcd",
}
VERSION_PACKAGE = "k8s.io/component-base/version"
# The kubelets of the older supported releases, for the feature-gate oracle: one module each,
# src/kubelet-<minor>/ (its go.mod requires k8s.io/kubernetes at that release).
KUBELET_MODULES = "kubelet-*"
BuildError = gobuild.GoBuildError


def older_kubelets() -> dict[str, tuple[Path, str]]:
    """'kubelet-1.33' -> (its module folder, its k8s.io/kubernetes version), oldest first."""
    found = {}
    for folder in sorted(
        SRC.glob(KUBELET_MODULES), key=lambda f: [int(x) for x in f.name[8:].split(".")]
    ):
        if (folder / "go.mod").is_file():
            found[folder.name] = (
                folder,
                module_version((folder / "go.mod").read_text(), "k8s.io/kubernetes"),
            )
    return found


def log(message: str) -> None:
    print(f"[cluster-build] {message}", file=sys.stderr, flush=True)


def module_version(gomod: str, module: str) -> str:
    """The version go.mod requires of ``module`` (a whole-line match, never a prefix)."""
    return gobuild.required_version(gomod, module, SRC / "go.mod")


def source_key() -> str:
    """A hash of everything the binaries are built from: src/, this script and the helper."""
    return gobuild.cache_key(HERE, [SRC, Path(__file__)])


def ldflags(kubernetes: str) -> str:
    match = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", kubernetes)
    if not match:
        raise BuildError(f"k8s.io/kubernetes {kubernetes}: not a release version vX.Y.Z")
    values = {
        "gitVersion": kubernetes,
        "gitMajor": match.group(1),
        "gitMinor": match.group(2),
        "gitTreeState": "clean",
    }
    return " ".join(["-s", "-w", *(f"-X {VERSION_PACKAGE}.{k}={v}" for k, v in values.items())])


def build(cache: Path, gomodcache: Path, kubelets: bool = False) -> dict[str, object]:
    """The cluster's programs (cached under bin-<release>-<key>); with ``kubelets``, also the
    kubelets of the older supported releases, which only the feature-gate oracle needs (cached
    apart, under kubelets-<key> and a lock of their own, so that a test waiting for the cluster
    does not wait for them)."""
    gomod = (SRC / "go.mod").read_text()
    kubernetes = module_version(gomod, "k8s.io/kubernetes")
    etcd = module_version(gomod, "go.etcd.io/etcd/server/v3")
    key = source_key()
    out = cache / f"bin-{kubernetes}-{key}"
    result: dict[str, object] = {
        "kubernetes_version": kubernetes,
        "etcd_version": etcd,
        "bin": {name: str(out / name) for name in PROGRAMS},
    }

    def make(partial: Path) -> None:
        env = gobuild.go_env(cache, gomodcache, cgo=False)
        log(f"building Kubernetes {kubernetes} and etcd {etcd} (cold: tens of minutes on 2 cores)")
        gobuild.go_build(SRC, env, ldflags(kubernetes), f"{partial}/", list(PROGRAMS.values()))

    cached = gobuild.build_once(out, list(PROGRAMS), make, "bin-*", log)
    if not kubelets:
        return result | {"cached": cached}
    older = older_kubelets()
    kubelets_out = cache / f"kubelets-{key}"

    def make_kubelets(partial: Path) -> None:
        env = gobuild.go_env(cache, gomodcache, cgo=False)
        for name, (folder, version) in older.items():
            log(f"building the kubelet of Kubernetes {version} (the feature-gate oracle's)")
            gobuild.go_build(folder, env, ldflags(version), partial / name, [PROGRAMS["kubelet"]])

    kubelets_cached = gobuild.build_once(
        kubelets_out, list(older), make_kubelets, "kubelets-*", log, lock=".lock-kubelets"
    )
    minor = ".".join(kubernetes[1:].split(".")[:2])
    # release -> (version, kubelet) for every supported minor, the newest being the cluster's
    result["kubelets"] = {
        **{name[8:]: [version, str(kubelets_out / name)] for name, (_, version) in older.items()},
        minor: [kubernetes, str(out / "kubelet")],
    }
    return result | {"cached": cached and kubelets_cached}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    parser.add_argument(
        "--kubelets",
        action="store_true",
        help="also the kubelets of the older supported releases (the feature-gate oracle's)",
    )
    args = parser.parse_args(argv)
    cache = Path(os.environ.get("KUBEGPU_CLUSTER_CACHE", DEFAULT_CACHE))
    gomodcache = gobuild.module_cache()
    try:
        result = build(cache, gomodcache, args.kubelets)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
    else:
        for name, path in result["bin"].items():  # type: ignore[union-attr]
            print(f"{name}: {path}")
        for minor, (_, path) in result.get("kubelets", {}).items():  # type: ignore[union-attr]
            print(f"kubelet {minor}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
