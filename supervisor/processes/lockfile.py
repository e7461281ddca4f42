"""hermesd's lock files in ``<root>/.hermesd``: an ``flock`` whose file names its holder's PID.

The daemon's (:mod:`supervisor.daemon.pidlock`), the fleet operation's and ``install-deps``' are
taken alike: non-blocking first, so a second taker can say who holds it before it refuses or
waits. The kernel lock is the truth, released on any death; the PID in the file is for messages
(:mod:`supervisor.processes.lockholder` asks the kernel who holds a lock, without taking it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from profiles import safeio
from supervisor.layout import Layout


class Held(Exception):
    """Another process holds the lock; the message is the PID it wrote there ("?" when nothing yet)."""


def stamp(fd: int) -> None:
    """Write our PID into the lock file ``fd``, replacing the previous holder's."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def take(layout: Layout, path: Path, waiting: Callable[[str], None] | None = None) -> int:
    """Lock ``path`` (in ``layout``'s folder) and :func:`stamp` it; the descriptor holds the lock until closed.
    Held by another process: :class:`Held`, or with ``waiting``, ``waiting(pid)`` and then wait for it."""
    layout.ensure()
    fd = safeio.open_beneath(layout.beneath(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            if waiting is None:
                raise Held(pid) from None
            waiting(pid)
            fcntl.flock(fd, fcntl.LOCK_EX)
        stamp(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def held(layout: Layout, path: Path, waiting: Callable[[str], None] | None = None) -> Iterator[None]:
    """:func:`take` for the length of a ``with`` block."""
    fd = take(layout, path, waiting)
    try:
        yield
    finally:
        os.close(fd)  # releases the lock
