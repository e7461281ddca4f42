"""Hard crash domains: hung detection, per-profile limits over the whole process tree.

Everything below the planner/loop line (the daemon's side is :mod:`supervisor.daemon.domains` and
:mod:`supervisor.daemon.guard`): settings (:mod:`supervisor.settings`), pure decisions (:mod:`cgroup`,
:mod:`tree`, :mod:`hung`) and thin I/O (:mod:`cgroup_io`, :mod:`procfs`, :mod:`watcher`).

- Start-up: :func:`setup` (detect cgroup v2, apply the setup plan; never raises), one
  :class:`TreeWatcher`. Spawn: ``cgroup.profile_plan`` applied before the spawn, ``cgroup_io.attach``
  right after it, before the loop yields; without cgroups the tree is found from ``/proc``
  (:class:`ProcRoot`), and ``cpu_weight`` becomes a nice value (:func:`apply_nice`).
- Hung timer, per running profile, at the ``next_check`` the last evaluation returned
  (``hung.check_hung``): a hung gateway's tree is killed at once (a frozen loop cannot handle
  SIGTERM and a stopped one would not see it) and restarted through the normal backoff. Skipped
  while hermesd itself is stopping the profile: the stop timeout governs then.
- Watch timer, only while some running profile has a limit no enabled controller enforces
  (:func:`watch_limits`): ``TreeWatcher.scan``, ``tree.check_tree``, ``tree.next_scan`` (``None``:
  stop the timer, so an idle daemon without limits never wakes up).
- cgroup events: ``cgroup.limit_hit`` between two ``cgroup_io.read_events`` (inotify on
  ``memory.events``/``pids.events``, and at every exit) tells an OOM kill from a crash.
- Status: :func:`status_fields` of :func:`usage`. Daemon exit: :func:`teardown` removes the empty
  profile cgroups; with ``--keep-children`` the populated ones stay for the next hermesd, which
  finds them by name.
"""

from __future__ import annotations

import os
from dataclasses import replace

from supervisor.limits import cgroup, cgroup_io
from supervisor.limits.cgroup import Detection
from supervisor.limits.watcher import CgroupRoot, ProcRoot, TreeUsage, TreeWatcher, apply_nice, tree_usage
from supervisor.settings import Limits

__all__ = [
    "CgroupRoot",
    "Detection",
    "Limits",
    "ProcRoot",
    "TreeWatcher",
    "apply_nice",
    "detect_only",
    "setup",
    "status_fields",
    "teardown",
    "usage",
    "watch_limits",
]


def detect_only(root: str, facts: cgroup.HostFacts | None = None) -> Detection:
    """What cgroup v2 offers hermesd for ``root``, without changing anything (doctor, status).
    ``facts``: already gathered (tests); default: read this process's view."""
    inst = cgroup.instance_name(root)
    return cgroup.detect(facts if facts is not None else cgroup_io.gather_facts(inst), inst)


def setup(root: str, facts: cgroup.HostFacts | None = None) -> Detection:
    """Detect, then create the base and enable the controllers. A failure downgrades the
    detection (to fewer controllers or to no cgroups at all) with the error as a problem line,
    so the daemon always gets a Detection it can act on."""
    det = detect_only(root, facts)
    try:
        cgroup_io.apply(cgroup.setup_plan(det))
    except cgroup_io.CgroupError as exc:
        why = str(exc)
        det = replace(
            det,
            usable=False,
            controllers=frozenset(),
            missing=dict.fromkeys(cgroup.WANTED, why),
            problems=(*det.problems, why),
        )
    return det


def watch_limits(limits: Limits, det: Detection | None) -> Limits:
    """The part of ``limits`` hermesd must enforce by watching (what no enabled controller covers)."""
    ctl = det.controllers if det is not None else frozenset()
    return Limits(
        memory_max=None if "memory" in ctl else limits.memory_max,
        tasks_max=None if "pids" in ctl else limits.tasks_max,
        cpu_weight=None,  # never watched: cpu.weight or nice, set once
    )


def usage(name: str, root: ProcRoot | CgroupRoot, watcher: TreeWatcher) -> TreeUsage:
    """``memory_bytes`` and ``tasks`` for ``status``.

    cgroup with the memory and pids controllers: ``memory.current`` (what ``memory.max`` is
    compared with; it counts page cache the tree caused and not shared pages another cgroup
    touched first, so it can differ from the watch figure) and ``pids.current``. Otherwise the
    exact watch figure over the tree's members (a fresh scan: ~3-5 ms; each member's PSS is reused
    for a few seconds, :class:`~supervisor.limits.watcher.PssCache`).
    """
    if isinstance(root, CgroupRoot):
        both = cgroup_io.usage(root.path)
        pids = cgroup_io.procs(root.path)
        if both is not None:
            return TreeUsage(memory_bytes=both[0], tasks=both[1], processes=len(pids))
        return tree_usage(pids, pss=watcher.pss)
    return tree_usage((p for p, _ in watcher.rescan_members(name, root)), pss=watcher.pss)


def status_fields(usage_: TreeUsage | None, limits: Limits, det: Detection | None) -> dict[str, object]:
    """The per-profile ``status --json`` fields of the limits: ``memory_bytes`` and ``tasks`` of the
    whole tree (``None`` when not running), ``limits`` in force, ``mechanism`` (``cgroup``,
    ``watch``, or ``None`` without limits) and ``limit_mechanisms`` per limit."""
    return {
        "memory_bytes": usage_.memory_bytes if usage_ is not None else None,
        "tasks": usage_.tasks if usage_ is not None else None,
        "limits": limits.as_dict(),
        "mechanism": cgroup.mechanism(limits, det),
        "limit_mechanisms": cgroup.mechanisms(limits, det),
    }


def teardown(det: Detection, *, timeout: float = 1.0) -> list[str]:
    """At daemon exit: remove every empty ``profile-*`` cgroup, and the base if hermesd created it
    (root mode). Returns the cgroups left because they still hold processes (``--keep-children``)."""
    if not det.usable or det.base is None or not os.path.isdir(det.base):
        return []
    left = []
    for entry in sorted(os.listdir(det.base)):
        path = os.path.join(det.base, entry)
        if entry.startswith((*cgroup.SWEPT_PREFIXES, cgroup.EXEC_PREFIX)) and os.path.isdir(path):
            try:
                if not cgroup_io.remove(path, timeout=timeout if cgroup_io.populated(path) is False else 0.0):
                    left.append(path)
            except cgroup_io.CgroupError:
                left.append(path)
    if det.create_base and not left:
        try:
            cgroup_io.remove(det.base, timeout=timeout)
        except cgroup_io.CgroupError:
            left.append(det.base)
    return left
