# -*- coding: utf-8 -*-
# Copyright: kubegpu contributors
# Apache License 2.0 (see LICENSE)
"""The state of dpkg before kubegpu installs packages: its locks, and an interrupted run.

- Locks: apt and dpkg take POSIX (fcntl) write locks on /var/lib/dpkg/lock-frontend,
  /var/lib/dpkg/lock, /var/lib/apt/lists/lock and /var/cache/apt/archives/lock. A lock is
  tested the way they take it (F_SETLK, never blocking) and, when it is held, F_GETLK names the
  holder's PID, whose command line comes from /proc. flock(2) locks do not conflict with these
  on Linux, so only fcntl locks count (as for apt itself).
- Interruption: dpkg journals every status change in <admindir>/updates/ (files named by
  digits) and folds them into the status file when it finishes; entries left there mean a dpkg
  run was killed. `dpkg --audit` lists packages left unpacked, half-configured or
  half-installed. Either one means `dpkg --configure -a` is due before anything else.

The decisions are pure functions; the lock calls take a file descriptor.
"""

from __future__ import absolute_import, division, print_function

import errno
import fcntl
import os
import struct
import time

__metaclass__ = type

ADMINDIR = "/var/lib/dpkg"
LOCK_FILES = (
    "/var/lib/dpkg/lock-frontend",
    "/var/lib/dpkg/lock",
    "/var/lib/apt/lists/lock",
    "/var/cache/apt/archives/lock",
)
FRONTEND_LOCK = "/var/lib/dpkg/lock-frontend"

# struct flock on Linux (x86_64, aarch64): short l_type, short l_whence, off_t l_start,
# off_t l_len, pid_t l_pid, padded to 32 bytes.
_FLOCK = "@hhqqi4x"


class DpkgStateError(Exception):
    """dpkg cannot be brought to a usable state; the message says why and what to do."""


class LockTimeout(DpkgStateError):
    def __init__(self, path, holder, timeout, variable):
        self.path = path
        self.holder = holder
        self.timeout = timeout
        DpkgStateError.__init__(
            self,
            "The apt/dpkg lock %s is held by %s and was not released within %s s (%s). "
            "Another package manager is running on the host (unattended-upgrades, apt, dpkg): "
            "let it finish or stop it, then run again, or raise %s to wait longer."
            % (path, describe_holder(holder), timeout, variable, variable),
        )


# ------------------------------------------------------------------------------ pure


def pending_journal(names):
    """The dpkg journal entries among the names in <admindir>/updates (digits only)."""
    return sorted(n for n in names if n.isdigit())


def audit_lines(text):
    """The meaningful lines of `dpkg --audit` output ([] when dpkg found nothing)."""
    return [line.rstrip() for line in (text or "").splitlines() if line.strip()]


def repair_plan(journal, audit):
    """Whether `dpkg --configure -a` is due, and why: (needed, [reasons])."""
    reasons = []
    if journal:
        reasons.append(
            "a dpkg run was interrupted: %d journal entr%s left in updates/ (%s)"
            % (len(journal), "y" if len(journal) == 1 else "ies", ", ".join(journal[:5]))
        )
    if audit:
        reasons.append("dpkg --audit reports: " + " / ".join(audit[:6]))
    return bool(reasons), reasons


def parse_cmdline(raw):
    """A /proc/<pid>/cmdline (NUL-separated bytes) as one readable line."""
    parts = [p for p in raw.split(b"\0") if p]
    text = " ".join(p.decode("utf-8", "replace") for p in parts)
    return text if len(text) <= 200 else text[:199] + "\u2026"


def describe_holder(holder):
    """'PID 1234 (apt-get install x)' from {pid, command}; unknown holders said as such."""
    if not holder or not holder.get("pid"):
        return "a process that could not be identified (outside this PID namespace?)"
    command = holder.get("command") or "command line not readable"
    return "PID %s (%s)" % (holder["pid"], command)


# ------------------------------------------------------------------------------ locks


def holder_of(fd):
    """The PID holding a lock that conflicts with a write lock on fd, or None."""
    query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    l_type, _whence, _start, _len, pid = struct.unpack(_FLOCK, answer)
    if l_type == fcntl.F_UNLCK:
        return None
    return pid


def read_holder(pid, proc="/proc"):
    if not pid:
        return {"pid": pid, "command": ""}
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as handle:
            command = parse_cmdline(handle.read())
    except (IOError, OSError):
        command = ""
    return {"pid": pid, "command": command}


def try_lock(fd):
    """Take a write lock on fd without waiting: True when taken, False when someone holds it."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (IOError, OSError) as exc:
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            return False
        raise
    return True


def query_locks(paths, proc="/proc"):
    """Who holds each lock now, without taking any: [{path, pid, command}] (held ones only)."""
    found = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except (IOError, OSError):
            continue
        try:
            pid = holder_of(fd)
        finally:
            os.close(fd)
        if pid is not None:
            holder = read_holder(pid, proc)
            holder["path"] = path
            found.append(holder)
    return found


class LockSet:
    """The apt/dpkg locks, taken in order (frontend first, as apt does), waiting for each
    up to one shared deadline. Holders seen while waiting are kept in `waited_for`."""

    def __init__(self, paths, proc="/proc"):
        self.paths = list(paths)
        self.proc = proc
        self.fds = {}
        self.waited_for = []
        self.waited = 0.0

    def acquire(
        self, timeout, poll=1.0, variable="lock_timeout", clock=time.monotonic, sleep=time.sleep
    ):
        started = clock()
        deadline = started + timeout
        for path in self.paths:
            parent = os.path.dirname(path)
            if not os.path.isdir(parent):
                continue
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
            self.fds[path] = fd
            while not try_lock(fd):
                holder = read_holder(holder_of(fd), self.proc)
                holder["path"] = path
                if not any(
                    h["path"] == path and h["pid"] == holder["pid"] for h in self.waited_for
                ):
                    self.waited_for.append(holder)
                if clock() >= deadline:
                    self.waited = clock() - started
                    self.release()
                    raise LockTimeout(path, holder, timeout, variable)
                sleep(min(poll, max(0.05, deadline - clock())))
        self.waited = clock() - started
        return self

    def release(self, keep=()):
        for path in list(self.fds):
            if path in keep:
                continue
            os.close(self.fds.pop(path))
