#!/usr/bin/env python3
"""Build NVIDIA's GPU kubelet plugin (the DRA driver for GPUs) from its official module, cached.

The module in nvidia-dra/ (go.mod, go.sum, tools.go) requires `sigs.k8s.io/dra-driver-nvidia-gpu`
at the release kubegpu deploys (`gpu_cluster_dra_driver_version`) with the driver's own module
graph: its requirements and go.sum lines, pinned as its release pins them. One module is replaced:
NVIDIA's Fabric Manager bindings (`github.com/NVIDIA/go-nvfm`), which the Go module proxy does not
serve, by nvidia-dra/nvfm-double/, a test double whose every call answers that Fabric Manager is
absent (the plugin opens Fabric Manager only on nodes with an NVSwitch fabric; the test nodes have
none). `go build -mod=readonly` with cgo, as the driver's Makefile builds it (go-nvml loads
libnvidia-ml.so.1 at run time: on the test nodes, the NVML test double of tests/nvml/), with the
release's version string set as the Makefile sets it.

The binary is kept under a key that hashes nvidia-dra/, this script and the shared build helper
(src/kubegpu/testbed/gobuild.py); a run that finds it answers in well under a second.

Standard library only. Progress goes to stderr; the result goes to stdout as one JSON line. The
tests call `from_environment()`.

Environment:
  KUBEGPU_NVIDIA_DRA_CACHE  cache folder (default /var/cache/kubegpu/nvidia-dra): binary, Go
                            build cache
  KUBEGPU_GOMODCACHE        Go module cache (default /var/cache/kubegpu/gomod/pkg/mod, shared
                            with the other builds)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

if __package__:
    from tests.cluster.build import gobuild
else:  # run as a script: build.py beside it loads the helper (alone when without the venv)
    from build import gobuild

HERE = Path(__file__).resolve().parent
MODULE_DIR = HERE / "nvidia-dra"
DEFAULT_CACHE = "/var/cache/kubegpu/nvidia-dra"
DRIVER_MODULE = "sigs.k8s.io/dra-driver-nvidia-gpu"
PLUGIN = "gpu-kubelet-plugin"
PROGRAMS = {PLUGIN: f"{DRIVER_MODULE}/cmd/{PLUGIN}"}
VERSION_VARIABLE = f"{DRIVER_MODULE}/internal/info.version"
# A module of the driver's graph whose version the Go module proxy serves as a zip but refuses to
# describe (its .info and .mod answer 403): its go.mod, read from the zip, is served from a file
# proxy in the cache folder, and `go` checks it against go.sum's pinned hash.
DESCRIBED_HERE = "k8s.io/kubernetes"
BuildError = gobuild.GoBuildError


def log(message: str) -> None:
    print(f"[nvidia-dra-build] {message}", file=sys.stderr, flush=True)


def upstream_proxy() -> str:
    """The proxies of the environment (GOPROXY, or the go command's default)."""
    return os.environ.get("GOPROXY") or gobuild.run(["go", "env", "GOPROXY"], HERE).strip()


def fetched_gomod(cache: Path, version: str) -> bytes:
    """DESCRIBED_HERE's go.mod at ``version``, from its zip downloaded by `go mod download` into a
    scratch module cache under ``cache`` (removed again with `go clean -modcache`). The go command
    asks for .info and .mod before the zip, so a scratch file proxy answers those two with
    placeholders and the checksum database is off for this one download: the placeholder never
    leaves the scratch cache, and the build checks the go.mod read here against go.sum."""
    scratch = cache / "fetch"
    placeholders = scratch / "proxy" / DESCRIBED_HERE / "@v"
    placeholders.mkdir(parents=True, exist_ok=True)
    (placeholders / f"{version}.info").write_text(json.dumps({"Version": version}))
    (placeholders / f"{version}.mod").write_text(f"module {DESCRIBED_HERE}\n")
    env = dict(
        os.environ,
        GOMODCACHE=str(scratch / "mod"),
        GOPROXY=f"file://{scratch / 'proxy'},{upstream_proxy()}",
        GOSUMDB="off",
        GOFLAGS="-mod=mod",
        GOTOOLCHAIN="local",
    )
    go = gobuild.go_tool()
    log(f"downloading {DESCRIBED_HERE} {version} (the proxy describes it not, it serves its zip)")
    try:
        gobuild.run([go, "mod", "download", f"{DESCRIBED_HERE}@{version}"], scratch, env)
        archive = scratch / "mod" / "cache" / "download" / DESCRIBED_HERE / "@v" / f"{version}.zip"
        with zipfile.ZipFile(archive) as opened:
            return opened.read(f"{DESCRIBED_HERE}@{version}/go.mod")
    finally:
        if (scratch / "mod").exists():
            gobuild.run([go, "clean", "-modcache"], scratch, env)
        shutil.rmtree(scratch, ignore_errors=True)


def file_proxy(cache: Path, gomodcache: Path, gomod: str) -> str:
    """A GOPROXY that answers DESCRIBED_HERE's .info and .mod from the cache folder, and every
    other request from the environment's proxies. The go.mod is read from the module's zip: the
    one in the shared module cache (an earlier build downloaded it), else fetched_gomod()'s."""
    version = gobuild.required_version(gomod, DESCRIBED_HERE, MODULE_DIR / "go.mod")
    archive = gomodcache / "cache" / "download" / DESCRIBED_HERE / "@v" / f"{version}.zip"
    if archive.is_file():
        with zipfile.ZipFile(archive) as opened:
            text = opened.read(f"{DESCRIBED_HERE}@{version}/go.mod")
    else:
        text = fetched_gomod(cache, version)
    folder = cache / "proxy" / DESCRIBED_HERE / "@v"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{version}.mod").write_bytes(text)
    (folder / f"{version}.info").write_text(json.dumps({"Version": version}))
    return f"file://{cache / 'proxy'},{upstream_proxy()}"


def build(cache: Path, gomodcache: Path) -> dict[str, object]:
    gomod = (MODULE_DIR / "go.mod").read_text()
    version = gobuild.required_version(gomod, DRIVER_MODULE, MODULE_DIR / "go.mod")
    out = cache / f"bin-{version}-{gobuild.cache_key(HERE, [MODULE_DIR, Path(__file__)])}"
    cached = gobuild.build_programs(
        out,
        MODULE_DIR,
        PROGRAMS,
        f"-s -w -X {VERSION_VARIABLE}={version}",
        gobuild.go_env(cache, gomodcache, cgo=True, GOPROXY=file_proxy(cache, gomodcache, gomod)),
        log,
        f"building NVIDIA's GPU kubelet plugin {version} (cold: minutes on 2 cores)",
    )
    return {"driver_version": version, "bin": {PLUGIN: str(out / PLUGIN)}, "cached": cached}


def from_environment() -> dict[str, object]:
    """build() into the cache folders the environment names (or the defaults)."""
    return build(
        Path(os.environ.get("KUBEGPU_NVIDIA_DRA_CACHE", DEFAULT_CACHE)),
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
