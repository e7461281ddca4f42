"""The daemon: one asyncio loop that turns the world into planner events and performs its actions.

Modelled on gunicorn's arbiter: signals become loop callbacks, each source of events has one
``handle_*`` method, and every decision is the planner's (:mod:`supervisor.plan.planner`). This
side only does I/O:

* events in: ``SIGCHLD`` and ``waitpid`` for our children, a pidfd per adopted child and per
  foreign gateway, inotify batches (profiles added or edited, a gateway's state file written),
  timers, control requests (:mod:`supervisor.control.server`), ``SIGTERM``/``SIGINT``/``SIGHUP``;
* actions out: :meth:`Daemon.execute` performs spawns, signals (only ever through a verified,
  pinned pidfd), tree kills, timers, saves and events.

Reading a profile's files (bounded, :mod:`profiles.snapshot`) runs in one worker thread, so a
slow or hostile file never delays another profile's respawn or a control request; its result
comes back to the loop as one planner event. Adoption after a crash is start-up reading what
exists (:mod:`supervisor.daemon.adoption`), not remembering it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import resource
import signal
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from profiles.safeio import Beneath
from profiles.snapshot import ProfileFacts, read_profile
from profiles.upstream import files as gf
from supervisor import child, childspec, identity, logs
from supervisor import config as config_mod
from supervisor.control.server import ControlServer
from supervisor.daemon import adoption, interpreter, selfcheck, served_elsewhere
from supervisor.daemon.board import Board
from supervisor.daemon.domains import Domains, Prepared
from supervisor.daemon.guard import Guard
from supervisor.daemon.pidlock import PidLock
from supervisor.daemon.requests import summary
from supervisor.daemon.serving import Serving
from supervisor.layout import Layout
from supervisor.notify import Notifier
from supervisor.plan import model as m
from supervisor.plan.model import Ident
from supervisor.plan.planner import Planner
from supervisor.plan.verdict import Hold, HoldKind
from supervisor.watch.events import FsEvents, Watcher

log = logging.getLogger("hermesd")

LOG_SPACE_MIN = 64 * 1024  # below this, a child's log counts as full
FD_RESERVE = 32  # descriptors hermesd keeps for itself (control requests, inotify, files it reads)
HOUSEKEEPING_S = 5.0


class Daemon:
    """One root's supervision: the loop's state and its ``handle_*`` methods."""

    def __init__(self, root: Path, env: Mapping[str, str] | None = None, *, lock_fd: int | None = None,
                 clock: Any = time.monotonic, wall: Any = time.time, rng: random.Random | None = None) -> None:
        self.root = root.resolve()
        self.layout = Layout(self.root)
        self.env = dict(os.environ if env is None else env)
        self.lock = PidLock(self.layout)
        self.lock_fd = lock_fd
        self.wall = wall
        self.planner = Planner(clock=clock, wall=wall, rng=rng)
        self.config = config_mod.Config()
        self.config_problem: str | None = None
        self.command: list[str] | None = None
        self.command_error: str | None = None
        self.contract: Any = None  # releases.Contract of the installed hermes-agent (None: unknown)
        self.release_problem: str | None = None  # why the release could not be read
        self.state_problem: str | None = None
        self.notifier = Notifier.from_env(self.env)
        self.domains = Domains(self.root, self.layout)
        from supervisor import __version__
        from supervisor.observe.observer import Observer

        self.observer = Observer(self.root, env=self.env, version=__version__)
        self.guard = Guard(self)
        self.children: dict[int, tuple[str, Ident]] = {}  # our children by PID (reaped by waitpid)
        self.adopted: dict[Ident, str] = {}  # adopted children (watched through their pidfd)
        self.pidfds: dict[Ident, int] = {}
        self.foreign_fds: dict[str, int] = {}
        self.timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self.ready = False
        self.boot = ""
        self.salt = b""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: asyncio.Event | None = None
        self._server: ControlServer | None = None
        self._watcher: Watcher | None = None
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="hermesd-read")
        self._reading: set[str] = set()
        self._reread: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._save_pending = False
        self._seq = 0
        self.cpu_samples: dict[Ident, tuple[float, float]] = {}
        self.board = Board(self)  # kanban (issue 16): workers run for the board, the dispatcher's hand-off
        self.own = selfcheck.Guard()  # hermesd's own limits and scheduling, kept as they started
        self.serving = Serving(self)  # what each child serves, second gateways, upstream's rewrites

    # ------------------------------------------------------------------------- lifetime

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (set by :meth:`run`; the collaborators in this package schedule on it)."""
        assert self._loop is not None
        return self._loop

    def acquire(self) -> None:
        if self.lock_fd is not None:
            self.lock.adopt_fd(self.lock_fd)
        else:
            self.lock.acquire()

    def release(self) -> None:
        self.lock.release()
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def run(self) -> int:
        """Supervise until told to stop; returns the process exit code."""
        self._loop = loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        os.chdir("/")  # never pin a mount point or a profile folder that may be deleted
        child.become_subreaper()
        _raise_fd_limit()
        self.own.start()
        self.boot = identity.boot_id()
        self.salt = self.layout.salt()
        loop.add_signal_handler(signal.SIGCHLD, self.handle_sigchld)
        loop.add_signal_handler(signal.SIGTERM, self.handle_shutdown_signal, "SIGTERM")
        loop.add_signal_handler(signal.SIGINT, self.handle_shutdown_signal, "SIGINT")
        loop.add_signal_handler(signal.SIGHUP, self.handle_reload_signal)
        # A burst of SIGCHLDs can fill asyncio's wakeup pipe; one pending byte is enough to wake
        # the loop, so a full pipe is not worth a warning per signal.
        signal.set_wakeup_fd(signal.set_wakeup_fd(-1), warn_on_full_buffer=False)
        # Requests are answered from the first moment, so a stop typed during start-up wins.
        from supervisor.daemon.requests import handlers

        self.observer.open()
        self._server = ControlServer(self.layout.socket, handlers(self), on_request=lambda verb, ok:
                                     self.observer.control_request(verb, "ok" if ok else "error"))
        await self._server.start()
        from supervisor import __version__

        self._emit({"type": "daemon_started", "profile": None, "version": __version__, "root": str(self.root)})
        self.domains.start(self.salt)
        await self.load_config(initial=True)
        self.list_profiles()
        await asyncio.gather(*(self._read(n) for n in list(self.planner.profiles)))
        adoption.adopt_existing(self)
        self.execute(self.planner.start())
        from supervisor.watch.choose import make_watcher

        self._watcher = make_watcher(self.root, self.handle_fs_events)
        self._follow()
        self.handle_sigchld()  # anything that died while we were starting
        self.ready = True
        from supervisor.daemon.requests import document

        await self.observer.start(status=lambda: document(self))
        log.info("ready: %s", summary(self))
        self.notifier.ready(summary(self))
        cancel_watchdog = self.notifier.schedule_watchdog(loop)
        loop.call_later(HOUSEKEEPING_S, self.handle_housekeeping)
        await self._done.wait()
        self.board.close()
        if not self.planner.keep_children:
            adoption.final_sweep(self)
        cancel_watchdog()
        if self._watcher is not None:
            self._watcher.close()
        self._server.close()
        await self.observer.aclose()
        if not self.planner.keep_children:
            self.domains.teardown()
        self.save_now()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        return 0

    async def load_config(self, *, initial: bool = False) -> bool:
        """(Re)read hermesd.yaml off the loop; on error keep the last good configuration and say why."""
        assert self._loop is not None
        try:
            cfg = await self._loop.run_in_executor(self.pool, config_mod.load, self.layout.config)
        except config_mod.ConfigError as exc:
            self.config_problem = str(exc)
            log.error("%s%s", exc, "" if initial else " (keeping the previous configuration)")
            self._emit({"type": "config_rejected", "profile": None, "error": str(exc)})
            if initial:  # no good configuration yet: start nothing rather than guess
                self._apply_config(self.config, Hold(HoldKind.NO_CONFIG, f"no valid hermesd.yaml yet: {exc}"))
            return False
        self.config_problem = None
        root_hold = None
        try:
            self.command = childspec.resolve_gateway_command(list(cfg.command) if cfg.command else None,
                                                             self.env.get("PATH"))
            self.command_error = None
            self.domains.set_command(self.command)
        except childspec.GatewayCommandError as exc:
            self.command, self.command_error = None, str(exc)
            root_hold = Hold(HoldKind.NO_COMMAND, str(exc))
            log.error("%s", exc)
        if self.command is not None:
            root_hold = await interpreter.learn_release(self, self.command) or root_hold
        await self.board.sync(cfg)
        self._apply_config(cfg, root_hold)
        if not initial and self.command is not None:
            known = [n for n, p in self.planner.profiles.items() if p.facts]
            self.spawn_task(interpreter.check_requirements(self, known))
        await self.observer.reconfigure(cfg.observe_settings())
        self._emit({"type": "config_applied", "profile": None})
        return True

    def _apply_config(self, cfg: config_mod.Config, root_hold: Hold | None) -> None:
        self.config = cfg
        self.execute(self.planner.set_settings(interpreter.planner_settings(self, cfg), root_hold))

    # ------------------------------------------------------------------------- profiles and files

    def list_profiles(self) -> None:
        """Compare the profiles folder with what the planner knows; read the files of new ones."""
        try:
            served = self.serving.discover()  # as the installed release defines a profile
        except OSError as exc:
            log.error("cannot list profiles under %s: %s", self.root, exc)
            return
        new = [n for n, _ in served if (p := self.planner.profiles.get(n)) is None or not p.present]
        self.execute(self.planner.set_served([(n, Path(h)) for n, h in served]))
        if self.ready:
            self.refresh(new)
            self._follow()

    def refresh(self, names: list[str] | set[str]) -> None:
        """Re-read these profiles' files off the loop; a read already running is simply repeated after."""
        for name in names:
            if name in self._reading:
                self._reread.add(name)
            else:
                self.spawn_task(self._read(name))

    async def _read(self, name: str) -> ProfileFacts | None:
        assert self._loop is not None
        self._reading.add(name)
        try:
            while True:
                p = self.planner.profiles.get(name)
                if p is None or not p.present:
                    return None
                facts = await self._loop.run_in_executor(self.pool, read_profile, name, p.home, self.salt)
                self.serving.compare(p.facts, facts)
                self.execute(self.planner.set_facts(name, facts))
                await interpreter.check_requirements(self, [name])
                if name not in self._reread:
                    return facts
                self._reread.discard(name)
        finally:
            self._reading.discard(name)

    def spawn_task(self, coro: Any) -> None:
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _follow(self) -> None:
        if self._watcher is not None:
            self._watcher.follow([*(p.home for p in self.planner.profiles.values() if p.present),
                                  *self.serving.candidates])

    # ------------------------------------------------------------------------- actions

    def execute(self, actions: list[m.Action]) -> None:
        """Perform the planner's actions, in order (a spawn's outcome is reported back at once)."""
        for a in actions:
            if isinstance(a, m.Spawn):
                self._spawn(a.name)
            elif isinstance(a, m.Signal):
                self._signal(a)
                if a.planned:  # hermesd stops or restarts this profile: its kanban workers end too
                    self.board.stop_workers(a.name, "stopped")
            elif isinstance(a, m.KillTree):
                self.board.stop_workers(a.name, "killed")
                fd = self.pidfds.get(a.ident)
                if fd is not None:
                    child.kill_group(a.ident, fd)
                self.domains.kill_tree(a.name, a.ident)
                child.kill_strays(self.root, a.name, keep=set(), salt=self.salt)
            elif isinstance(a, m.Sweep):
                assert self._loop is not None
                self.domains.sweep(a.name)  # its cgroup, exact and cheap: before a respawn joins it
                # The tag sweep after the respawn decision: the /proc scan stays off the restart path.
                self._loop.call_soon(self.handle_strays, a.name)
            elif isinstance(a, m.Schedule):
                self._schedule(a.name, a.timer, a.delay)
            elif isinstance(a, m.Cancel):
                handle = self.timers.pop((a.name, a.timer), None)
                if handle is not None:
                    handle.cancel()
            elif isinstance(a, m.WatchForeign):
                self._watch_foreign(a.name, a.pid)
            elif isinstance(a, m.Save):
                self.save_soon()
            elif isinstance(a, m.Emit):
                self._emit(a.event)
            elif isinstance(a, m.Finish) and self._done is not None:
                self._done.set()

    def _spawn(self, name: str) -> None:
        p = self.planner.profiles[name]
        foreign = identity.gateway_of(p.home, name)
        if foreign is not None and foreign.pid not in self.children and all(i.pid != foreign.pid for i in self.adopted):
            self.execute(self.planner.foreign(name, foreign.pid))
            return
        problem = _fd_budget_problem()
        if problem is not None or self.command is None:
            self.execute(self.planner.spawn_failed(name, problem or self.command_error or "no gateway command"))
            return
        argv = childspec.child_argv(self.command, name, self.contract)
        env = childspec.child_env(self.env, root=self.root, profile=name, home=p.home,
                                  extra={**self.config.child_environment(name), **self.board.env_for(name)},
                                  salt=self.salt)
        logfile: Beneath | Path = self.layout.beneath(self.layout.child_log(name))
        free = logs.free_bytes(self.layout.logs)
        if free is not None and free < LOG_SPACE_MIN:
            # A gateway dies at its first write to a full log; discarding its output keeps it up.
            log.error("profile %s: log file system full (%d bytes free): discarding this run's output", name, free)
            logfile = Path(os.devnull)
        prepared = self.domains.prepare(
            name, p.home, argv, env, isolation=self.config.isolation_for(name), limits=self.config.limits_for(name),
            other_homes=tuple(q.home for n, q in self.planner.profiles.items() if n != name and q.present),
            **self.board.plan_extras(name),
        )
        if not isinstance(prepared, Prepared):
            self.execute(self.planner.spawn_refused(name, prepared))
            return
        before = self.wall()  # before the child can write anything: its files' times are after this
        try:
            ident = child.spawn(prepared.argv, env, logfile)
            self.domains.attach(name, ident, self.config.limits_for(name))
            fd = os.pidfd_open(ident.pid)
        except child.SpawnError as exc:
            self.execute(self.planner.spawn_failed(name, str(exc)))
            return
        except OSError as exc:  # no pidfd (out of descriptors): never run a child we cannot pin
            child.reap_now(ident.pid)
            self.execute(self.planner.spawn_failed(name, f"cannot pin the new gateway: {exc.strerror or exc}"))
            return
        self.children[ident.pid] = (name, ident)
        self.pidfds[ident] = fd
        logs.note(logfile, f"hermesd: started {' '.join(argv)} as PID {ident.pid} "
                           f"(isolation: {prepared.plan.summary()})")
        self.execute(self.planner.spawned(name, ident, output_discarded=logfile == Path(os.devnull), argv0=argv[0],
                                          code=interpreter.code_now(self), started_wall=before))
        self.guard.start(name)

    def _signal(self, a: m.Signal) -> None:
        fd = self.pidfds.get(a.ident)
        if fd is None:  # the planner only names children we pinned; anything else is a bug, never a kill
            log.error("profile %s: refusing to signal PID %d: not a pinned child", a.name, a.ident.pid)
            return
        if a.planned:
            p = self.planner.profiles.get(a.name)
            if p is not None:
                with contextlib.suppress(OSError):
                    gf.write_planned_stop_marker(p.home, a.ident.pid, a.ident.start_time)
        identity.send_signal(fd, a.signal)

    def _schedule(self, name: str, which: str, delay: float) -> None:
        assert self._loop is not None
        old = self.timers.pop((name, which), None)
        if old is not None:
            old.cancel()
        self.timers[(name, which)] = self._loop.call_later(delay, self.handle_timer, name, which)

    def _watch_foreign(self, name: str, pid: int) -> None:
        assert self._loop is not None
        old = self.foreign_fds.pop(name, None)
        if old is not None:
            self._loop.remove_reader(old)
            os.close(old)
        start = identity.proc_start_time(pid)
        fd = identity.open_pidfd(Ident(pid, start)) if start is not None else None
        if fd is None:  # already gone
            self._loop.call_soon(self.handle_foreign_exit, name, None)
            return
        self.foreign_fds[name] = fd
        self._loop.add_reader(fd, self.handle_foreign_exit, name, fd)

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
            entry = self.children.pop(pid, None)
            if entry is None:
                self.observer.child_reaped(pid, status)  # a hook of ours, or an orphan: reaping it was the point
                continue
            name, ident = entry
            if os.WIFSIGNALED(status):
                self._child_gone(name, ident, None, os.WTERMSIG(status))
            else:
                self._child_gone(name, ident, os.waitstatus_to_exitcode(status), None)

    def handle_adopted_exit(self, name: str, ident: Ident) -> None:
        if self.adopted.pop(ident, None) is None:
            return
        fd = self.pidfds.get(ident)
        if fd is not None and self._loop is not None:
            self._loop.remove_reader(fd)
        self._child_gone(name, ident, None, None)

    def _child_gone(self, name: str, ident: Ident, code: int | None, sig: int | None) -> None:
        fd = self.pidfds.pop(ident, None)
        if fd is not None:
            os.close(fd)
        self.cpu_samples.pop(ident, None)
        self.guard.stop(name)
        p = self.planner.profiles.get(name)
        gstate = gf.read_gateway_state(p.home) if p is not None else {}
        ours = gstate.get("pid") == ident.pid
        state = gstate.get("gateway_state") if ours and isinstance(gstate.get("gateway_state"), str) else None
        cause = self.domains.exit_cause(name, ident)
        unconfined = None
        if code == _EXIT_CANNOT_CONFINE and not ours and p is not None:
            unconfined = (_last_line(self.layout.beneath(self.layout.child_log(name)))
                          or "the confinement could not be applied")
        self.domains.forget(name, ident)
        detail = served_elsewhere.exit_detail(self.env, p.home if p is not None else self.root,
                                              self.layout.child_log(name), code=code, ours=ours, cause=cause)
        actions = self.planner.child_exited(
            name, ident, code, sig, state, bool(gstate.get("restart_requested")) if ours else False,
            killed_for=cause, detail=detail, unconfined=unconfined, stated=ours)
        if p is not None:
            kind = (p.last_exit or {}).get("kind") or "?"
            logs.note(self.layout.beneath(self.layout.child_log(name)),
                      f"hermesd: PID {ident.pid} {_describe(code, sig)} ({kind})")
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
        if fd is not None and self.foreign_fds.get(name) == fd:
            assert self._loop is not None
            self._loop.remove_reader(fd)
            os.close(self.foreign_fds.pop(name))
        self.execute(self.planner.foreign_gone(name))

    def handle_fs_events(self, ev: FsEvents) -> None:
        """Profiles added, removed or edited, hermesd.yaml changed, a gateway wrote its state."""
        if ev.config:
            log.info("hermesd.yaml changed")
            self.spawn_task(self.load_config())
        if ev.rescan:
            self.list_profiles()
        if ev.profiles:
            self.refresh(ev.profiles)
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
                rec = identity.gateway_of(p.home, name)
                if rec is not None and rec.pid not in self.children:
                    self.execute(self.planner.foreign(name, rec.pid))
            return
        gstate = gf.read_gateway_state(p.home)
        pid = gstate.get("pid")
        if pid == p.child.ident.pid:
            state = gstate.get("gateway_state")
            plats = gstate.get("platforms")
            self.execute(self.planner.gateway_reported(
                name, pid, state if isinstance(state, str) else None,
                {k: v for k, v in plats.items() if isinstance(k, str) and isinstance(v, dict)}
                if isinstance(plats, dict) else None,
            ))
        self.serving.check(name, gstate)

    def handle_shutdown_signal(self, name: str) -> None:
        log.info("%s received: stopping every child", name)
        self.shutdown(keep_children=False)

    def handle_reload_signal(self) -> None:
        self.spawn_task(self.reload())

    async def reload(self) -> None:
        """Re-read hermesd.yaml and every profile's files (for file systems without change events)."""
        log.info("reload: re-reading hermesd.yaml and every profile's files")
        await self.load_config()
        self.list_profiles()
        await asyncio.gather(*(self._read(n) for n, p in list(self.planner.profiles.items()) if p.present))

    def shutdown(self, *, keep_children: bool) -> None:
        self.board.stop_all()
        self.notifier.stopping("leaving the gateways running" if keep_children else "stopping every gateway")
        if keep_children:
            log.info("exiting and leaving children running for the next hermesd to adopt")
        self.execute(self.planner.shutdown(keep_children=keep_children))

    def handle_housekeeping(self) -> None:
        """Every few seconds: hermesd's own limits, log rotation, full log file systems, gateway
        states, a failed save."""
        self.own.check(_fd_budget_problem())  # first: a starved descriptor budget fails every step below
        problems = logs.housekeep(self.layout, list(self.planner.profiles), self.config.log_max_bytes,
                                  self.config.log_backups, LOG_SPACE_MIN)
        for p in self.planner.profiles.values():
            problem = problems.get(p.name)
            if problem and problem != p.extra.get("log_problem"):
                log.error("profile %s: %s", p.name, problem)
            p.extra["log_problem"] = problem
            if p.child is not None and not p.child.ready:
                self.check_gateway(p.name)  # in case a state-file event was missed
            self.serving.housekeeping(p.name)
        if self.state_problem:
            self.save_now()
        self.observer.housekeeping()
        if self.ready and self.notifier.enabled:
            self.notifier.status(summary(self))
        if not self.planner.shutting_down and self._loop is not None:
            self._loop.call_later(HOUSEKEEPING_S, self.handle_housekeeping)

    # ------------------------------------------------------------------------- persistence and events

    def save_soon(self) -> None:
        if self._save_pending or self._loop is None:
            return
        self._save_pending = True
        self._loop.call_soon(self.save_now)

    def save_now(self) -> None:
        self._save_pending = False
        adoption.save_state(self)

    def _emit(self, event: dict[str, Any]) -> None:
        """Journal, count and hand to hooks one event (stamped with time, sequence and our PID)."""
        self._seq += 1
        self.observer.record({"ts": self.wall(), "seq": self._seq, "daemon": os.getpid(), **event})




_EXIT_CANNOT_CONFINE = 125  # supervisor.isolation.enter: the plan could not be applied


def _last_line(path: Beneath) -> str | None:
    """The confinement shim's one line of explanation, from the end of the child's log."""
    lines = [ln for ln in logs.tail_lines(path, 5) if ln.startswith(b"hermesd: isolation")]
    return lines[-1].decode("utf-8", "replace").strip()[:300] if lines else None


def _describe(code: int | None, sig: int | None) -> str:
    from supervisor.plan.policy import describe_exit

    return describe_exit(code, sig)


def _raise_fd_limit() -> None:
    """Raise the soft descriptor limit to the hard one: each child costs a pidfd for its whole life."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _fd_budget_problem() -> str | None:
    """Why a spawn must be refused for lack of descriptors (a pidfd for its life, a log while spawning)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
    if soft != resource.RLIM_INFINITY and used + 2 + FD_RESERVE > soft:
        return (f"out of file descriptors: {used} open of a limit of {soft}, and hermesd keeps {FD_RESERVE} for "
                "itself; raise the limit (LimitNOFILE= in the unit, or ulimit -n) or run fewer profiles")
    return None
