"""A session run for a profile outside its gateway's tree: its own cgroup with limits of its own,
watched by the command that waits for it.

Why: ``hermesd exec alpha -- …`` (and every alias, and every kanban worker, which run through it)
runs *as* alpha's gateway: alpha's ``memory_max`` and ``tasks_max`` must hold for it, or a 400 MiB
allocation under ``memory_max: 300M`` simply completes. Why not in the gateway's own cgroup: the
limit would then cover the gateway and the session *together*, and a user's ``hermes chat`` (or a
flood of kanban workers) going over it would get the *gateway* killed. So each session gets the
profile's limits as its own, in a cgroup beside the profile's (``<base>/exec.<profile>.<pid>``,
``<base>/worker.<profile>.<pid>``): a session over the limit is killed, the gateway is untouched.
A profile can thus use its limits once for the gateway and once per session it runs; kanban
workers are bounded in number per assignee by the daemon.

Enforcement is the kernel's where the cgroup has the controllers (``memory.max``, ``pids.max``,
``cpu.weight`` on the session's cgroup), else this module's: the command that waits for the
session (:func:`supervisor.cli.exec.run`) scans the session's members at the watch mechanism's pace
(:func:`supervisor.limits.tree.next_scan`) and kills the session on a breach. Members are the
cgroup's processes (exact), or, where no cgroup can be made (hermesd not root and nothing
delegated), the waiting command's descendants: it becomes a child subreaper, so orphans come back
to it; a process that leaves the tree some other way is not counted (the watch mechanism's blind
spot). When the session's command ends, whatever it left running is killed: nothing it started
outlives the limits that covered it.
"""

from __future__ import annotations

import contextlib
import os
import select
import time
from dataclasses import dataclass, field
from pathlib import Path

from supervisor import limits as lim
from supervisor.limits import cgroup, cgroup_io, procfs
from supervisor.limits.cgroup import Detection
from supervisor.limits.tree import Breach, Pace, TreeSample, build_trees, check_tree, next_scan
from supervisor.limits.watcher import freeze_and_kill, measure
from supervisor.processes.prctl import become_subreaper
from supervisor.settings import Limits, format_size


@dataclass
class Session:
    """One session's domain: where its processes are counted and what limits the waiter enforces."""

    name: str
    kind: str  # exec | worker
    limits: Limits
    dir: str | None = None  # its cgroup, when one could be made
    det: Detection | None = None
    problem: str | None = None  # why there is no cgroup
    keeper: int = field(default_factory=os.getpid)  # the waiting command (never a member)
    _keeper_start: int = -1

    @property
    def pace(self) -> Pace:
        """How often the waiter scans: a session's cgroup is a few processes (a read of
        ``cgroup.procs`` and their ``stat``), so four times a second; without one, a scan reads
        every process on the host, so the watch mechanism's pace."""
        return Pace(base=0.25, fast=0.05) if self.dir is not None else Pace()

    @property
    def watched(self) -> Limits:
        """The limits no controller of the session's cgroup enforces: the waiter's to enforce."""
        return lim.watch_limits(self.limits, self.det if self.dir is not None else None)

    @property
    def note(self) -> str | None:
        """One line for the user when the profile's limits are not all the kernel's to enforce."""
        w = self.watched
        parts = [f"memory_max {format_size(w.memory_max)}" if w.memory_max is not None else "",
                 f"tasks_max {w.tasks_max}" if w.tasks_max is not None else ""]
        shown = " and ".join(p for p in parts if p)
        if not shown:
            return None
        if self.dir is None:
            return (f"hermesd: {self.kind} {self.name}: {shown} enforced by this command watching its own process"
                    f" tree (no cgroup: {self.problem}); a process that leaves the tree is not counted")
        missing = sorted(c for c in ("memory", "pids") if self.det is None or c not in self.det.controllers)
        return (f"hermesd: {self.kind} {self.name}: {shown} enforced by this command watching its cgroup"
                f" (no cgroup {' and '.join(missing)} controller here: checked 4 times a second, not by the kernel)")

    # ------------------------------------------------------------------ membership

    def attach(self, pid: int) -> None:
        """Put the session's first process into its cgroup (before it runs anything: the caller
        holds it until this returns). Without a cgroup, nothing to do: it is our child."""
        if self.dir is None:
            return
        try:
            cgroup_io.attach(self.dir, pid)
        except (cgroup_io.CgroupError, ProcessLookupError) as exc:
            self.problem = f"cannot join {self.dir}: {exc}"
            self._remove()
            self.dir = None
            become_subreaper()  # its process tree is watched instead: orphans must come back to us

    def members(self) -> list[tuple[int, int]]:
        """``(pid, start)`` of every process of the session now."""
        if self.dir is not None:
            out = []
            for pid in cgroup_io.procs(self.dir):
                st = procfs.read_stat(pid)
                if st is not None:
                    out.append((pid, st.start))
            return out
        stats = procfs.scan()
        if self._keeper_start < 0 and self.keeper in stats:
            self._keeper_start = stats[self.keeper].start
        tree = build_trees(stats, {"s": (self.keeper, self._keeper_start)}, {}).get("s", [])
        return [(p, stats[p].start) for p in tree if p != self.keeper]

    def sample(self) -> TreeSample:
        stats = [st for st in (procfs.read_stat(p) for p, _ in self.members()) if st is not None]
        return measure(self.name, stats, self.watched, swapping=procfs.swap_in_use())

    def kill(self) -> None:
        """SIGKILL every process of the session (never the waiting command)."""
        if self.dir is not None:
            with contextlib.suppress(cgroup_io.CgroupError):
                cgroup_io.kill(self.dir)
            return
        freeze_and_kill(self.members)

    # ------------------------------------------------------------------ the waiter's loop

    def wait(self, pid: int) -> tuple[int, Breach | None]:
        """Wait for ``pid`` (our child, the session's command); enforce the watched limits meanwhile.

        Returns its wait status and the breach it was killed for, if any. Reaps the orphans that
        come back to us as subreaper while waiting.
        """
        w = self.watched
        if w.memory_max is None and w.tasks_max is None:
            return os.waitpid(pid, 0)[1], None
        fd = os.pidfd_open(pid)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        breach: Breach | None = None
        previous: dict[str, TreeSample] = {}
        hot_until = float("-inf")
        delay: float | None = 0.0
        try:
            while True:
                if poller.poll(None if delay is None else max(0, int(delay * 1000))):
                    return os.waitpid(pid, 0)[1], breach
                self._reap_orphans(pid)
                sample = self.sample()
                if breach is None:
                    breach = check_tree(sample, w)
                    if breach is not None:
                        self.kill()
                        delay = 0.05
                        continue
                delay, hot_until = next_scan({"s": sample}, previous, {"s": w}, now=time.monotonic(),
                                             hot_until=hot_until, pace=self.pace)
                previous = {"s": sample}
        finally:
            os.close(fd)

    def _reap_orphans(self, child: int) -> None:
        """As subreaper (no cgroup), dead orphans are ours to reap: never the command itself,
        whose status :meth:`wait` reads."""
        if self.dir is not None:
            return
        for p in _zombie_children(child):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(p, os.WNOHANG)

    def close(self) -> None:
        """The command has ended: kill what it left running, reap it, remove the cgroup."""
        if self.dir is not None:
            if cgroup_io.populated(self.dir) is not False:
                self.kill()
            self._remove()
        elif self.members():
            self.kill()
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass

    def _remove(self) -> None:
        if self.dir is not None:
            with contextlib.suppress(cgroup_io.CgroupError, OSError):
                cgroup_io.remove(self.dir, timeout=2.0)


def _zombie_children(keep: int) -> list[int]:
    """Our zombie children other than ``keep`` (orphans handed to us as subreaper, now dead)."""
    me = os.getpid()
    out = []
    for pid, st in procfs.scan().items():
        if st.ppid == me and pid != keep and st.state in ("Z", "X"):
            out.append(pid)
    return out


def open_session(root: Path, name: str, kind: str, limits: Limits, *, keeper: int | None = None,
                 tree_without_cgroup: bool = True) -> Session | None:
    """Make the session's cgroup (the profile's limits written on it) or say why there is none.

    ``kind``: ``exec`` or ``worker``. Never raises for a cgroup problem: the session is then
    watched as a process tree and :attr:`Session.note` says so, or, with ``tree_without_cgroup``
    False (no limits to enforce), there is no session (``None``).
    """
    keeper = os.getpid() if keeper is None else keeper
    det = lim.detect_only(str(root))
    session = Session(name, kind, limits, det=det, keeper=keeper)
    d = cgroup.session_dir(det, kind, name, keeper)
    if d is None:
        session.problem = det.problems[0] if det.problems else "cgroup v2 is not usable here"
    else:
        try:
            cgroup_io.apply(cgroup.session_setup_plan(det))
            cgroup_io.apply(cgroup.leaf_plan(det, d, limits))
            session.dir = d
        except cgroup_io.CgroupError as exc:
            session.problem = str(exc)
            with contextlib.suppress(OSError, cgroup_io.CgroupError):
                cgroup_io.remove(d, timeout=0.0)
    if session.dir is None:
        if not tree_without_cgroup:
            return None
        become_subreaper()
    return session
