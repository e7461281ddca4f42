"""Hard crash domains: hung detection, per-profile limits over the whole process tree.

Everything below the planner/loop line: settings, pure decisions, and thin I/O. The loop calls:

**Configuration** (the hermesd.yaml reader; values already constructed from YAML nodes)::

    spec = limits_config.parse_limits(value, "limits")              # top level; and "profiles.<p>.limits"
    after = limits_config.parse_hung_after(value, "hung_after")     # None = off
    grace = limits_config.parse_startup_grace(value, "startup_grace")
    limits = limits_config.merge_limits(top_spec, own_spec)         # -> Limits, per profile
    hung = limits_config.merge_hung(top_after, top_grace, own_after, own_grace)  # leave absent keys out
    # errors: limits_config.LimitsConfigError (a ValueError): str() == "<key>: <problem>", .key, .problem

**Start-up** (once; again on ``hermesd reload`` is harmless)::

    det = setup(str(root))        # detect cgroup v2, apply the setup plan; never raises
    watcher = TreeWatcher(str(root))

**Spawn / adopt** a profile's gateway (``pid``, ``start`` ticks from ``child.spawn``'s Ident)::

    d = cgroup.profile_dir(det, name)             # None: no cgroups, use ProcRoot(pid, start)
    cgroup_io.apply(cgroup.profile_plan(det, name, limits))   # before the spawn (idempotent)
    cgroup_io.attach(d, pid)                      # right after the spawn, before yielding
    # adoption: if cgroup_io.current_cgroup(pid) is not d's path (an older hermesd ran without
    # cgroups), cgroup_io.attach_all(d, [p for p, _ in watcher.rescan_members(name, ProcRoot(pid, start))])
    before = cgroup_io.read_events(d)             # baseline for limit_hit
    root = CgroupRoot(d) if d is not None else ProcRoot(pid, start)
    if limits.cpu_weight and "cpu" not in det.controllers: apply_nice([pid], limits.cpu_weight)
    start_mono, start_wall, _ = procfs.start_clock(pid)        # for hung detection
    # then run the hung evaluation below once, right away

**Hung timer** (per running profile, at the ``next_check`` the last evaluation returned;
monotonic clock, i.e. ``loop.call_at``)::

    state, beat, gstate = hung.observe(home, pid)
    res = hung.check_hung(pid=pid, start_mono=..., start_wall=..., proc_state=state, beat=beat,
                          settings=hung_settings, now_mono=time.monotonic(), now_wall=time.time(),
                          gateway_state=gstate)
    if res.hung:  kill the tree at once (watcher.kill; a frozen loop cannot handle SIGTERM and
                  a stopped one would not see it), exit record from res.hung, restart through
                  the normal backoff (classify as a crash)
    elif res.next_check is not None: schedule the next evaluation at res.next_check
    # skip while hermesd itself is stopping the profile (the stop timeout governs then)

**Watch timer** (only while some running profile has a limit the kernel does not enforce)::

    wl = {n: watch_limits(limits[n], det) for n in running}
    samples = watcher.scan(roots, wl)               # roots: {name: ProcRoot | CgroupRoot}
    for n, s in samples.items():
        if (b := tree.check_tree(s, wl[n])): watcher.kill(n, roots[n]), exit record from b, backoff
    delay, hot_until = tree.next_scan(samples, previous_samples, wl, now=time.monotonic(),
                                      hot_until=hot_until)       # delay None: stop the timer

**cgroup events** (cgroup mode): inotify ``IN_MODIFY`` on ``<d>/memory.events`` and
``<d>/pids.events``, and at every gateway exit::

    hit = cgroup.limit_hit(before, after := cgroup_io.read_events(d)); before = after
    # "tasks_limit" while running: watcher.kill + restart; at exit: the exit record's reason

**Kill a tree** (hung, breach, and the SIGKILL step of a stop)::

    watcher.kill(name, root)      # cgroup.kill (or freeze+kill) for CgroupRoot, else freeze_and_kill

**Status** (on a status request, per running profile)::

    fields = status_fields(usage(name, root, watcher), limits, det)
    # {memory_bytes, tasks, limits, mechanism: "cgroup"|"watch"|None, limit_mechanisms}

**Doctor**: ``cgroup.doctor_findings(detect_only(str(root)), limits_configured=...)``,
``cgroup.memory_pressure_findings(usage_by_profile, limits_by_profile, procfs.host_memory_total())``,
``limits_config.hung_after_warning(hung_after)``.

**Profile removed**: ``cgroup_io.remove(d)`` once its processes are gone. **Daemon exit**:
``teardown(det)`` removes the empty profile cgroups (and the base hermesd created as root); with
``--keep-children`` the populated ones stay for the next hermesd, which finds them by name.
"""

from __future__ import annotations

import os
from dataclasses import replace

from supervisor.limits import cgroup, cgroup_io
from supervisor.limits.cgroup import Detection
from supervisor.limits.limits_config import Limits
from supervisor.limits.watcher import CgroupRoot, ProcRoot, TreeUsage, TreeWatcher, apply_nice, tree_usage

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
    exact watch figure over the tree's members (a fresh scan: ~3-5 ms).
    """
    if isinstance(root, CgroupRoot):
        mem, tasks = cgroup_io.usage(root.path)
        pids = cgroup_io.procs(root.path)
        if mem is not None and tasks is not None:
            return TreeUsage(memory_bytes=mem, tasks=tasks, processes=len(pids))
        return tree_usage(pids)
    return tree_usage(p for p, _ in watcher.rescan_members(name, root))


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
