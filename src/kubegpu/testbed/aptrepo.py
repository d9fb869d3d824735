"""A local signed apt repository that stands in for NVIDIA's vendor repository.

It holds test doubles of the packages only the vendor carries (nvidia-container-toolkit and
its companions), in two versions so that pinning can be tested, signed with a throwaway key
made for this testbed. It is laid out like the vendor's flat repository
(`<url>/stable/deb/amd64 /`), so roles see an ordinary operator-given mirror.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tarfile
from dataclasses import dataclass
from email.utils import formatdate
from importlib import resources
from pathlib import Path

from kubegpu.testbed._proc import run, write_file

VERSIONS = ("1.18.0-1", "1.17.8-1")
DEFAULT_VERSION = VERSIONS[0]
REPO_PATH = "libnvidia-container"  # the vendor repository's name, as in its URL
FLAT_DIR = "stable/deb/amd64"
KEY_UID = "kubegpu testbed vendor repository (THROWAWAY TEST KEY) <testbed@kubegpu.invalid>"
DOUBLE_NOTE = (
    " This is a kubegpu TEST DOUBLE built by the kubegpu testbed, not NVIDIA's package.\n"
    " It installs scripts that imitate the real programs' interfaces so that roles can be\n"
    " tested on machines without a GPU. Never install it on a real system."
)


@dataclass(frozen=True)
class PackageSpec:
    name: str
    summary: str
    files: dict[str, tuple[str, int]]  # path in the package -> (double's source name, mode)
    depends: tuple[str, ...] = ()
    conffiles: tuple[str, ...] = ()
    section: str = "utils"


def package_specs(version: str) -> list[PackageSpec]:
    upstream = version.split("-")[0]
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
            summary="NVIDIA Container Toolkit Base (kubegpu TEST DOUBLE)",
            files={
                "usr/bin/nvidia-ctk": ("nvidia-ctk", 0o755),
                "usr/bin/nvidia-container-runtime": ("nvidia-container-runtime", 0o755),
                "usr/bin/nvidia-cdi-hook": ("nvidia-cdi-hook", 0o755),
                "etc/nvidia-container-runtime/config.toml": ("config.toml", 0o644),
            },
            conffiles=("/etc/nvidia-container-runtime/config.toml",),
        ),
        PackageSpec(
            name="nvidia-container-toolkit",
            summary="NVIDIA Container toolkit (kubegpu TEST DOUBLE)",
            files={
                "usr/bin/nvidia-container-runtime-hook": ("nvidia-container-runtime-hook", 0o755)
            },
            depends=(
                f"nvidia-container-toolkit-base (= {version})",
                f"libnvidia-container-tools (>= {upstream}-1)",
                "libnvidia-container-tools (<< 2.0.0)",
            ),
        ),
    ]


def _double_text(source: str, version: str) -> str:
    text = resources.files("kubegpu.testbed").joinpath("doubles").joinpath(source).read_text()
    return text.replace("@VERSION@", version.split("-")[0])


def build_deb(spec: PackageSpec, version: str, out_dir: Path, work: Path) -> Path:
    """Build one test-double package with dpkg-deb; return the .deb path."""
    root = work / f"{spec.name}_{version}"
    shutil.rmtree(root, ignore_errors=True)
    (root / "DEBIAN").mkdir(parents=True)
    for path, (source, mode) in spec.files.items():
        write_file(root / path, _double_text(source, version), mode)
    doc = root / "usr/share/doc" / spec.name / "TEST-DOUBLE"
    write_file(doc, f"{spec.name} {version}: a kubegpu TEST DOUBLE, not NVIDIA's package.\n")
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
    control.append(f"Description: {spec.summary}\n{DOUBLE_NOTE}")
    write_file(root / "DEBIAN/control", "\n".join(control) + "\n")
    if spec.conffiles:
        write_file(root / "DEBIAN/conffiles", "".join(f"{c}\n" for c in spec.conffiles))
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


def release_file(folder: Path, names: list[str]) -> str:
    lines = [
        "Origin: kubegpu testbed (TEST DOUBLES)",
        "Label: kubegpu testbed vendor repository (TEST DOUBLES)",
        f"Date: {formatdate(usegmt=True)}",
        "Architectures: amd64",
        "Description: test doubles of vendor-only packages, built by the kubegpu testbed",
        "SHA256:",
    ]
    for name in names:
        data = (folder / name).read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data):>8} {name}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class VendorRepo:
    root: Path  # served folder
    flat: Path  # folder with Packages / InRelease
    keyring: Path  # binary keyring for signed-by
    versions: tuple[str, ...]


def build_repo(folder: Path) -> VendorRepo:
    """Build, index and sign the repository under folder (replacing what was there)."""
    shutil.rmtree(folder, ignore_errors=True)
    serve = folder / "www"
    flat = serve / REPO_PATH / FLAT_DIR
    flat.mkdir(parents=True)
    work = folder / "build"
    work.mkdir()
    debs = [
        build_deb(spec, version, flat, work)
        for version in VERSIONS
        for spec in package_specs(version)
    ]
    index = packages_index(debs, flat)
    write_file(flat / "Packages", index)
    write_file(flat / "Packages.gz", gzip.compress(index.encode(), mtime=0))
    write_file(flat / "Release", release_file(flat, ["Packages", "Packages.gz"]))
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
