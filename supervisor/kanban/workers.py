"""The daemon's side of kanban workers: run a dispatcher's worker as ``hermesd exec <assignee>`` would.

Why the daemon runs them: upstream's dispatcher spawns every worker as its own child, so profile
B's agent would live in profile A's process tree (A's restart ends it, A's confinement and limits
apply to it). With ``HERMES_BIN`` pointing at :mod:`supervisor.kanban.worker`, the dispatcher's
"worker" is only a messenger; the real worker is started here, by the daemon, as
``python -m supervisor exec --root R --status-fd 3 ASSIGNEE -- <hermes> <upstream's worker argv>``:

* the assignee's environment contract and confinement (that is what ``exec`` does), never the
  dispatcher's: of the messenger's environment only upstream's per-task variables pass
  (:data:`TASK_VARIABLES`) — the dispatcher's own environment holds its ``.env`` secrets;
* output appended to the task's log (``<board>/logs/<task>.log``, so ``hermes kanban log`` keeps
  working): the path is derived from the task and the board, never taken from the request (which
  must name exactly that file), and opened by the worker itself, confined as the assignee,
  beneath the board's log folder and without following links (:mod:`supervisor.kanban.worklog`).
  The keeper's own words (a refused log, a limit it killed the worker for) go to the assignee's
  log in hermesd's folder;
* in a cgroup of its own beside the assignee's (``worker.<assignee>.<keeper pid>``), with the
  assignee's limits (or ``kanban.worker_limits``) as its *own*: a worker over them is killed, never
  the assignee's gateway, and at most ``kanban.workers_per_profile`` run per assignee
  (:mod:`supervisor.kanban.bounds`);
* in hermesd's own tree, in a session of its own, untagged: ``hermesd restart <dispatcher>``
  (a tree kill of the dispatcher's gateway) does not reach it;
* its exit status comes back unchanged through a pipe (``exec --status-fd``): the daemon's
  ``waitpid(-1)`` reaper owns every child's wait status, so the keeper reports its own.

Only upstream's worker command line is accepted (:func:`check_argv`): ``-p ASSIGNEE … chat -q
"work kanban task <id>"`` with the task id of ``HERMES_KANBAN_TASK``; this is not a way to run an
arbitrary command as another profile.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from profiles import safeio
from profiles.printable import printable
from profiles.safeio import Beneath
from supervisor.kanban.bounds import too_many_workers
from supervisor.kanban.worklog import LogError, log_parts

# Upstream's per-task variables (hermes_cli/kanban_db.py, _default_spawn): all a worker needs
# from its dispatcher.
TASK_VARIABLES = ("HERMES_TENANT", "TERMINAL_CWD", "TERMINAL_TIMEOUT", "TERMINAL_MAX_FOREGROUND_TIMEOUT")
TASK_PREFIX = "HERMES_KANBAN_"
# Marks a keeper and its worker as hermesd-run kanban work (not a gateway tag: never swept).
WORKER_TAG = "HERMESD_KANBAN_WORKER"
# At most this many workers at once per daemon: the hand-off must not let one dispatcher flood the
# machine with other profiles' agents (upstream's own concurrency setting is far below it).
MAX_RUNNING = 32
STOP_GRACE_S = 10.0  # SIGTERM to SIGKILL for a worker hermesd ends
_PROMPT_RE = re.compile(r"work kanban task ([A-Za-z0-9_.-]{1,80})")
_FLAGS_WITH_VALUE = {"--skills", "-m", "--toolsets"}
_FLAGS = {"--cli", "--accept-hooks", "-Q"}


class WorkerError(ValueError):
    """A worker request that is refused; the message is the reply's error."""


def check_argv(argv: Sequence[str], assignee: str, task: str) -> None:
    """Accept only upstream's worker shape: ``-p ASSIGNEE [flags] chat -q "work kanban task ID" [-Q]``."""
    args = list(argv)
    if args[:2] != ["-p", assignee]:
        raise WorkerError(f"worker command must start with -p {assignee}")
    i = 2
    while i < len(args) and args[i] != "chat":
        if args[i] in _FLAGS:
            i += 1
        elif args[i] in _FLAGS_WITH_VALUE and i + 1 < len(args):
            i += 2
        else:
            raise WorkerError(f"unexpected worker argument {printable(args[i], 40)!r}")
    rest = args[i:]
    if rest[:2] != ["chat", "-q"] or len(rest) < 3 or rest[3:] not in ([], ["-Q"]):
        raise WorkerError("worker command must end with chat -q PROMPT [-Q]")
    m = _PROMPT_RE.fullmatch(rest[2])
    if m is None or m.group(1) != task:
        raise WorkerError("worker prompt does not name the task of HERMES_KANBAN_TASK")


def task_env(env: Mapping[str, str]) -> dict[str, str]:
    """The per-task variables of a messenger's environment, and nothing else."""
    return {k: str(v) for k, v in env.items()
            if isinstance(k, str) and (k.startswith(TASK_PREFIX) or k in TASK_VARIABLES)}


@dataclass
class Running:
    """One worker the daemon started (its keeper: the ``hermesd exec`` process)."""

    pid: int
    assignee: str
    done: asyncio.Future[int] = field(repr=False)


class Workers:
    """The workers one daemon runs for the kanban board of ``root``."""

    def __init__(self, root: Path, base_env: Mapping[str, str], kanban_home: Path | None = None, *,
                 keeper_log: Callable[[str], Path] | None = None,
                 on_end: Callable[[Running], None] | None = None) -> None:
        """``keeper_log(assignee)``: where a keeper's own messages go (the assignee's log in
        hermesd's folder); default: discarded. ``on_end(run)``: after a keeper has ended (the
        daemon clears what a killed keeper could not: its worker's cgroup)."""
        self.on_end = on_end
        self.root = root
        self.base_env = dict(base_env)
        self.kanban_home = (kanban_home or root).resolve()
        self.keeper_log = keeper_log
        self.running: dict[int, Running] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.finished: dict[int, int] = {}
        self._stopping: set[int] = set()  # keepers (= process groups) sent SIGTERM, SIGKILL pending

    def _keeper_fd(self, assignee: str) -> int:
        """The keeper's stdout and stderr: the assignee's log in hermesd's folder, resolved from the root
        without a link and appended to only if it is a regular file (else ``/dev/null``)."""
        if self.keeper_log is None:
            return os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC)
        where = safeio.under(self.root, self.keeper_log(assignee))
        try:
            safeio.makedirs(Beneath(where.base, where.rel.rpartition("/")[0]), 0o700)
            return safeio.open_append(where, 0o600)
        except OSError as exc:
            raise WorkerError(f"cannot open the keeper's log {where}: {exc.strerror or exc}") from None

    def start(self, *, assignee: str, command: Sequence[str], argv: Sequence[str], env: Mapping[str, str],
              log: str, per_profile: int = 4) -> Running:
        """Start the keeper for one worker; the caller awaits :meth:`wait` for its exit code."""
        per_task = task_env(env)
        task = per_task.get("HERMES_KANBAN_TASK", "")
        if not task:
            raise WorkerError("HERMES_KANBAN_TASK missing: not a kanban worker")
        check_argv(argv, assignee, task)
        try:
            base, rel = log_parts(self.kanban_home, per_task.get("HERMES_KANBAN_BOARD"), task)
        except LogError as exc:
            raise WorkerError(str(exc)) from None
        if log != str(base / rel):
            raise WorkerError(f"log must be the task's own log {base / rel}, not {printable(log, 200)!r}")
        if len(self.running) >= MAX_RUNNING:
            raise WorkerError(f"{MAX_RUNNING} kanban workers already running: try again later")
        refused = too_many_workers(sum(1 for r in self.running.values() if r.assignee == assignee), per_profile,
                                   assignee)
        if refused:
            raise WorkerError(refused)
        keeper = [sys.executable, "-m", "supervisor", "exec", "--root", str(self.root), "--status-fd", "3",
                  "--session", "worker", "--worker-log", str(base), rel, assignee, "--", *command, *argv]
        kenv = {**{k: v for k, v in self.base_env.items() if not k.startswith(TASK_PREFIX)}, **per_task,
                WORKER_TAG: assignee, "HERMES_PROFILE": assignee}
        for tag in ("HERMESD_ROOT", "HERMESD_PROFILE"):
            kenv.pop(tag, None)
        loop = asyncio.get_running_loop()
        fd = self._keeper_fd(assignee)
        r, w = os.pipe2(os.O_CLOEXEC)
        try:
            pid = os.posix_spawn(
                keeper[0], keeper, kenv,
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, fd, 1),
                    (os.POSIX_SPAWN_DUP2, fd, 2),
                    (os.POSIX_SPAWN_DUP2, w, 3),
                ],
                setsid=True,
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
            )
        except OSError as exc:
            os.close(r)
            raise WorkerError(f"cannot start the worker: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
            os.close(w)
        run = Running(pid, assignee, loop.create_future())
        self.running[pid] = run
        task_ = loop.create_task(self._collect(run, r))
        self._tasks.add(task_)
        task_.add_done_callback(self._tasks.discard)
        return run

    async def _collect(self, run: Running, r: int) -> None:
        """Read the keeper's one status line (EOF without one: it was killed, 128+9 by convention)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(r, "rb"))
        try:
            data = await reader.read(64)
        finally:
            transport.close()
        try:
            code = int(data.strip())
        except ValueError:
            code = 128 + signal.SIGKILL
        self.running.pop(run.pid, None)
        if self.on_end is not None:
            self.on_end(run)
        self.finished[run.pid] = code  # a kanban_wait may arrive after the end
        while len(self.finished) > 256:
            del self.finished[next(iter(self.finished))]
        if not run.done.done():
            run.done.set_result(code)

    async def wait(self, pid: int) -> int:
        """The worker's exit code (a death by signal N: 128+N), once it has ended."""
        if pid in self.finished:
            return self.finished[pid]
        run = self.running.get(pid)
        if run is None:
            raise WorkerError(f"no running kanban worker with PID {pid}")
        return await asyncio.shield(run.done)

    def stop_of(self, assignee: str, why: str = "") -> list[int]:
        """End ``assignee``'s workers (hermesd stops or restarts that profile): SIGTERM now, SIGKILL later.

        The keeper passes SIGTERM on to the worker and reports the worker's own code back; what is
        still running :data:`STOP_GRACE_S` later is killed with its whole process group (the keeper
        leads a session of its own).
        """
        pids = [pid for pid, r in self.running.items() if r.assignee == assignee]
        self._stop(pids)
        return pids

    def stop_all(self) -> list[int]:
        """At daemon shutdown: workers end with hermesd (nothing would be left to report their end)."""
        pids = list(self.running)
        self._stop(pids)
        return pids

    def _stop(self, pids: list[int]) -> None:
        """SIGTERM to each keeper's process group (keeper, worker and the worker's own children: the
        keeper leads a session of its own), SIGKILL to what is left of it after the grace."""
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        if pids:
            self._stopping.update(pids)
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().call_later(STOP_GRACE_S, self.kill, pids)

    def kill(self, pids: list[int] | None = None) -> None:
        """SIGKILL the process group of each worker being stopped (default: every one still known).

        A group outlives its keeper while a member lives, and the kernel does not hand a PID that
        is still some group's ID to a new process, so the group is still the worker's.
        """
        for pid in set(self.running) | self._stopping if pids is None else pids:
            self._stopping.discard(pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
