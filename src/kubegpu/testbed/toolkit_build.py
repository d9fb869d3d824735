#!/usr/bin/env python3
"""Build NVIDIA's container toolkit programs from the official Go module, cached.

Each folder under toolkit-src/ (`v<version>/go.mod`, `go.sum`, `tools.go`) is a module of ours
that requires `github.com/NVIDIA/nvidia-container-toolkit` at one release tag; `go build
-mod=readonly` builds, from the Go module proxy's sources verified against go.sum:

    nvidia-ctk nvidia-container-runtime nvidia-container-runtime-hook nvidia-cdi-hook

with the version string NVIDIA's Makefile sets (`nvidia-ctk --version` says the release). cgo is
required (the toolkit's internal/cuda and go-nvml are cgo packages that dlopen the driver's
libraries at run time), so the build needs a C compiler (Debian's gcc); linking follows NVIDIA's
Makefile (unresolved driver symbols are left to the dynamic loader).

Which program and which of NVIDIA's files (systemd units, udev rules) goes into which package is
read from the module's own packaging/debian/*.install at that release, and recorded beside the
binaries (manifest.json) for the testbed's repository (aptrepo.py) to package.

The result is kept under a key that hashes the module folder, this file and the shared build helper
(gobuild.py); a run that finds it answers in well under a second, and the result of the previous
key of the same release is kept too. Standard library only: it runs as a script too
(`python3 src/kubegpu/testbed/toolkit_build.py [--json]`), progress on stderr.

Environment:
  KUBEGPU_TOOLKIT_CACHE   cache folder (default /var/cache/kubegpu/toolkit): binaries, Go build cache
  KUBEGPU_GOMODCACHE      Go module cache (default /var/cache/kubegpu/gomod/pkg/mod, shared with
                          the test cluster's build)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:
    from kubegpu.testbed import gobuild
else:  # run as a script: the helper beside it
    import gobuild

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "toolkit-src"
MODULE = "github.com/NVIDIA/nvidia-container-toolkit"
PROGRAMS = (
    "nvidia-ctk",
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
    "nvidia-cdi-hook",
)
# The packages kubegpu installs from this module (NVIDIA's operator-extensions are left out).
PACKAGES = ("nvidia-container-toolkit-base", "nvidia-container-toolkit")
VERSION_PACKAGE = f"{MODULE}/internal/info"
# NVIDIA's Makefile links with these, so the driver's symbols resolve when it is loaded.
EXTLDFLAGS = "-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy"
DEFAULT_CACHE = "/var/cache/kubegpu/toolkit"
# The toolkit's programs could not be built; the message says why and what is needed.
ToolkitBuildError = gobuild.GoBuildError


def log(message: str) -> None:
    print(f"[toolkit-build] {message}", file=sys.stderr, flush=True)


def versions() -> tuple[str, ...]:
    """The toolkit releases there is a module for, newest first ("1.20.2", "1.17.8")."""
    found = [
        f.name[1:]
        for f in SOURCES.glob("v*")
        if (f / "go.mod").is_file() and (f / "go.sum").is_file()
    ]
    return tuple(sorted(found, key=lambda v: [int(x) for x in v.split(".")], reverse=True))


def module_version(gomod: str) -> str:
    """The toolkit release go.mod requires ("1.20.2")."""
    return gobuild.required_version(gomod, MODULE)[1:]


def source_key(folder: Path) -> str:
    """A hash of what the programs are built from: the module folder, this file and the helper."""
    return gobuild.cache_key(HERE, [folder, Path(__file__)])


def parse_install(text: str) -> list[tuple[str, str]]:
    """The (source file name, destination folder) lines of a debhelper .install file."""
    pairs = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.lstrip().startswith("#"):
            pairs.append((parts[0], parts[1]))
    return pairs


def _package_files(module_dir: Path, out: Path) -> dict[str, list[list[object]]]:
    """package -> [[file in out, path in the package, mode]] from the module's .install files."""
    deployments = {p.name: p for p in (module_dir / "deployments").rglob("*") if p.is_file()}
    files: dict[str, list[list[object]]] = {}
    (out / "files").mkdir(exist_ok=True)
    for package in PACKAGES:
        install = module_dir / "packaging" / "debian" / f"{package}.install"
        if not install.is_file():
            raise ToolkitBuildError(f"{install} is missing: the module's packaging is not there")
        entries: list[list[object]] = []
        for name, folder in parse_install(install.read_text()):
            dest = folder.strip("/") + "/" + name
            if name in PROGRAMS:
                entries.append([f"bin/{name}", dest, 0o755])
            elif name in deployments:
                shutil.copyfile(deployments[name], out / "files" / name)
                entries.append([f"files/{name}", dest, 0o644])
            else:
                raise ToolkitBuildError(
                    f"{install} installs {name}, which this build neither builds nor finds under "
                    f"{module_dir / 'deployments'}"
                )
        files[package] = entries
    return files


def build(
    version: str, cache: Path | None = None, gomodcache: Path | None = None
) -> dict[str, object]:
    """Build (or find) the programs of one toolkit release; return where they and the
    packaging manifest are: {"version", "dir", "manifest", "cached"}."""
    cache = cache or Path(os.environ.get("KUBEGPU_TOOLKIT_CACHE", DEFAULT_CACHE))
    gomodcache = gomodcache or gobuild.module_cache()
    folder = SOURCES / f"v{version}"
    if not (folder / "go.mod").is_file():
        raise ToolkitBuildError(
            f"no module for toolkit {version} in {SOURCES} (there are: {', '.join(versions())})"
        )
    if module_version((folder / "go.mod").read_text()) != version:
        raise ToolkitBuildError(f"{folder / 'go.mod'} does not require {MODULE} v{version}")
    out = cache / f"v{version}-{source_key(folder)}"
    cached = gobuild.build_once(
        out,
        ["manifest.json", *(f"bin/{name}" for name in PROGRAMS)],
        lambda partial: _build_into(version, folder, partial, cache, gomodcache),
        f"v{version}-*",
        log,
    )
    manifest = out / "manifest.json"
    return {"version": version, "dir": str(out), "manifest": str(manifest), "cached": cached}


def _build_into(version: str, folder: Path, partial: Path, cache: Path, gomodcache: Path) -> None:
    go = gobuild.go_tool("building NVIDIA's container toolkit")
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise ToolkitBuildError(
            "no C compiler (gcc) on PATH: NVIDIA's container toolkit is built with cgo"
            " (install Debian's gcc and libc6-dev)"
        )
    (partial / "bin").mkdir()
    env = gobuild.go_env(
        cache,
        gomodcache,
        cgo=True,
        CC=cc,
        # The deprecation warnings of NVML's header are not ours to fix.
        CGO_CFLAGS="-O2 -Wno-deprecated-declarations",
    )
    log(f"building NVIDIA's container toolkit {version} (cold: about a minute on 2 cores)")
    gobuild.go_build(
        folder,
        env,
        f"-s -w '-extldflags={EXTLDFLAGS}' -X {VERSION_PACKAGE}.version={version}",
        f"{partial / 'bin'}/",
        [f"{MODULE}/cmd/{name}" for name in PROGRAMS],
    )
    module_dir = Path(
        gobuild.run([go, "list", "-m", "-f", "{{.Dir}}", MODULE], folder, env).strip()
    )
    if not module_dir.is_dir():
        raise ToolkitBuildError(f"go list -m {MODULE} in {folder} named no folder: {module_dir}")
    manifest = {
        "version": version,
        "module": f"{MODULE}@v{version}",
        "go": gobuild.run([go, "env", "GOVERSION"], folder, env).strip(),
        "packages": _package_files(module_dir, partial),
    }
    (partial / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the results as one JSON line")
    parser.add_argument("version", nargs="*", help="toolkit releases (default: every one)")
    args = parser.parse_args(argv)
    try:
        results = [build(v) for v in (args.version or versions())]
    except ToolkitBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(results))
    else:
        for result in results:
            state = "cached" if result["cached"] else "built"
            print(f"{result['version']}: {result['dir']} ({state})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
