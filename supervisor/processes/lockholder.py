"""Who holds a lock: the daemon's PID (the root's lock) and a gateway's (its ``gateway.lock``), read
without ever taking the lock.

The daemon takes ``<root>/.hermesd/hermesd.lock`` for its whole life (:mod:`supervisor.daemon.pidlock`
through :mod:`supervisor.processes.lockfile`); everything else (the control client, ``hermesd start``,
messages that name the daemon) only asks who holds it. A gateway takes ``gateway.lock`` in its home
for its whole life, *before* it writes ``gateway.pid`` (upstream's start_gateway). The kernel lock is
the truth: it is released on any death, SIGKILL included, and ``/proc/locks`` names its holder even in
the instant between a process taking it and writing its PID anywhere, so a daemon or a gateway that
is slow to say so is never mistaken for an absent one. Probing by taking the lock instead could make
the very process starting at that instant fail (the upstream contract warns of it).
"""

from __future__ import annotations

import os
from pathlib import Path

from profiles import safeio
from supervisor.layout import Layout


def holder(layout: Layout, lock: Path | None = None) -> int | None:
    """The PID holding the root's lock (or ``lock``, another of hermesd's lock files), from
    ``/proc/locks`` (the kernel's own answer), or ``None``.

    Reading the table never takes the lock, so it cannot make a daemon that starts at that
    instant fail to acquire it.
    """
    try:
        st = safeio.lstat(layout.beneath(lock or layout.lock))
    except OSError:
        return None
    return flock_holder(st) if st is not None else None


def flock_holder(st: os.stat_result) -> int | None:
    """The PID ``/proc/locks`` names for an ``flock`` on the file ``st`` describes (device and inode): the
    process that took it, which may since have exited if a child inherited the descriptor."""
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's line reads "1: -> FLOCK ..."
        if len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == want and parts[4].isdigit():
            return int(parts[4])
    return None


def owner_pid(layout: Layout) -> int | None:
    """The daemon's PID for messages: the lock holder, or the PID file when the lock was handed down.

    ``/proc/locks`` names the process that took the lock; after ``hermesd start`` hands its locked
    descriptor to the daemon and exits, that is a dead PID while the PID file names the daemon.
    """
    from profiles.upstream.process import proc_start_time  # see fleet_operation

    for pid in (holder(layout), read_pid(layout.pidfile)):
        if pid is not None and proc_start_time(pid) is not None:
            return pid
    return None


def fleet_operation(layout: Layout) -> int | None:
    """The PID of the fleet operation (``hermesd upgrade``, ``restart --rolling``) running on the root, or None."""
    pid = holder(layout, layout.upgrade_lock)
    if pid is None:
        return None
    # Every `hermesd status` asks, and the module (enums, dataclasses, the upstream rules) costs it
    # ~6 ms to import (measured): only for a lock that is held, which it nearly never is.
    from profiles.upstream.process import proc_start_time  # only for a held lock: see above

    return pid if proc_start_time(pid) is not None else None


def read_pid(path: Path) -> int | None:
    raw = safeio.read_regular_or_none(path, 64)
    text = raw.decode("ascii", "replace").strip() if raw else ""
    return int(text) if text.isdigit() else None
