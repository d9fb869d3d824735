"""A detached process that runs one command for the testbed and records its PIDs.

Used two ways, both started as `python -m kubegpu.testbed.launcher ... -- COMMAND...`:

- a node: the launcher moves itself into a cgroup of its own (one per node, in every
  hierarchy, so that the nodes' systemds do not manage each other's units), then runs
  systemd-nspawn and runs it again whenever it exits with 133 (the node asked to reboot);
- a service (the apt proxy, the repository server): `--exec` replaces the launcher with the
  command once it is detached, so the recorded PID is the service's own.

The launcher forks, and the first process exits as soon as the PID file is written: whoever
started it (a CLI call, a pytest session) is not its parent and leaves no zombie behind.
On SIGTERM the launcher forwards the signal to systemd-nspawn (which halts the node) and exits
once it is gone, without relaunching.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REBOOT_EXIT = 133
V1_CONTROLLERS = frozenset(
    (
        "cpu",
        "cpuacct",
        "cpuset",
        "memory",
        "devices",
        "freezer",
        "blkio",
        "pids",
        "net_cls",
        "net_prio",
        "perf_event",
        "hugetlb",
        "rdma",
        "misc",
    )
)


def cgroup_mounts() -> dict[str, Path]:
    """Hierarchy key ('0' for cgroup2, else the v1 controller list) -> mount point."""
    found: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(rfields) < 3:
            continue
        fstype, options = rfields[0], rfields[2].split(",")
        if fstype == "cgroup2":
            found.setdefault("0", Path(fields[4]))
        elif fstype == "cgroup":
            controllers = sorted(o for o in options if o in V1_CONTROLLERS or o.startswith("name="))
            if controllers:
                found.setdefault(",".join(sorted(controllers)), Path(fields[4]))
    return found


def own_cgroups(group: str) -> list[Path]:
    """Create `group` under this process's cgroup in every hierarchy and move into it."""
    mounts = cgroup_mounts()
    made: list[Path] = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, controllers, current = line.split(":", 2)
        key = "0" if hid == "0" else ",".join(sorted(controllers.split(",")))
        base = mounts.get(key)
        if base is None:
            continue
        parent = base / current.lstrip("/")
        target = parent / group
        target.mkdir(exist_ok=True)
        if "cpuset" in controllers.split(","):
            for name in ("cpuset.cpus", "cpuset.mems"):
                (target / name).write_text((parent / name).read_text())
        (target / "cgroup.procs").write_text(str(os.getpid()))
        made.append(target)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubegpu.testbed.launcher")
    parser.add_argument("--pidfile", required=True, type=Path)
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--child-pidfile", type=Path, help="where the running command's PID goes")
    parser.add_argument("--cgroup", help="create and enter this cgroup in every hierarchy")
    parser.add_argument("--cgroup-record", type=Path, help="file listing the cgroups created")
    parser.add_argument("--exec", action="store_true", help="become the command (services)")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the command")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")

    read_fd, write_fd = os.pipe()
    if os.fork() > 0:
        # First process: wait for the detached one to say it started, then leave.
        os.close(write_fd)
        with os.fdopen(read_fd) as pipe:
            answer = pipe.read()
        if answer.startswith("ok"):
            return 0
        sys.stderr.write(answer or "launcher failed to start\n")
        return 1
    os.close(read_fd)
    os.setsid()
    status = os.fdopen(write_fd, "w")
    try:
        log_fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(null_fd)
        os.close(log_fd)
        env = dict(os.environ)
        for item in args.env:
            name, _, value = item.partition("=")
            env[name] = value
        if args.cgroup:
            made = own_cgroups(args.cgroup)
            if args.cgroup_record:
                args.cgroup_record.write_text("".join(f"{p}\n" for p in made))
        args.pidfile.write_text(f"{os.getpid()}\n")
    except Exception as exc:  # report to the starter, which is still waiting
        status.write(f"launcher setup failed: {exc}\n")
        status.close()
        os._exit(1)
    if args.exec:
        status.write("ok\n")
        status.close()
        os.execvpe(command[0], command, env)
    status.write("ok\n")
    status.close()
    return supervise(command, env, args.child_pidfile)


def supervise(command: list[str], env: dict[str, str], child_pidfile: Path | None) -> int:
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    while True:
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        print(f"[kubegpu-testbed launcher] {started} starting: {' '.join(command)}", flush=True)
        child = subprocess.Popen(command, env=env)
        if child_pidfile is not None:
            child_pidfile.write_text(f"{child.pid}\n")
        code = child.wait()
        print(f"[kubegpu-testbed launcher] exited with {code}", flush=True)
        if code != REBOOT_EXIT or stopping:
            if child_pidfile is not None:
                child_pidfile.unlink(missing_ok=True)
            return code
        print("[kubegpu-testbed launcher] node rebooted: starting it again", flush=True)


if __name__ == "__main__":
    sys.exit(main())
