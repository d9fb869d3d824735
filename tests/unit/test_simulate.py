"""The simulated host root borrows the real system's folders when asked, and only then."""

from __future__ import annotations

import os
from pathlib import Path

from kubegpu import simulate


def test_real_root_links_the_layers_above_the_gpu(tmp_path: Path, fixtures_real: Path) -> None:
    real = tmp_path / "real"
    (real / "etc" / "containerd").mkdir(parents=True)
    (real / "etc" / "containerd" / "config.toml").write_text("version = 2\n")
    root = tmp_path / "sim"
    simulate.build_simulated_host_root(
        root, "telegraf-tesla-t4-515", fixtures=fixtures_real, real_root=real
    )
    assert (root / "etc" / "containerd" / "config.toml").read_text() == "version = 2\n"
    for name in simulate.REAL_ROOT_LINKS:
        assert os.readlink(root / name) == str(real / name)
    # The GPU side stays simulated, and says so.
    assert (root / "sys/module/nvidia/version").read_text() == "515.105.01\n"
    assert "links to the real system's folders" in (root / "SIMULATED-GPU-README").read_text()
    # Building again over the same tree is fine (the testbed may re-run it).
    simulate.build_simulated_host_root(
        root, "telegraf-tesla-t4-515", fixtures=fixtures_real, real_root=real
    )


def test_without_real_root_nothing_is_linked(tmp_path: Path, fixtures_real: Path) -> None:
    root = tmp_path / "sim"
    simulate.build_simulated_host_root(root, "telegraf-tesla-t4-515", fixtures=fixtures_real)
    assert not any((root / name).exists() for name in simulate.REAL_ROOT_LINKS)
