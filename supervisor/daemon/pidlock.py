"""One hermesd per root: an ``flock`` held for the daemon's whole life, and a PID file beside it.

The kernel lock is the truth: it is released on any death, SIGKILL included, and ``/proc/locks``
names its holder even in the instant between a daemon taking it and writing its PID anywhere.
Clients ask :func:`supervisor.processes.lockholder.holder` before concluding that no daemon runs, so a
daemon that is slow to answer (starting up, stopped by a debugger, swapped out) is never mistaken for an absent one.

``hermesd start`` takes the lock itself before it launches the daemon and hands the locked
descriptor down (:meth:`PidLock.adopt_fd`): from the first instant of ``start`` the root is
visibly owned, so a ``hermesd stop`` typed right after it waits for the daemon instead of
concluding that nothing runs.
"""

from __future__ import annotations

import contextlib
import os

from profiles import safeio
from supervisor.layout import Layout
from supervisor.processes import lockfile
from supervisor.processes.lockholder import owner_pid, read_pid


class AlreadyRunning(RuntimeError):
    """Another hermesd holds this root."""


class PidLock:
    """The root's lock file, taken for as long as this object holds it."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock (non-blocking) and write our PID; raise :class:`AlreadyRunning` naming the holder."""
        try:
            self.fd = lockfile.take(self.layout, self.layout.lock)
        except lockfile.Held:
            other = owner_pid(self.layout)
            who = f" (PID {other})" if other else ""
            raise AlreadyRunning(f"hermesd is already running for {self.layout.root}{who}") from None
        self._write_pidfile()

    def adopt_fd(self, fd: int) -> None:
        """Keep a lock a parent (``hermesd start``) took for us; refuse a descriptor of another file."""
        st, want = os.fstat(fd), safeio.lstat(self.layout.beneath(self.layout.lock))
        if want is None or (st.st_dev, st.st_ino) != (want.st_dev, want.st_ino):
            raise AlreadyRunning(f"descriptor {fd} is not {self.layout.lock}")
        os.set_inheritable(fd, False)
        self.fd = fd
        lockfile.stamp(fd)
        self._write_pidfile()

    def _write_pidfile(self) -> None:
        pid = f"{os.getpid()}\n".encode()
        safeio.replace_bytes(self.layout.beneath(self.layout.pidfile), pid, 0o600, durable=False)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            if read_pid(self.layout.pidfile) == os.getpid():
                safeio.unlink(self.layout.beneath(self.layout.pidfile))
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
