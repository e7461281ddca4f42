"""The processes the loop holds by a pidfd: its own children, the gateways it adopted after a
restart, and the foreign gateways it waits for.

A PID names another process the moment its owner is reaped; a pidfd names one process for as long
as it is open. So every gateway hermesd may signal is pinned here first (right after its spawn, or
after :func:`supervisor.processes.identity.verify` proved an adopted one), a signal goes only through its
pidfd, and a process hermesd did not pin is never signalled at all. An adopted or foreign gateway
is not our child, so its end arrives as its pidfd turning readable on the loop; our own children
end through ``SIGCHLD`` and ``waitpid`` (:meth:`Pinned.reaped`).

The loop owns the one instance and is its only caller.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from supervisor.plan.model import Ident
from supervisor.processes import child, identity


class Pinned:
    """See the module docstring."""

    def __init__(self) -> None:
        self._children: dict[int, tuple[str, Ident]] = {}  # our children by PID (reaped by waitpid)
        self._adopted: dict[Ident, str] = {}  # adopted gateways (watched through their pidfd)
        self._fds: dict[Ident, int] = {}
        self._foreign: dict[str, int] = {}  # per profile, the pidfd of the foreign gateway waited for

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
        """The child ``ident`` is gone: close its pidfd."""
        fd = self._fds.pop(ident, None)
        if fd is not None:
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
