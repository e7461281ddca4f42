"""Each profile's crash domain and trust domain, for the loop: confinement, cgroups, trees, hangs.

The loop asks this one object everything about a child's domain, so that the rules live in their
own packages (:mod:`supervisor.isolation`: what a profile may reach; :mod:`supervisor.limits`:
how much of the machine its tree may use and whether it is alive) and the loop only says when:

* :meth:`Domains.prepare` before a spawn: the confinement plan and the command that applies it,
  the profile's cgroup created with its limits (or a reason the profile cannot start);
* :meth:`Domains.attach` right after the spawn: the child joins its cgroup;
* :meth:`Domains.kill_tree` for a stop's SIGKILL, a hang or a limit: the whole tree, escaped
  ``setsid`` descendants included (``cgroup.kill``, else freeze-and-kill over the tagged tree);
* :meth:`Domains.check_hung` on the hung timer, :meth:`Domains.scan` on the watch timer;
* :meth:`Domains.exit_cause` at an exit: the kernel's own word on an OOM kill or a pids limit;
* :meth:`Domains.fields` for ``status``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiles.printable import printable
from supervisor import limits as lim
from supervisor.isolation import install, shared_board
from supervisor.isolation.planning import Plan, PlanInputs, make_plan
from supervisor.isolation.probing import Probe, probe
from supervisor.isolation.shim_argv import shim_words, with_shim
from supervisor.layout import Layout
from supervisor.limits import cgroup, cgroup_io, procfs
from supervisor.limits import hung as hung_mod
from supervisor.limits import tree as tree_mod
from supervisor.limits.cgroup import Events
from supervisor.limits.hung import HungCheck
from supervisor.limits.tree import Breach, TreeSample
from supervisor.plan.model import Ident
from supervisor.plan.policy import ExitKind, limit_exit
from supervisor.settings import HungSettings, IsolationSettings, Limits

log = logging.getLogger("hermesd")


@dataclass(slots=True)
class _Tree:
    """What the domain layer remembers of one running child."""

    ident: Ident
    root: lim.ProcRoot | lim.CgroupRoot
    cgroup: str | None
    events: Events | None = None  # at spawn: the baseline for an OOM verdict
    start_mono: float = 0.0
    start_wall: float | None = None


@dataclass(slots=True)
class Prepared:
    argv: list[str]
    plan: Plan


@dataclass(frozen=True, slots=True)
class _Planned:
    """A profile's last plan, kept with what it was made from: a respawn with the same inputs (the
    usual case) reuses it, its ``status`` form and the shim's words (the plan encoded for the
    shim's command line; ``()`` when unconfined or not runnable), instead of planning again."""

    inputs: PlanInputs
    plan: Plan
    status: dict[str, Any]
    shim: tuple[str, ...]


@dataclass(slots=True)
class Domains:
    root: Path
    layout: Layout
    probe: Probe | None = None  # these three: set by start()
    cgroups: lim.Detection | None = None
    watcher: lim.TreeWatcher | None = None
    install_paths: tuple[Path, ...] = ()
    # Per profile, the confinement its gateway was last started under (status's ``isolation``): the
    # plan of the last spawn, or for an adopted gateway what its hermesd recorded at its spawn.
    isolation: dict[str, dict[str, Any]] = field(default_factory=dict)
    trees: dict[str, _Tree] = field(default_factory=dict)
    _samples: dict[str, TreeSample] = field(default_factory=dict)
    _hot_until: float = 0.0
    _plans: dict[str, _Planned] = field(default_factory=dict)

    def start(self, salt: bytes) -> None:
        """Once per daemon: what the kernel offers (confinement, cgroup v2), and the tree watcher
        (``salt``: the per-root salt that proves a tag was set by hermesd)."""

        self.probe = probe()
        self.cgroups = lim.setup(str(self.root))
        self.watcher = lim.TreeWatcher(str(self.root), salt=salt, exclude=(os.getpid(),))
        for problem in self.cgroups.problems:
            log.warning("cgroups: %s", problem)

        try:
            shared_board.migrate(self.root)
        except (shared_board.BoardNotMovedError, OSError) as exc:  # the profile's files: never the fleet's end
            log.warning("kanban board not moved to its shared folder: %s", printable(str(exc)))

    def _host(self) -> tuple[Probe, lim.Detection, lim.TreeWatcher]:
        """What :meth:`start` found; every spawn and adoption comes after it (a status request may not)."""
        if self.probe is None or self.cgroups is None or self.watcher is None:
            raise RuntimeError("Domains.start() has not run")
        return self.probe, self.cgroups, self.watcher

    def set_command(self, command: list[str] | None) -> None:

        self.install_paths = tuple(install.discover_install_paths(command)) if command else ()

    # ------------------------------------------------------------------------- spawn

    def prepare(self, name: str, home: Path, argv: list[str], env: Mapping[str, str], *,
                isolation: IsolationSettings, limits: Limits, other_homes: tuple[Path, ...],
                grants: tuple[tuple[Path, str], ...] = (), placeholders: tuple[Path, ...] = ()) -> Prepared | str:
        """The command to spawn for ``name`` under its confinement, or why it cannot be started."""
        facts, det, _ = self._host()
        inputs = plan_inputs(self.layout, name, home, env, probe=facts, isolation=isolation, other_homes=other_homes,
                             install_paths=self.install_paths, grants=grants, placeholders=placeholders,
                             check_owner=True)
        if isinstance(inputs, str):
            return inputs
        planned = self._plans.get(name)
        if planned is None or planned.inputs != inputs:  # make_plan is pure: equal inputs, equal plan
            plan = make_plan(inputs)
            shim = shim_words(plan) if plan.runnable else ()
            planned = self._plans[name] = _Planned(inputs, plan, plan.status_json(), shim)
        plan = planned.plan
        self.isolation[name] = planned.status
        if not plan.runnable:
            return f"isolation: {plan.reason}"
        try:
            cgroup_io.apply(cgroup.profile_plan(det, name, limits))
        except cgroup_io.CgroupError as exc:
            log.warning("profile %s: cgroup not prepared (%s); its limits are watched", name, exc)
        return Prepared(with_shim(planned.shim, argv), plan)

    def attach(self, name: str, ident: Ident, limits: Limits) -> None:
        """Right after the spawn, before the loop yields: the child joins its cgroup."""
        _, det, _ = self._host()
        d = cgroup.profile_dir(det, name)
        events = None
        if d is not None:
            try:
                cgroup_io.attach(d, ident.pid)
                events = cgroup_io.read_events(d)
            except cgroup_io.CgroupError as exc:
                log.warning("profile %s: PID %d not moved into its cgroup (%s)", name, ident.pid, exc)
                d = None
        if limits.cpu_weight and "cpu" not in det.controllers:
            lim.apply_nice([ident.pid], limits.cpu_weight)
        self.trees[name] = _tree(ident, d, events)

    def member_of(self, name: str, pid: int) -> bool | None:
        """Whether ``pid`` is in the cgroup of ``name``'s running gateway (``None``: the gateway has
        no cgroup, membership is not the kernel's to say)."""

        tree = self.trees.get(name)
        det = self.cgroups
        if tree is None or tree.cgroup is None or det is None or det.top is None:
            return None
        where = cgroup_io.current_cgroup(pid)
        if where is None:
            return False
        return os.path.normpath(det.top.rstrip("/") + "/" + where.lstrip("/")) == os.path.normpath(tree.cgroup)

    def adopt(self, name: str, ident: Ident, isolation: dict[str, Any] | None = None) -> None:
        """A gateway found running at start-up: into its cgroup with its whole tree, if it has one.
        ``isolation``: the confinement it was started under, as recorded at its spawn (None: unknown)."""
        _, det, watcher = self._host()
        if isolation is not None:
            self.isolation[name] = isolation
        else:
            self.isolation.pop(name, None)
        d = cgroup.profile_dir(det, name)
        if d is not None:
            try:
                if cgroup_io.current_cgroup(ident.pid) != d:
                    members = watcher.rescan_members(name, lim.ProcRoot(ident.pid, ident.start_time))
                    cgroup_io.apply(cgroup.profile_plan(det, name, lim.Limits()))
                    cgroup_io.attach_all(d, [p for p, _ in members] or [ident.pid])
            except cgroup_io.CgroupError as exc:
                log.warning("profile %s: adopted PID %d not moved into its cgroup (%s)", name, ident.pid, exc)
                d = None
        self.trees[name] = _tree(ident, d, cgroup_io.read_events(d) if d else None)

    # ------------------------------------------------------------------------- ends

    def kill_tree(self, name: str, ident: Ident) -> list[int]:
        """SIGKILL everything of ``name``'s current tree (the gateway and what it started)."""
        tree = self.trees.get(name)
        if tree is None or tree.ident != ident or self.watcher is None:
            return []
        return self.watcher.kill(name, tree.root)

    def sweep(self, name: str) -> list[int]:
        """What is left in ``name``'s cgroup once its gateway has exited, killed before anything is
        spawned for the profile again (escaped ``setsid`` descendants, processes that cleared their
        environment, detached helpers alike: membership is the kernel's, not a tag's).

        Called synchronously at the exit: one read of ``cgroup.events`` when nothing is left, one
        write of ``cgroup.kill`` otherwise, so the restart path stays free of any ``/proc`` scan.
        Returns the PIDs that were listed (empty: no cgroup, or nothing left)."""

        d = cgroup.profile_dir(self.cgroups, name) if self.cgroups is not None else None
        if d is None or cgroup_io.populated(d) is False or not os.path.isdir(d):
            return []
        pids = cgroup_io.procs(d)
        try:
            cgroup_io.kill(d)
        except cgroup_io.CgroupError as exc:
            log.warning("profile %s: leftovers in %s not killed (%s)", name, d, exc)
            return []
        if pids:
            log.info("profile %s: killed %d leftover process(es) in its cgroup: %s", name, len(pids), pids)
        return pids

    def sweep_all(self) -> list[int]:
        """At hermesd's own exit (without ``--keep-children``): every profile's cgroup and every
        kanban worker's, killed (the exact counterpart of the tag sweep)."""

        det = self.cgroups
        if det is None or not det.usable or det.base is None:
            return []
        try:
            entries = sorted(os.listdir(det.base))
        except OSError:
            return []
        killed: list[int] = []
        for entry in entries:
            path = os.path.join(det.base, entry)
            if not entry.startswith(cgroup.SWEPT_PREFIXES) or not os.path.isdir(path):
                continue
            if cgroup_io.populated(path) is False:
                continue
            killed += cgroup_io.procs(path)
            try:
                cgroup_io.kill(path)
            except cgroup_io.CgroupError as exc:
                log.warning("leftovers in %s not killed (%s)", path, exc)
        return killed

    def end_exec_sessions(self, name: str) -> list[int]:
        """The operator stops ``name``: its ``hermesd exec`` sessions (aliases included) end with it,
        and with them whatever their commands left running (a ``setsid`` + ``env -i`` orphan is
        still the session cgroup's). Returns the PIDs killed."""
        det = self.cgroups
        if det is None or det.base is None:
            return []
        try:
            entries = os.listdir(det.base)
        except OSError:
            return []
        killed: list[int] = []
        for d in cgroup.sessions_of(det, entries, "exec", name):
            try:
                if cgroup_io.populated(d) is not False:
                    killed += cgroup_io.procs(d)
                    cgroup_io.kill(d)
                cgroup_io.remove(d, timeout=1.0)  # its keeper, if alive, finds it gone: nothing left to end
            except (cgroup_io.CgroupError, OSError) as exc:
                log.warning("profile %s: exec session %s not ended (%s)", name, d, exc)
        if killed:
            log.info("profile %s stopped: ended its exec session(s), %d process(es): %s", name, len(killed), killed)
        return killed

    def end_session(self, kind: str, name: str, keeper: int) -> None:
        """A session's keeper has ended (a kanban worker's, maybe killed before it could clean up):
        kill what is left in the session's cgroup and remove it."""

        d = cgroup.session_dir(self.cgroups, kind, name, keeper) if self.cgroups is not None else None
        if d is None or not os.path.isdir(d):
            return
        try:
            if cgroup_io.populated(d) is not False:
                cgroup_io.kill(d)
            cgroup_io.remove(d, timeout=1.0)
        except cgroup_io.CgroupError as exc:
            log.warning("kanban: %s not cleared (%s)", d, exc)

    def exit_cause(self, name: str, ident: Ident) -> ExitKind | None:
        """At an exit: did the kernel kill the tree for a limit (cgroup events since the spawn)?"""
        tree = self.trees.get(name)
        if tree is None or tree.ident != ident or tree.cgroup is None or tree.events is None:
            return None
        after = cgroup_io.read_events(tree.cgroup)
        hit = cgroup.limit_hit(tree.events, after)
        tree.events = after
        return limit_exit(hit)

    def forget(self, name: str, ident: Ident) -> None:
        tree = self.trees.get(name)
        if tree is not None and tree.ident == ident:
            del self.trees[name]
            self._samples.pop(name, None)

    # ------------------------------------------------------------------------- watching

    def check_hung(self, name: str, home: Path, hung: HungSettings) -> HungCheck | None:
        """One hung evaluation, or ``None`` when the child is not ours any more."""
        tree = self.trees.get(name)
        if tree is None:
            return None
        state, beat, gstate = hung_mod.observe(home, tree.ident.pid)
        return hung_mod.check_hung(pid=tree.ident.pid, start_mono=tree.start_mono, start_wall=tree.start_wall,
                                   proc_state=state, beat=beat, settings=hung, now_mono=time.monotonic(),
                                   now_wall=time.time(), gateway_state=gstate)

    def scan(self, limits: Mapping[str, Limits]) -> tuple[dict[str, Breach], float | None]:
        """One watch scan of the running profiles whose limits no cgroup enforces: breaches and the next delay."""
        wl = {n: lim.watch_limits(limits[n], self.cgroups) for n in limits if n in self.trees}
        wl = {n: v for n, v in wl.items() if not v.empty}
        if not wl or self.watcher is None:
            self._samples.clear()
            return {}, None
        roots = {n: self.trees[n].root for n in wl}
        samples = self.watcher.scan(roots, wl)
        breaches = {n: b for n, s in samples.items() if (b := tree_mod.check_tree(s, wl[n])) is not None}
        delay, self._hot_until = tree_mod.next_scan(samples, self._samples, wl, now=time.monotonic(),
                                                    hot_until=self._hot_until)
        self._samples = dict(samples)
        return breaches, delay

    # ------------------------------------------------------------------------- status

    def fields(self, name: str, limits: Limits) -> dict[str, object]:
        """``memory_bytes``, ``tasks``, ``limits``, ``mechanism`` and ``isolation`` of one profile."""
        tree = self.trees.get(name)
        usage = lim.usage(name, tree.root, self.watcher) if tree is not None and self.watcher is not None else None
        out = lim.status_fields(usage, limits, self.cgroups)
        out["isolation"] = self.isolation.get(name)
        return out

    def teardown(self) -> None:
        if self.cgroups is not None:
            lim.teardown(self.cgroups)


def gateway_plan(layout: Layout, name: str, home: Path, env: Mapping[str, str], *, probe: Probe,
                 isolation: IsolationSettings, other_homes: tuple[Path, ...], install_paths: tuple[Path, ...],
                 grants: tuple[tuple[Path, str], ...] = (), placeholders: tuple[Path, ...] = (),
                 check_owner: bool = False) -> Plan | str:
    """``name``'s confinement plan, for its gateway and for ``hermesd exec`` alike, or why there is none:
    its isolation user is unknown, or (``check_owner``, as root) cannot use the profile's files."""
    inputs = plan_inputs(layout, name, home, env, probe=probe, isolation=isolation, other_homes=other_homes,
                         install_paths=install_paths, grants=grants, placeholders=placeholders, check_owner=check_owner)
    return inputs if isinstance(inputs, str) else make_plan(inputs)


def plan_inputs(layout: Layout, name: str, home: Path, env: Mapping[str, str], *, probe: Probe,
                isolation: IsolationSettings, other_homes: tuple[Path, ...], install_paths: tuple[Path, ...],
                grants: tuple[tuple[Path, str], ...] = (), placeholders: tuple[Path, ...] = (),
                check_owner: bool = False) -> PlanInputs | str:
    """What :func:`gateway_plan` plans from, read now (the user, the install, the root's links), or
    why there is no plan."""
    user = None
    if isolation.user:
        try:
            user = install.resolve_user(isolation.user)
        except (KeyError, ValueError, OSError) as exc:
            return f"isolation user {isolation.user!r}: {exc}"
        if check_owner and os.geteuid() == 0:
            from supervisor.isolation import ownership  # lazy: hermesd exec, which plans too, never checks (~8 ms)

            trouble = ownership.problems(home, user)
            if trouble:
                fix = (f"; run '{ownership.fix_command(name, user, layout.root)}' (it shows what it changes and "
                       "asks first)" if any(t.startswith(str(home)) for t in trouble) else "")
                return f"isolation user {user.name}: {'; '.join(trouble)}{fix}"
    code = install_paths + tuple(p for p in install.environment_code_paths(env) if p not in install_paths)
    return PlanInputs(
        root=layout.root, profile=name, home=home, probe=probe, settings=isolation,
        hermesd_dir=layout.dir, control_socket=layout.socket, other_homes=other_homes,
        install_paths=code, lock_dir=install.credential_lock_dir(env),
        user_home=Path(env["HOME"]) if env.get("HOME") else None, user_ids=user,
        kanban_layout=shared_board.layout(layout.root), grants=grants, placeholders=placeholders,
        linked=install.linked_channels(layout.root),
    )


def _tree(ident: Ident, d: str | None, events: Events | None) -> _Tree:
    """``ident``'s tree (cgroup ``d``'s members, else its descendants) and when it started, on the
    monotonic clock (now, if it is already gone) and the wall clock."""
    root = lim.CgroupRoot(d) if d is not None else lim.ProcRoot(ident.pid, ident.start_time)
    clock = procfs.start_clock(ident.pid)
    return _Tree(ident, root, d, events, *((clock[0], clock[1]) if clock is not None else (time.monotonic(), None)))
