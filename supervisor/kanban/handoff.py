"""The dispatcher's hand-off: a restricted socket and a ``HERMES_BIN`` only the chosen dispatcher sees.

Why not the control socket: it can stop and restart every profile, so it is hidden from every
confined profile on purpose (docs/isolation.md). The dispatching gateway needs exactly two verbs of it,
``kanban_worker`` and ``kanban_wait`` (:mod:`supervisor.kanban.worker`), so the daemon serves
those two, and nothing else, on a second socket:

* where: ``<root>/.hermesd/handoff/<dispatcher>/worker.sock``, with the messenger's launcher
  (``hermes`` in the same folder, the dispatcher's ``HERMES_BIN``) beside it. The folder is put
  back **read-only** into the dispatcher's confinement only (the plan's ``grants``); every other
  profile still sees an empty ``.hermesd`` (or none), and the dispatcher cannot replace the
  launcher or the socket, nor reach the control socket;
* who: the connecting process (``SO_PEERCRED``, which a process cannot forge) must belong to the
  chosen dispatcher's *current* gateway (its cgroup where it has one, else a descendant by
  parent links), and that profile must still be the configured dispatcher. Anything else —
  another profile, a process of the right account outside that tree, a stale dispatcher — is
  refused before its request is parsed (its line is read and dropped, so the client can read
  why). The PID is proved to be the process that connected: its pidfd (``SO_PEERPIDFD``, Linux
  6.5+) is alive after every read about it, or, on older kernels, it started before the
  connection was accepted and still has that start time afterwards, so a PID reused in between is
  never taken for the dispatcher's;
* how often: a token bucket per dispatcher (``kanban.requests_per_minute``,
  :mod:`supervisor.kanban.bounds`), checked before anything else;
* what: requests of at most :data:`MAX_REQUEST` bytes, read within the control protocol's
  timeout; ``kanban_worker`` only accepts upstream's worker command line for a task
  (:func:`supervisor.kanban.workers.check_argv`) and only for an assignee that keeps the board
  (``isolation.kanban``), and passes on only upstream's per-task variables.

So the hand-off gives the dispatcher what upstream's dispatcher already does without hermesd —
start ``hermes -p <assignee> chat -q "work kanban task <id>"`` — but the worker now runs in the
assignee's own domain instead of the dispatcher's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import supervisor
from profiles import safeio
from profiles.safeio import Beneath
from supervisor.control.protocol import Peer
from supervisor.control.server import ControlServer
from supervisor.kanban.bounds import RateLimit
from supervisor.kanban.dispatch import HANDOFF_ENV, LAUNCHER_NAME, OFF, SOCKET_NAME, handoff_dir
from supervisor.limits.procfs import read_stat
from supervisor.processes.identity import proc_start_time

log = logging.getLogger("hermesd")

MAX_REQUEST = 16 * 1024  # upstream's worker argv and per-task variables fit many times over
_ANCESTRY_MAX = 64


def _pidfd_pid(fd: int) -> int | None:
    """The PID a pidfd refers to (``Pid:`` of its fdinfo; -1 once the process is gone)."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def is_descendant(pid: int, ancestor: int) -> bool:
    """``pid`` is ``ancestor`` or below it (parent links from ``/proc``; PIDs in our namespace)."""
    for _ in range(_ANCESTRY_MAX):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        st = read_stat(pid)
        if st is None:
            return False
        pid = st.ppid
    return False


def launcher_text(python: str | None = None) -> str:
    """The dispatcher's ``HERMES_BIN``: one executable path that runs the messenger with hermesd's code.

    Written by the daemon (never by a profile), with the daemon's own interpreter and the folder
    hermesd's code is imported from, so it works from a venv, a system install or a checkout,
    without any console script and without changing the worker's ``PYTHONPATH``.
    """
    code_dir = str(Path(supervisor.__file__).resolve().parents[1])
    prog = (f"import sys; sys.path.insert(0, {code_dir!r}); "
            "from supervisor.kanban.worker import main; sys.exit(main())")
    return (f"#!/bin/sh\n# hermesd: HERMES_BIN of the kanban dispatcher (supervisor.kanban.handoff)\n"
            f"exec {shlex.quote(python or sys.executable)} -c {shlex.quote(prog)} \"$@\"\n")


class Handoff:
    """The hand-off folder and server of the chosen dispatcher (at most one per daemon)."""

    def __init__(self, hermesd_dir: Path, handlers: Mapping[str, Callable[..., Any]],
                 gateway_pid: Callable[[str], int | None], *,
                 in_tree: Callable[[str, int], bool | None] | None = None, per_minute: int = 60,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``in_tree(profile, pid)``: whether ``pid`` is in the profile's gateway cgroup (``None``:
        the profile has none; parent links decide then)."""
        self.hermesd_dir = hermesd_dir
        self.handlers = dict(handlers)
        self.gateway_pid = gateway_pid  # the profile's current gateway PID (None: not running)
        self.in_tree = in_tree
        self.clock = clock
        self.rate = RateLimit(per_minute, clock=clock)
        self.profile: str | None = None
        self._server: Any = None

    def set_rate(self, per_minute: int) -> None:
        if per_minute != self.rate.per_minute:
            self.rate = RateLimit(per_minute, clock=self.clock)

    def folder(self, profile: str) -> Path:
        return handoff_dir(self.hermesd_dir, profile)

    def _beneath(self, path: Path) -> Beneath:
        """A hand-off file as the file rule resolves it: from the root, no link in ``.hermesd`` followed
        (under Landlock alone the default profile can write ``.hermesd``)."""
        return safeio.under(self.hermesd_dir.parent, path)

    def socket_path(self, profile: str) -> Path:
        return self.folder(profile) / SOCKET_NAME

    def launcher(self, profile: str) -> Path:
        return self.folder(profile) / LAUNCHER_NAME

    def env_for(self, profile: str) -> dict[str, str]:
        """What the daemon adds to ``profile``'s gateway environment (nothing unless it dispatches)."""
        if profile != self.profile or self._server is None:
            return {}
        return {"HERMES_BIN": str(self.launcher(profile)), HANDOFF_ENV: str(self.socket_path(profile))}

    def _check(self, peer: Peer) -> str | None:
        profile = self.profile
        if profile is None:
            return "no kanban dispatcher is configured"
        if not self.rate.take():
            return (f"too many hand-off requests from {profile} (kanban.requests_per_minute:"
                    f" {self.rate.per_minute})")
        gw = self.gateway_pid(profile)
        if gw is None:
            return f"the kanban dispatcher {profile} is not running"
        pid = peer.pid
        if pid is None:
            return "no peer credentials"
        start = proc_start_time(pid)  # None for a zombie: it has exited
        if peer.pidfd is not None:
            if _pidfd_pid(peer.pidfd) != pid:
                return f"PID {pid} has exited since it connected"
        elif start is None or peer.accepted_ticks is None or start > peer.accepted_ticks:
            return f"PID {pid} is not the process that connected (started after the connection)"
        member = self.in_tree(profile, pid) if self.in_tree is not None else None
        if member is None:
            member = is_descendant(pid, gw)
        # Everything read above about `pid` was about the process that connected only if it
        # still lives (pidfd) or still has the start time it had (older kernels).
        if peer.pidfd is not None:
            try:
                signal.pidfd_send_signal(peer.pidfd, 0)
            except ProcessLookupError:
                return f"PID {pid} has exited since it connected"
        elif proc_start_time(pid) != start:
            return f"PID {pid} is not the process that connected (reused)"
        if not member:
            return f"PID {pid} is not part of {profile}'s gateway (PID {gw})"
        return None

    async def sync(self, choice: str, owner: tuple[int, int] | None = None) -> None:
        """Serve the hand-off for ``choice`` (a profile, or ``off``): create, move or close it."""
        want = None if choice == OFF else choice
        if want == self.profile and (want is None or self._server is not None):
            return
        old = self.profile
        self.close()
        if old is not None and old != want:  # that gateway is restarted without HERMES_BIN
            with contextlib.suppress(OSError):
                safeio.unlink(self._beneath(self.launcher(old)))
        if want is None:
            return
        folder = self._beneath(self.folder(want))
        try:
            safeio.makedirs(folder, 0o755)
            safeio.chmod(folder, 0o755)
            safeio.replace_bytes(self._beneath(self.launcher(want)), launcher_text().encode(), 0o755, exact_mode=True)
            if len(os.fsencode(self.socket_path(want))) > 107:
                raise OSError(f"socket path {self.socket_path(want)} is too long for a unix socket")
            server = ControlServer(self.socket_path(want), self.handlers, peer_check=self._check,
                                   max_request=MAX_REQUEST, mode=0o666)
            await server.start()
            if owner is not None:  # a dispatcher with an account of its own (isolation.user)
                with contextlib.suppress(OSError):
                    safeio.chown(self._beneath(self.socket_path(want)), *owner)
        except OSError as exc:
            log.error("kanban: hand-off for dispatcher %s not served (%s); its workers run in its own tree",
                      want, exc)
            return
        self.profile, self._server = want, server
        log.info("kanban: %s dispatches; workers are handed to hermesd through %s", want, self.socket_path(want))

    def close(self) -> None:
        """Stop serving. The launcher stays: a gateway left running for the next hermesd keeps a
        working ``HERMES_BIN`` (with no socket to ask, the messenger runs the worker itself)."""
        if self._server is not None:
            self._server.close()
        self.profile, self._server = None, None
