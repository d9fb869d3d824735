#!/usr/bin/env python3
"""Build the test cluster's Kubernetes and etcd from their official Go modules, cached.

The module in src/ (go.mod, go.sum) requires `k8s.io/kubernetes` at a release tag, with every
`k8s.io/*` staging module replaced by its matching `v0.x` release, the usual way to build
Kubernetes from its module; etcd's server comes at the release Kubernetes' own go.mod pins.
`go build -mod=readonly` then builds, from the Go module proxy's sources verified against go.sum:

    kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kubeadm etcd

with component-base's version set from the release (`kubectl version` and the API server's
`/version` say v1.37.x, as an official build does). The binaries are kept under a key that hashes
src/ and this script; a run that finds them answers in well under a second.

Standard library only. Progress goes to stderr; the result goes to stdout (`--json` for the
pytest fixture).

Environment:
  KUBEGPU_CLUSTER_CACHE   cache folder (default /var/cache/kubegpu/cluster): binaries, Go build cache
  KUBEGPU_GOMODCACHE      Go module cache (default /var/cache/kubegpu/gomod/pkg/mod, shared with
                          scripts/feature-gates)
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
DEFAULT_CACHE = "/var/cache/kubegpu/cluster"
DEFAULT_GOMODCACHE = "/var/cache/kubegpu/gomod/pkg/mod"
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


class BuildError(RuntimeError):
    pass


def log(message: str) -> None:
    print(f"[cluster-build] {message}", file=sys.stderr, flush=True)


def module_version(gomod: str, module: str) -> str:
    """The version go.mod requires of ``module`` (a whole-line match, never a prefix)."""
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)$", gomod, re.M)
    if not match:
        raise BuildError(f"{SRC / 'go.mod'} requires no {module}")
    return match.group(1)


def source_key() -> str:
    """A hash of everything the binaries are built from: src/ and this script."""
    digest = hashlib.sha256()
    for path in sorted([*SRC.rglob("*"), Path(__file__).resolve()]):
        if path.is_file():
            digest.update(str(path.relative_to(HERE)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


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


def build(cache: Path, gomodcache: Path) -> dict[str, object]:
    gomod = (SRC / "go.mod").read_text()
    kubernetes = module_version(gomod, "k8s.io/kubernetes")
    etcd = module_version(gomod, "go.etcd.io/etcd/server/v3")
    key = source_key()
    out = cache / f"bin-{kubernetes}-{key}"
    older = older_kubelets()
    names = [*PROGRAMS, *older]
    minor = ".".join(kubernetes[1:].split(".")[:2])
    result = {
        "kubernetes_version": kubernetes,
        "etcd_version": etcd,
        "bin": {name: str(out / name) for name in names},
        # release -> (version, kubelet) for every supported minor, the newest being the cluster's
        "kubelets": {
            **{name[8:]: [version, str(out / name)] for name, (_, version) in older.items()},
            minor: [kubernetes, str(out / "kubelet")],
        },
    }
    if all((out / name).is_file() for name in names):
        return result | {"cached": True}
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all((out / name).is_file() for name in names):
            return result | {"cached": True}
        go = shutil.which("go")
        if not go:
            raise BuildError("no `go` on PATH: the Go toolchain (1.26 or newer) is needed")
        partial = cache / f".partial-{key}"
        shutil.rmtree(partial, ignore_errors=True)
        env = dict(
            os.environ,
            GOMODCACHE=str(gomodcache),
            GOCACHE=str(cache / "gocache"),
            GOFLAGS="-mod=readonly -buildvcs=false",
            GOTOOLCHAIN="local",
            CGO_ENABLED="0",
        )
        command = [
            "nice",
            go,
            "build",
            "-trimpath",
            "-ldflags",
            ldflags(kubernetes),
            "-o",
            f"{partial}/",
            *PROGRAMS.values(),
        ]
        log(f"building Kubernetes {kubernetes} and etcd {etcd} (cold: tens of minutes on 2 cores)")
        started = time.monotonic()
        builds = [(SRC, command)]
        for name, (folder, version) in older.items():
            log(f"then the kubelet of Kubernetes {version}")
            builds.append(
                (
                    folder,
                    [
                        *command[:5],
                        ldflags(version),
                        "-o",
                        str(partial / name),
                        PROGRAMS["kubelet"],
                    ],
                )
            )
        for folder, argv in builds:
            proc = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                shutil.rmtree(partial, ignore_errors=True)
                raise BuildError(
                    f"go build in {folder} failed ({proc.returncode}):\n{proc.stderr[-6000:]}"
                )
        missing = [name for name in names if not (partial / name).is_file()]
        if missing:
            raise BuildError(f"go build wrote no {', '.join(missing)} in {partial}")
        for old in cache.glob("bin-*"):
            shutil.rmtree(old, ignore_errors=True)
        partial.rename(out)
        log(f"built in {time.monotonic() - started:.0f} s: {out}")
    return result | {"cached": False}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = parser.parse_args(argv)
    cache = Path(os.environ.get("KUBEGPU_CLUSTER_CACHE", DEFAULT_CACHE))
    gomodcache = Path(os.environ.get("KUBEGPU_GOMODCACHE", DEFAULT_GOMODCACHE))
    try:
        result = build(cache, gomodcache)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
    else:
        for name, path in result["bin"].items():  # type: ignore[union-attr]
            print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
