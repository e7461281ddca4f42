"""The watch mechanism's I/O: scan every profile's tree from ``/proc``, kill a tree without cgroups.

One :class:`TreeWatcher` per daemon serves every profile: a scan reads ``/proc/<pid>/stat`` once
for every process on the host (the parent map is needed to find descendants), attributes
orphans by their environment tag, checked against its token (read once per process, cached by
``(pid, start time)``), and
measures PSS only for trees whose cheap upper bound nears ``memory_max`` (see
:mod:`supervisor.limits.tree`). A profile placed in a cgroup (:class:`CgroupRoot`) is enumerated
from its ``cgroup.procs`` instead, with no host scan.

Killing a tree without ``cgroup.kill`` (:func:`freeze_and_kill`): a list of PIDs is stale the
moment it is read; a fork bomb forks between the scan and the signal. So every member is pinned
with a pidfd (checked against the start time the scan saw, so a recycled PID is never signalled),
sent SIGSTOP, and the tree is scanned again until a scan finds no member that is not already
stopped; stopped processes cannot fork, so the set is then closed, and SIGKILL goes to all of it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from supervisor.limits import cgroup_io, procfs
from supervisor.limits.tree import TreeSample, build_trees, needs_exact, nice_for_weight, summarize
from supervisor.processes.tags import TAG_PROFILE, TAG_ROOT, TAG_TOKEN, verified_profile
from supervisor.settings import Limits

_TAG_ROOT = f"{TAG_ROOT}=".encode()
_TAG_PROFILE = f"{TAG_PROFILE}=".encode()
_TAG_TOKEN = f"{TAG_TOKEN}=".encode()


@dataclass(frozen=True, slots=True)
class ProcRoot:
    """A profile whose tree is found from ``/proc``: its gateway's PID and start time (ticks)."""

    pid: int
    start: int


@dataclass(frozen=True, slots=True)
class CgroupRoot:
    """A profile whose tree is exactly the processes of a cgroup directory."""

    path: str


Root = ProcRoot | CgroupRoot


def _verified_tag(raw: bytes, salt: bytes | None, root: str) -> str | None:
    """The profile of a tagged environment, when its token proves hermesd set the tag."""
    if salt is None:
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        if item.startswith((_TAG_ROOT, _TAG_PROFILE, _TAG_TOKEN)):
            key, _, value = item.decode("utf-8", "surrogateescape").partition("=")
            env.setdefault(key, value)
    return verified_profile(env, salt, root)


# How long ``status`` reuses a process's PSS. Reading ``smaps_rollup`` walks the process's page
# tables: it was a third of the daemon's status answer at 100 profiles (measured), and ``status
# --watch`` or a metrics scraper asks every second or two. Enforcement never reuses one (``measure``).
PSS_MAX_AGE_S = 5.0


class PssCache:
    """PSS per process for ``status``, reused for ``max_age`` seconds of ``clock``.

    Keyed by ``(pid, start ticks)``, so a recycled PID never gets another process's figure; the
    memory shown may lag by up to ``max_age`` (it is never below the tree's largest RSS, which is read
    fresh each time). Not thread-safe, like its :class:`TreeWatcher`.
    """

    def __init__(self, *, max_age: float = PSS_MAX_AGE_S, clock: Callable[[], float] = time.monotonic,
                 proc: str = procfs.PROC) -> None:
        self.max_age = max_age
        self.clock = clock
        self.proc = proc
        self._seen: dict[tuple[int, int], tuple[float, int | None]] = {}
        self._pruned = clock()

    def rollup_bytes(self, st: procfs.ProcStat) -> int | None:
        """:func:`procfs.rollup_bytes` of ``st``'s process, read again once the last reading is too old."""
        now = self.clock()
        if now - self._pruned > self.max_age:  # forget the dead (and the stale) now and then
            self._seen = {k: v for k, v in self._seen.items() if now - v[0] <= self.max_age}
            self._pruned = now
        key = (st.pid, st.start)
        hit = self._seen.get(key)
        if hit is not None and now - hit[0] <= self.max_age:
            return hit[1]
        value = procfs.rollup_bytes(st.pid, self.proc)
        self._seen[key] = (now, value)
        return value


class TreeWatcher:
    """Scans and kills profile trees for one hermesd root. Not thread-safe; one per daemon loop."""

    def __init__(self, tag_root: str, *, salt: bytes | None, proc: str = procfs.PROC,
                 exclude: Iterable[int] = (), clock: Callable[[], float] = time.monotonic) -> None:
        """``salt``: the daemon's per-root salt; an orphan is attributed by its tag only when the
        tag carries the token hermesd gave it (``None``: no tag is trusted, orphans are lost).
        ``clock``: for :attr:`pss`, the PSS readings ``status`` reuses (:class:`PssCache`)."""
        self.proc = proc
        self.tag_root = tag_root
        self.salt = salt
        self._needle = _TAG_ROOT + tag_root.encode()
        self._exclude = {os.getpid(), *exclude}
        self._tags: dict[tuple[int, int], str | None] = {}
        self.pss = PssCache(clock=clock, proc=proc)

    # ------------------------------------------------------------------ membership

    def _tag_of(self, pid: int, start: int) -> str | None:
        key = (pid, start)
        if key not in self._tags:
            raw = procfs.environ_has(pid, (self._needle,), self.proc)
            self._tags[key] = _verified_tag(raw, self.salt, self.tag_root) if raw is not None else None
        return self._tags[key]

    def _proc_trees(self, roots: Mapping[str, ProcRoot], procs: Mapping[int, procfs.ProcStat]) -> dict[str, list[int]]:
        wanted = {name: (r.pid, r.start) for name, r in roots.items()}
        first = build_trees(procs, wanted, {}, self._exclude)
        reached = {pid for members in first.values() for pid in members} | self._exclude
        tagged: dict[int, str] = {}
        live: set[tuple[int, int]] = set()
        for p in procs.values():
            if p.pid in reached or p.pid == 2 or p.ppid == 2:  # tree members, kthreadd and kernel threads
                continue
            live.add((p.pid, p.start))
            name = self._tag_of(p.pid, p.start)
            if name is not None:
                tagged[p.pid] = name
        self._tags = {k: v for k, v in self._tags.items() if k in live}  # forget the dead
        if not tagged:
            return first
        return build_trees(procs, wanted, tagged, self._exclude)

    # ------------------------------------------------------------------ scanning

    def scan(self, roots: Mapping[str, Root], limits: Mapping[str, Limits] | None = None) -> dict[str, TreeSample]:
        """One sample per profile in ``roots``. PSS is measured for a profile only when its
        ``limits`` need it (:func:`~supervisor.limits.tree.needs_exact`); pass ``limits=None`` to
        skip memory exactness entirely, or use :func:`tree_usage` for status."""
        proc_roots = {n: r for n, r in roots.items() if isinstance(r, ProcRoot)}
        stats: dict[int, procfs.ProcStat] = {}
        trees: dict[str, list[int]] = {}
        if proc_roots:
            stats = procfs.scan(self.proc)
            trees.update(self._proc_trees(proc_roots, stats))
        for name, r in roots.items():
            if isinstance(r, CgroupRoot):
                pids = cgroup_io.procs(r.path)
                for pid in pids:
                    if pid not in stats:
                        st = procfs.read_stat(pid, self.proc)
                        if st is not None:
                            stats[pid] = st
                trees[name] = [p for p in pids if p in stats]
        swapping = procfs.swap_in_use(self.proc)
        return {name: measure(name, [stats[p] for p in pids], (limits or {}).get(name), swapping=swapping,
                              proc=self.proc)
                for name, pids in trees.items()}

    # ------------------------------------------------------------------ killing

    def rescan_members(self, name: str, root: ProcRoot) -> list[tuple[int, int]]:
        """A fresh membership of one tree (a host scan), for :func:`freeze_and_kill`."""
        stats = procfs.scan(self.proc)
        pids = self._proc_trees({name: root}, stats).get(name, [])
        return [(p, stats[p].start) for p in pids]

    def kill(self, name: str, root: Root, *, budget: float = 2.0) -> list[int]:
        """SIGKILL the whole tree of ``name``. For a :class:`CgroupRoot`: ``cgroup.kill`` (or its
        fallbacks, see :mod:`supervisor.limits.cgroup_io`). Returns the PIDs signalled (cgroup: the
        PIDs listed just before the kill)."""
        if isinstance(root, CgroupRoot):
            pids = cgroup_io.procs(root.path)
            cgroup_io.kill(root.path)
            return pids
        return freeze_and_kill(lambda: self.rescan_members(name, root), budget=budget, proc=self.proc)


def _pss(members: Iterable[procfs.ProcStat], proc: str, cache: PssCache | None = None) -> int:
    total = 0
    for m in members:
        value = procfs.rollup_bytes(m.pid, proc) if cache is None else cache.rollup_bytes(m)
        total += m.rss if value is None else value  # unreadable: RSS, an upper bound
    return total


def measure(name: str, members: list[procfs.ProcStat], limits: Limits | None, *, swapping: bool,
            proc: str = procfs.PROC) -> TreeSample:
    """One tree's sample; PSS is read only when ``limits`` need it (:func:`~supervisor.limits.tree.needs_exact`)."""
    pids = [m.pid for m in members]
    swap = sum(procfs.vm_swap_bytes(p, proc) for p in pids) if swapping else 0
    sample = summarize(name, members, pids, swap=swap)
    if limits is not None and needs_exact(sample, limits):
        sample = summarize(name, members, pids, swap=swap, pss=_pss(members, proc))
    return sample


def freeze_and_kill(
    rescan: Callable[[], Iterable[tuple[int, int]]],
    *,
    budget: float = 2.0,
    settle: float = 0.2,
    proc: str = procfs.PROC,
) -> list[int]:
    """Stop every member ``rescan()`` reports until it reports no new one, then SIGKILL them all.

    ``rescan`` returns ``(pid, start ticks)`` pairs. Each is pinned with a pidfd and signalled only
    if its start time still matches. Bounded by ``budget`` seconds: past it, what was found is
    killed anyway (a kernel that cannot stop a process in ``D`` state is not worth waiting for).
    Returns the PIDs that received SIGKILL.
    """
    pinned: dict[tuple[int, int], int] = {}
    deadline = time.monotonic() + budget
    killed: list[int] = []
    try:
        while True:
            new = []
            for pid, start in rescan():
                if (pid, start) in pinned:
                    continue
                fd = _pin(pid, start, proc)
                if fd is None:
                    continue
                pinned[(pid, start)] = fd
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    signal.pidfd_send_signal(fd, signal.SIGSTOP)
                new.append(pid)
            if not new or time.monotonic() > deadline:
                break
            # Wait (briefly) until every pinned member is really stopped: a pending SIGSTOP does not
            # stop a fork already under way, so its child must show up in the next rescan.
            settle_until = min(deadline, time.monotonic() + settle)
            while time.monotonic() < settle_until and not all(
                procfs.state_letter(pid, proc) in (None, "T", "t", "Z", "X") for pid, _ in pinned
            ):
                time.sleep(0.001)
    finally:
        # Whatever happened above (even an exception from rescan), nothing stays stopped: kill all.
        for (pid, _), fd in pinned.items():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
                killed.append(pid)
            os.close(fd)
    return killed


def _pin(pid: int, start: int, proc: str) -> int | None:
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    st = procfs.read_stat(pid, proc)
    if st is None or st.start != start:
        os.close(fd)
        return None
    return fd


@dataclass(frozen=True, slots=True)
class TreeUsage:
    """``status`` fields for one profile's tree."""

    memory_bytes: int  # watch: max(Σ (Pss + SwapPss), largest RSS); cgroup: memory.current
    tasks: int  # threads of every member (cgroup: pids.current)
    processes: int


def tree_usage(pids: Iterable[int], proc: str = procfs.PROC, *, pss: PssCache | None = None) -> TreeUsage:
    """Memory and tasks of a tree given its PIDs, measured exactly (PSS), for ``status``. Gone PIDs
    are skipped. Cost: one ``stat`` and one ``smaps_rollup`` read per process (~1 ms for a gateway,
    ~0.2 ms per small helper); with ``pss``, the ``smaps_rollup`` reads it still holds are reused."""
    stats = [st for st in (procfs.read_stat(p, proc) for p in pids) if st is not None]
    s = summarize("", stats, [st.pid for st in stats], pss=_pss(stats, proc, pss))
    return TreeUsage(memory_bytes=s.memory_bytes, tasks=s.tasks, processes=len(stats))


def apply_nice(pids: Iterable[int], weight: int | None, proc: str = procfs.PROC) -> bool:
    """The watch mechanism's stand-in for ``cpu.weight``: set every thread of ``pids`` to the nice
    value of ``weight`` (:func:`~supervisor.limits.tree.nice_for_weight`). Call it on the gateway
    right after spawn (its later threads and children inherit it) or on a scanned tree after
    adoption. False when any thread refused (raising priority needs CAP_SYS_NICE)."""
    nice = nice_for_weight(weight)
    ok = True
    for pid in pids:
        for tid in procfs.thread_ids(pid, proc) or [pid]:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
            except ProcessLookupError:
                continue
            except PermissionError:
                ok = False
    return ok
