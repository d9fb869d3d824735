"""Benchmark the testbed: base image build, node boot, full up and down. Prints figures only.

    python bench/bench_testbed.py [--nodes N] [--rounds R] [--build-image]

--build-image builds a fresh base image in a temporary cache folder (a full debootstrap from
the host's Debian mirror, about a minute) instead of reusing the cached one. Needs root. Uses
its own state folder, bridge and subnet, so a testbed that is already up is left alone.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kubegpu.testbed import TestbedConfig, down, up
from kubegpu.testbed.config import default_cache_dir
from kubegpu.testbed.image import Recipe, ensure_base_image, host_mirror


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--build-image", action="store_true")
    args = parser.parse_args()

    cache = default_cache_dir()
    if args.build_image:
        scratch = Path(tempfile.mkdtemp(prefix="kubegpu-bench-cache-", dir="/var/tmp"))
        try:
            image = ensure_base_image(scratch, Recipe("bookworm", host_mirror()))
            size = sum(
                f.stat().st_size
                for f in image.rootfs.rglob("*")
                if f.is_file() and not f.is_symlink()
            )
            print(
                f"base image build (debootstrap minbase + packages): {image.seconds:.1f} s, "
                f"{size / 1e6:.0f} MB"
            )
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    config = TestbedConfig(
        nodes=args.nodes,
        name_prefix="bench",
        subnet="10.213.9.0/24",
        bridge="kgtbbench0",
        state_dir=Path("/run/kubegpu-testbed-bench"),
        cache_dir=cache,
    )
    ups, downs, boots = [], [], []
    for _ in range(args.rounds):
        started = time.monotonic()
        state = up(config)
        ups.append(time.monotonic() - started)
        boots += [n.boot_seconds for n in state.nodes if n.boot_seconds is not None]
        report = down(config.state_dir)
        downs.append(report.seconds)
        if report.remaining:
            print(f"down left: {report.remaining}", file=sys.stderr)
            return 1
    print(f"nodes per testbed: {args.nodes}, rounds: {args.rounds} (cached base image)")
    print(
        f"node boot to SSH + systemd running: median {statistics.median(boots):.2f} s, "
        f"max {max(boots):.2f} s"
    )
    print(f"full up:   median {statistics.median(ups):.2f} s, max {max(ups):.2f} s")
    print(f"full down: median {statistics.median(downs):.2f} s, max {max(downs):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
