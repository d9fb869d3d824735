#!/usr/bin/env python3
"""Build node-feature-discovery's nfd-master and nfd-worker from their official module, cached.

The module in nfd/ (go.mod, go.sum, tools.go) requires `sigs.k8s.io/node-feature-discovery` at
the release kubegpu deploys (`gpu_cluster_nfd_version`, the artifact manifest's
node-feature-discovery tag) and its `api/nfd` module at the same release: the root module's
go.mod replaces `api/nfd` by its own folder, which the module zip leaves out. `go build
-mod=readonly`, CGO_ENABLED=0 as NFD's Makefile builds them (static), with the release's version
string set as the Makefile sets it.

The binaries are kept under a key that hashes nfd/, this script and the shared build helper
(src/kubegpu/testbed/gobuild.py); a run that finds them answers in well under a second, and the
binaries of the previous key are kept too. nfd/ is a module of its own beside src/, so that it
never changes the key (and the link) of the Kubernetes build.

Standard library only. Progress goes to stderr; the result (the binaries' paths, whether they
were cached) goes to stdout as one JSON line. The tests call `from_environment()`.

Environment:
  KUBEGPU_NFD_CACHE    cache folder (default /var/cache/kubegpu/nfd): binaries, Go build cache
  KUBEGPU_GOMODCACHE   Go module cache (default /var/cache/kubegpu/gomod/pkg/mod, shared with
                       tests/cluster/build.py and tests/nvml/build.py)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

if __package__:
    from tests.cluster.build import gobuild
else:  # run as a script: build.py beside it loads the helper (alone when without the venv)
    from build import gobuild

HERE = Path(__file__).resolve().parent
MODULE_DIR = HERE / "nfd"
DEFAULT_CACHE = "/var/cache/kubegpu/nfd"
NFD_MODULE = "sigs.k8s.io/node-feature-discovery"
# name -> Go package; the names are the binaries' file names.
PROGRAMS = {name: f"{NFD_MODULE}/cmd/{name}" for name in ("nfd-master", "nfd-worker")}
VERSION_VARIABLE = f"{NFD_MODULE}/pkg/version.version"
BuildError = gobuild.GoBuildError


def required_version(gomod: str, module: str) -> str:
    """The version go.mod requires of ``module`` (a whole-line match, never a prefix)."""
    return gobuild.required_version(gomod, module, MODULE_DIR / "go.mod")


def source_key() -> str:
    """A hash of everything the binaries are built from: nfd/, this script and the helper."""
    return gobuild.cache_key(HERE, [MODULE_DIR, Path(__file__)])


def log(message: str) -> None:
    print(f"[nfd-build] {message}", file=sys.stderr, flush=True)


def build(cache: Path, gomodcache: Path) -> dict[str, object]:
    gomod = (MODULE_DIR / "go.mod").read_text()
    version = required_version(gomod, NFD_MODULE)
    api = required_version(gomod, f"{NFD_MODULE}/api/nfd")
    if api != version:
        raise BuildError(f"{NFD_MODULE}/api/nfd is {api}, not the release's {version}")
    out = cache / f"bin-{version}-{source_key()}"
    ldflags = f"-s -w -X {VERSION_VARIABLE}={version}"
    env = gobuild.go_env(cache, gomodcache, cgo=False)
    announce = f"building NFD {version} (cold: minutes)"
    cached = gobuild.build_programs(out, MODULE_DIR, PROGRAMS, ldflags, env, log, announce)
    return {
        "nfd_version": version,
        "bin": {name: str(out / name) for name in PROGRAMS},
        "cached": cached,
    }


def from_environment() -> dict[str, object]:
    """build() into the cache folders the environment names (or the defaults)."""
    return build(
        Path(os.environ.get("KUBEGPU_NFD_CACHE", DEFAULT_CACHE)),
        gobuild.module_cache(),
    )


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    try:
        print(json.dumps(from_environment()))
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
