"""Starting and ending one gateway process: spawn, reap, kill its group, sweep its strays.

Every gateway is started here. The other processes hermesd starts (``hermesd exec`` sessions and
the kanban workers run through them, short questions to the gateway's interpreter) are started by
the module that needs them, and none of them is a gateway.

Children are started with ``posix_spawn`` (a fresh interpreter, never a fork of hermesd, so
upstream binds its path constants to the child's own HERMES_HOME at import) in a new session,
with stdout/stderr appended to a log file rather than a pipe: a child must outlive hermesd
without a SIGPIPE. hermesd keeps no ``subprocess.Popen`` objects, so nothing but the daemon's
own reaper ever calls ``waitpid``.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping
from pathlib import Path

from profiles import safeio
from profiles.safeio import Beneath
from supervisor.plan.model import Ident
from supervisor.processes import identity
from supervisor.processes.prctl import become_subreaper  # noqa: F401 -- TEMPORARY: daemon/loop.py's call moves to prctl
from supervisor.processes.tags import verified_profile


class SpawnError(OSError):
    """The gateway command could not be executed at all."""

    def __str__(self) -> str:
        # The reason alone: status shows it to an operator, for whom "[Errno 30]" is noise.
        return self.strerror or super().__str__()


def spawn(argv: list[str], env: Mapping[str, str], log_path: Beneath | Path) -> Ident:
    """Start ``argv`` in its own session, output appended to ``log_path``; return its identity.

    Every way a start can fail (the log cannot be opened: read-only, full or out of descriptors;
    exec fails; the kernel refuses a process for now) is one :class:`SpawnError` with the reason,
    so the planner backs off and retries instead of the profile silently staying down.
    """
    try:
        if Path(str(log_path)) == Path(os.devnull):
            fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        else:
            spot = safeio.beneath(log_path)
            try:  # a regular file only: a FIFO planted there would block the loop that serves every profile
                fd = safeio.open_append(spot, 0o600)
            except FileNotFoundError:  # the logs folder is gone: make it (never through a link), once
                safeio.makedirs(Beneath(spot.base, spot.rel.rpartition("/")[0]), 0o700)
                fd = safeio.open_append(spot, 0o600)
    except OSError as exc:
        raise SpawnError(exc.errno, f"cannot open its log {log_path}: {exc.strerror or exc}") from None
    try:
        pid = os.posix_spawn(
            argv[0],
            argv,
            dict(env),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, fd, 1),
                (os.POSIX_SPAWN_DUP2, fd, 2),
            ],
            setsid=True,
            # Python ignores SIGPIPE and the child would inherit that; give it the defaults.
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
        )
    except OSError as exc:
        raise SpawnError(exc.errno, f"cannot execute {argv[0]}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    # The child cannot be reaped before the daemon's loop runs again, so /proc still has it.
    start = identity.proc_start_time(pid)
    return Ident(pid, start if start is not None else -1)


def reap_now(pid: int) -> None:
    """Kill and reap a child of ours at once (one we could not pin: it must not run unsupervised).

    Safe by PID: an unreaped child's PID cannot be reused.
    """
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def kill_group(ident: Ident, pidfd: int) -> None:
    """SIGKILL the child's whole process group, then the child itself through its pidfd.

    Called only while the child is known alive or unreaped (the pidfd pins it), so its PID,
    which is also its process group id, cannot have been reused.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(ident.pid, signal.SIGKILL)
    identity.send_signal(pidfd, signal.SIGKILL)


def kill_strays(root: Path, profile: str, keep: set[int], salt: bytes) -> list[int]:
    """SIGKILL every process tagged with this profile except ``keep``.

    Finds descendants that escaped the process group (``setsid``) by the tag they inherited, with
    its token (:func:`supervisor.processes.tags.verified_profile`): a process that set the tag itself
    is not ours to kill. Each is pinned with a pidfd and re-checked before the signal. Where the
    profile has a cgroup, :meth:`supervisor.daemon.domains.Domains.sweep` is exact; this finds
    what lives outside it (a child that could not be moved into it).
    """
    killed = []
    for pid, _name, env in identity.find_tagged(root, profile):
        if pid in keep or verified_profile(env, salt, root) != profile:
            continue
        start = identity.proc_start_time(pid)
        if start is None:
            continue
        fd = identity.open_pidfd(Ident(pid, start))
        if fd is None:
            continue
        try:
            if verified_profile(identity.proc_environ(pid), salt, root) == profile and identity.send_signal(
                fd, signal.SIGKILL
            ):
                killed.append(pid)
        finally:
            os.close(fd)
    return killed
