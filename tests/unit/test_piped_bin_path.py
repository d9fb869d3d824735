"""piped.BIN_PATH: the sh lookup of a command that the piped actions use must find what
ansible's own get_bin_path (the module's lookup) finds, for the same PATH and folders."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from unittest import mock

import pytest
from ansible.module_utils.common.process import get_bin_path
from ansible_collections.kubegpu.gpu.plugins.plugin_utils.piped import BIN_PATH


def sh_bin_path(name: str, opt_dirs: list[str], path: str | None) -> str | None:
    env = {k: v for k, v in os.environ.items() if k != "PATH"}
    if path is not None:
        env["PATH"] = path
    done = subprocess.run(
        # The script sets PATH from its first argument, as the node's PATH would be.
        [
            "/bin/sh",
            "-c",
            BIN_PATH + 'PATH=$1; shift; bin_path "$@"',
            "sh",
            path or "",
            name,
            *opt_dirs,
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.stderr == ""
    if done.returncode != 0:
        assert done.stdout == ""
        return None
    return done.stdout.rstrip("\n")


def ansible_bin_path(name: str, opt_dirs: list[str], path: str) -> str | None:
    with mock.patch.dict(os.environ, {"PATH": path}):
        try:
            return get_bin_path(name, opt_dirs=opt_dirs)
        except ValueError:
            return None


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    def make(rel: str, mode: int) -> None:
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("#!/bin/sh\n")
        target.chmod(mode)

    make("a/tool", 0o644)  # no execute bit: passed over
    make("b/tool", 0o755)
    make("c/tool", 0o010)  # group execute only
    (tmp_path / "d" / "tool").mkdir(parents=True)  # a directory of that name: passed over
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "tool").symlink_to(tmp_path / "b" / "tool")
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "tool").symlink_to(tmp_path / "nowhere")  # dangling: passed over
    return tmp_path


CASES = {
    "first executable in PATH": ("tool", [], "{t}/a:{t}/d:{t}/b:{t}/c"),
    "group bit only": ("tool", [], "{t}/a:{t}/c:{t}/b"),
    "opt dirs first": ("tool", ["{t}/c", "{t}/b"], "{t}/e"),
    "missing opt dir": ("tool", ["{t}/missing"], "{t}/f:{t}/e"),
    "empty entries and a trailing slash": ("tool", [], "::{t}/f:{t}/b/:"),
    "not found": ("tool", [], "{t}/a:{t}/d:{t}/f"),
    "the sbin folders come last": ("ip", [], "{t}/a"),
    "an sbin folder in PATH keeps its place": ("ip", [], "/usr/sbin:{t}/b"),
    "empty PATH": ("tool", ["{t}/b"], ""),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_sh_lookup_finds_what_get_bin_path_finds(tree: Path, case: str) -> None:
    name, opt_dirs, path = CASES[case]
    opt = [d.format(t=tree) for d in opt_dirs]
    wanted = ansible_bin_path(name, opt, path.format(t=tree))
    assert sh_bin_path(name, opt, path.format(t=tree)) == wanted
    if case == "not found":
        assert wanted is None
    elif case != "an sbin folder in PATH keeps its place":
        assert wanted is not None


def test_the_execute_bit_is_read_where_test_x_says_no(tmp_path: Path) -> None:
    """As root, test -x agrees with ansible's any-bit rule; the stat fallback is what decides
    for other users, so it is checked on its own."""
    for mode, expected in (
        (0o644, 1),
        (0o4644, 1),
        (0o1644, 1),
        (0o010, 0),
        (0o001, 0),
        (0o100, 0),
    ):
        target = tmp_path / f"m{mode:o}"
        target.write_text("")
        target.chmod(mode)
        done = subprocess.run(
            ["/bin/sh", "-c", BIN_PATH + '_kg_xbit "$1"', "sh", str(target)], check=False
        )
        assert done.returncode == expected, oct(mode)
