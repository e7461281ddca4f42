"""hermesd's own process settings: remembered at start, checked and put back at housekeeping.

Why: any process of hermesd's account that is not confined (or a confined one on a kernel
without the process-control filter, :mod:`supervisor.isolation.syscalls`) can lower hermesd's
descriptor limit (``prlimit --pid``: every control request and spawn then fails), renice it, pin
it to one CPU, give it idle I/O priority or raise its OOM score. None of these leaves a trace
but hermesd slowing down or failing, so hermesd compares its settings with those it started
with every housekeeping round, restores what it may, and says in ``status`` what it found and
what it could not undo (a lowered hard limit needs CAP_SYS_RESOURCE; a lowered nice value,
CAP_SYS_NICE).

Per-thread settings (nice, affinity, scheduling policy, I/O priority) are checked on every
thread: ``renice -p`` and ``taskset -p`` change one thread.

:func:`drift` is pure (tests feed it two snapshots); :func:`snapshot` and :func:`restore` do the I/O.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import resource
import time
from dataclasses import dataclass, field

log = logging.getLogger("hermesd")

RLIMITS: tuple[tuple[str, int], ...] = tuple(
    (name, getattr(resource, name)) for name in (
        "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_DATA", "RLIMIT_STACK", "RLIMIT_AS",
        "RLIMIT_CORE", "RLIMIT_MEMLOCK", "RLIMIT_SIGPENDING", "RLIMIT_MSGQUEUE", "RLIMIT_NICE", "RLIMIT_RTPRIO",
        "RLIMIT_RTTIME", "RLIMIT_LOCKS",
    ) if hasattr(resource, name)
)
FD_RESERVE = 32  # descriptors hermesd keeps for itself (control requests, inotify, files it reads)
_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}
_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}
_IOPRIO_WHO_PROCESS = 1


@dataclass(frozen=True, slots=True)
class Thread:
    nice: int | None
    affinity: frozenset[int] | None
    policy: int | None
    ioprio: int | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What hermesd's process looks like: per-process limits and scores, per-thread scheduling."""

    rlimits: dict[str, tuple[int, int]] = field(default_factory=dict)
    oom_score_adj: int | None = None
    threads: dict[int, Thread] = field(default_factory=dict)  # tid -> settings


_libc: ctypes.CDLL | None = None


def _syscall(*args: int) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return int(_libc.syscall(*args))


def _ioprio(tid: int) -> int | None:
    nr = _IOPRIO_GET.get(os.uname().machine)
    if nr is None:
        return None
    value = _syscall(nr, _IOPRIO_WHO_PROCESS, tid)
    return None if value < 0 else int(value)


def _thread(tid: int) -> Thread:
    try:
        nice: int | None = os.getpriority(os.PRIO_PROCESS, tid)
    except OSError:
        nice = None
    try:
        affinity: frozenset[int] | None = frozenset(os.sched_getaffinity(tid))
    except OSError:
        affinity = None
    try:
        policy: int | None = os.sched_getscheduler(tid)
    except OSError:
        policy = None
    return Thread(nice, affinity, policy, _ioprio(tid))


def _oom() -> int | None:
    try:
        with open("/proc/self/oom_score_adj", "rb") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def snapshot() -> Snapshot:
    """This process, now (every thread listed in ``/proc/self/task``)."""
    rl = {}
    for name, which in RLIMITS:
        try:
            rl[name] = resource.getrlimit(which)
        except (OSError, ValueError):
            continue
    try:
        tids = sorted(int(t) for t in os.listdir("/proc/self/task") if t.isdigit())
    except OSError:  # out of descriptors: at least the main thread
        tids = [os.getpid()]
    return Snapshot(rl, _oom(), {tid: _thread(tid) for tid in tids})


def _limit(v: int) -> str:
    return "unlimited" if v == resource.RLIM_INFINITY else str(v)


@dataclass(frozen=True, slots=True)
class Change:
    """One setting that differs from the start: what, as it was, as it is, and where (a thread)."""

    what: str
    was: object
    now: object
    tid: int | None = None

    def describe(self) -> str:
        where = f" of thread {self.tid}" if self.tid is not None else ""
        return f"{self.what}{where} changed from {self.was} to {self.now}"


def drift(base: Snapshot, now: Snapshot) -> list[Change]:
    """Every setting of ``now`` that differs from ``base`` (threads compared with the main thread's
    settings at start: new threads inherit them, and hermesd never changes them on purpose)."""
    out: list[Change] = []
    for name, (soft, hard) in base.rlimits.items():
        cur = now.rlimits.get(name)
        if cur is not None and cur != (soft, hard):
            out.append(Change(name, f"{_limit(soft)}:{_limit(hard)}", f"{_limit(cur[0])}:{_limit(cur[1])}"))
    if base.oom_score_adj is not None and now.oom_score_adj not in (None, base.oom_score_adj):
        out.append(Change("oom_score_adj", base.oom_score_adj, now.oom_score_adj))
    main = base.threads.get(min(base.threads)) if base.threads else None
    if main is None:
        return out
    for tid, t in sorted(now.threads.items()):
        for attr, label in (("nice", "nice value"), ("affinity", "CPU affinity"), ("policy", "scheduling policy"),
                            ("ioprio", "I/O priority")):
            was, cur = getattr(main, attr), getattr(t, attr)
            if was is not None and cur is not None and cur != was:
                show = (lambda v: ",".join(map(str, sorted(v)))) if attr == "affinity" else str
                out.append(Change(label, show(was), show(cur), tid))
    return out


def restore(base: Snapshot, changes: list[Change]) -> list[str]:
    """Put back what ``changes`` lists; one line per change, saying whether it was undone."""
    lines = []
    main = base.threads.get(min(base.threads)) if base.threads else None
    for c in changes:
        try:
            _undo(c, base, main)
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            lines.append(f"{c.describe()} by another process; cannot restore it: {reason}")
            continue
        lines.append(f"{c.describe()} by another process; restored")
    return lines


def _undo(c: Change, base: Snapshot, main: Thread | None) -> None:
    if c.what.startswith("RLIMIT_"):
        soft, hard = base.rlimits[c.what]
        which = getattr(resource, c.what)
        cur_soft, cur_hard = resource.getrlimit(which)
        try:
            resource.setrlimit(which, (soft, hard))
        except (OSError, ValueError):
            # A lowered hard limit comes back only with CAP_SYS_RESOURCE: raise the soft limit as
            # far as the new hard limit allows, then report the rest.
            best = soft if cur_hard == resource.RLIM_INFINITY else cur_hard if soft == resource.RLIM_INFINITY \
                else min(soft, cur_hard)
            if best != cur_soft:
                resource.setrlimit(which, (best, cur_hard))
            raise
        return
    if c.what == "oom_score_adj":
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, str(base.oom_score_adj).encode())
        finally:
            os.close(fd)
        return
    assert main is not None and c.tid is not None
    if c.what == "nice value" and main.nice is not None:
        os.setpriority(os.PRIO_PROCESS, c.tid, main.nice)
    elif c.what == "CPU affinity" and main.affinity is not None:
        os.sched_setaffinity(c.tid, main.affinity)
    elif c.what == "scheduling policy" and main.policy is not None:
        os.sched_setscheduler(c.tid, main.policy, os.sched_param(0))
    elif c.what == "I/O priority" and main.ioprio is not None:
        nr = _IOPRIO_SET.get(os.uname().machine)
        if nr is None:
            raise OSError(38, "ioprio_set is not known on this architecture")
        if _syscall(nr, _IOPRIO_WHO_PROCESS, c.tid, main.ioprio) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))


def raise_fd_limit() -> None:
    """Raise the soft descriptor limit to the hard one: each child costs a pidfd for its whole life."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _fd_table_size() -> int | None:
    """``FDSize`` of ``/proc/self/status``: the slots of this process's descriptor table, never fewer
    than the descriptors open (one small read, where listing ``/proc/self/fd`` grows with them)."""
    try:
        with open("/proc/self/status", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    i = raw.find(b"\nFDSize:")
    if i < 0:
        return None
    parts = raw[i + 8 : raw.find(b"\n", i + 1)].split()
    return int(parts[0]) if parts and parts[0].isdigit() else None


def fd_budget_problem(spare: int = 0) -> str | None:
    """Why a spawn must be refused for lack of descriptors (a pidfd for its life, a log while spawning;
    ``spare``: that many more, which the caller would keep open first).

    Asked before every spawn: the open descriptors are counted only when the table's size (an upper
    bound) does not already leave room under the limit, which after :func:`raise_fd_limit` is nearly never.
    """
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    bound = _fd_table_size()
    if bound is not None and bound + 2 + spare + FD_RESERVE <= soft:
        return None
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
    if used + 2 + spare + FD_RESERVE > soft:
        return (f"out of file descriptors: {used} open of a limit of {soft}, and hermesd keeps {FD_RESERVE} for "
                "itself; raise the limit (LimitNOFILE= in the unit, or ulimit -n) or run fewer profiles")
    return None


class SelfCheck:
    """The daemon's side: the settings at start, and what ``status`` says about them since."""

    def __init__(self) -> None:
        self.base: Snapshot | None = None
        self.problems: list[str] = []  # changed by another process and not undone, now
        self.restored: list[str] = []  # the latest changes that were undone (with the time)

    def start(self) -> None:
        """Raise the descriptor limit as far as it goes, then remember the settings as they are."""
        raise_fd_limit()
        self.base = snapshot()

    def check(self) -> None:
        """Compare, restore what may be restored, and keep what is left for ``status``, with a
        starved descriptor budget (checked first: it fails every other housekeeping step)."""
        budget_problem = fd_budget_problem()
        if self.base is None:
            return
        unresolved = []
        changes = drift(self.base, snapshot())
        for line in restore(self.base, changes) if changes else []:
            if line.endswith("; restored"):
                log.warning("%s", line)
                self.restored = [*self.restored, f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {line}"][-5:]
            else:
                unresolved.append(line)
        if budget_problem:
            unresolved.append(budget_problem)
        for line in unresolved:
            if line not in self.problems:
                log.error("%s", line)
        self.problems = unresolved
