#!/usr/bin/env python3
"""Build the NVML test double and NVIDIA's device plugin and GPU Feature Discovery, cached.

Two artefacts, each kept under a key that hashes what it is built from:

- `libnvidia-ml.so.1`, the NVML TEST DOUBLE (KUBEGPU_SIMULATED), compiled by gcc from
  nvml_standin.c against nvml.h of the go-nvml module that src/go.sum pins (NVIDIA's types, read
  from the Go module cache, never copied into the repository);
- `nvidia-device-plugin` and `gpu-feature-discovery`, built with cgo by `go build -mod=readonly`
  from `github.com/NVIDIA/k8s-device-plugin` at the release src/go.mod requires (v0.19.0: the
  newest release the Go module proxy serves here; kubegpu's deployment pin is v0.20.0), with the
  release's version string set as NVIDIA's Makefile sets it.

Both go through the shared build helper (src/kubegpu/testbed/gobuild.py), whose file each key
hashes too; the artefacts of the previous key of each are kept. A run that finds both answers in
well under a second. Standard library only. Progress goes to stderr; the result goes to stdout
(`--json` for the pytest fixtures).

Environment:
  KUBEGPU_NVML_CACHE    cache folder (default /var/cache/kubegpu/nvml): binaries, Go build cache
  KUBEGPU_GOMODCACHE    Go module cache (default /var/cache/kubegpu/gomod/pkg/mod, shared with
                        tests/cluster/build.py)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

try:
    from kubegpu.testbed import gobuild
except ImportError:  # without the venv, whose packages kubegpu needs: the helper module alone
    sys.path.append(str(Path(__file__).resolve().parents[2] / "src" / "kubegpu" / "testbed"))
    import gobuild

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"
LIBRARY_SOURCE = HERE / "nvml_standin.c"
DEFAULT_CACHE = "/var/cache/kubegpu/nvml"
DEFAULT_GOMODCACHE = gobuild.DEFAULT_GOMODCACHE
PLUGIN_MODULE = "github.com/NVIDIA/k8s-device-plugin"
NVML_MODULE = "github.com/NVIDIA/go-nvml"
# name -> Go package; the names are the binaries' file names.
PROGRAMS = {
    "nvidia-device-plugin": f"{PLUGIN_MODULE}/cmd/nvidia-device-plugin",
    "gpu-feature-discovery": f"{PLUGIN_MODULE}/cmd/gpu-feature-discovery",
}
VERSION_VARIABLE = f"{PLUGIN_MODULE}/internal/info.version"
LIBRARY = "libnvidia-ml.so.1"
BuildError = gobuild.GoBuildError


def log(message: str) -> None:
    print(f"[nvml-build] {message}", file=sys.stderr, flush=True)


def module_version(gomod: str, module: str) -> str:
    """The version go.mod requires of ``module`` (a whole-line match, never a prefix)."""
    return gobuild.required_version(gomod, module, SRC / "go.mod")


def escaped(module: str) -> str:
    """A module path as the module cache spells it (upper case -> '!' + lower case)."""
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), module)


def nvml_header(gomodcache: Path, nvml: str, env: dict[str, str]) -> Path:
    folder = gomodcache / f"{escaped(NVML_MODULE)}@{nvml}" / "pkg" / "nvml"
    if not (folder / "nvml.h").is_file():
        log(f"downloading {NVML_MODULE}@{nvml} for its nvml.h")
        gobuild.run([gobuild.go_tool(), "mod", "download", f"{NVML_MODULE}@{nvml}"], SRC, env)
    if not (folder / "nvml.h").is_file():
        raise BuildError(f"no nvml.h in {folder} after go mod download")
    return folder


def build_library(cache: Path, gomodcache: Path, nvml: str) -> tuple[Path, bool]:
    out = cache / f"lib-{gobuild.cache_key(HERE, [LIBRARY_SOURCE, Path(__file__)], nvml)}"

    def make(partial: Path) -> None:
        header = nvml_header(gomodcache, nvml, gobuild.go_env(cache, gomodcache, cgo=True))
        gcc = shutil.which("gcc")
        if not gcc:
            raise BuildError("no `gcc` on PATH: Debian's gcc builds the NVML test double")
        log("building the NVML test double")
        gobuild.run(
            [
                "nice",
                gcc,
                "-std=c11",
                "-D_DEFAULT_SOURCE",
                "-DNVML_NO_UNVERSIONED_FUNC_DEFS=1",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-O2",
                "-fPIC",
                "-shared",
                "-fvisibility=hidden",
                f"-I{header}",
                f"-Wl,-soname,{LIBRARY}",
                "-o",
                str(partial / LIBRARY),
                str(LIBRARY_SOURCE),
            ],
            HERE,
        )

    cached = gobuild.build_once(out, [LIBRARY], make, "lib-*", log)
    return out / LIBRARY, cached


def build_programs(cache: Path, gomodcache: Path, plugin: str) -> tuple[Path, bool]:
    out = cache / f"bin-{plugin}-{gobuild.cache_key(HERE, [SRC, Path(__file__)])}"
    cached = gobuild.build_programs(
        out,
        SRC,
        PROGRAMS,
        f"-s -w -X {VERSION_VARIABLE}={plugin}",
        gobuild.go_env(cache, gomodcache, cgo=True),
        log,
        f"building NVIDIA's device plugin and GFD {plugin} (cold: minutes on 2 cores)",
    )
    return out, cached


def build(cache: Path, gomodcache: Path) -> dict[str, object]:
    gomod = (SRC / "go.mod").read_text()
    plugin = module_version(gomod, PLUGIN_MODULE)
    nvml = module_version(gomod, NVML_MODULE)
    library, library_cached = build_library(cache, gomodcache, nvml)
    programs, programs_cached = build_programs(cache, gomodcache, plugin)
    return {
        "device_plugin_version": plugin,
        "go_nvml_version": nvml,
        "library": str(library),
        "libdir": str(library.parent),
        "bin": {name: str(programs / name) for name in PROGRAMS},
        "cached": library_cached and programs_cached,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = parser.parse_args(argv)
    cache = Path(os.environ.get("KUBEGPU_NVML_CACHE", DEFAULT_CACHE))
    gomodcache = gobuild.module_cache()
    try:
        result = build(cache, gomodcache)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{LIBRARY}: {result['library']}")
        for name, path in result["bin"].items():  # type: ignore[union-attr]
            print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
