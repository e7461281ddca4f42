"""A confined child's mount namespace is held while it runs and handed over at its end, so the kernel
tears it down after the respawn instead of inside the child's exit (supervisor.daemon.pinned)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator

import pytest

from supervisor.daemon.pinned import Pinned
from supervisor.plan.model import Ident
from supervisor.processes import identity

needs_mount_ns = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                    reason="a mount namespace of its own needs root and unshare(1)")


def _ns(pid: int | str) -> str:
    return os.readlink(f"/proc/{pid}/ns/mnt")


def _start(argv: list[str]) -> Ident:
    pid = os.posix_spawn(argv[0], argv, dict(os.environ))
    start = identity.proc_start_time(pid)
    assert start is not None
    return Ident(pid, start)


def _end(ident: Ident) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(ident.pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(ident.pid, 0)


@pytest.fixture
def closed() -> Iterator[list[int]]:
    fds: list[int] = []
    yield fds
    for fd in fds:
        os.close(fd)


def _own(pinned: Pinned, ident: Ident) -> None:
    fd = os.pidfd_open(ident.pid)
    pinned.own("p", ident, fd)


@needs_mount_ns
def test_a_child_in_its_own_mount_namespace_has_it_held_until_it_is_released(closed: list[int]) -> None:
    unshare = shutil.which("unshare")
    assert unshare is not None
    ident = _start([unshare, "--mount", "--propagation", "private", sys.executable, "-S", "-c",
                    "import time; time.sleep(60)"])
    try:
        pinned = Pinned(closed.append)
        _own(pinned, ident)
        deadline = time.monotonic() + 10
        while _ns(ident.pid) == _ns("self"):  # unshare(1) has not made it yet: not held, asked again later
            pinned.hold_namespace(ident)
            assert time.monotonic() < deadline, "unshare never made a namespace"
            time.sleep(0.01)
        theirs = _ns(ident.pid)
        pinned.hold_namespace(ident)
        pinned.hold_namespace(ident)  # asked at every report: held once
        _end(ident)
        assert closed == []
        pinned.release(ident)
        assert len(closed) == 1 and os.readlink(f"/proc/self/fd/{closed[0]}") == theirs
        pinned.release(ident)  # a second release hands nothing over
        assert len(closed) == 1
    finally:
        _end(ident)


def test_a_child_in_our_namespace_or_not_ours_holds_nothing(closed: list[int]) -> None:
    ident = _start([sys.executable, "-S", "-c", "import time; time.sleep(60)"])
    other = _start([sys.executable, "-S", "-c", "import time; time.sleep(60)"])
    try:
        pinned = Pinned(closed.append)
        _own(pinned, ident)
        pinned.hold_namespace(ident)  # in the daemon's own namespace: unconfined
        pinned.hold_namespace(other)  # never pinned: not ours to hold
        pinned.hold_namespace(Ident(ident.pid, ident.start_time + 1))  # not the process we pinned
        pinned.release(ident)
        assert closed == []
    finally:
        _end(ident)
        _end(other)
