"""A local signed apt repository that stands in for NVIDIA's vendor repository.

It holds the packages only the vendor carries (nvidia-container-toolkit and its companions), in
two versions so that pinning, holds and upgrades can be tested, signed with a throwaway key made
for this testbed. It is laid out like the vendor's flat repository (`<url>/stable/deb/amd64 /`),
so roles see an ordinary operator-given mirror.

nvidia-container-toolkit-base and nvidia-container-toolkit carry NVIDIA's real programs
(nvidia-ctk, nvidia-container-runtime, nvidia-container-runtime-hook, nvidia-cdi-hook), built
from NVIDIA's Go module at that release by toolkit_build.py and split into the two packages as
the module's own packaging/debian/*.install files say, with NVIDIA's systemd units and udev rule
where that release has them. They are built by the kubegpu testbed, not by NVIDIA, and say so.
libnvidia-container1 and libnvidia-container-tools (nvidia-container-cli, C code that needs a
GPU) stay TEST DOUBLES and say so.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import os
import shutil
import tarfile
from dataclasses import dataclass
from email.utils import formatdate
from importlib import resources
from pathlib import Path

from kubegpu.testbed import gobuild, toolkit_build
from kubegpu.testbed._proc import run, write_file

# The pin (the newest) and an older release without NVIDIA's CDI refresh units, for the
# upgrade, hold and downgrade tests: the toolkit releases toolkit-src/ has a module for.
VERSIONS = ("1.20.2-1", "1.17.8-1")
DEFAULT_VERSION = VERSIONS[0]
REPO_PATH = "libnvidia-container"  # the vendor repository's name, as in its URL
FLAT_DIR = "stable/deb/amd64"
KEY_UID = "kubegpu testbed vendor repository (THROWAWAY TEST KEY) <testbed@kubegpu.invalid>"
DOUBLE_NOTE = (
    " This is a kubegpu TEST DOUBLE built by the kubegpu testbed, not NVIDIA's package.\n"
    " It installs scripts that imitate the real programs' interfaces so that roles can be\n"
    " tested on machines without a GPU. Never install it on a real system."
)
BUILT_NOTE = (
    " NVIDIA's programs built by the kubegpu testbed from NVIDIA's Go module\n"
    " @MODULE@ (toolkit_build.py), packaged as NVIDIA's\n"
    " packaging/debian files split them. Not NVIDIA's own package: for tests only."
)
BUILT_MARKER = "KUBEGPU-TESTBED-BUILD"
DOUBLE_MARKER = "TEST-DOUBLE"


@dataclass(frozen=True)
class PackageSpec:
    name: str
    summary: str
    files: dict[str, tuple[str, int]]  # path in the package -> (double's source name, mode)
    depends: tuple[str, ...] = ()
    conffiles: tuple[str, ...] = ()
    section: str = "utils"
    # Built from NVIDIA's module: path in the package -> (file in the build, mode)
    built: dict[str, tuple[Path, int]] | None = None
    module: str = ""
    scripts: dict[str, str] | None = None  # maintainer scripts: name -> text


# What NVIDIA's maintainer scripts do, written for these packages: the base package writes
# the runtime's config.toml with nvidia-ctk (NVIDIA ships none; its postinst makes it), and, where
# the release ships the CDI refresh units, enables and starts them as debhelper's systemd
# helpers do for NVIDIA's packages; the toolkit package links nvidia-container-toolkit to the hook.
BASE_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ]; then
    /usr/bin/nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place
    if [ -e /lib/systemd/system/nvidia-cdi-refresh.path ]; then
        if command -v udevadm >/dev/null 2>&1; then
            udevadm control --reload-rules >/dev/null 2>&1 || true
        fi
        if command -v deb-systemd-helper >/dev/null 2>&1; then
            deb-systemd-helper unmask nvidia-cdi-refresh.path nvidia-cdi-refresh.service >/dev/null || true
            deb-systemd-helper enable nvidia-cdi-refresh.path nvidia-cdi-refresh.service >/dev/null || true
        fi
        if [ -d /run/systemd/system ]; then
            systemctl --system daemon-reload >/dev/null || true
            deb-systemd-invoke start nvidia-cdi-refresh.path nvidia-cdi-refresh.service >/dev/null || true
        fi
    fi
fi
exit 0
"""
BASE_PRERM = """#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ] && [ -e /lib/systemd/system/nvidia-cdi-refresh.path ]; then
    deb-systemd-invoke stop nvidia-cdi-refresh.path nvidia-cdi-refresh.service >/dev/null || true
fi
exit 0
"""
BASE_POSTRM = """#!/bin/sh
set -e
if [ "$1" = purge ] && command -v deb-systemd-helper >/dev/null 2>&1; then
    deb-systemd-helper purge nvidia-cdi-refresh.path nvidia-cdi-refresh.service >/dev/null || true
fi
if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
fi
exit 0
"""
TOOLKIT_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ] && [ -f /usr/bin/nvidia-container-runtime-hook ] \\
        && [ ! -e /usr/bin/nvidia-container-toolkit ]; then
    ln -s /usr/bin/nvidia-container-runtime-hook /usr/bin/nvidia-container-toolkit
fi
exit 0
"""
TOOLKIT_POSTRM = """#!/bin/sh
set -e
if [ "$1" = purge ] && [ -L /usr/bin/nvidia-container-toolkit ]; then
    rm /usr/bin/nvidia-container-toolkit
fi
exit 0
"""


def package_specs(version: str, build: dict[str, object] | None = None) -> list[PackageSpec]:
    """The four packages at one version; build is toolkit_build.build()'s result for it."""
    upstream = version.split("-")[0]
    if build is None:
        build = toolkit_build.build(upstream)
    folder = Path(str(build["dir"]))
    manifest = json.loads(Path(str(build["manifest"])).read_text())

    def built(package: str) -> dict[str, tuple[Path, int]]:
        return {dest: (folder / src, mode) for src, dest, mode in manifest["packages"][package]}

    base = built("nvidia-container-toolkit-base")
    return [
        PackageSpec(
            name="libnvidia-container1",
            summary="NVIDIA container runtime library (kubegpu TEST DOUBLE)",
            files={},
            section="libs",
        ),
        PackageSpec(
            name="libnvidia-container-tools",
            summary="NVIDIA container runtime library, command-line tools (kubegpu TEST DOUBLE)",
            files={"usr/bin/nvidia-container-cli": ("nvidia-container-cli", 0o755)},
            depends=(f"libnvidia-container1 (>= {version})",),
        ),
        PackageSpec(
            name="nvidia-container-toolkit-base",
            summary="NVIDIA Container Toolkit Base (built from source by the kubegpu testbed)",
            files={},
            built=base,
            module=str(manifest["module"]),
            # debhelper marks every file under /etc as a configuration file
            conffiles=tuple(sorted("/" + p for p in base if p.startswith("etc/"))),
            scripts={"postinst": BASE_POSTINST, "prerm": BASE_PRERM, "postrm": BASE_POSTRM},
        ),
        PackageSpec(
            name="nvidia-container-toolkit",
            summary="NVIDIA Container toolkit (built from source by the kubegpu testbed)",
            files={},
            built=built("nvidia-container-toolkit"),
            module=str(manifest["module"]),
            depends=(
                f"nvidia-container-toolkit-base (= {version})",
                f"libnvidia-container-tools (>= {upstream}-1)",
                "libnvidia-container-tools (<< 2.0.0)",
            ),
            scripts={"postinst": TOOLKIT_POSTINST, "postrm": TOOLKIT_POSTRM},
        ),
    ]


def _double_text(source: str, version: str) -> str:
    text = resources.files("kubegpu.testbed").joinpath("doubles").joinpath(source).read_text()
    return text.replace("@VERSION@", version.split("-")[0])


def build_deb(spec: PackageSpec, version: str, out_dir: Path, work: Path) -> Path:
    """Build one package with dpkg-deb; return the .deb path."""
    root = work / f"{spec.name}_{version}"
    shutil.rmtree(root, ignore_errors=True)
    (root / "DEBIAN").mkdir(parents=True)
    for path, (source, mode) in spec.files.items():
        write_file(root / path, _double_text(source, version), mode)
    for path, (built, mode) in (spec.built or {}).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, root / path)
        os.chmod(root / path, mode)
    if spec.built is not None:
        doc = root / "usr/share/doc" / spec.name / BUILT_MARKER
        write_file(
            doc,
            f"{spec.name} {version}: NVIDIA's programs built by the kubegpu testbed from"
            f" {spec.module}; not NVIDIA's package.\n",
        )
        note = BUILT_NOTE.replace("@MODULE@", spec.module)
    else:
        doc = root / "usr/share/doc" / spec.name / DOUBLE_MARKER
        write_file(doc, f"{spec.name} {version}: a kubegpu TEST DOUBLE, not NVIDIA's package.\n")
        note = DOUBLE_NOTE
    control = [
        f"Package: {spec.name}",
        f"Version: {version}",
        "Architecture: amd64",
        "Maintainer: kubegpu testbed <testbed@kubegpu.invalid>",
        f"Section: {spec.section}",
        "Priority: optional",
    ]
    if spec.depends:
        control.append("Depends: " + ", ".join(spec.depends))
    control.append(f"Description: {spec.summary}\n{note}")
    write_file(root / "DEBIAN/control", "\n".join(control) + "\n")
    if spec.conffiles:
        write_file(root / "DEBIAN/conffiles", "".join(f"{c}\n" for c in spec.conffiles))
    for name, text in (spec.scripts or {}).items():
        write_file(root / "DEBIAN" / name, text, 0o755)
    deb = out_dir / f"{spec.name}_{version}_amd64.deb"
    run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, deb],
        what=f"building {deb.name}",
    )
    return deb


def _control_of(deb: Path) -> str:
    with tarfile.open(fileobj=_member(deb, "control.tar")) as tar:
        member = tar.extractfile("./control")
        assert member is not None
        return member.read().decode()


def _member(deb: Path, prefix: str):  # type: ignore[no-untyped-def]
    """The ar member of a .deb whose name starts with prefix, as a file object."""
    import io

    data = deb.read_bytes()
    offset = 8  # "!<arch>\n"
    while offset < len(data):
        header = data[offset : offset + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        body = data[offset + 60 : offset + 60 + size]
        if name.startswith(prefix):
            return io.BytesIO(body)
        offset += 60 + size + (size % 2)
    raise ValueError(f"{deb} has no {prefix} member")


def packages_index(debs: list[Path], base: Path) -> str:
    """The Packages index for these .debs (paths relative to base), as apt expects it."""
    stanzas = []
    for deb in sorted(debs):
        data = deb.read_bytes()
        control = _control_of(deb).rstrip("\n")
        stanzas.append(
            control
            + f"\nFilename: ./{deb.relative_to(base)}"
            + f"\nSize: {len(data)}"
            + f"\nMD5sum: {hashlib.md5(data).hexdigest()}"
            + f"\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    return "\n".join(stanzas)


def write_release(flat: Path, debs: list[Path], label: str, description: str = "") -> None:
    """Index the .debs of a flat repository: Packages, Packages.gz and the Release file over
    them (Origin "kubegpu testbed", ``label``, and ``description`` when given), unsigned."""
    index = packages_index(debs, flat)
    write_file(flat / "Packages", index)
    write_file(flat / "Packages.gz", gzip.compress(index.encode(), mtime=0))
    lines = [
        "Origin: kubegpu testbed",
        f"Label: {label}",
        f"Date: {formatdate(usegmt=True)}",
        "Architectures: amd64",
        *([f"Description: {description}"] if description else []),
        "SHA256:",
    ]
    for name in ("Packages", "Packages.gz"):
        data = (flat / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data):>8} {name}")
    write_file(flat / "Release", "\n".join(lines) + "\n")


@dataclass(frozen=True)
class VendorRepo:
    root: Path  # served folder
    flat: Path  # folder with Packages / InRelease
    keyring: Path  # binary keyring for signed-by
    versions: tuple[str, ...]


def _packaging_key(build_dir: str) -> str:
    """A hash of what the .debs of one release are made from besides the build: this file and
    the doubles."""
    digest = hashlib.sha256(build_dir.encode() + b"\0" + Path(__file__).read_bytes())
    doubles = resources.files("kubegpu.testbed").joinpath("doubles")
    for entry in sorted(doubles.iterdir(), key=lambda e: e.name):
        digest.update(entry.name.encode() + b"\0" + entry.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _cached_debs(version: str, flat: Path, work: Path) -> list[Path]:
    """The four .debs of one release, copied into flat: packaged once per build of NVIDIA's
    programs (kept beside it), so a testbed comes up without compressing them again."""
    build = toolkit_build.build(version.split("-")[0])
    kept = Path(str(build["dir"])) / f"debs-{_packaging_key(str(build['dir']))}"
    with open(kept.parent / ".debs.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not kept.is_dir():
            partial = kept.with_name(".partial-" + kept.name)
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            for spec in package_specs(version, build):
                build_deb(spec, version, partial, work)
            partial.rename(kept)
            os.utime(kept)
            gobuild.prune(kept.parent, "debs-*")
    debs = []
    for deb in sorted(kept.glob("*.deb")):
        shutil.copyfile(deb, flat / deb.name)
        debs.append(flat / deb.name)
    return debs


def build_repo(folder: Path) -> VendorRepo:
    """Build, index and sign the repository under folder (replacing what was there)."""
    shutil.rmtree(folder, ignore_errors=True)
    serve = folder / "www"
    flat = serve / REPO_PATH / FLAT_DIR
    flat.mkdir(parents=True)
    work = folder / "build"
    work.mkdir()
    debs = []
    for version in VERSIONS:
        debs += _cached_debs(version, flat, work)
    write_release(
        flat,
        debs,
        "kubegpu testbed vendor repository (built from source, and TEST DOUBLES)",
        "vendor-only packages built by the kubegpu testbed: NVIDIA's container toolkit from"
        " source, libnvidia-container as test doubles",
    )
    keyring = _sign(folder, flat)
    shutil.copy2(keyring, serve / REPO_PATH / "gpgkey.gpg")
    shutil.rmtree(work)
    return VendorRepo(root=serve, flat=flat, keyring=keyring, versions=VERSIONS)


def _sign(folder: Path, flat: Path) -> Path:
    """Make a throwaway key, sign Release (InRelease, Release.gpg), export the keyring."""
    home = folder / "gnupg"
    home.mkdir(mode=0o700)
    env = {"GNUPGHOME": str(home)}
    gpg = ["gpg", "--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", ""]
    try:
        run(
            [*gpg, "--quick-gen-key", KEY_UID, "ed25519", "sign", "0"],
            what="generating the vendor repository's test key",
            env=env,
        )
        run(
            [*gpg, "--yes", "--clearsign", "-o", flat / "InRelease", flat / "Release"],
            what="signing InRelease",
            env=env,
        )
        run(
            [
                *gpg,
                "--yes",
                "--armor",
                "--detach-sign",
                "-o",
                flat / "Release.gpg",
                flat / "Release",
            ],
            what="signing Release.gpg",
            env=env,
        )
        keyring = folder / "vendor-repo-keyring.gpg"
        run([*gpg, "--yes", "-o", keyring, "--export"], what="exporting the test key", env=env)
        os.chmod(keyring, 0o644)
    finally:
        run(["gpgconf", "--kill", "all"], what="stopping gpg-agent", env=env, check=False)
    return keyring
