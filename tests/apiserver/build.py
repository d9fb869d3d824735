#!/usr/bin/env python3
"""Build the test Kubernetes API server from Debian's Go packages, cached.

What it does, in order (every step is skipped when its result is already in the cache):

1. Writes a private apt configuration under the cache folder that adds Debian sid from the same
   mirror host the machine's own apt sources use. The machine's sources, state and preferences
   are never touched.
2. Resolves the closure of the Kubernetes library packages (golang-k8s-apiserver-dev and friends),
   the Go toolchain sid's golang-go points to, and etcd-server, with apt's own resolver working
   against an empty package database. The result (names and versions) is the manifest; it is kept
   and reused until the root set changes, a pinned version has left the mirror, or
   KUBEGPU_APISERVER_REFRESH=1 asks for a fresh resolution.
3. Downloads the packages with `apt-get download` and unpacks them with `dpkg-deb -x` into a tree
   keyed on the manifest's hash.
4. Builds the Go sources under src/ in GOPATH mode against the unpacked /usr/share/gocode, offline,
   with component-base's version set from the packaged library version, and keeps the binary
   under a key that hashes the Go sources, the manifest and this script.

Standard library only, so any python3 can run it. Progress goes to stderr; the result goes to
stdout (`--json` for a machine-readable form, used by the pytest fixture).

Environment:
  KUBEGPU_APISERVER_CACHE    cache folder (default /var/cache/kubegpu/apiserver)
  KUBEGPU_APISERVER_MIRROR   Debian mirror base URL (default: taken from the machine's apt sources)
  KUBEGPU_APISERVER_REFRESH  set to 1 to resolve the package closure again from current sid
"""

from __future__ import annotations

import argparse
import fcntl
import glob
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
GO_PACKAGE = "kubegpu/testapiserver"
BINARY_NAME = "kubegpu-test-apiserver"
DEFAULT_CACHE = "/var/cache/kubegpu/apiserver"
DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
SUITE = "sid"
# What the Go code imports directly; apt resolves everything else.
ROOT_PACKAGES = (
    "golang-k8s-apiserver-dev",
    "golang-k8s-api-dev",
    "golang-k8s-apimachinery-dev",
    "golang-k8s-client-go-dev",
    "golang-k8s-component-base-dev",
    "golang-k8s-kube-openapi-dev",
    "golang-k8s-klog-dev",
    "etcd-server",
)
MANIFEST_FORMAT = 1


class BuildError(Exception):
    """A step failed; the message says which and what to do."""


def log(msg: str) -> None:
    print(f"[apiserver-build] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, LC_ALL="C")
    env.update(kw.pop("env", {}))
    proc = subprocess.run(cmd, env=env, text=True, capture_output=True, **kw)
    if proc.returncode != 0:
        raise BuildError(
            f"command failed (exit {proc.returncode}): {' '.join(cmd)}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    return proc


# --------------------------------------------------------------------------- mirror discovery


def _os_codename() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError as exc:
        raise BuildError(
            f"cannot read /etc/os-release to find the release codename: {exc}"
        ) from exc
    match = re.search(r"^VERSION_CODENAME=\"?([a-z]+)\"?$", text, re.M)
    if not match:
        raise BuildError("/etc/os-release has no VERSION_CODENAME; set KUBEGPU_APISERVER_MIRROR")
    return match.group(1)


def _source_entries() -> list[dict]:
    """Enabled `deb` entries of the machine's apt sources, as dicts of URIs/Suites/..."""
    entries: list[dict] = []
    files = [Path("/etc/apt/sources.list")]
    files += sorted(Path("/etc/apt/sources.list.d").glob("*.list"))
    for path in files:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line.startswith("deb "):
                continue
            opts = {}
            rest = line[4:].strip()
            if rest.startswith("["):
                inner, _, rest = rest[1:].partition("]")
                for opt in inner.split():
                    key, _, value = opt.partition("=")
                    opts[key.lower()] = value
            parts = rest.split()
            if len(parts) < 3:
                continue
            entries.append(
                {
                    "uris": [parts[0]],
                    "suites": [parts[1]],
                    "components": parts[2:],
                    "signed-by": opts.get("signed-by", ""),
                }
            )
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            fields: dict[str, str] = {}
            key = None
            for raw in stanza.splitlines():
                if raw.startswith("#") or not raw.strip():
                    continue
                if raw[0] in " \t" and key:
                    fields[key] += "\n" + raw.strip()
                    continue
                key, _, value = raw.partition(":")
                key = key.strip().lower()
                fields[key] = value.strip()
            if "deb" not in fields.get("types", "").split():
                continue
            if fields.get("enabled", "yes").lower() == "no":
                continue
            entries.append(
                {
                    "uris": fields.get("uris", "").split(),
                    "suites": fields.get("suites", "").split(),
                    "components": fields.get("components", "").split(),
                    "signed-by": fields.get("signed-by", ""),
                }
            )
    return entries


def find_mirror() -> tuple[str, str]:
    """The Debian mirror URL and keyring the machine's own sources use for its release."""
    keyring = DEFAULT_KEYRING
    override = os.environ.get("KUBEGPU_APISERVER_MIRROR", "").strip()
    if override:
        if not re.match(r"^https?://", override):
            raise BuildError(
                f"KUBEGPU_APISERVER_MIRROR={override!r} is not an http(s) URL of a Debian mirror"
            )
        return override.rstrip("/"), keyring
    codename = _os_codename()
    for entry in _source_entries():
        if codename in entry["suites"] and "main" in entry["components"] and entry["uris"]:
            uri = entry["uris"][0]
            if not re.match(r"^https?://", uri):
                continue
            signed_by = entry["signed-by"]
            if signed_by.startswith("/") and Path(signed_by).is_file():
                keyring = signed_by
            return uri.rstrip("/"), keyring
    raise BuildError(
        f"no enabled apt source for suite {codename!r} with component main over http(s) was "
        "found in /etc/apt/sources.list(.d); set KUBEGPU_APISERVER_MIRROR to a Debian mirror URL"
    )


# --------------------------------------------------------------------------- private apt


class PrivateApt:
    """apt-get/apt-cache with their own sources, state and cache under `root`."""

    def __init__(self, root: Path, mirror: str, keyring: str) -> None:
        self.root = root
        for sub in (
            "etc/sources.list.d",
            "etc/preferences.d",
            "state/lists/partial",
            "cache/archives/partial",
        ):
            (root / sub).mkdir(parents=True, exist_ok=True)
        line = f"deb [signed-by={keyring}] {mirror} {SUITE} main\n"
        sources = root / "etc/sources.list"
        if not sources.exists() or sources.read_text() != line:
            sources.write_text(line)
            # A different mirror or keyring invalidates the downloaded lists.
            for old in (root / "state/lists").glob("*_*"):
                old.unlink()
        (root / "state/status").touch()
        self.opts = [
            f"-oDir::Etc::sourcelist={sources}",
            f"-oDir::Etc::sourceparts={root / 'etc/sources.list.d'}",
            f"-oDir::Etc::preferencesparts={root / 'etc/preferences.d'}",
            f"-oDir::Etc::preferences={root / 'etc/preferences'}",
            f"-oDir::State={root / 'state'}",
            f"-oDir::State::status={root / 'state/status'}",
            f"-oDir::Cache={root / 'cache'}",
            "-oAcquire::Languages=none",
            "-oAPT::Install-Recommends=false",
            "-oAPT::Get::AllowUnauthenticated=false",
            "-oDebug::NoLocking=true",
        ]

    def apt_get(self, *args: str, cwd: Path | None = None) -> str:
        return run(["apt-get", *self.opts, *args], cwd=cwd).stdout

    def apt_cache(self, *args: str) -> str:
        return run(["apt-cache", *self.opts, *args]).stdout

    def update(self) -> None:
        log(f"apt-get update (private sources: {SUITE} main)")
        self.apt_get("-q", "update")


def resolve(apt: PrivateApt) -> dict:
    """Resolve the package closure against an empty package database; fail loudly if it can't."""
    show = apt.apt_cache("show", "golang-go")
    depends = re.search(r"^Depends: (.*)$", show, re.M)
    go_match = re.search(r"\b(golang-1\.\d+)-go\b", depends.group(1) if depends else "")
    if not go_match:
        raise BuildError(f"cannot tell which Go toolchain sid's golang-go uses:\n{show[:2000]}")
    go_pkg = go_match.group(1)
    wanted = [*ROOT_PACKAGES, f"{go_pkg}-go", f"{go_pkg}-src"]
    try:
        sim = apt.apt_get("-s", "-q", "install", *wanted)
    except BuildError as exc:
        raise BuildError(
            f"apt cannot resolve the closure of {' '.join(wanted)} in {SUITE}: {exc}"
        ) from exc
    packages: dict[str, str] = {}
    for match in re.finditer(r"^Inst (\S+) \((\S+) .*\[(\S+)\]\)", sim, re.M):
        name, version, arch = match.groups()
        keep = (name.startswith("golang-") and name.endswith("-dev") and arch == "all") or name in (
            f"{go_pkg}-go",
            f"{go_pkg}-src",
            "etcd-server",
        )
        if keep:
            packages[name] = version
    missing = [p for p in wanted if p not in packages]
    if missing:
        raise BuildError(f"the resolved closure lacks {', '.join(missing)}:\n{sim[-3000:]}")
    return {
        "format": MANIFEST_FORMAT,
        "roots": list(ROOT_PACKAGES),
        "go": go_pkg,
        "resolved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "packages": dict(sorted(packages.items())),
    }


def deb_path(debs: Path, name: str, version: str) -> Path | None:
    hits = glob.glob(str(debs / f"{name}_{version.replace(':', '%3a')}_*.deb"))
    return Path(hits[0]) if hits else None


def download(apt: PrivateApt, manifest: dict, debs: Path) -> None:
    debs.mkdir(parents=True, exist_ok=True)
    todo = [f"{n}={v}" for n, v in manifest["packages"].items() if deb_path(debs, n, v) is None]
    if todo:
        log(f"downloading {len(todo)} packages into {debs}")
        for i in range(0, len(todo), 100):
            apt.apt_get("-q", "download", *todo[i : i + 100], cwd=debs)
    keep = {deb_path(debs, n, v) for n, v in manifest["packages"].items()}
    for stale in debs.glob("*.deb"):
        if stale not in keep:
            stale.unlink()


def manifest_hash(manifest: dict) -> str:
    text = json.dumps({"go": manifest["go"], "packages": manifest["packages"]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def unpack(manifest: dict, debs: Path, cache: Path) -> Path:
    tree = cache / f"tree-{manifest_hash(manifest)}"
    if (tree / ".complete").exists():
        return tree
    partial = cache / f"{tree.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log(f"unpacking {len(manifest['packages'])} packages into {tree}")
    for name, version in manifest["packages"].items():
        deb = deb_path(debs, name, version)
        if deb is None:
            raise BuildError(f"{name}={version} is in the manifest but not downloaded")
        run(["dpkg-deb", "-x", str(deb), str(partial)])
    # Packages ship absolute symlinks (/usr/lib/go-1.N/src -> /usr/share/...; alternative import
    # paths in gocode); point them inside the tree.
    for dirpath, dirnames, filenames in os.walk(partial):
        for entry in dirnames + filenames:
            link = Path(dirpath) / entry
            if link.is_symlink():
                target = os.readlink(link)
                if target.startswith("/"):
                    link.unlink()
                    link.symlink_to(os.path.relpath(str(partial) + target, dirpath))
    (partial / ".complete").write_text(json.dumps(manifest, indent=1) + "\n")
    partial.rename(tree)
    for old in cache.glob("tree-*"):
        if old != tree:
            log(f"removing the old tree {old}")
            shutil.rmtree(old, ignore_errors=True)
    return tree


# --------------------------------------------------------------------------- Go build


def source_files() -> list[Path]:
    return sorted(p for p in SRC.rglob("*") if p.is_file() and p.suffix in (".go", ".s"))


def input_hash(manifest: dict) -> str:
    digest = hashlib.sha256()
    digest.update(Path(__file__).read_bytes())
    digest.update(manifest_hash(manifest).encode())
    for path in source_files():
        digest.update(str(path.relative_to(SRC)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def kube_version(manifest: dict) -> tuple[str, str, str]:
    """v1.MINOR.PATCH from the packaged k8s.io/apiserver version (0.MINOR.PATCH-debrev)."""
    raw = manifest["packages"]["golang-k8s-apiserver-dev"]
    match = re.match(r"^(?:\d+:)?0\.(\d+)\.(\d+)", raw)
    if not match:
        raise BuildError(f"unexpected golang-k8s-apiserver-dev version {raw!r}")
    minor, patch = match.groups()
    return f"v1.{minor}.{patch}", "1", minor


def go_build(manifest: dict, tree: Path, cache: Path, out: Path) -> None:
    goroot = tree / "usr/lib" / manifest["go"].replace("golang-", "go-")
    gobin = goroot / "bin/go"
    if not gobin.exists():
        raise BuildError(f"the unpacked Go toolchain has no {gobin}")
    git_version, major, minor = kube_version(manifest)
    pkg = "k8s.io/component-base/version"
    ldflags = " ".join(
        [
            "-s -w",
            f"-X {pkg}.gitVersion={git_version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate={manifest['resolved_at']}",
        ]
    )
    env = {
        "GOROOT": str(goroot),
        "GOPATH": f"{HERE}:{tree / 'usr/share/gocode'}",
        "GO111MODULE": "off",
        "GOTOOLCHAIN": "local",
        "GOPROXY": "off",
        "GOFLAGS": "",
        "GOENV": "off",
        "GOTELEMETRY": "off",
        "CGO_ENABLED": "0",
        "GOCACHE": str(cache / "gocache"),
        "HOME": str(cache),
        "PATH": f"{goroot / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    log(f"go build {GO_PACKAGE} ({git_version}, {manifest['go']})")
    started = time.monotonic()
    run(
        [
            "nice",
            "-n",
            "10",
            str(gobin),
            "build",
            "-trimpath",
            "-ldflags",
            ldflags,
            "-o",
            str(tmp),
            GO_PACKAGE,
        ],
        env=env,
        cwd=SRC / GO_PACKAGE,
    )
    tmp.rename(out)
    log(f"built {out} in {time.monotonic() - started:.1f} s")


# --------------------------------------------------------------------------- main


def load_manifest(path: Path) -> dict | None:
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if manifest.get("format") != MANIFEST_FORMAT or manifest.get("roots") != list(ROOT_PACKAGES):
        return None
    return manifest


def build(cache: Path, refresh: bool) -> dict:
    cache.mkdir(parents=True, exist_ok=True)
    manifest_file = cache / "manifest.json"
    manifest = None if refresh else load_manifest(manifest_file)
    if manifest is not None:
        binary = cache / "bin" / input_hash(manifest) / BINARY_NAME
        tree = cache / f"tree-{manifest_hash(manifest)}"
        if binary.exists() and (tree / ".complete").exists():
            return describe(manifest, tree, binary, cached=True)
    apt = None
    debs = cache / "debs"
    if manifest is None:
        apt = PrivateApt(cache / "apt", *find_mirror())
        apt.update()
        manifest = resolve(apt)
        manifest_file.write_text(json.dumps(manifest, indent=1) + "\n")
        log(f"resolved {len(manifest['packages'])} packages")
    tree = cache / f"tree-{manifest_hash(manifest)}"
    if not (tree / ".complete").exists():
        apt = apt or PrivateApt(cache / "apt", *find_mirror())
        try:
            download(apt, manifest, debs)
        except BuildError:
            # The pinned versions may have left sid: resolve again from the current lists.
            log("download of the pinned versions failed; resolving again from current sid")
            apt.update()
            manifest = resolve(apt)
            manifest_file.write_text(json.dumps(manifest, indent=1) + "\n")
            download(apt, manifest, debs)
        tree = unpack(manifest, debs, cache)
    binary = cache / "bin" / input_hash(manifest) / BINARY_NAME
    if not binary.exists():
        go_build(manifest, tree, cache, binary)
        for old in (cache / "bin").iterdir():
            if old != binary.parent:
                shutil.rmtree(old, ignore_errors=True)
    return describe(manifest, tree, binary, cached=False)


def describe(manifest: dict, tree: Path, binary: Path, cached: bool) -> dict:
    return {
        "apiserver": str(binary),
        "etcd": str(tree / "usr/bin/etcd"),
        "kubernetes_version": kube_version(manifest)[0],
        "etcd_version": manifest["packages"]["etcd-server"],
        "go": manifest["go"],
        "packages": len(manifest["packages"]),
        "cached": cached,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="resolve the package closure again from current sid (also KUBEGPU_APISERVER_REFRESH=1)",
    )
    args = parser.parse_args(argv)
    cache = Path(os.environ.get("KUBEGPU_APISERVER_CACHE") or DEFAULT_CACHE)
    refresh = args.refresh or os.environ.get("KUBEGPU_APISERVER_REFRESH") == "1"
    started = time.monotonic()
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with open(cache / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            result = build(cache, refresh)
    except BuildError as exc:
        print(f"[apiserver-build] FAILED: {exc}", file=sys.stderr)
        return 1
    result["seconds"] = round(time.monotonic() - started, 1)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
