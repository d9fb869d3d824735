"""Small helpers around subprocesses, /proc and files, shared by the testbed modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from kubegpu.testbed.errors import TestbedError

C_ENV = {"LC_ALL": "C", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    what: str,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    timeout: float | None = 900,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run argv (no shell) with LC_ALL=C; raise TestbedError naming `what` when it fails."""
    full_env = dict(os.environ)
    full_env.update(C_ENV)
    if env:
        full_env.update(env)
    try:
        proc = subprocess.run(
            [str(a) for a in argv],
            env=full_env,
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise TestbedError(f"{what}: {argv[0]} not found ({exc.strerror})") from exc
    except subprocess.TimeoutExpired as exc:
        raise TestbedError(f"{what}: timed out after {timeout} s") from exc
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise TestbedError(f"{what} failed (exit {proc.returncode}): {' / '.join(tail)}")
    return proc


def which(tool: str) -> str | None:
    return shutil.which(tool, path=C_ENV["PATH"] + ":" + os.environ.get("PATH", ""))


def write_file(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    """Write atomically (temp file in the same folder, then rename), with an explicit mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode() if isinstance(text, str) else text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def pid_alive(pid: int) -> bool:
    """True when pid exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state field follows the parenthesised command name, which may contain spaces.
    return stat.rpartition(")")[2].split()[0] != "Z"


def all_pids() -> Iterator[int]:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            yield int(entry.name)


def ancestors(pid: int) -> set[int]:
    """pid and its ancestors (so that a scan never kills the process asking for it)."""
    seen: set[int] = set()
    while pid > 0 and pid not in seen:
        seen.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rpartition(")")[2].split()[2])
    return seen


def mounts() -> list[tuple[str, str, str]]:
    """(source, mountpoint, fstype) for every mount this process sees, in mount order."""
    result = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3:
            mountpoint = fields[1].encode().decode("unicode_escape")
            result.append((fields[0], mountpoint, fields[2]))
    return result
