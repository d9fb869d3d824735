"""One node: an overlay on the base image, personalised, booted by systemd-nspawn under a
launcher that gives it its own cgroup and starts it again when it reboots."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kubegpu.testbed import launcher
from kubegpu.testbed._proc import mounts, pid_alive, read_cmdline, run, write_file
from kubegpu.testbed.errors import TestbedError

SIMULATED_SMI = "/usr/local/lib/kubegpu-simulated/nvidia-smi"
SIMULATED_ROOT = "/var/lib/kubegpu-simulated/root"
CONTAINERD_IMAGE_SIZE = "8G"
# The host-global sysctls kubelet sets unless they hold these values (a node that runs
# containers gets its own copy of each, bound over /proc/sys inside the node).
FAKED_SYSCTLS = {"vm.overcommit_memory": "1", "kernel.panic": "10", "kernel.panic_on_oops": "1"}


@dataclass(frozen=True)
class NodePaths:
    dir: Path

    @property
    def upper(self) -> Path:
        return self.dir / "upper"

    @property
    def work(self) -> Path:
        return self.dir / "work"

    @property
    def root(self) -> Path:
        return self.dir / "root"

    @property
    def containerd(self) -> Path:
        return self.dir / "containerd"

    @property
    def containerd_image(self) -> Path:
        return self.dir / "containerd.ext4"

    @property
    def console_log(self) -> Path:
        return self.dir / "console.log"

    @property
    def launcher_pid(self) -> Path:
        return self.dir / "launcher.pid"

    @property
    def nspawn_pid(self) -> Path:
        return self.dir / "nspawn.pid"

    @property
    def cgroups(self) -> Path:
        return self.dir / "cgroups"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    address: str
    prefixlen: int
    containers: bool = False
    simulate_capture: str | None = None


@dataclass(frozen=True)
class NodeContext:
    """What every node of one testbed shares."""

    state_dir: Path
    bridge: str
    bridge_address: str
    proxy_url: str
    operator_pubkey: str
    hosts_entries: str  # /etc/hosts lines: the mirror's (copied from this host) and the nodes'
    apt_extra: str  # apt settings copied from this host (e.g. Check-Valid-Until)


def cgroup_name(state_dir: Path, node: str) -> str:
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:6]
    return f"kubegpu-testbed-{digest}-{node}"


def mount_overlay(paths: NodePaths, base: Path) -> None:
    for folder in (paths.upper, paths.work, paths.root):
        folder.mkdir(parents=True, exist_ok=True)
    run(
        [
            "mount",
            "-t",
            "overlay",
            "overlay",
            "-o",
            f"lowerdir={base},upperdir={paths.upper},workdir={paths.work}",
            paths.root,
        ],
        what=f"mounting the overlay of {paths.dir.name}",
    )


def _link(root: Path, wants: str, unit: str) -> None:
    link = root / "etc/systemd/system" / wants / unit
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(f"/etc/systemd/system/{unit}")


def personalise(paths: NodePaths, spec: NodeSpec, ctx: NodeContext) -> str:
    """Write the node's identity and settings into its overlay; return its host public key."""
    root = paths.root
    write_file(root / "etc/hostname", spec.name + "\n")
    write_file(
        root / "etc/hosts",
        "127.0.0.1\tlocalhost\n"
        f"127.0.1.1\t{spec.name}\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n" + ctx.hosts_entries,
    )
    write_file(root / "etc/machine-id", secrets.token_hex(16) + "\n", 0o444)
    # Host key made here, so the operator's known_hosts can be written before the first login.
    key = root / "etc/ssh/ssh_host_ed25519_key"
    for old in (key, key.with_suffix(".pub")):
        old.unlink(missing_ok=True)
    run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{spec.name}", "-f", key],
        what=f"making the host key of {spec.name}",
    )
    write_file(
        root / "etc/ssh/sshd_config.d/kubegpu-testbed.conf",
        "# kubegpu testbed: key-only root login with the testbed's own host key.\n"
        "HostKey /etc/ssh/ssh_host_ed25519_key\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\n"
        "UseDNS no\n",
    )
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(ssh_dir, 0o700)
    write_file(ssh_dir / "authorized_keys", ctx.operator_pubkey.strip() + "\n", 0o600)
    write_file(
        root / "etc/apt/apt.conf.d/01kubegpu-testbed-proxy",
        "// kubegpu testbed: Debian's mirror only through apt-cacher-ng on the bridge;\n"
        "// repositories served on the bridge itself are reached directly.\n"
        f'Acquire::http::Proxy "{ctx.proxy_url}";\n'
        f'Acquire::http::Proxy::{ctx.bridge_address} "DIRECT";\n'
        "// An update of several nodes at once through apt-cacher-ng has hung (apt's http method\n"
        "// idle, no connection open, the update waiting): no HTTP pipelining, and retries.\n"
        'Acquire::http::Pipeline-Depth "0";\n'
        'Acquire::Retries "3";\n' + ctx.apt_extra,
    )
    network_unit = (
        "[Unit]\n"
        "Description=kubegpu testbed address on the bridge\n"
        "Before=network.target network-online.target ssh.service\n"
        "Wants=network.target\n"
        "\n[Service]\n"
        "Type=oneshot\n"
        "RemainAfterExit=yes\n"
        "ExecStart=/sbin/sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 "
        "net.ipv6.conf.default.disable_ipv6=1\n"
        "ExecStart=/sbin/ip link set dev host0 up\n"
        f"ExecStart=/sbin/ip address replace {spec.address}/{spec.prefixlen} dev host0\n"
        f"ExecStart=/sbin/ip route replace default via {ctx.bridge_address} dev host0\n"
        "\n[Install]\n"
        "WantedBy=multi-user.target network-online.target\n"
    )
    write_file(root / "etc/systemd/system/kubegpu-testbed-network.service", network_unit)
    _link(root, "multi-user.target.wants", "kubegpu-testbed-network.service")
    _link(root, "network-online.target.wants", "kubegpu-testbed-network.service")
    if spec.containers:
        write_file(
            root / "etc/systemd/system/kubegpu-testbed-cgroups-rw.service",
            "[Unit]\n"
            "Description=kubegpu testbed: make the v1 cgroup controllers writable for containerd\n"
            "DefaultDependencies=no\n"
            "After=local-fs.target\n"
            "Before=sysinit.target containerd.service\n"
            "\n[Service]\n"
            "Type=oneshot\n"
            "RemainAfterExit=yes\n"
            "ExecStart=/bin/sh -c 'for d in /sys/fs/cgroup/*; do "
            '[ -L "$d" ] && continue; case "$d" in */systemd|*/unified) continue;; esac; '
            'mountpoint -q "$d" && mount -o remount,bind,rw "$d"; done; true\'\n'
            "\n[Install]\n"
            "WantedBy=sysinit.target\n",
        )
        _link(root, "sysinit.target.wants", "kubegpu-testbed-cgroups-rw.service")
        # /proc/sys is writable in such a node (containerd needs it), and these three are the
        # host's own: kubelet sets them when they differ from what it wants. Each gets a file of
        # the node's own bound over it, holding kubelet's value, so nothing reaches the host.
        binds = " ".join(
            f"echo {value} > /run/kubegpu-testbed/sysctl/{name}; "
            f"mount --bind /run/kubegpu-testbed/sysctl/{name} /proc/sys/{name.replace('.', '/')};"
            for name, value in FAKED_SYSCTLS.items()
        )
        write_file(
            root / "etc/systemd/system/kubegpu-testbed-sysctls.service",
            "[Unit]\n"
            "Description=kubegpu testbed: the node's own copies of the host-global sysctls "
            "kubelet sets\n"
            "DefaultDependencies=no\n"
            "After=local-fs.target\n"
            "Before=sysinit.target containerd.service kubelet.service\n"
            "\n[Service]\n"
            "Type=oneshot\n"
            "RemainAfterExit=yes\n"
            f"ExecStart=/bin/sh -ec 'mkdir -p /run/kubegpu-testbed/sysctl; {binds}'\n"
            "\n[Install]\n"
            "WantedBy=sysinit.target\n",
        )
        _link(root, "sysinit.target.wants", "kubegpu-testbed-sysctls.service")
    return (key.with_suffix(".pub")).read_text().strip()


def prepare_containerd_dir(paths: NodePaths) -> Path:
    """An ext4-backed folder for /var/lib/containerd (overlayfs snapshots need a real fs)."""
    paths.containerd.mkdir(parents=True, exist_ok=True)
    fstype = ""
    best = ""
    for _source, point, kind in mounts():
        prefix = point.rstrip("/") + "/"
        if (str(paths.containerd) + "/").startswith(prefix) and len(point) >= len(best):
            best, fstype = point, kind
    if fstype != "ext4":
        if not paths.containerd_image.exists():
            run(
                ["truncate", "-s", CONTAINERD_IMAGE_SIZE, paths.containerd_image],
                what="making the containerd disk image",
            )
            run(
                ["mkfs.ext4", "-q", "-F", paths.containerd_image],
                what="formatting the containerd disk image",
            )
        run(
            ["mount", "-o", "loop", paths.containerd_image, paths.containerd],
            what="mounting the containerd disk image",
        )
    return paths.containerd


def nspawn_argv(paths: NodePaths, spec: NodeSpec, bridge: str) -> list[str]:
    argv = [
        "systemd-nspawn",
        "--boot",
        f"--directory={paths.root}",
        f"--machine={spec.name}",
        "--keep-unit",
        "--register=no",
        f"--network-bridge={bridge}",
        "--console=passive",
        "--resolv-conf=off",
        "--timezone=off",
        "--link-journal=no",
    ]
    if spec.containers:
        argv += [
            "--system-call-filter=@keyring",
            f"--bind={paths.containerd}:/var/lib/containerd",
            # kubelet's OOM watcher reads the kernel log.
            "--bind-ro=/dev/kmsg",
            "--capability=CAP_SYSLOG",
        ]
    return argv


def start(paths: NodePaths, spec: NodeSpec, ctx: NodeContext) -> int:
    """Start the node's launcher (detached); return the launcher's PID."""
    command = [
        sys.executable,
        launcher.__file__,
        "--pidfile",
        str(paths.launcher_pid),
        "--child-pidfile",
        str(paths.nspawn_pid),
        "--log",
        str(paths.console_log),
        "--cgroup",
        cgroup_name(ctx.state_dir, spec.name),
        "--cgroup-record",
        str(paths.cgroups),
    ]
    if spec.containers:
        command += ["--env", "SYSTEMD_NSPAWN_API_VFS_WRITABLE=1"]
    command += ["--", *nspawn_argv(paths, spec, ctx.bridge)]
    run(command, what=f"starting node {spec.name}", timeout=60)
    return int(paths.launcher_pid.read_text())


def ssh_argv(key: Path, known_hosts: Path, address: str, *command: str) -> list[str]:
    return [
        "ssh",
        "-F",
        "/dev/null",
        "-i",
        str(key),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "ConnectTimeout=2",
        "-o",
        "LogLevel=ERROR",
        f"root@{address}",
        *command,
    ]


def wait_ready(
    name: str,
    address: str,
    key: Path,
    known_hosts: Path,
    launcher_pid: int,
    log: Path,
    timeout: float = 90,
) -> str:
    """Wait until the node answers over SSH and systemd finished booting; return its state."""
    deadline = time.monotonic() + timeout
    while True:
        proc = subprocess.run(
            ssh_argv(key, known_hosts, address, "systemctl", "is-system-running", "--wait"),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            return state
        if not pid_alive(launcher_pid):
            tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
            raise TestbedError(f"node {name} stopped while booting: {' / '.join(tail)}")
        if time.monotonic() > deadline:
            raise TestbedError(
                f"node {name} ({address}) not ready over SSH within {timeout:.0f} s: "
                f"{(proc.stderr or state).strip()[-200:]}"
            )
        time.sleep(0.2)


def mentions_path(argv: list[str], path: str) -> bool:
    """argv names path itself or something under it; /run/tb does not match /run/tb-other."""
    pattern = re.compile(re.escape(path.rstrip("/")) + r"(?=$|[/\s:=,\"'])")
    return any(pattern.search(part) for part in argv)


def owned_pid(pid: int, marker: str) -> bool:
    """pid is alive and its command line mentions marker (our state folder)."""
    return pid_alive(pid) and mentions_path(read_cmdline(pid), marker)


def recorded_cgroups(record: Path) -> list[Path]:
    """The cgroups the launcher created for a node (one per hierarchy)."""
    try:
        return [Path(line) for line in record.read_text().splitlines() if line]
    except OSError:
        return []


def cgroup_pids(tops: list[Path]) -> set[int]:
    """Every process inside these cgroups (the launcher, nspawn and the whole node)."""
    found: set[int] = set()
    for top in tops:
        if not top.is_dir():
            continue
        for folder, _dirs, _files in os.walk(top):
            try:
                text = (Path(folder) / "cgroup.procs").read_text()
            except OSError:
                continue
            found.update(int(p) for p in text.split())
    return found


def stop(paths: NodePaths, marker: str, timeout: float = 30) -> list[int]:
    """Halt the node (SIGTERM to its launcher, which forwards it to nspawn), then make sure
    nothing of it is left. Return the PIDs that had to be killed (empty when it halted)."""
    launcher_pid = _read_pid(paths.launcher_pid)
    if launcher_pid and owned_pid(launcher_pid, marker):
        os.kill(launcher_pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(launcher_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    tops = recorded_cgroups(paths.cgroups)
    leftovers = {p for p in cgroup_pids(tops) if pid_alive(p)}
    if launcher_pid and owned_pid(launcher_pid, marker):
        leftovers.add(launcher_pid)
    nspawn_pid = _read_pid(paths.nspawn_pid)
    if nspawn_pid and owned_pid(nspawn_pid, marker):
        leftovers.add(nspawn_pid)
    leftovers.discard(os.getpid())
    if leftovers:
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(pid_alive(p) for p in leftovers) and time.monotonic() < deadline:
            time.sleep(0.1)
    remove_cgroups(tops)
    paths.cgroups.unlink(missing_ok=True)
    return sorted(leftovers)


def remove_cgroups(tops: list[Path]) -> None:
    """Remove these cgroups and everything below them (deepest first), once empty."""
    for top in tops:
        if not top.is_dir():
            continue
        for folder, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            for _ in range(50):
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def unmount_under(folder: Path) -> list[str]:
    """Unmount every mount at or below folder (deepest first); return what stays mounted."""
    prefix = str(folder).rstrip("/") + "/"
    for _ in range(3):
        points = [p for _s, p, _t in mounts() if p == str(folder) or p.startswith(prefix)]
        if not points:
            return []
        for point in sorted(points, key=len, reverse=True):
            run(["umount", point], what=f"unmounting {point}", check=False)
    remaining = [p for _s, p, _t in mounts() if p == str(folder) or p.startswith(prefix)]
    for point in sorted(remaining, key=len, reverse=True):
        run(["umount", "--lazy", point], what=f"unmounting {point}", check=False)
    return [p for _s, p, _t in mounts() if p == str(folder) or p.startswith(prefix)]
