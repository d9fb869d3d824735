"""Services on the bridge address: apt-cacher-ng (the nodes' only way to Debian's mirror) and
the HTTP server of the vendor repository. Each is our own instance, detached by the launcher,
with its PID recorded in the state folder."""

from __future__ import annotations

import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from kubegpu.testbed import launcher
from kubegpu.testbed._proc import pid_alive, run, which, write_file
from kubegpu.testbed.errors import TestbedError


def start_detached(
    command: list[str],
    *,
    pidfile: Path,
    log: Path,
    what: str,
) -> int:
    """Start command detached from us (its parent exits at once); return its PID."""
    pidfile.unlink(missing_ok=True)
    run(
        [
            sys.executable,
            launcher.__file__,
            "--exec",
            "--pidfile",
            pidfile,
            "--log",
            log,
            "--",
            *command,
        ],
        what=f"starting {what}",
        timeout=60,
    )
    return int(pidfile.read_text())


def wait_tcp(address: str, port: int, pid: int, what: str, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            pass
        if not pid_alive(pid):
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            raise TestbedError(f"{what} exited while starting: {' / '.join(tail)}")
        if time.monotonic() > deadline:
            raise TestbedError(f"{what} did not listen on {address}:{port} within {timeout:.0f} s")
        time.sleep(0.1)


def port_in_use(port: int) -> bool:
    """True when something on this host listens on port on every address (0.0.0.0 or ::)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            addr, _, hexport = local.rpartition(":")
            if state == "0A" and int(hexport, 16) == port and set(addr) == {"0"}:
                return True
    return False


def start_apt_proxy(folder: Path, cache: Path, address: str, port: int) -> tuple[int, str]:
    """Our own apt-cacher-ng, bound to the bridge address only; return (PID, proxy URL)."""
    binary = which("apt-cacher-ng")
    if binary is None:
        raise TestbedError("apt-cacher-ng not found: install the apt-cacher-ng package")
    conf = folder / "conf"
    logs = folder / "log"
    for path in (conf, logs, cache):
        path.mkdir(parents=True, exist_ok=True)
    write_file(
        conf / "acng.conf",
        "# apt-cacher-ng instance of the kubegpu testbed (not the distribution's service).\n"
        f"CacheDir: {cache}\n"
        f"LogDir: {logs}\n"
        "SupportDir: /usr/lib/apt-cacher-ng\n"
        f"Port: {port}\n"
        f"BindAddress: {address}\n"
        f"PidFile: {folder / 'acng.pid'}\n"
        f"SocketPath: {folder / 'acng.socket'}\n"
        "ForeGround: 1\n"
        "ExThreshold: 4\n"
        "ReportPage: acng-report.html\n",
    )
    log = folder / "stdout.log"
    pid = start_detached(
        [binary, "-c", str(conf)], pidfile=folder / "pid", log=log, what="apt-cacher-ng"
    )
    wait_tcp(address, port, pid, "apt-cacher-ng", log)
    return pid, f"http://{address}:{port}"


def start_repo_server(folder: Path, root: Path, address: str, port: int) -> int:
    """A plain HTTP server for the vendor repository, on the bridge address only."""
    log = folder / "repo-server.log"
    pid = start_detached(
        [
            sys.executable,
            "-m",
            "http.server",
            "--bind",
            address,
            "--directory",
            str(root),
            str(port),
        ],
        pidfile=folder / "repo-server.pid",
        log=log,
        what="the vendor repository server",
    )
    wait_tcp(address, port, pid, "the vendor repository server", log)
    return pid


def http_get(url: str, timeout: float = 5) -> bytes:
    """GET without any proxy from the environment (only bridge addresses are ever asked)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as answer:
            data: bytes = answer.read()
            return data
    except (urllib.error.URLError, OSError) as exc:
        raise TestbedError(f"GET {url} failed: {exc}") from exc
