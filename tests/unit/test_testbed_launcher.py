"""The node launcher: detaches, records PIDs, starts the command again on exit code 133
(a node that reboots), stops on SIGTERM without starting it again."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kubegpu.testbed import launcher
from kubegpu.testbed._proc import pid_alive


def _wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def _launch(tmp_path: Path, script: str) -> int:
    subprocess.run(
        [
            sys.executable,
            launcher.__file__,
            "--pidfile",
            str(tmp_path / "launcher.pid"),
            "--child-pidfile",
            str(tmp_path / "child.pid"),
            "--log",
            str(tmp_path / "log"),
            "--",
            "/bin/sh",
            "-c",
            script,
        ],
        check=True,
        timeout=30,
    )
    return int((tmp_path / "launcher.pid").read_text())


def test_relaunches_on_133_and_exits_on_anything_else(tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    # First run "reboots" (133), the second one halts (0).
    script = f"echo x >> {counter}; [ $(wc -l < {counter}) -ge 2 ] && exit 0; exit 133"
    pid = _launch(tmp_path, script)
    assert _wait_gone(pid)
    assert counter.read_text().count("x") == 2
    log = (tmp_path / "log").read_text()
    assert log.count("starting: /bin/sh") == 2
    assert "node rebooted: starting it again" in log
    assert not (tmp_path / "child.pid").exists()


def test_detaches_from_its_starter(tmp_path: Path) -> None:
    pid = _launch(tmp_path, "sleep 30")
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        assert int(stat[1]) != os.getpid()  # the starter is not its parent
        assert int(stat[3]) == pid  # its own session
    finally:
        os.kill(pid, signal.SIGTERM)
    assert _wait_gone(pid)


def test_sigterm_is_forwarded_and_not_followed_by_a_relaunch(tmp_path: Path) -> None:
    pid = _launch(tmp_path, "trap 'exit 133' TERM; sleep 30 & wait")
    deadline = time.monotonic() + 10
    while not (tmp_path / "child.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int((tmp_path / "child.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    assert _wait_gone(pid)
    assert not pid_alive(child)
    assert (tmp_path / "log").read_text().count("starting: /bin/sh") == 1


def test_cgroup_mounts_are_found_for_this_process() -> None:
    mounts = launcher.cgroup_mounts()
    if not mounts:
        pytest.skip("no cgroup file system mounted here")
    keys = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, controllers, _path = line.split(":", 2)
        keys.append("0" if hid == "0" else ",".join(sorted(controllers.split(","))))
    found = [k for k in keys if k in mounts]
    assert found, f"none of {keys} among {sorted(mounts)}"
    assert all((mounts[k] / "cgroup.procs").exists() for k in found)


def test_inotify_limit_is_raised_for_many_nodes_and_never_lowered(tmp_path: Path) -> None:
    from kubegpu.testbed.api import raise_inotify_limit

    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")
    # 16 nodes on Linux's default of 128: udevd ran out of instances in the 16-node bench.
    assert raise_inotify_limit(16, limit) == (128, 768)
    assert limit.read_text() == "768\n"
    # High enough already (or higher than wanted): left alone.
    assert raise_inotify_limit(2, limit) is None
    assert limit.read_text() == "768\n"
    limit.write_text("100000\n")
    assert raise_inotify_limit(16, limit) is None
    assert limit.read_text() == "100000\n"
    # Unreadable: nothing to do.
    assert raise_inotify_limit(16, tmp_path / "missing") is None


def test_the_last_testbed_down_puts_the_host_s_inotify_limit_back(tmp_path: Path) -> None:
    from kubegpu.testbed.api import raise_inotify_limit, restore_inotify_limit

    limit, record = tmp_path / "max_user_instances", tmp_path / "record.json"
    limit.write_text("128\n")
    demo, tests = tmp_path / "demo", tmp_path / "tests"
    assert raise_inotify_limit(3, limit, holder=demo, record=record) == (128, 512)
    # A second testbed while the first is up: nothing to raise, but it holds the limit too.
    assert raise_inotify_limit(3, limit, holder=tests, record=record) is None
    assert restore_inotify_limit(demo, limit, record) is None
    assert limit.read_text() == "512\n"
    assert restore_inotify_limit(tests, limit, record) == 128
    assert limit.read_text() == "128\n" and not record.exists()
    # A host whose limit was high enough is never recorded, and never changed by a down.
    limit.write_text("4096\n")
    assert raise_inotify_limit(3, limit, holder=demo, record=record) is None
    assert not record.exists()
    assert restore_inotify_limit(demo, limit, record) is None
    assert limit.read_text() == "4096\n"


def _blocked_while_locked(
    lock: Path, call: Callable[[], object], meanwhile: Callable[[], object] = lambda: None
) -> object:
    """Run call in a thread while this test holds lock (and runs meanwhile, as another testbed
    would); return its result once released, after asserting that it waited for the lock."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    results: list[object] = []
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        worker = threading.Thread(target=lambda: results.append(call()))
        worker.start()
        worker.join(0.5)
        assert worker.is_alive(), f"did not wait for {lock.name}"
        meanwhile()
    worker.join(10)
    assert not worker.is_alive() and len(results) == 1
    return results[0]


def test_testbeds_going_up_at_once_record_the_inotify_limit_one_at_a_time(tmp_path: Path) -> None:
    # The 2.21 leg's testbed may come up beside a suite's: a holder written while
    # another testbed rewrote the record would be lost, and the limit put back under it.
    from kubegpu.testbed.api import raise_inotify_limit, restore_inotify_limit

    limit, record = tmp_path / "max_user_instances", tmp_path / "record.json"
    limit.write_text("128\n")
    lock = tmp_path / "record.json.lock"
    leg, suite = tmp_path / "leg", tmp_path / "suite"
    raised = _blocked_while_locked(
        lock, lambda: raise_inotify_limit(3, limit, holder=leg, record=record)
    )
    assert raised == (128, 512)
    assert raise_inotify_limit(3, limit, holder=suite, record=record) is None
    assert _blocked_while_locked(lock, lambda: restore_inotify_limit(leg, limit, record)) is None
    assert limit.read_text() == "512\n"
    assert restore_inotify_limit(suite, limit, record) == 128


def test_a_base_image_is_built_once_by_testbeds_going_up_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubegpu.testbed import image

    recipe = image.Recipe(suite="trixie", mirror=image.Mirror("http://mirror", "http://sec"))
    builds: list[str] = []

    def build(cache_dir: Path, recipe: image.Recipe) -> image.BaseImage:
        builds.append(recipe.suite)
        folder = image.image_dir(cache_dir, recipe.suite)
        (folder / "rootfs/sbin").mkdir(parents=True)
        (folder / "rootfs/sbin/init").write_text("")
        (folder / "recipe.sha256").write_text(recipe.digest() + "\n")
        return image.BaseImage(folder / "rootfs", recipe, built=True, seconds=0.0)

    monkeypatch.setattr(image, "_build_base_image", build)
    cache = tmp_path / "cache"
    # Another testbed holds the suite's lock while it builds: this one waits, then finds the
    # image made and builds nothing.
    found = _blocked_while_locked(
        cache / ".base-trixie.lock",
        lambda: image.ensure_base_image(cache, recipe),
        meanwhile=lambda: build(cache, recipe),
    )
    assert isinstance(found, image.BaseImage) and found.built is False
    assert found.rootfs == cache / "base-trixie" / "rootfs"
    assert builds == ["trixie"]  # only the one this test made as the other testbed
    # With nothing cached and nobody else building, it builds under the lock.
    other = image.Recipe(suite="bookworm", mirror=recipe.mirror)
    assert image.ensure_base_image(cache, other).built is True
    assert builds == ["trixie", "bookworm"]
