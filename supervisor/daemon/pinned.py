"""The processes the loop holds by a pidfd: its own children, the gateways it adopted after a
restart, and the foreign gateways it waits for.

A PID names another process the moment its owner is reaped; a pidfd names one process for as long
as it is open. So every gateway hermesd may signal is pinned here first (right after its spawn, or
after :func:`supervisor.processes.identity.verify` proved an adopted one), a signal goes only through its
pidfd, and a process hermesd did not pin is never signalled at all. An adopted or foreign gateway
is not our child, so its end arrives as its pidfd turning readable on the loop; our own children
end through ``SIGCHLD`` and ``waitpid`` (:meth:`Pinned.reaped`).

A confined child of ours also has its mount namespace held here once it runs
(:meth:`Pinned.hold_namespace`). When the last process of a mount namespace exits, the kernel
unmounts it inside that process's exit, waiting for an RCU grace period, and reports the exit
(``SIGCHLD``, the exit event) only after: measured here, 0.5 ms at best and several ms on a busy
machine added to every respawn. Held, the namespace outlives its child; its descriptor is closed
after the respawn by ``close_namespace`` (the loop's: :func:`close_in` its reader thread), and the
teardown happens there.

The loop owns the one instance and is its only caller.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from concurrent.futures import Executor

from supervisor.daemon.selfcheck import fd_budget_problem
from supervisor.plan.model import Ident
from supervisor.processes import child, identity


def close_in(pool: Executor, fd: int) -> None:
    """Close ``fd`` in ``pool``'s thread (the daemon's reader thread): a held namespace's teardown waits
    for an RCU grace period, which must not hold up the loop; at once when the pool is shut down."""
    try:
        pool.submit(os.close, fd)
    except RuntimeError:
        os.close(fd)


def _namespace_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


class Pinned:
    """See the module docstring."""

    def __init__(self, close_namespace: Callable[[int], None] = os.close) -> None:
        self._children: dict[int, tuple[str, Ident]] = {}  # our children by PID (reaped by waitpid)
        self._adopted: dict[Ident, str] = {}  # adopted gateways (watched through their pidfd)
        self._fds: dict[Ident, int] = {}
        self._foreign: dict[str, int] = {}  # per profile, the pidfd of the foreign gateway waited for
        self._namespaces: dict[Ident, int] = {}  # our children's own mount namespaces, held open
        self._close_namespace = close_namespace
        self._own_namespace = _namespace_inode("/proc/self/ns/mnt")

    # ------------------------------------------------------------------------- ours

    def own(self, name: str, ident: Ident, fd: int) -> None:
        """A child hermesd just spawned (``fd``: its pidfd)."""
        self._children[ident.pid] = (name, ident)
        self._fds[ident] = fd

    def adopt(self, name: str, ident: Ident, fd: int, on_exit: Callable[[str, Ident], None]) -> None:
        """A gateway a previous hermesd started: ``on_exit(name, ident)`` once its pidfd says it ended."""
        self._adopted[ident] = name
        self._fds[ident] = fd
        asyncio.get_running_loop().add_reader(fd, on_exit, name, ident)

    def reaped(self, pid: int) -> tuple[str, Ident] | None:
        """``waitpid`` returned ``pid``: the profile and identity of that child, if it was a gateway of ours."""
        return self._children.pop(pid, None)

    def adopted_ended(self, ident: Ident) -> bool:
        """An adopted gateway's pidfd turned readable: stop watching it (False: already handled)."""
        if self._adopted.pop(ident, None) is None:
            return False
        fd = self._fds.get(ident)
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
        return True

    def release(self, ident: Ident) -> None:
        """The child ``ident`` is gone: close its pidfd, and hand its mount namespace to ``close_namespace``."""
        fd = self._fds.pop(ident, None)
        if fd is not None:
            os.close(fd)
        ns = self._namespaces.pop(ident, None)
        if ns is not None:
            self._close_namespace(ns)

    def hold_namespace(self, ident: Ident) -> None:
        """Hold the mount namespace of our child ``ident`` (see the module docstring), once it has one
        of its own: asked whenever the child reports, which it does only after its confinement shim
        has made the namespace. Only for our own unreaped children (their PID cannot be reused), and
        only with descriptors to spare: a held namespace must never cost a spawn."""
        if ident in self._namespaces or self._own_namespace is None:
            return
        entry = self._children.get(ident.pid)
        if entry is None or entry[1] != ident or fd_budget_problem(spare=1) is not None:
            return
        try:
            fd = os.open(f"/proc/{ident.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            own = os.fstat(fd).st_ino != self._own_namespace
        except OSError:
            own = False
        if own:
            self._namespaces[ident] = fd
        else:  # not confined, or its shim has not made the namespace yet: asked again at its next report
            os.close(fd)

    def pins(self, ident: Ident) -> bool:
        """Whether ``ident`` is a gateway of ours held by its pidfd now."""
        return ident in self._fds

    def holds(self, pid: int) -> bool:
        """Whether ``pid`` is a gateway hermesd runs (spawned or adopted)."""
        return pid in self._children or any(i.pid == pid for i in self._adopted)

    def adopted(self) -> dict[Ident, str]:
        return dict(self._adopted)

    def signal(self, ident: Ident, sig: int) -> bool:
        """Send ``sig`` through the child's pidfd; False when ``ident`` is not a pinned child."""
        fd = self._fds.get(ident)
        if fd is None:
            return False
        identity.send_signal(fd, sig)
        return True

    def kill_group(self, ident: Ident) -> None:
        """SIGKILL the child's process group (through its pidfd: never a reused PID)."""
        fd = self._fds.get(ident)
        if fd is not None:
            child.kill_group(ident, fd)

    # ------------------------------------------------------------------------- foreign gateways

    def watch_foreign(self, name: str, pid: int, on_exit: Callable[[str, int | None], None]) -> None:
        """``on_exit(name, fd)`` once the foreign gateway ``pid`` has ended (at once if it is gone)."""
        loop = asyncio.get_running_loop()
        self.forget_foreign(name)
        start = identity.proc_start_time(pid)
        fd = identity.open_pidfd(Ident(pid, start)) if start is not None else None
        if fd is None:
            loop.call_soon(on_exit, name, None)
            return
        self._foreign[name] = fd
        loop.add_reader(fd, on_exit, name, fd)

    def foreign_ended(self, name: str, fd: int | None) -> None:
        """The pidfd ``fd`` of ``name``'s foreign gateway turned readable: stop watching it."""
        if fd is not None and self._foreign.get(name) == fd:
            self.forget_foreign(name)

    def forget_foreign(self, name: str) -> None:
        fd = self._foreign.pop(name, None)
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)
