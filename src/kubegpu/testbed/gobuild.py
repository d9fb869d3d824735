"""Cached builds of Go programs from official Go modules: the part every kubegpu build shares.

A build reads a module folder of ours (go.mod, go.sum, a tools.go) that requires the upstream
module at a release, and runs `go build -mod=readonly -trimpath` (GOTOOLCHAIN=local, VCS stamping
off) with the module cache shared by all builds (KUBEGPU_GOMODCACHE) and a Go build cache of its
own (`gocache` in its cache folder): every module is verified against go.sum's pinned hashes.

What it builds is kept in a folder named by a key that hashes its inputs (the module folder, the
build's script and this file). A run that finds the folder's files present answers at once,
without Go. A build writes into a `.partial-` folder under the cache folder's lock, renames it to
the keyed name when every file is there, and keeps the two most recently built or used keys of
the same kind: a checkout whose inputs differ (an older branch, a second work tree) keeps its
binaries, and a running cluster keeps the programs it was started from.

Standard library only (the test cluster's build runs it without the virtual environment).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

DEFAULT_GOMODCACHE = "/var/cache/kubegpu/gomod/pkg/mod"
# How many keys of one kind a cache folder keeps: the newest build and the one before it.
KEEP = 2
STDERR_TAIL = 6000


class GoBuildError(RuntimeError):
    """A build could not run or failed; the message says why (with the tool's stderr tail)."""


def module_cache() -> Path:
    """The Go module cache every build shares: KUBEGPU_GOMODCACHE, or the default."""
    return Path(os.environ.get("KUBEGPU_GOMODCACHE", DEFAULT_GOMODCACHE))


def required_version(gomod: str, module: str, where: Path | str = "go.mod") -> str:
    """The version go.mod requires of ``module`` (a whole-line match, never a prefix)."""
    found = re.search(
        rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)(?: // indirect)?$", gomod, re.M
    )
    if not found:
        raise GoBuildError(f"{where} requires no {module}")
    return found.group(1)


def cache_key(root: Path, inputs: Iterable[Path], *extra: str) -> str:
    """A hash of the files under ``inputs`` (files or folders, named relative to ``root``), of
    this file, and of ``extra``: 16 hex digits."""
    files = {Path(__file__).resolve(): "gobuild.py"}
    for path in inputs:
        for found in [path, *path.rglob("*")] if path.is_dir() else [path]:
            if found.is_file():
                files[found.resolve()] = str(found.resolve().relative_to(root.resolve()))
    digest = hashlib.sha256()
    for path, name in sorted(files.items(), key=lambda item: item[1]):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    for item in extra:
        digest.update(item.encode() + b"\0")
    return digest.hexdigest()[:16]


def go_env(cache: Path, gomodcache: Path, cgo: bool, **extra: str) -> dict[str, str]:
    """The environment of every `go` command of a build whose cache folder is ``cache``."""
    return dict(
        os.environ,
        GOMODCACHE=str(gomodcache),
        GOCACHE=str(cache / "gocache"),
        GOFLAGS="-mod=readonly -buildvcs=false",
        GOTOOLCHAIN="local",
        CGO_ENABLED="1" if cgo else "0",
        **extra,
    )


def go_tool(purpose: str = "the build") -> str:
    """The `go` command's path; GoBuildError when there is none."""
    go = shutil.which("go")
    if not go:
        raise GoBuildError(f"no `go` on PATH: {purpose} needs the Go toolchain (1.26 or newer)")
    return go


def run(argv: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a build step; its stdout, or GoBuildError with the tail of its stderr."""
    proc = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        words = list(argv[1:] if argv[0] == "nice" else argv)
        named = " ".join([Path(words[0]).name, *words[1:2]])
        raise GoBuildError(
            f"{named} in {cwd} failed ({proc.returncode}):\n{proc.stderr[-STDERR_TAIL:]}"
        )
    return proc.stdout


def go_build(
    folder: Path,
    env: dict[str, str],
    ldflags: str,
    output: Path | str,
    packages: Sequence[str],
    modfile: Path | None = None,
) -> None:
    """`nice go build -trimpath` of ``packages`` in the module ``folder`` into ``output`` (a file,
    or a folder when it ends in '/')."""
    argv = ["nice", go_tool(), "build"]
    if modfile is not None:
        argv.append(f"-modfile={modfile}")
    run([*argv, "-trimpath", "-ldflags", ldflags, "-o", str(output), *packages], folder, env)


@contextmanager
def locked(cache: Path, name: str = ".lock") -> Iterator[None]:
    """Hold the cache folder's lock file ``name`` (made with the folder when missing)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / name, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def present(out: Path, files: Iterable[str]) -> bool:
    """Whether every file is in ``out``; a hit marks the folder as just used."""
    if not all((out / name).is_file() for name in files):
        return False
    # A read-only cache, or one pruned by another build since: the files were there.
    with suppress(OSError):
        os.utime(out)
    return True


def prune(cache: Path, pattern: str, keep: int = KEEP) -> list[Path]:
    """Remove all but the ``keep`` most recently built or used folders matching ``pattern``;
    return those removed."""
    folders = sorted(
        (p for p in cache.glob(pattern) if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in folders[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    return folders[keep:]


def build_once(
    out: Path,
    files: Sequence[str],
    make: Callable[[Path], None],
    kind: str,
    log: Callable[[str], None],
    lock: str = ".lock",
) -> bool:
    """Find ``files`` in ``out`` (True), or, under the cache folder's ``lock``, have ``make`` write
    them into a partial folder, move it to ``out`` and prune the folders matching ``kind`` (a
    glob) to the newest two (False)."""
    if present(out, files):
        return True
    cache = out.parent
    with locked(cache, lock):
        if present(out, files):
            return True
        partial = cache / f".partial-{out.name}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        started = time.monotonic()
        try:
            make(partial)
            missing = [name for name in files if not (partial / name).is_file()]
            if missing:
                raise GoBuildError(f"the build wrote no {', '.join(missing)} in {partial}")
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
        os.utime(out)
        prune(cache, kind)
        log(f"built in {time.monotonic() - started:.0f} s: {out}")
    return False


def build_programs(
    out: Path,
    folder: Path,
    programs: dict[str, str],
    ldflags: str,
    env: dict[str, str],
    log: Callable[[str], None],
    announce: str,
) -> bool:
    """build_once() of ``programs`` (file name -> Go package) in one `go build` in the module
    ``folder``, pruning the ``bin-*`` folders beside ``out``; ``announce`` is logged first."""

    def make(partial: Path) -> None:
        log(announce)
        go_build(folder, env, ldflags, f"{partial}/", list(programs.values()))

    return build_once(out, list(programs), make, "bin-*", log)
