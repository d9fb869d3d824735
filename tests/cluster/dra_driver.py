"""Kubernetes' DRA test driver, built from the test cluster's module and cached.

`k8s.io/kubernetes/test/e2e/dra/test-driver` is the DRA driver Kubernetes' own end-to-end tests
run: a real kubelet plugin on `k8s.io/dynamic-resource-allocation/kubeletplugin` (the library
NVIDIA's DRA driver for GPUs is built on too) that registers with the kubelet through its plugin
registry, publishes the node's ResourceSlice (driver `test-driver.cdi.k8s.io`, devices
`device-00` ... without attributes), prepares the claims the kubelet hands it and writes one CDI
spec per prepared request whose device injects environment variables into the container:
`claim_<claim>_<request>=true`, and `admin_<key>` / `user_<key>` for each string parameter of the
DeviceClass's / the claim's opaque config for the driver. In kubegpu's tests it stands in for
NVIDIA's DRA driver, which needs a GPU and cannot be had here: a test double of NVIDIA's driver,
but Kubernetes' own code end to end (registration, slices, prepare and unprepare, CDI).

The package is in the module graph of src/go.mod (k8s.io/kubernetes at the cluster's release),
but src/go.sum lacks the hashes of the one module it adds, CDI's spec types (nothing else built
there imports them, so `go mod tidy` leaves them out). Rather than change src/ (its hash keys the
cluster's binaries: a change relinks all of Kubernetes), the build reads a copy of src/go.mod and
a go.sum of src/go.sum plus the two lines below (`go build -modfile`), in src/ with the cluster's
Go caches, `-mod=readonly`: every module is still verified against a pinned hash. The binary is
kept under a key that hashes src/go.mod, src/go.sum, this file and the shared build helper
(src/kubegpu/testbed/gobuild.py, as build.py loads it); the binary of the previous key is kept too.

Standard library only; `python -m tests.cluster.dra_driver` prints the binary's path.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.cluster import build as cluster

PACKAGE = "k8s.io/kubernetes/test/e2e/dra/test-driver"
NAME = "dra-test-driver"
# The driver name it publishes and prepares for (its --drivername default).
DRIVER = "test-driver.cdi.k8s.io"
# The module src/go.sum lacks, as Kubernetes' own go.sum at the release pins it.
EXTRA_SUMS = (
    "tags.cncf.io/container-device-interface/specs-go v1.1.0 "
    "h1:QRZVeAceQM+zTZe12eyfuJuuzp524EKYwhmvLd+h+yQ=\n"
    "tags.cncf.io/container-device-interface/specs-go v1.1.0/go.mod "
    "h1:u86hoFWqnh3hWz3esofRFKbI261bUlvUfLKGrDhJkgQ=\n"
)


def source_key() -> str:
    return cluster.gobuild.cache_key(
        cluster.HERE, [cluster.SRC / "go.mod", cluster.SRC / "go.sum", Path(__file__)]
    )


def build(cache: Path, gomodcache: Path) -> Path:
    """The driver's binary: found under its key, or built (a few seconds when the cluster's Go
    build cache is warm, it holds every package but the driver's own and CDI's)."""
    gomod = (cluster.SRC / "go.mod").read_text()
    kubernetes = cluster.module_version(gomod, "k8s.io/kubernetes")
    out = cache / f"{NAME}-{kubernetes}-{source_key()}"

    def make(partial: Path) -> None:
        (partial / "build.mod").write_text(gomod)
        (partial / "build.sum").write_text((cluster.SRC / "go.sum").read_text() + EXTRA_SUMS)
        cluster.log(f"building Kubernetes' DRA test driver of {kubernetes}")
        cluster.gobuild.go_build(
            cluster.SRC,
            cluster.gobuild.go_env(cache, gomodcache, cgo=False),
            cluster.ldflags(kubernetes),
            partial / NAME,
            [PACKAGE],
            modfile=partial / "build.mod",
        )

    cluster.gobuild.build_once(out, [NAME], make, f"{NAME}-*", cluster.log, lock=f".lock-{NAME}")
    return out / NAME


def build_cached() -> Path:
    """build() with the cache folders of build.py's environment variables."""
    return build(
        Path(os.environ.get("KUBEGPU_CLUSTER_CACHE", cluster.DEFAULT_CACHE)),
        cluster.gobuild.module_cache(),
    )


if __name__ == "__main__":
    try:
        print(build_cached())
    except cluster.BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
