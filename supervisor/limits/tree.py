"""The watch mechanism's decisions, pure: who is in a profile's tree, what it uses, when it breaks a limit.

**Tree.** A profile's tree is its gateway and every descendant, including descendants that left
the process group or session (``setsid``). Those still have a parent, so they stay in the
parent-PID closure, unless their parent died: then the kernel hands them to the nearest child
subreaper, which is hermesd (or, for a gateway adopted after hermesd restarted, init or the
systemd user manager). Every child hermesd spawns carries ``HERMESD_ROOT``/``HERMESD_PROFILE`` in
its environment, inherited by everything it starts, so an orphan is attributed by that tag, but
only when the tag carries the token hermesd gave it (``HERMESD_TAG_TOKEN``, see
:func:`supervisor.processes.tags.verified_profile`): anyone can set ``HERMESD_PROFILE=p2``, and a
process that did must not have p2 killed for its memory. Parent closure wins over tags (a
process started by profile A's tree counts against A whatever it calls itself). A process that
clears its environment *and* loses its parent cannot be found without cgroups: that is the watch
mechanism's blind spot.

**Memory.** A tree's memory is ``max(Σ (Pss + SwapPss), largest single RSS)``:

- Σ RSS counts a shared page once per process that maps it: five forked workers of an 80 MB
  Python read as 400 MB. That would trip limits that are not exceeded.
- Σ PSS splits each shared page between its sharers, so it never counts a page twice, and it is
  what the tree adds to the host when the sharers are all inside it. Pages shared with processes
  outside (libc, the Python binary hermesd also maps) count only in part, so Σ PSS can fall
  *below* the gateway's own RSS; the largest RSS is also a floor of the tree's footprint, so the
  maximum of the two is the tightest cheap floor, and ``memory_bytes >= the gateway's RSS`` holds.
- USS (private pages only) ignores shared pages altogether: a tree whose workers share a large
  mapping would look tiny. Not used.
- ``SwapPss`` counts memory pushed to swap: a limit that swapping escapes protects nothing, so
  ``memory_max`` covers RAM and swap together (the cgroup plan sets ``memory.swap.max`` to 0 to
  match).

PSS costs a page-table walk (``smaps_rollup``: ~0.15 ms for a small process, ~1 ms for an 80 MB
one), RSS is free (it comes with the ``stat`` line the scan reads anyway). Since Σ RSS (+ swap)
is never below the PSS figure, the exact figure is measured only when that cheap upper bound
reaches 90 % of ``memory_max`` (:func:`needs_exact`); under it, no breach is possible.

**Tasks.** The sum of every member's thread count (``/proc/<pid>/stat`` field 20), zombies
included (they hold a PID until reaped): what cgroup v2 ``pids.max`` counts.

**Breach.** One sample over a limit is a breach: limits are maxima, like ``memory.max`` and
``pids.max``, which act on the first page or fork over the line, and the samples are exact (PSS,
thread counts), not noisy. Requiring two samples would double the reaction time and let a fork
bomb grow for another interval. Tasks are checked before memory (a fork bomb is the faster harm).

**Pace.** Scan every ``base`` seconds (default 1 s) while every tree is calm, every ``fast``
seconds (0.1 s) while any tree is hot: tasks at half of ``tasks_max`` or more, tasks grown by at
least max(8, 10 % of ``tasks_max``) or doubled (by at least 4) since the last scan (exponential
growth is a fork bomb's signature), or memory at 80 % of ``memory_max``; and for ``hold`` (3 s)
after a tree was last seen hot: a fork bomb grows in bursts, and one quiet scan between two bursts
must not drop the pace (this is the only hysteresis; breaches need none).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from supervisor.settings import Limits, format_size

EXACT_FRACTION = 0.9  # measure PSS when the cheap upper bound reaches this share of memory_max


class _Proc(Protocol):
    @property
    def pid(self) -> int: ...
    @property
    def ppid(self) -> int: ...
    @property
    def start(self) -> int: ...


class _Usage(Protocol):
    @property
    def threads(self) -> int: ...
    @property
    def rss(self) -> int: ...


def build_trees(
    procs: Mapping[int, _Proc],
    roots: Mapping[str, tuple[int, int]],
    tagged: Mapping[int, str],
    exclude: Iterable[int] = (),
) -> dict[str, list[int]]:
    """Members of each profile's tree, root first.

    ``procs``: every process (pid -> something with ``pid``, ``ppid``, ``start``).
    ``roots``: profile -> (gateway pid, start ticks); a root whose start differs from the live
    process's is a recycled PID and yields an empty tree. ``tagged``: pid -> profile for
    processes whose environment carries this root's tag (only those not already reached by the
    parent closure matter). ``exclude``: never members (hermesd itself).
    """
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    skip = set(exclude)
    assigned: set[int] = set(skip)
    trees: dict[str, list[int]] = {name: [] for name in roots}

    def grow(name: str, top: int) -> None:
        todo = [top]
        while todo:
            pid = todo.pop()
            if pid in assigned:
                continue
            assigned.add(pid)
            trees[name].append(pid)
            todo.extend(children.get(pid, ()))

    for name, (pid, start) in roots.items():
        root_proc = procs.get(pid)
        if root_proc is not None and root_proc.start == start:
            grow(name, pid)
    # Orphans by tag, oldest first, so an escaped process's own tagged children join through it.
    for pid in sorted((p for p in tagged if p in procs), key=lambda p: (procs[p].start, p)):
        name = tagged[pid]
        if name in trees and pid not in assigned:
            grow(name, pid)
    return trees


@dataclass(frozen=True, slots=True)
class TreeSample:
    """What one profile's tree uses at one scan."""

    profile: str
    pids: tuple[int, ...]  # root first
    tasks: int  # threads, zombies included: what pids.max counts
    rss_sum: int  # Σ RSS (+ swap when the host swaps): an upper bound of the tree's memory
    rss_max: int  # the largest single RSS: a floor of the tree's memory
    pss: int | None = None  # Σ (Pss + SwapPss), when measured

    @property
    def exact(self) -> bool:
        return self.pss is not None

    @property
    def memory_bytes(self) -> int:
        """The tree's memory: exact ``max(Σ PSS, largest RSS)`` when measured, else the upper bound."""
        return max(self.pss, self.rss_max) if self.pss is not None else self.rss_sum


def summarize(
    profile: str,
    members: Sequence[_Usage],
    pids: Sequence[int],
    *,
    swap: int = 0,
    pss: int | None = None,
) -> TreeSample:
    """A :class:`TreeSample` from the members' ``stat`` data (``swap``: Σ VmSwap when the host swaps)."""
    rss = [m.rss for m in members]
    return TreeSample(
        profile=profile,
        pids=tuple(pids),
        tasks=sum(m.threads for m in members),
        rss_sum=sum(rss) + swap,
        rss_max=max(rss, default=0),
        pss=pss,
    )


def needs_exact(sample: TreeSample, limits: Limits) -> bool:
    """Whether the sampler must measure PSS before :func:`check_tree` can judge memory."""
    return limits.memory_max is not None and sample.pss is None and sample.rss_sum >= EXACT_FRACTION * limits.memory_max


@dataclass(frozen=True, slots=True)
class Breach:
    """A tree over one of its limits: the profile is killed and restarted through backoff."""

    reason: Literal["memory_limit", "tasks_limit"]
    value: int
    limit: int

    def describe(self) -> str:
        if self.reason == "memory_limit":
            return f"memory_limit: tree uses {format_size(self.value)}, memory_max {format_size(self.limit)}"
        return f"tasks_limit: tree has {self.value} tasks, tasks_max {self.limit}"


def check_tree(sample: TreeSample, limits: Limits) -> Breach | None:
    """The breach, if any. Memory is judged only on an exact sample (see :func:`needs_exact`)."""
    if limits.tasks_max is not None and sample.tasks > limits.tasks_max:
        return Breach("tasks_limit", sample.tasks, limits.tasks_max)
    if limits.memory_max is not None and sample.pss is not None and sample.memory_bytes > limits.memory_max:
        return Breach("memory_limit", sample.memory_bytes, limits.memory_max)
    return None


@dataclass(frozen=True, slots=True)
class Pace:
    """Scan intervals (seconds) and what makes a tree hot."""

    base: float = 1.0
    fast: float = 0.1
    hot_tasks: float = 0.5  # share of tasks_max
    hot_memory: float = 0.8  # share of memory_max
    growth_min: int = 8  # tasks gained since the last scan ...
    growth_share: float = 0.1  # ... or this share of tasks_max, whichever is larger
    doubling_min: int = 4  # or at least this many tasks gained while the count at least doubled
    hold: float = 3.0  # stay fast this long after a tree was last hot (hysteresis)


def is_hot(sample: TreeSample, previous: TreeSample | None, limits: Limits, pace: Pace = Pace()) -> bool:
    """Whether this tree wants the fast pace."""
    if limits.tasks_max is not None:
        if sample.tasks >= pace.hot_tasks * limits.tasks_max:
            return True
        before = previous.tasks if previous is not None else sample.tasks
        grown = sample.tasks - before
        if grown >= max(pace.growth_min, math.ceil(pace.growth_share * limits.tasks_max)):
            return True
        if grown >= pace.doubling_min and sample.tasks >= 2 * before:  # exponential: a fork bomb's signature
            return True
    return limits.memory_max is not None and sample.memory_bytes >= pace.hot_memory * limits.memory_max


def next_scan(
    current: Mapping[str, TreeSample],
    previous: Mapping[str, TreeSample],
    limits: Mapping[str, Limits],
    *,
    now: float,
    hot_until: float = -math.inf,
    pace: Pace = Pace(),
) -> tuple[float | None, float]:
    """``(seconds until the next scan, new hot_until)``; pass ``hot_until`` back in next time.

    The delay is ``None`` when no running profile has a memory or tasks limit (then the loop
    schedules nothing: an idle daemon without limits never wakes up). Any hot tree keeps the fast
    pace until ``pace.hold`` seconds after it was last seen hot (``now``: monotonic): a fork bomb
    grows in bursts (everyone forks, then sleeps), and one quiet scan between two bursts must not
    drop the pace back to a second.
    """

    def watched_limit(n: str) -> bool:
        return n in limits and (limits[n].memory_max is not None or limits[n].tasks_max is not None)

    watched = [n for n in current if watched_limit(n)]
    if not watched:
        return None, hot_until
    if any(is_hot(current[n], previous.get(n), limits[n], pace) for n in watched):
        hot_until = now + pace.hold
    return (pace.fast if now < hot_until else pace.base), hot_until


def nice_for_weight(weight: int | None) -> int:
    """The nice value whose scheduler weight matches ``cpu.weight`` (100 = nice 0), for the watch
    mechanism. The kernel weighs nice n as 1024 / 1.25^n and ``cpu.weight`` 100 as 1024, so
    n = -log(w / 100) / log(1.25), clamped to -20..19. An approximation: nice applies per thread,
    ``cpu.weight`` to the whole group, and raising priority (n < 0) needs CAP_SYS_NICE."""
    if weight is None or weight == 100:
        return 0
    n = round(-math.log(weight / 100) / math.log(1.25))
    return max(-20, min(19, n))
