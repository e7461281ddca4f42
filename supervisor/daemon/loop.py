"""The daemon: one asyncio loop that turns the world into planner events and performs its actions.

Modelled on gunicorn's arbiter: signals become loop callbacks, each source of events has one
``handle_*`` method, and every decision is the planner's (:mod:`supervisor.plan.planner`). This
side only does I/O:

* events in: ``SIGCHLD`` and ``waitpid`` for our children, a pidfd per adopted child and per
  foreign gateway, inotify batches (profiles added or edited, a gateway's state file written),
  timers, control requests (:mod:`supervisor.control.server`), ``SIGTERM``/``SIGINT``/``SIGHUP``;
* actions out: :meth:`Daemon.execute` performs spawns, signals (only ever through a verified,
  pinned pidfd), tree kills, timers, saves and events.

The loop is the only code that changes its own state. Its helpers are given what they need and
hand back results: :class:`~supervisor.daemon.launch.Launcher` starts a gateway and says how it
went, the :class:`~supervisor.daemon.guard.Guard` and :class:`~supervisor.daemon.serving.Serving`
report verdicts and findings through ``handle_kill``, ``handle_served``, ``handle_rival`` and
``handle_rewrite``, adoption returns a
:class:`~supervisor.daemon.adoption.Survey` the loop takes over, and control requests reach the
loop through the :class:`~supervisor.daemon.requests.Operations` it implements. The settings in
force are one :class:`~supervisor.daemon.effective.InForce`, rebuilt whenever hermesd.yaml is loaded.

Reading a profile's files (bounded, :mod:`profiles.snapshot`) runs in one worker thread, so a
slow or hostile file never delays another profile's respawn or a control request; its result
comes back to the loop as one planner event.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from profiles.names import DEFAULT_PROFILE
from profiles.snapshot import ProfileFacts
from profiles.upstream import files as gf
from supervisor import __version__
from supervisor import config as config_mod
from supervisor.control.server import ControlServer, quiet_loop_errors
from supervisor.daemon import adoption, effective, exit_report, interpreter, requests
from supervisor.daemon.apiwatch import ApiWatch
from supervisor.daemon.board import Board
from supervisor.daemon.domains import Domains
from supervisor.daemon.guard import Guard
from supervisor.daemon.later import Later
from supervisor.daemon.launch import LOG_SPACE_MIN, Launcher, NotStarted
from supervisor.daemon.pinned import Pinned, close_in
from supervisor.daemon.reads import Reads
from supervisor.daemon.report import Report, summary
from supervisor.daemon.selfcheck import SelfCheck
from supervisor.daemon.serving import Serving
from supervisor.layout import Layout
from supervisor.observe.observer import Observer
from supervisor.plan import model as m
from supervisor.plan.model import Ident
from supervisor.plan.planner import Planner
from supervisor.plan.policy import ExitKind
from supervisor.plan.verdict import Hold, HoldKind
from supervisor.processes import child, identity, logs
from supervisor.processes.notify import Notifier
from supervisor.watch.choose import make_watcher
from supervisor.watch.classify import FsEvents, Watcher

log = logging.getLogger("hermesd")

HOUSEKEEPING_S = 5.0


class Daemon:
    """One root's supervision: the loop's state and its ``handle_*`` methods. Its caller holds the
    root's lock and gives it its one reader thread, ``pool`` (:mod:`supervisor.cli.run`)."""

    def __init__(self, root: Path, pool: ThreadPoolExecutor, env: Mapping[str, str] | None = None, *,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 rng: random.Random | None = None) -> None:
        self.root = root.resolve()
        self.layout = Layout(self.root)
        self.env = dict(os.environ if env is None else env)
        self.wall = wall
        self.planner = Planner(clock=clock, wall=wall, rng=rng)
        self.in_force = effective.build(config_mod.Config())  # until hermesd.yaml is read
        self.config_problem: str | None = None  # why the last hermesd.yaml was rejected
        self.state_problem: str | None = None
        self.log_problems: dict[str, str | None] = {}  # per profile, why its log cannot be written (shown as is)
        self.ready = False
        self.boot = ""
        self.salt = b""
        self.notifier = Notifier.from_env(self.env)
        self.observer = Observer(self.root, env=self.env, version=__version__)
        self.pool = pool  # the one reader thread (see supervisor.cli.run), perhaps already asking the interpreter
        self.pinned = Pinned(lambda fd: self.later.run(functools.partial(close_in, self.pool, fd)))
        self.timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self.domains = Domains(self.root, self.layout)
        self.own = SelfCheck()  # hermesd's own limits and scheduling, kept as they started
        profiles = self.planner.profiles
        self.guard = Guard(self.domains, profiles, lambda name: self.in_force.of(name), self.handle_kill)
        self.board = Board(self.root, self.env, self.layout, self.domains, profiles, lambda: self.in_force)
        self.serving = Serving(self.root, self.pool, profiles, self.pinned.holds, self, self.spawn_task)
        self.apiwatch = ApiWatch(self.pool, profiles, self.spawn_task)  # whether each API server answers
        self.requirements = interpreter.Requirements(self.root, self.env, self.pool, profiles, lambda: self.in_force)
        self.reads = Reads(self.pool, profiles, lambda: self.salt, lambda: self.in_force.line, self.handle_read,
                           self.spawn_task)
        self.launcher = Launcher(self.root, self.layout, self.env, self.domains, wall)
        self.report = Report(self.root, self.planner, self.domains, self.serving, self.apiwatch, self.requirements,
                             self.own, self.log_problems, wall)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: asyncio.Event | None = None
        self._watcher: Watcher | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._save_pending = False
        self._seq = 0
        self.later = Later()  # bookkeeping held until the step's spawns are done

    # ------------------------------------------------------------------------- lifetime

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def run(self) -> int:
        """Supervise until told to stop; returns the process exit code."""
        self._loop = loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        os.chdir("/")  # never pin a mount point or a profile folder that may be deleted
        child.become_subreaper()
        self.own.start()
        self.boot = identity.boot_id()
        self.salt = self.layout.salt()
        loop.set_exception_handler(quiet_loop_errors)
        loop.add_signal_handler(signal.SIGCHLD, self.handle_sigchld)
        loop.add_signal_handler(signal.SIGTERM, self.handle_shutdown_signal, "SIGTERM")
        loop.add_signal_handler(signal.SIGINT, self.handle_shutdown_signal, "SIGINT")
        loop.add_signal_handler(signal.SIGHUP, self.handle_reload_signal)
        # A burst of SIGCHLDs can fill asyncio's wakeup pipe; one pending byte is enough to wake
        # the loop, so a full pipe is not worth a warning per signal.
        signal.set_wakeup_fd(signal.set_wakeup_fd(-1), warn_on_full_buffer=False)
        # Requests are answered from the first moment, so a stop typed during start-up wins.
        self.observer.open()
        server = ControlServer(self.layout.socket, requests.handlers(self, self.board.handlers()),
                               on_request=lambda verb, ok: self.observer.control_request(verb, "ok" if ok else "error"))
        await server.start()
        self._emit({"type": "daemon_started", "profile": None, "version": __version__, "root": str(self.root)})
        self.domains.start(self.salt)
        await self.load_config(initial=True)
        self.list_profiles()
        await asyncio.gather(*(self.reads.read(n) for n in list(self.planner.profiles)))
        self._take_over(adoption.survey(self.root, self.layout, self.boot,
                                        {n: p.home for n, p in self.planner.profiles.items() if p.present}))
        self.execute(self.planner.start())
        self._watcher = watcher = make_watcher(self.root, self.handle_fs_events)
        self._follow()
        self.handle_sigchld()  # anything that died while we were starting
        self.ready = True
        await self.observer.start(status=self.status)
        log.info("ready: %s", summary(self.planner))
        self.notifier.ready(summary(self.planner))
        cancel_watchdog = self.notifier.schedule_watchdog(loop)
        loop.call_later(HOUSEKEEPING_S, self.handle_housekeeping)
        await self._done.wait()
        self.board.close()
        if not self.planner.keep_children:
            adoption.final_sweep(self.root, self.salt, self.domains, self.handle_sigchld)
        cancel_watchdog()
        watcher.close()
        server.close()
        await self.observer.aclose()
        if not self.planner.keep_children:
            self.domains.teardown()
        self.save_now()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        return 0

    def _running(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "the daemon's loop is not running"
        return self._loop

    async def load_config(self, *, initial: bool = False, changed: bool = False) -> bool:
        """(Re)read hermesd.yaml and build the settings in force from it; on error keep the last good
        ones and say why. ``changed``: the file changed on disk; a rewrite that changes no setting
        (hermesd's own empty file, created when the first confined gateway starts; an editor saving
        twice) is then not a reconfiguration: nothing is re-applied or counted, one line says so."""
        try:
            in_force = await effective.load(self.layout, self.env, self.pool, self.domains.probe)
        except config_mod.ConfigError as exc:
            self.config_problem = str(exc)
            log.error("%s%s", exc, "" if initial else " (keeping the previous configuration)")
            self._emit({"type": "config_rejected", "profile": None, "error": str(exc)})
            if initial:  # no good configuration yet: start nothing rather than guess
                self._apply(effective.build(self.in_force.config, root_hold=Hold(
                    HoldKind.NO_CONFIG, f"no valid hermesd.yaml yet: {exc}")))
            return False
        if changed:
            if self.config_problem is None and in_force == self.in_force:
                log.info("hermesd.yaml rewritten: no setting changed")
                return True
            log.info("hermesd.yaml changed")
        self.config_problem = None
        if in_force.command is not None:
            self.domains.set_command(list(in_force.command))
        await self.board.sync(in_force)  # the dispatcher's launcher exists before it may be spawned
        reread = not initial and in_force.line != self.in_force.line
        self._apply(in_force)
        if reread:  # another release reads the same files differently: what each profile claims may change
            log.info("hermes-agent %s reads profiles by the %s rules: reading every profile again",
                     in_force.release.version, in_force.line.name)
            self.reads.refresh([n for n, p in self.planner.profiles.items() if p.present])
        if not initial and in_force.command is not None:
            self.spawn_task(self.requirements.check([n for n, p in self.planner.profiles.items() if p.facts]))
        await self.observer.reconfigure(in_force.config.observe_settings())
        self._emit({"type": "config_applied", "profile": None})
        return True

    def _apply(self, in_force: effective.InForce) -> None:
        self.in_force = in_force
        self.execute(self.planner.set_settings(in_force.planner, in_force.root_hold))

    def _take_over(self, found: adoption.Survey) -> None:
        """Take over what a previous hermesd of this root left: its history, its running gateways (a stop
        or restart it had begun is issued again), the ends of those that died while nobody watched, and
        the leftovers of dead gateways, killed."""
        self.state_problem = found.problem
        for h in found.history:
            self.planner.restore(h.name, h.home, present=h.present, restarts=h.restarts, failures=h.failures,
                                 last_exit=h.last_exit, down=h.down)
        for s in found.survivors:
            fd = identity.open_pidfd(s.ident)
            if fd is None:
                continue
            self.pinned.adopt(s.name, s.ident, fd, self.handle_adopted_exit)
            self.domains.adopt(s.name, s.ident, isolation=s.isolation)
            self.guard.start(s.name)
            self.execute(self.planner.adopt(s.name, s.home, s.ident, s.started_wall or self.wall(),
                                            stopping=s.stopping, then_restart=s.then_restart, code=s.code))
            adoption.kill_duplicates(s)
        for r in found.recorded:
            p = self.planner.profiles.get(r.name)
            if p is not None and p.child is None:
                self.execute(self.planner.ended_while_down(r.name, r.ident, r.started_wall or self.wall(),
                                                           stopping=r.stopping, then_restart=r.then_restart))
        adopted = self.pinned.adopted()
        # A profile whose gateway did not survive hermesd's absence: what is left in its cgroup is a
        # dead gateway's (membership is the kernel's; an adopted gateway's cgroup is left alone).
        for name in (set(self.planner.profiles) | found.saved) - set(adopted.values()):
            self.domains.sweep(name)
        adoption.kill_leftovers(self.root, self.salt, found.tagged, set(adopted))

    # ------------------------------------------------------------------------- profiles and files

    def list_profiles(self) -> None:
        """Compare the profiles folder with what the planner knows; read the files of new ones."""
        try:
            served = self.serving.discover(self.in_force.contract)  # as the installed release defines a profile
        except OSError as exc:
            log.error("cannot list profiles under %s: %s", self.root, exc)
            return
        new = [n for n, _ in served if (p := self.planner.profiles.get(n)) is None or not p.present]
        self.execute(self.planner.set_served([(n, Path(h)) for n, h in served]))
        if self.ready:
            self.reads.refresh(new)
            self._follow()

    async def handle_read(self, facts: ProfileFacts) -> None:
        """A profile's files were read: to the planner, and which of its platforms lack a library."""
        p = self.planner.profiles.get(facts.name)
        self.serving.compare(p.facts if p is not None else None, facts)
        self.execute(self.planner.set_facts(facts.name, facts))
        await self.requirements.check([facts.name])

    def spawn_task(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = self._running().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _follow(self) -> None:
        if self._watcher is not None:
            self._watcher.follow([*(p.home for p in self.planner.profiles.values() if p.present),
                                  *self.serving.candidates])

    # ------------------------------------------------------------------------- actions

    def execute(self, actions: list[m.Action]) -> None:
        """Perform the planner's actions, in order (a spawn's outcome is reported back at once)."""
        with self.later.batch():  # a spawn comes before the writing about what led to it
            for a in actions:
                if isinstance(a, m.Spawn):
                    self._spawn(a.name)
                elif isinstance(a, m.Signal):
                    self._signal(a)
                    if a.planned:  # hermesd stops or restarts this profile: its kanban workers end too
                        self.board.stop_workers(a.name, "stopped")
                elif isinstance(a, m.KillTree):
                    self.board.stop_workers(a.name, "killed")
                    self.pinned.kill_group(a.ident)
                    self.domains.kill_tree(a.name, a.ident)
                    child.kill_strays(self.root, a.name, keep=set(), salt=self.salt)
                elif isinstance(a, m.Release):  # SIGKILLed and still there: stop waiting for it
                    self.pinned.release(a.ident)
                    self.guard.stop(a.name)
                    self.domains.forget(a.name, a.ident)
                elif isinstance(a, m.Sweep):
                    self.domains.sweep(a.name)  # its cgroup, exact and cheap: before a respawn joins it
                    self._running().call_soon(self.handle_strays, a.name)  # the /proc tag scan: after a respawn
                elif isinstance(a, m.Schedule):
                    self._cancel(a.name, a.timer)
                    self.timers[(a.name, a.timer)] = self._running().call_later(a.delay, self.handle_timer,
                                                                                a.name, a.timer)
                elif isinstance(a, m.Cancel):
                    self._cancel(a.name, a.timer)
                elif isinstance(a, m.WatchForeign):
                    self.pinned.watch_foreign(a.name, a.pid, self.handle_foreign_exit)
                elif isinstance(a, m.Save):
                    self.save_soon()
                elif isinstance(a, m.Emit):
                    self._emit(a.event)
                elif isinstance(a, m.Finish) and self._done is not None:
                    self._done.set()

    def _spawn(self, name: str) -> None:
        p = self.planner.profiles[name]
        foreign = identity.occupant(p.home, name)
        if foreign is not None and not self.pinned.holds(foreign.pid):
            self.execute(self.planner.foreign(name, foreign.pid))
            return
        others = tuple(q.home for n, q in self.planner.profiles.items() if n != name and q.present)
        out = self.launcher.launch(name, p.home, self.in_force, salt=self.salt, others=others,
                                   kanban=self.board.extras(name, others), later=self.later.run)
        if isinstance(out, NotStarted):
            self.execute(self.planner.spawn_refused(name, out.reason) if out.refused
                         else self.planner.spawn_failed(name, out.reason))
        else:
            self.pinned.own(name, out.ident, out.fd)
            self.execute(self.planner.spawned(name, out.ident, output_discarded=out.output_discarded,
                                              argv0=out.argv0, code=out.code, started_wall=out.started_wall))
            self.guard.start(name)

    def _signal(self, a: m.Signal) -> None:
        if not self.pinned.pins(a.ident):  # the planner only names children we pinned: anything else is a bug
            log.error("profile %s: refusing to signal PID %d: not a pinned child", a.name, a.ident.pid)
            return
        p = self.planner.profiles.get(a.name)
        if a.planned and p is not None:
            with contextlib.suppress(OSError):
                gf.write_planned_stop_marker(p.home, a.ident.pid, a.ident.start_time)
        self.pinned.signal(a.ident, a.signal)

    def _cancel(self, name: str, which: str) -> None:
        handle = self.timers.pop((name, which), None)
        if handle is not None:
            handle.cancel()

    # ------------------------------------------------------------------------- events

    def handle_sigchld(self) -> None:
        """Reap every exited child: our gateways and orphans we inherited as subreaper."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            entry = self.pinned.reaped(pid)
            if entry is None:
                self.observer.child_reaped(pid, status)  # a hook of ours, or an orphan: reaping it was the point
            elif os.WIFSIGNALED(status):
                self._child_gone(*entry, None, os.WTERMSIG(status))
            else:
                self._child_gone(*entry, os.waitstatus_to_exitcode(status), None)

    def handle_adopted_exit(self, name: str, ident: Ident) -> None:
        if self.pinned.adopted_ended(ident):
            self._child_gone(name, ident, None, None)

    def _child_gone(self, name: str, ident: Ident, code: int | None, sig: int | None) -> None:
        with self.later.batch():  # the respawn, then its namespace's teardown, the exit's line, the "started" line
            self.pinned.release(ident)
            self.guard.stop(name)
            p = self.planner.profiles.get(name)
            cause = self.domains.exit_cause(name, ident)
            self.domains.forget(name, ident)
            asked = p is not None and p.child is not None and p.child.ident == ident and p.child.stop_requested
            since = p.child.started_wall if p is not None and p.child is not None and p.child.ident == ident else 0.0
            r = exit_report.read_exit(self.env, self.layout, name, p.home if p is not None else None, ident, code=code,
                                      cause=cause, since=since, requested=asked)
            actions = self.planner.child_exited(name, ident, code, sig, r.gateway_state, r.restart_requested,
                                                killed_for=cause, detail=r.detail, unconfined=r.unconfined,
                                                stated=r.stated, replaced_by=r.replaced_by,
                                                startup_watchdog=r.startup_watchdog)
            if p is not None:
                kind = (p.last_exit or {}).get("kind") or "?"
                self.later.run(lambda: exit_report.note(self.layout, name, ident.pid, code, sig, kind))
            self.execute(actions)

    def handle_timer(self, name: str, which: str) -> None:
        self.timers.pop((name, which), None)
        self.execute(self.planner.timer(name, which))

    def handle_strays(self, name: str) -> None:
        """Kill what is left of a profile's previous gateway (escaped descendants, diagnostics)."""
        p = self.planner.profiles.get(name)
        keep = {p.child.ident.pid} if p is not None and p.child is not None else set()
        strays = child.kill_strays(self.root, name, keep=keep, salt=self.salt)
        if strays:
            log.info("profile %s: killed %d leftover process(es) %s", name, len(strays), strays)

    def handle_foreign_exit(self, name: str, fd: int | None) -> None:
        self.pinned.foreign_ended(name, fd)
        self.execute(self.planner.foreign_gone(name))

    def handle_kill(self, name: str, ident: Ident, kind: ExitKind, detail: str, **event: Any) -> None:
        """The guard's verdict: a hung gateway, or a tree over its limit."""
        self.execute(self.planner.kill_for(name, ident, kind, detail, **event))

    # What serving.py found: a child that serves other profiles too, a second gateway, a rewrite.

    def handle_served(self, name: str, pid: int, others: Sequence[str], source: str) -> None:
        self.execute(self.planner.served(name, pid, others, source))

    def handle_rival(self, name: str, pid: int, how: str) -> None:
        self.execute(self.planner.rival(name, pid, how))

    def handle_rewrite(self, file: Path, marker: Path | None) -> None:
        self._emit({"type": "config_rewritten", "profile": DEFAULT_PROFILE, "file": str(file),
                    "marker": str(marker) if marker is not None else None})

    def handle_fs_events(self, ev: FsEvents) -> None:
        """Profiles added, removed or edited, hermesd.yaml changed, a gateway wrote its state."""
        if ev.config:
            self.spawn_task(self.load_config(changed=True))
        if ev.rescan:
            self.list_profiles()
        if ev.profiles:
            self.reads.refresh(ev.profiles)
        for name in ev.states:
            self.check_gateway(name)
        self.serving.on_events(ev)

    def check_gateway(self, name: str) -> None:
        """Read what a profile's gateway reports: readiness and platforms of ours, or a foreign gateway."""
        p = self.planner.profiles.get(name)
        if p is None or not p.present:
            return
        if p.child is None:
            if not p.spawning:
                rec = identity.occupant(p.home, name)
                if rec is not None and not self.pinned.holds(rec.pid):
                    self.execute(self.planner.foreign(name, rec.pid))
            return
        gstate = gf.read_gateway_state(p.home)
        pid = gstate.get("pid")
        if pid == p.child.ident.pid:
            self.pinned.hold_namespace(p.child.ident)
            state = gstate.get("gateway_state")
            plats = gstate.get("platforms")
            self.execute(self.planner.gateway_reported(name, pid, state if isinstance(state, str) else None, {
                k: v for k, v in plats.items() if isinstance(k, str) and isinstance(v, dict)
            } if isinstance(plats, dict) else None))
        self.serving.check(name, gstate, self.in_force.contract)
        self.apiwatch.follow(name)

    def handle_shutdown_signal(self, name: str) -> None:
        log.info("%s received: stopping every child", name)
        self.shutdown(keep_children=False)

    def handle_reload_signal(self) -> None:
        self.spawn_task(self.reload())

    def handle_housekeeping(self) -> None:
        """Every few seconds: hermesd's own limits, log rotation, full log file systems, gateway
        states, a failed save. The next round is scheduled first: a step that fails (out of
        descriptors, say) must not end housekeeping for good."""
        if not self.planner.shutting_down:
            self._running().call_later(HOUSEKEEPING_S, self.handle_housekeeping)
        self.own.check()  # first: a starved descriptor budget fails every step below
        cfg = self.in_force.config
        problems = logs.housekeep(self.layout, list(self.planner.profiles), cfg.log_max_bytes, cfg.log_backups,
                                  LOG_SPACE_MIN)
        for name in set(self.log_problems) - set(self.planner.profiles):
            del self.log_problems[name]
        for p in self.planner.profiles.values():
            problem = problems.get(p.name)
            if problem and problem != self.log_problems.get(p.name):
                log.error("profile %s: %s", p.name, problem)
            self.log_problems[p.name] = problem
            if p.child is not None and not p.child.ready:
                self.check_gateway(p.name)  # in case a state-file event was missed
            self.serving.housekeeping(p.name, self.in_force.contract)
            self.apiwatch.follow(p.name)  # an adopted gateway may never write its state file again
        if self.state_problem:
            self.save_now()
        self.observer.housekeeping()
        if self.ready and self.notifier.enabled:
            self.notifier.status(summary(self.planner))

    # ------------------------------------------------------------------------- operator requests

    def present(self) -> list[str]:
        return [n for n, p in self.planner.profiles.items() if p.present]

    def start_profile(self, name: str) -> str:
        return self._decided(self.planner.request_start(name))

    def stop_profile(self, name: str) -> str:
        result = self._decided(self.planner.request_stop(name))
        self.domains.end_exec_sessions(name)  # a profile cannot outlive its stop in a session of its own
        return result

    async def restart_profile(self, name: str, *, graceful: bool, force: bool) -> str:
        await self.reads.read(name)  # judge the files as they are now, not as the last event left them
        return self._decided(self.planner.request_restart(name, graceful=graceful, force=force))

    async def check_profile(self, name: str) -> Hold | None:
        await self.reads.read(name)
        return self.planner.check_restart(name)

    def _decided(self, outcome: tuple[str, list[m.Action]]) -> str:
        result, actions = outcome
        self.execute(actions)
        return result

    async def reload(self) -> str | None:
        """Re-read hermesd.yaml and every profile's files (for file systems without change events)."""
        log.info("reload: re-reading hermesd.yaml and every profile's files")
        await self.load_config()
        self.list_profiles()
        await asyncio.gather(*(self.reads.read(n) for n, p in list(self.planner.profiles.items()) if p.present))
        return self.config_problem

    def shutdown(self, *, keep_children: bool) -> None:
        self.board.stop_all()
        self.apiwatch.close()
        self.guard.close()
        self.notifier.stopping("leaving the gateways running" if keep_children else "stopping every gateway")
        if keep_children:
            log.info("exiting and leaving children running for the next hermesd to adopt")
        self.execute(self.planner.shutdown(keep_children=keep_children))

    def status(self) -> dict[str, Any]:
        return self.report.document(ready=self.ready, in_force=self.in_force, config_problem=self.config_problem,
                                    state_problem=self.state_problem)

    def metrics(self) -> str:
        return self.observer.metrics_text(self.status())

    def record(self, event: dict[str, Any]) -> None:
        self._emit(event)

    # ------------------------------------------------------------------------- persistence and events

    def save_soon(self) -> None:
        if self._save_pending or self._loop is None:
            return
        self._save_pending = True
        self._loop.call_soon(self.save_now)

    def save_now(self) -> None:
        self._save_pending = False
        if self.ready and self.notifier.enabled:
            self.notifier.status(summary(self.planner))  # repeats are dropped by the notifier
        self.state_problem = adoption.save(self.layout, self.boot, self.planner, self.wall(),
                                           self.in_force.release.dist_info, self.state_problem, self.domains.isolation)

    def _emit(self, event: dict[str, Any]) -> None:
        """Journal, count and hand to hooks one event (stamped with time, sequence and our PID)."""
        self._seq += 1
        self.later.run(functools.partial(self.observer.record,  # stamped now, written after the step's spawns
                                         {"ts": self.wall(), "seq": self._seq, "daemon": os.getpid(), **event}))
