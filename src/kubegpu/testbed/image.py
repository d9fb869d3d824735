"""The base image: one debootstrap of Debian with systemd and sshd, cached and shared by nodes.

The image is rebuilt only when it is absent or when its recipe (suite, mirror, packages and the
steps below) changes: a hash of the recipe is kept in a stamp file beside the root file system.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from kubegpu.testbed._proc import run, which, write_file
from kubegpu.testbed.errors import TestbedInputError
from kubegpu.testbed.gobuild import locked

SUITES = ("bookworm", "trixie")
ARCHIVE_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

# What a node needs: systemd as PID 1, sshd, Python and apt for Ansible (python3-apt serves the
# apt module), and the tools Ansible's modules call (sysctl from procps, modprobe from kmod).
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-apt",
    "sudo",
    "ca-certificates",
    "gnupg",
    "iproute2",
    "procps",
    "kmod",
)

# Bump when the preparation steps in _prepare() change, so that cached images are rebuilt.
RECIPE_REVISION = 3

# Written into the image instead of the host's resolver: nodes have no DNS server to ask, and
# must never be pointed at one outside the testbed's bridge.
RESOLV_CONF = "# kubegpu testbed: no resolver; apt goes through the proxy on the bridge.\n"


@dataclass(frozen=True)
class Mirror:
    """Where Debian's packages come from: the archive and the security archive (URLs)."""

    archive: str
    security: str


@dataclass(frozen=True)
class Recipe:
    suite: str
    mirror: Mirror
    packages: tuple[str, ...] = PACKAGES
    variant: str = "minbase"
    revision: int = RECIPE_REVISION

    def digest(self) -> str:
        data = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class BaseImage:
    rootfs: Path
    recipe: Recipe
    built: bool  # True when this call built it, False when the cached one was reused
    seconds: float  # time spent building (0 when reused)


def host_mirror(override: str | None = None) -> Mirror:
    """The Debian mirror this host's apt uses (or `override`, an archive URL)."""
    if override:
        base = override.rstrip("/")
        return Mirror(archive=base, security=base + "-security")
    proc = run(
        ["apt-get", "indextargets", "--format", "$(SITE)|$(RELEASE)|$(TARGET_OF)"],
        what="reading the host's apt sources",
        check=False,
    )
    archive = security = ""
    for line in proc.stdout.splitlines():
        site, _, rest = line.partition("|")
        release, _, kind = rest.partition("|")
        if kind != "deb" or not site.startswith("http"):
            continue
        if release.endswith("-security"):
            security = security or site
        elif "-" not in release:
            archive = archive or site
    if not archive:
        raise TestbedInputError(
            "mirror",
            "no Debian archive found in this host's apt sources",
            "set KUBEGPU_TESTBED_MIRROR to the archive URL",
        )
    return Mirror(archive=archive.rstrip("/"), security=(security or archive + "-security"))


def image_dir(cache_dir: Path, suite: str) -> Path:
    return cache_dir / f"base-{suite}"


def cached_image(cache_dir: Path, recipe: Recipe) -> Path | None:
    """The cached root file system when present and built from this very recipe."""
    folder = image_dir(cache_dir, recipe.suite)
    stamp = folder / "recipe.sha256"
    rootfs = folder / "rootfs"
    try:
        if stamp.read_text().strip() == recipe.digest() and (rootfs / "sbin/init").exists():
            return rootfs
    except OSError:
        return None
    return None


def ensure_base_image(cache_dir: Path, recipe: Recipe) -> BaseImage:
    """Return the cached base image, building it first when absent or stale. Testbeds that come
    up at the same time (the 2.21 leg's beside a suite's) build each suite's image once: the
    build holds that suite's lock, and whoever waited on it finds the image made."""
    rootfs = cached_image(cache_dir, recipe)
    if rootfs is not None:
        return BaseImage(rootfs=rootfs, recipe=recipe, built=False, seconds=0.0)
    with locked(cache_dir, f".base-{recipe.suite}.lock"):
        rootfs = cached_image(cache_dir, recipe)
        if rootfs is not None:
            return BaseImage(rootfs=rootfs, recipe=recipe, built=False, seconds=0.0)
        return _build_base_image(cache_dir, recipe)


def _build_base_image(cache_dir: Path, recipe: Recipe) -> BaseImage:
    if which("debootstrap") is None:
        raise TestbedInputError(
            "debootstrap", "not found on PATH", "install the debootstrap package"
        )
    folder = image_dir(cache_dir, recipe.suite)
    staging = cache_dir / f".base-{recipe.suite}.building-{os.getpid()}"
    started = time.monotonic()
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        target = staging / "rootfs"
        run(
            [
                "debootstrap",
                f"--variant={recipe.variant}",
                "--components=main",
                f"--keyring={ARCHIVE_KEYRING}",
                "--include=" + ",".join(recipe.packages),
                recipe.suite,
                target,
                recipe.mirror.archive,
            ],
            what=f"debootstrap of {recipe.suite}",
            timeout=1800,
        )
        _prepare(target, recipe)
        write_file(staging / "recipe.sha256", recipe.digest() + "\n")
        write_file(staging / "recipe.json", json.dumps(asdict(recipe), indent=2) + "\n")
        # Swap in the new image; the old one (if any) goes only once the new one is complete.
        old = cache_dir / f".base-{recipe.suite}.old-{os.getpid()}"
        if folder.exists():
            folder.rename(old)
        staging.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return BaseImage(
        rootfs=folder / "rootfs",
        recipe=recipe,
        built=True,
        seconds=time.monotonic() - started,
    )


def _prepare(root: Path, recipe: Recipe) -> None:
    """Make the fresh root file system a neutral base that every node personalises."""
    suite = recipe.suite
    sources = (
        "Types: deb\n"
        f"URIs: {recipe.mirror.archive}\n"
        f"Suites: {suite} {suite}-updates\n"
        "Components: main\n"
        f"Signed-By: {ARCHIVE_KEYRING}\n"
        "\n"
        "Types: deb\n"
        f"URIs: {recipe.mirror.security}\n"
        f"Suites: {suite}-security\n"
        "Components: main\n"
        f"Signed-By: {ARCHIVE_KEYRING}\n"
    )
    write_file(root / "etc/apt/sources.list.d/debian.sources", sources)
    (root / "etc/apt/sources.list").unlink(missing_ok=True)
    # Every node gets its own host keys, machine id and host name.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    write_file(root / "etc/machine-id", "")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    (root / "etc/hostname").unlink(missing_ok=True)
    resolv = root / "etc/resolv.conf"
    if resolv.is_symlink():
        resolv.unlink()
    write_file(resolv, RESOLV_CONF)
    run(["chroot", root, "apt-get", "clean"], what="apt-get clean in the base image")
    lists = root / "var/lib/apt/lists"
    for entry in lists.iterdir():
        if entry.is_file() and entry.name != "lock":
            entry.unlink()
    # No package lists, and a lists folder that looks never updated: Ansible's apt module
    # (cache_valid_time) then refreshes the cache instead of trusting an empty one.
    os.utime(lists, (0, 0))
    # Units that have nothing to do in a container and only slow the boot or fail.
    for unit in (
        "systemd-networkd-wait-online.service",
        "apt-daily.timer",
        "apt-daily-upgrade.timer",
        "e2scrub_all.timer",
        "fstrim.timer",
    ):
        link = root / "etc/systemd/system/timers.target.wants" / unit
        link.unlink(missing_ok=True)
