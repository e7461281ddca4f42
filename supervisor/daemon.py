"""The daemon: one asyncio loop that reconciles what should run against what runs.

Each profile is a ``Slot`` holding the desired state (present on disk, enabled, not stopped by
the operator, not held) and the actual one (the verified process, if any). Every event — a child
exited, a timer fired, a control request, a signal, a file change — updates a slot through one
``handle_*`` method and then calls ``reconcile``, which alone spawns or stops. Start-up runs the
same step after reading the processes that already exist, which is how adoption after a crash
falls out: actual state is read from /proc, not remembered.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import random
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiles import gateway_files as gf
from supervisor import child, contract, identity, logs
from supervisor import config as config_mod
from supervisor import conflicts as conflicts_mod
from supervisor import state as state_mod
from supervisor.control import MAX_REQUEST, READ_TIMEOUT, decode_request, peer_uid
from supervisor.identity import Ident
from supervisor.layout import Layout
from supervisor.policy import Action, ExitFacts, ExitKind, classify_exit, decide, describe_exit

log = logging.getLogger("hermesd")


CONFLICT_HOLDS = ("credential_conflict", "port_conflict")
LOG_SPACE_MIN = 64 * 1024  # below this, a child's log counts as full
# Holds that a change to the profile's files (or hermesd.yaml) may have cured.
FILE_HOLDS = ("config_error", "command_error", "spawn_error", *CONFLICT_HOLDS)


class AlreadyRunning(RuntimeError):
    """Another hermesd holds this root."""


@dataclass(slots=True)
class Hold:
    """Why a profile that should run is kept down; cleared when its files change or on start."""

    kind: str  # config_error | credential_conflict | port_conflict | foreign_gateway | spawn_error
    message: str


@dataclass(slots=True)
class Running:
    ident: Ident
    pidfd: int
    own: bool  # our child (its status can be waited for) or adopted after a hermesd restart
    started_mono: float
    started_wall: float
    stop_requested: bool = False
    then_restart: bool = False
    kill_timer: asyncio.TimerHandle | None = None
    cpu_sample: tuple[float, float] | None = None  # (monotonic, CPU seconds) at the last status
    spec: str = ""  # digest of what it was started with: files, argv, extra environment
    claims: tuple[Any, ...] = ()  # the credentials and ports it was started with
    output_discarded: bool = False  # started while the log file system was full


@dataclass(slots=True)
class Slot:
    name: str
    home: Path
    present: bool = True
    down: str | None = None  # sticky reason the operator (or an outside stop) put it down
    hold: Hold | None = None
    run: Running | None = None
    failures: int = 0
    restarts: int = 0
    last_exit: dict[str, Any] | None = None
    retry_at: float | None = None  # wall clock, for status
    retry_timer: asyncio.TimerHandle | None = None
    foreign_fd: int | None = None  # pidfd of a gateway we did not start that holds the profile
    claims: tuple[conflicts_mod.Claim, ...] = ()
    files_digest: str = ""
    file_error: str | None = None  # malformed .env / config.yaml, naming file and line
    log_problem: str | None = None  # the child's log cannot be written or rotated


@dataclass(slots=True)
class Daemon:
    root: Path
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    rng: random.Random = field(default_factory=random.Random)
    keep_children: bool = False

    layout: Layout = field(init=False)
    config: config_mod.Config = field(init=False)
    command: list[str] | None = field(init=False, default=None)
    command_error: str | None = field(init=False, default=None)
    slots: dict[str, Slot] = field(init=False, default_factory=dict)
    by_pid: dict[int, Slot] = field(init=False, default_factory=dict)
    boot: str = field(init=False, default="")
    ready: bool = field(init=False, default=False)
    shutting_down: bool = field(init=False, default=False)
    config_problem: str | None = field(init=False, default=None)
    state_problem: str | None = field(init=False, default=None)
    _scanned: bool = field(init=False, default=False)
    # (held, contenders), cached during one rescan pass
    _conflicts: tuple[dict[str, Any], set[str]] | None = field(init=False, default=None)
    _lock_fd: int | None = field(init=False, default=None)
    _loop: asyncio.AbstractEventLoop | None = field(init=False, default=None)
    _done: asyncio.Event | None = field(init=False, default=None)
    _save_pending: bool = field(init=False, default=False)
    _server: asyncio.AbstractServer | None = field(init=False, default=None)
    _salt: bytes = field(init=False, default=b"")
    _watcher: Any = field(init=False, default=None)
    order: list[str] = field(init=False, default_factory=list)
    notifier: Any = field(init=False, default=None)

    def __post_init__(self) -> None:
        from supervisor.notify import Notifier

        self.root = self.root.resolve()
        self.layout = Layout(self.root)
        self.notifier = Notifier.from_env(self.env)  # a no-op without NOTIFY_SOCKET

    # ----------------------------------------------------------------- lifetime

    def acquire(self) -> None:
        """Take the per-root lock (held for the daemon's life) and write the PID file."""
        self.layout.ensure()
        fd = os.open(self.layout.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            other = _flock_holder(self.layout.lock) or _read_pid(self.layout.pidfile)
            who = f" (PID {other})" if other else ""
            raise AlreadyRunning(f"hermesd is already running for {self.root}{who}") from None
        self._lock_fd = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        tmp = self.layout.pidfile.with_suffix(".tmp")
        tmp.write_text(f"{os.getpid()}\n")
        os.replace(tmp, self.layout.pidfile)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            if _read_pid(self.layout.pidfile) == os.getpid():
                self.layout.pidfile.unlink()
        with contextlib.suppress(OSError):
            self.layout.socket.unlink()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    async def run(self) -> int:
        """Supervise until told to stop; returns the process exit code."""
        self._loop = asyncio.get_running_loop()
        self._done = asyncio.Event()
        os.chdir("/")  # never pin a mount point or a profile folder that may be deleted
        child.become_subreaper()
        self.boot = identity.boot_id()
        self._salt = self.layout.salt()
        self.load_config(initial=True)
        loop = self._loop
        loop.add_signal_handler(signal.SIGCHLD, self.handle_sigchld)
        loop.add_signal_handler(signal.SIGTERM, self.handle_shutdown_signal, "SIGTERM")
        loop.add_signal_handler(signal.SIGINT, self.handle_shutdown_signal, "SIGINT")
        loop.add_signal_handler(signal.SIGHUP, self.handle_reload)
        # A burst of SIGCHLDs can fill asyncio's wakeup pipe; one pending byte is enough to wake
        # the loop, so a full pipe is not worth a warning per signal.
        signal.set_wakeup_fd(signal.set_wakeup_fd(-1), warn_on_full_buffer=False)
        self.adopt_existing()
        self.rescan()
        await self.start_control()
        from supervisor.watch import make_watcher

        self._watcher = make_watcher(self.root, self.handle_fs_events)
        self._watcher.follow(s.home for s in self.slots.values())
        self.handle_sigchld()  # anything that died while we were starting
        self.ready = True
        log.info("ready: %s", self.summary())
        self.notifier.ready(self.summary())
        cancel_watchdog = self.notifier.schedule_watchdog(loop)
        self._schedule_housekeeping()
        await self._done.wait()
        if not self.keep_children:
            self._final_sweep()
        cancel_watchdog()
        if self._watcher is not None:
            self._watcher.close()
        if self._server:
            self._server.close()
        self.save_now()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        return 0

    def load_config(self, *, initial: bool = False) -> bool:
        """(Re)read hermesd.yaml; on error keep the last good config and say why."""
        try:
            cfg = config_mod.load(self.layout.config)
        except config_mod.ConfigError as exc:
            self.config_problem = str(exc)
            log.error("%s%s", exc, "" if initial else " (keeping the previous configuration)")
            if initial:  # no good configuration yet: start nothing rather than guess
                self.config = config_mod.Config()
                self.command, self.command_error = None, f"no valid hermesd.yaml yet: {exc}"
            return False
        self.config = cfg
        self.config_problem = None
        try:
            self.command = contract.resolve_gateway_command(
                list(cfg.command) if cfg.command else None, self.env.get("PATH")
            )
            self.command_error = None
        except contract.GatewayCommandError as exc:
            self.command, self.command_error = None, str(exc)
            log.error("%s", exc)
        return True

    # ----------------------------------------------------------------- discovery

    def rescan(self, *, full: bool = False) -> None:
        """Compare ``profiles_to_serve`` with the slots; add, mark gone, reconcile all.

        ``full`` re-reads every profile's files too (``hermesd reload``, for file systems where
        change events never arrive).
        """
        from profiles.discovery import profiles_to_serve

        try:
            served = profiles_to_serve(True, root=self.root)
        except OSError as exc:
            log.error("cannot list profiles under %s: %s", self.root, exc)
            return
        seen = set()
        self.order = [name for name, _home in served]
        for name, home in served:
            seen.add(name)
            slot = self.slots.get(name)
            if slot is None or not slot.present or slot.home != Path(home):
                slot = self.slots.get(name) or Slot(name, Path(home))
                self.slots[name] = slot
                slot.home = Path(home)
                log.info("profile %s: found at %s", name, home)
            slot.present = True
            if full or not slot.files_digest:
                self.refresh_files(slot)
        for name, slot in self.slots.items():
            if name not in seen and slot.present:
                slot.present = False
                slot.claims = ()
                log.info("profile %s: folder gone", name)
        self._scanned = True
        self.recheck_holds()
        # One conflict map for the whole pass (O(N), not O(N²)): spawning the winners in serving
        # order cannot change who wins, since a running holder and the first in order coincide.
        self._conflicts = self.conflict_map()
        try:
            for slot in list(self.slots.values()):
                self.reconcile(slot)
        finally:
            self._conflicts = None
        self._forget_finished()
        if self._watcher is not None:
            self._watcher.follow(s.home for s in self.slots.values() if s.present)

    def _forget_finished(self) -> None:
        for name in [n for n, s in self.slots.items() if not s.present and s.run is None]:
            slot = self.slots.pop(name)
            self._cancel_retry(slot)
            self._clear_foreign(slot)

    # ----------------------------------------------------------------- reconcile

    def should_run(self, slot: Slot) -> bool:
        return (
            slot.present
            and not self.shutting_down
            and self.config.for_profile(slot.name).enabled
            and slot.down is None
            and slot.hold is None
        )

    def reconcile(self, slot: Slot) -> None:
        """Turn the difference between desired and actual into one action."""
        want = self.should_run(slot)
        if slot.run is not None:
            if not want and not slot.run.stop_requested:
                self.stop(slot)
            return
        if not want:
            self._cancel_retry(slot)
            return
        if slot.retry_timer is not None:
            return  # backing off; the timer reconciles again
        hold = self.admission(slot)
        if hold is not None:
            self.set_hold(slot, hold)
            return
        self.spawn(slot)

    def admission(self, slot: Slot) -> Hold | None:
        """Checks made before every spawn; a reason to hold the profile, or ``None``."""
        if self.command is None:
            return Hold("command_error", self.command_error or "no gateway command")
        if slot.file_error is not None:
            return Hold("config_error", slot.file_error)
        conflict = self.conflict_for(slot)
        if conflict is not None:
            return Hold(conflict.reason, conflict.message)
        foreign = gf.live_gateway(slot.home)
        if foreign is not None and foreign.pid not in self.by_pid:
            self._watch_foreign(slot, foreign)
            return Hold("foreign_gateway", f"foreign gateway (PID {foreign.pid}) holds this profile")
        return None

    def conflict_for(self, slot: Slot) -> conflicts_mod.Conflict | None:
        """Would ``slot`` take a credential or port another active profile claims?"""
        if self._conflicts is not None and slot.name in self._conflicts[1]:
            return self._conflicts[0].get(slot.name)
        return self.conflict_map(include=slot.name)[0].get(slot.name)

    def conflict_map(
        self, include: str | None = None
    ) -> tuple[dict[str, conflicts_mod.Conflict], set[str]]:
        """Every profile that must be held for a conflict among the active ones, and those ones.

        Profiles held for a conflict do not compete (unless ``include`` names one being
        re-evaluated), so a holder that crashes and restarts keeps its token instead of losing it
        to the profile it was blocking.
        """
        contenders = [
            n for n in self.order
            if (s := self.slots.get(n)) is not None
            and (n == include or s.run is not None or s.retry_timer is not None or self.should_run(s))
        ]
        running = {n for n in contenders if self.slots[n].run is not None or self.slots[n].retry_timer is not None}
        claims = {n: self._claims_in_use(self.slots[n]) for n in contenders}
        return conflicts_mod.find_conflicts(contenders, claims, running), set(contenders)

    @staticmethod
    def _claims_in_use(slot: Slot) -> tuple[conflicts_mod.Claim, ...]:
        """A running child still uses what it was started with, whatever its files say now."""
        return slot.run.claims + slot.claims if slot.run is not None else slot.claims

    def recheck_holds(self) -> None:
        """Release conflict holds whose conflict is gone (clone deleted, token changed)."""
        for slot in list(self.slots.values()):
            held = slot.hold is not None and slot.hold.kind in CONFLICT_HOLDS and slot.run is None
            if held and self.conflict_for(slot) is None:
                self.release_hold(slot, "conflict resolved")

    def refresh_files(self, slot: Slot) -> bool:
        """Re-read the profile's .env and config.yaml; True when their effective content changed."""
        from profiles.errors import ProfileError
        from supervisor.claims import read_profile_files

        try:
            files = read_profile_files(slot.home, self._salt)
            claims, digest, error = files.claims, _digest({"env": files.env, "config": files.config}), None
            overrides = contract.env_file_overrides(files.env)
            if overrides:
                error = (
                    f"{slot.home / '.env'} sets {', '.join(overrides)}, overriding what hermesd gives every "
                    "child (Hermes loads .env with override); remove it from the profile's .env"
                )
        except (ProfileError, ValueError, OSError) as exc:
            claims, digest, error = (), f"error:{exc}", str(exc)
        changed = digest != slot.files_digest
        slot.claims, slot.files_digest, slot.file_error = claims, digest, error
        if error and changed:
            log.error("profile %s: %s", slot.name, error)
        return changed

    def spec_for(self, slot: Slot) -> str:
        """Digest of everything a spawn of ``slot`` would use; a difference means restart."""
        return _digest({
            "files": slot.files_digest,
            "argv": contract.child_argv(self.command or [], slot.name),
            "env": self.config.child_environment(slot.name),
        })

    def handle_fs_events(self, ev: Any) -> None:
        """Profiles added, removed or edited, or hermesd.yaml changed."""
        if ev.config:
            log.info("hermesd.yaml changed")
            if self.load_config():
                for slot in self.slots.values():  # admission re-derives whatever still applies
                    if slot.hold is not None and slot.hold.kind in FILE_HOLDS:
                        slot.hold = None
        if ev.rescan:
            self.rescan()
        for name in sorted(ev.profiles):
            slot = self.slots.get(name)
            if slot is not None and slot.present and self.refresh_files(slot):
                log.info("profile %s: configuration changed", name)
                if slot.hold is not None and slot.hold.kind in FILE_HOLDS:
                    slot.hold = None
        if ev.config or ev.profiles:
            self.apply_changes()

    def apply_changes(self) -> None:
        """Restart exactly the running profiles whose spawn spec changed; recheck holds."""
        for slot in list(self.slots.values()):
            if slot.run is None or slot.run.stop_requested or slot.run.spec == self.spec_for(slot):
                continue
            if slot.file_error is not None:
                # A typo must not take down a working bot: it keeps its last good configuration.
                log.warning("profile %s: %s; the running gateway keeps its last good configuration",
                            slot.name, slot.file_error)
                continue
            log.info("profile %s: effective configuration changed; restarting it", slot.name)
            self.stop(slot, then_restart=True)
        self.recheck_holds()
        for slot in list(self.slots.values()):
            self.reconcile(slot)

    def set_hold(self, slot: Slot, hold: Hold) -> None:
        if slot.hold != hold:
            log.warning("profile %s: held: %s", slot.name, hold.message)
        slot.hold = hold
        self.save_soon()

    def release_hold(self, slot: Slot, why: str) -> None:
        if slot.hold is not None:
            log.info("profile %s: hold released (%s)", slot.name, why)
            slot.hold = None
            self.save_soon()
        self.reconcile(slot)

    # ----------------------------------------------------------------- actions

    def spawn(self, slot: Slot) -> None:
        assert self.command is not None
        argv = contract.child_argv(self.command, slot.name)
        env = contract.child_env(
            self.env,
            root=self.root,
            profile=slot.name,
            home=slot.home,
            extra=self.config.child_environment(slot.name),
        )
        logfile = self.layout.child_log(slot.name)
        free = logs.free_bytes(self.layout.logs)
        if free is not None and free < LOG_SPACE_MIN:
            # A gateway dies at its first write to a full log; discarding its output keeps it up.
            log.error("profile %s: log file system full (%d bytes free): discarding this run's output", slot.name, free)
            logfile = Path(os.devnull)
        try:
            ident = child.spawn(argv, env, logfile, slot.home)
        except child.SpawnError as exc:
            self.set_hold(slot, Hold("spawn_error", str(exc)))
            return
        fd = os.pidfd_open(ident.pid)
        slot.run = Running(ident, fd, True, self.clock(), self.wall(), spec=self.spec_for(slot), claims=slot.claims)
        slot.run.output_discarded = logfile == Path(os.devnull)
        self.by_pid[ident.pid] = slot
        slot.retry_at = None
        _note(logfile, f"hermesd: started {' '.join(argv)} as PID {ident.pid}")
        log.info("profile %s: started PID %d", slot.name, ident.pid)
        self.save_soon()

    def stop(self, slot: Slot, *, graceful: bool = False, then_restart: bool = False) -> None:
        """Ask the child to stop; SIGKILL its group when the timeout passes."""
        run = slot.run
        assert run is not None
        run.then_restart = run.then_restart or then_restart
        if run.stop_requested:
            return
        run.stop_requested = True
        if graceful:
            identity.send_signal(run.pidfd, signal.SIGUSR1)  # upstream drains, then exits 75
        else:
            with contextlib.suppress(OSError):
                gf.write_planned_stop_marker(slot.home, run.ident.pid, run.ident.start_time)
            identity.send_signal(run.pidfd, signal.SIGTERM)
        timeout = self.config.stop_timeout_for(slot.name, slot.home)
        log.info("profile %s: stopping PID %d (timeout %.0fs)", slot.name, run.ident.pid, timeout)
        assert self._loop is not None
        run.kill_timer = self._loop.call_later(timeout, self.handle_stop_timeout, slot.name, run.ident)
        self.save_soon()

    # ----------------------------------------------------------------- events

    def handle_sigchld(self) -> None:
        """Reap every exited child: our gateways and orphans we inherited as subreaper."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = self.by_pid.get(pid)
            if slot is None or slot.run is None or slot.run.ident.pid != pid:
                continue  # an orphaned grandchild; reaping it was the point
            if os.WIFSIGNALED(status):
                self.handle_exit(slot, None, os.WTERMSIG(status))
            else:
                self.handle_exit(slot, os.waitstatus_to_exitcode(status), None)

    def handle_adopted_exit(self, name: str, ident: Ident) -> None:
        slot = self.slots.get(name)
        if slot is None or slot.run is None or slot.run.ident != ident:
            return
        self.handle_exit(slot, None, None)

    def handle_exit(self, slot: Slot, code: int | None, sig: int | None) -> None:
        run = slot.run
        assert run is not None
        self._drop_run(slot)
        assert self._loop is not None
        # After the respawn decision, not before it: the /proc scan stays off the restart path.
        self._loop.call_soon(self.handle_strays, slot.name)
        self.conclude_exit(slot, run, code, sig)

    def conclude_exit(self, slot: Slot, run: Running, code: int | None, sig: int | None) -> None:
        """Classify the end of ``run`` and decide: restart now or later, hold, or stay down."""
        gstate = gf.read_gateway_state(slot.home)
        ours = gstate.get("pid") == run.ident.pid
        facts = ExitFacts(
            code=code,
            signal=sig,
            requested_by_us=run.stop_requested,
            gateway_state=gstate.get("gateway_state") if ours else None,
            restart_requested=bool(gstate.get("restart_requested")) if ours else False,
        )
        kind = classify_exit(facts)
        uptime = max(0.0, self.clock() - run.started_mono)
        what = describe_exit(code, sig)
        now = self.wall()
        _note(self.layout.child_log(slot.name), f"hermesd: PID {run.ident.pid} {what} ({kind.value})")
        if kind is ExitKind.PLANNED:
            slot.last_exit = _exit_record(code, sig, now, kind, "stopped by hermesd")
            log.info("profile %s: PID %d stopped (%s)", slot.name, run.ident.pid, what)
            if run.then_restart:
                slot.restarts += 1
                slot.failures = 0
            self._after_exit(slot)
            return
        decision = decide(kind, failures=slot.failures, uptime=uptime, policy=self.config.restart, rng=self.rng)
        slot.failures = decision.failures
        slot.last_exit = _exit_record(code, sig, now, kind, decision.reason)
        log.warning(
            "profile %s: PID %d %s after %.1fs: %s", slot.name, run.ident.pid, what, uptime, decision.reason
        )
        if decision.action is Action.RESTART:
            slot.restarts += 1
            if decision.delay > 0 and not self.shutting_down:
                self._schedule_retry(slot, decision.delay)
        elif decision.action is Action.HOLD:
            slot.hold = Hold("config_error", f"gateway {what}: {decision.reason}")
        else:
            slot.down = decision.reason
        self._after_exit(slot)

    def _after_exit(self, slot: Slot) -> None:
        self.save_soon()
        if not self._scanned:
            return  # start-up: the first rescan reconciles everything once every file is read
        self.reconcile(slot)
        self.recheck_holds()  # a token this profile held may now be free for a held one
        self._forget_finished()
        self._maybe_finish_shutdown()

    def handle_stop_timeout(self, name: str, ident: Ident) -> None:
        slot = self.slots.get(name)
        if slot is None or slot.run is None or slot.run.ident != ident:
            return
        log.warning("profile %s: PID %d did not stop in time; SIGKILL to its group", name, ident.pid)
        child.kill_group(ident, slot.run.pidfd)
        child.kill_strays(self.root, name, keep={ident.pid})

    def handle_strays(self, name: str) -> None:
        """Kill what is left of a profile's previous gateway (escaped descendants, diagnostics)."""
        slot = self.slots.get(name)
        keep = {slot.run.ident.pid} if slot is not None and slot.run is not None else set()
        strays = child.kill_strays(self.root, name, keep=keep)
        if strays:
            log.info("profile %s: killed %d leftover process(es) %s", name, len(strays), strays)

    def handle_retry(self, name: str) -> None:
        slot = self.slots.get(name)
        if slot is None:
            return
        slot.retry_timer = None
        slot.retry_at = None
        self.reconcile(slot)

    def handle_foreign_exit(self, name: str) -> None:
        slot = self.slots.get(name)
        if slot is None:
            return
        self._clear_foreign(slot)
        if slot.hold is not None and slot.hold.kind == "foreign_gateway":
            self.release_hold(slot, "the foreign gateway exited")

    def handle_shutdown_signal(self, name: str) -> None:
        log.info("%s received: stopping every child", name)
        self.shutdown(keep_children=False)

    def handle_reload(self) -> None:
        log.info("reload: re-reading hermesd.yaml and every profile's files")
        self.load_config()
        for slot in self.slots.values():
            if slot.hold is not None and slot.hold.kind in FILE_HOLDS:
                slot.hold = None
        self.rescan(full=True)
        self.apply_changes()

    def shutdown(self, *, keep_children: bool) -> None:
        self.notifier.stopping("leaving the gateways running" if keep_children else "stopping every gateway")
        self.shutting_down = True
        self.keep_children = keep_children
        if keep_children:
            log.info("exiting and leaving children running for the next hermesd to adopt")
            self._finish()
            return
        for slot in list(self.slots.values()):
            self._cancel_retry(slot)
            self.reconcile(slot)
        self._maybe_finish_shutdown()

    def _final_sweep(self, budget: float = 2.0) -> None:
        """Before exiting, kill every process still tagged with this root.

        A gateway's last act may be a detached helper (upstream's diagnostic shell) that forks
        after the per-exit sweep looked; repeat until a pass finds nothing, within ``budget``.
        """
        deadline = time.monotonic() + budget
        while True:
            names = {name for _pid, name, _env in identity.find_tagged(self.root)}
            killed = [pid for name in names for pid in child.kill_strays(self.root, name, keep=set())]
            self.handle_sigchld()  # reap what we just killed (we are their subreaper)
            if not killed or time.monotonic() > deadline:
                if killed:
                    log.warning("processes still appearing at exit: %s", killed)
                return
            log.info("killed %d leftover process(es) at exit: %s", len(killed), killed)
            time.sleep(0.02)

    def _maybe_finish_shutdown(self) -> None:
        if self.shutting_down and all(s.run is None for s in self.slots.values()):
            self._finish()

    def _finish(self) -> None:
        if self._done is not None:
            self._done.set()

    # ----------------------------------------------------------------- operator verbs

    def op_start(self, name: str) -> str:
        slot = self._slot(name)
        slot.down = None
        slot.hold = None
        slot.failures = 0
        self._cancel_retry(slot)
        self.reconcile(slot)
        self.save_soon()
        return "running" if slot.run else "not started: " + self.describe(slot)["reason"]

    def op_stop(self, name: str) -> str:
        slot = self._slot(name)
        slot.down = "stopped by operator"
        self.reconcile(slot)
        self.save_soon()
        return "stopping" if slot.run else "stopped"

    def op_restart(self, name: str, graceful: bool) -> str:
        slot = self._slot(name)
        if slot.run is None:
            return self.op_start(name)
        slot.down = None
        self.stop(slot, graceful=graceful, then_restart=True)
        return "restarting"

    def _slot(self, name: str) -> Slot:
        from profiles.names import normalize_name

        canon = normalize_name(name)
        slot = self.slots.get(canon)
        if slot is None:
            raise KeyError(f"no such profile: {name!r} (known: {', '.join(sorted(self.slots)) or 'none'})")
        return slot

    # ----------------------------------------------------------------- adoption

    def adopt_existing(self) -> None:
        """Take over every gateway a previous hermesd of this root left running.

        Also finishes what that hermesd left half done: a stop or restart it had begun is issued
        again, a gateway that ended while nobody watched is accounted for like any exit, and
        leftover processes of dead gateways are killed.
        """
        from profiles.discovery import profiles_to_serve

        saved = state_mod.load(self.layout.state, self.boot)
        self.state_problem = saved.problem
        if saved.problem:
            log.error("%s", saved.problem)
        homes = {name: Path(home) for name, home in profiles_to_serve(True, root=self.root)}
        candidates: dict[str, list[int]] = {}
        tagged: dict[str, list[int]] = {}
        for pid, name, env in identity.find_tagged(self.root):
            tagged.setdefault(name, []).append(pid)
            if (
                identity.session_id(pid) == pid
                and env.get("HERMES_HOME")
                and identity.is_gateway_cmdline(identity.proc_cmdline(pid))
            ):
                candidates.setdefault(name, []).append(pid)
        for name, rec in saved.profiles.items():
            # A saved name whose folder is gone is not present: it never starts anything.
            slot = self.slots.setdefault(name, Slot(name, homes.get(name, self.root), present=name in homes))
            slot.restarts = state_mod.saved_int(rec, "restarts")
            slot.failures = state_mod.saved_int(rec, "failures")
            slot.last_exit = state_mod.exit_record(rec.get("last_exit"))
            down = rec.get("down")
            slot.down = down if isinstance(down, str) else None
        for name, pids in candidates.items():
            self._adopt_profile(name, pids, saved.profiles.get(name, {}), homes)
        for name, rec in saved.profiles.items():
            slot = self.slots[name]
            if slot.run is None and isinstance(rec.get("pid"), int) and isinstance(rec.get("start_time"), int):
                self._ended_while_down(slot, rec)
        keep: set[int] = set()
        for slot in self.slots.values():
            if slot.run is not None:
                keep |= {slot.run.ident.pid, *identity.descendants(slot.run.ident.pid)}
        for name in tagged:
            strays = child.kill_strays(self.root, name, keep=keep)
            if strays:
                log.warning("profile %s: killed leftovers of a dead gateway: %s", name, strays)

    def _adopt_profile(
        self, name: str, pids: list[int], rec: dict[str, Any], homes: dict[str, Path]
    ) -> None:
        home = homes.get(name) or Path(str(rec.get("home") or ""))
        idents = [Ident(p, s) for p in pids if (s := identity.proc_start_time(p)) is not None]
        verified = [i for i in idents if home and identity.verify(i, home=home, root=self.root, profile=name)]
        if not verified:
            return
        recorded = gf.read_pid_record(home)
        saved_ident = (rec.get("pid"), rec.get("start_time"))

        def rank(i: Ident) -> tuple[int, int, int]:
            return (
                (i.pid, i.start_time) == saved_ident,
                recorded is not None and recorded.pid == i.pid,
                -i.start_time,
            )

        verified.sort(key=rank, reverse=True)
        main, extras = verified[0], verified[1:]
        fd = identity.open_pidfd(main)
        if fd is None:
            return
        slot = self.slots.setdefault(name, Slot(name, home))
        slot.home, slot.present = home, name in homes
        started_wall = identity.proc_start_wall(main.pid) or self.wall()
        slot.run = Running(main, fd, False, self.clock() - max(0.0, self.wall() - started_wall), started_wall)
        self.refresh_files(slot)
        slot.run.spec, slot.run.claims = self.spec_for(slot), slot.claims
        self.by_pid[main.pid] = slot
        assert self._loop is not None
        self._loop.add_reader(fd, self.handle_adopted_exit, name, main)
        log.info("profile %s: adopted running gateway PID %d", name, main.pid)
        if (main.pid, main.start_time) == saved_ident and rec.get("stopping") is True:
            log.info("profile %s: finishing the %s the previous hermesd began", name,
                     "restart" if rec.get("then_restart") else "stop")
            self.stop(slot, then_restart=rec.get("then_restart") is True)
        for extra in extras:
            xfd = identity.open_pidfd(extra)
            if xfd is not None:
                log.warning("profile %s: duplicate gateway PID %d; killing it", name, extra.pid)
                child.kill_group(extra, xfd)
                os.close(xfd)

    def _ended_while_down(self, slot: Slot, rec: dict[str, Any]) -> None:
        """The gateway recorded in ``rec`` is gone: decide about its end as if we had seen it."""
        started = rec.get("started_at")
        started_wall = float(started) if isinstance(started, int | float) else self.wall()
        ghost = Running(
            Ident(rec["pid"], rec["start_time"]), -1, False,
            self.clock() - max(0.0, self.wall() - started_wall), started_wall,
            stop_requested=rec.get("stopping") is True, then_restart=rec.get("then_restart") is True,
        )
        log.info("profile %s: gateway PID %d ended while hermesd was not running", slot.name, ghost.ident.pid)
        self.conclude_exit(slot, ghost, None, None)

    # ----------------------------------------------------------------- helpers

    def _drop_run(self, slot: Slot) -> None:
        run = slot.run
        if run is None:
            return
        slot.run = None
        self.by_pid.pop(run.ident.pid, None)
        if run.kill_timer is not None:
            run.kill_timer.cancel()
        if not run.own and self._loop is not None:
            self._loop.remove_reader(run.pidfd)
        os.close(run.pidfd)

    def _schedule_retry(self, slot: Slot, delay: float) -> None:
        assert self._loop is not None
        self._cancel_retry(slot)
        slot.retry_at = self.wall() + delay
        slot.retry_timer = self._loop.call_later(delay, self.handle_retry, slot.name)
        log.info("profile %s: retry in %.1fs", slot.name, delay)

    def _cancel_retry(self, slot: Slot) -> None:
        if slot.retry_timer is not None:
            slot.retry_timer.cancel()
        slot.retry_timer = None
        slot.retry_at = None

    def _watch_foreign(self, slot: Slot, rec: gf.PidRecord) -> None:
        if slot.foreign_fd is not None or self._loop is None:
            return
        start = rec.start_time if rec.start_time is not None else identity.proc_start_time(rec.pid)
        fd = identity.open_pidfd(Ident(rec.pid, start)) if start is not None else None
        if fd is None:
            return
        slot.foreign_fd = fd
        self._loop.add_reader(fd, self.handle_foreign_exit, slot.name)

    def _clear_foreign(self, slot: Slot) -> None:
        if slot.foreign_fd is not None:
            if self._loop is not None:
                self._loop.remove_reader(slot.foreign_fd)
            os.close(slot.foreign_fd)
            slot.foreign_fd = None

    def _schedule_housekeeping(self) -> None:
        assert self._loop is not None
        self._loop.call_later(5.0, self._housekeeping)

    def _housekeeping(self) -> None:
        free = logs.free_bytes(self.layout.logs)
        full = (
            f"log file system full ({free} bytes free in {self.layout.logs})"
            if free is not None and free < LOG_SPACE_MIN
            else None
        )
        for slot in self.slots.values():
            problem = full
            try:
                logs.rotate_if_needed(
                    self.layout.child_log(slot.name), self.config.log_max_bytes, self.config.log_backups
                )
            except OSError as exc:
                problem = f"log rotation failed: {exc}"
            if problem and problem != slot.log_problem:
                log.error("profile %s: %s", slot.name, problem)
            slot.log_problem = problem
        if self.ready and self.notifier.enabled:
            self.notifier.status(self.summary())  # starting → running changes no saved state
        if not self.shutting_down:
            self._schedule_housekeeping()

    # ----------------------------------------------------------------- persistence

    def save_soon(self) -> None:
        if self._save_pending or self._loop is None:
            return
        self._save_pending = True
        self._loop.call_soon(self.save_now)

    def save_now(self) -> None:
        self._save_pending = False
        if self.ready and self.notifier.enabled:
            self.notifier.status(self.summary())  # repeats are dropped by the notifier
        records = {}
        for name, slot in self.slots.items():
            rec: dict[str, Any] = {
                "home": str(slot.home),
                "restarts": slot.restarts,
                "failures": slot.failures,
                "last_exit": slot.last_exit,
                "down": slot.down,
                "hold": {"kind": slot.hold.kind, "message": slot.hold.message} if slot.hold else None,
                "next_retry_at": slot.retry_at,
            }
            if slot.run is not None:
                rec.update(
                    pid=slot.run.ident.pid,
                    start_time=slot.run.ident.start_time,
                    started_at=slot.run.started_wall,
                    stopping=slot.run.stop_requested,
                    then_restart=slot.run.then_restart,
                )
            records[name] = rec
        try:
            state_mod.save(self.layout.state, self.boot, os.getpid(), records, self.wall())
        except OSError as exc:
            log.error("cannot write %s: %s", self.layout.state, exc)

    # ----------------------------------------------------------------- status

    def describe(self, slot: Slot) -> dict[str, Any]:
        """One profile's row, from the daemon's point of view (see supervisor.status)."""
        run = slot.run
        reason = None
        if run is not None:
            state = "stopping" if run.stop_requested else "running"
            gstate = gf.read_gateway_state(slot.home)
            if state == "running" and (gstate.get("pid") != run.ident.pid or gstate.get("gateway_state") == "starting"):
                state = "starting"
        elif slot.retry_timer is not None:
            state, reason = "backoff", (slot.last_exit or {}).get("reason", "restarting")
        elif slot.hold is not None:
            state, reason = "held", f"{slot.hold.kind}: {slot.hold.message}"
        else:
            state = "stopped"
            if not slot.present:
                reason = "profile folder removed"
            elif not self.config.for_profile(slot.name).enabled:
                reason = "disabled in hermesd.yaml"
            elif self.shutting_down:
                reason = "hermesd is shutting down"
            else:
                reason = slot.down or "stopped"
        return {
            "name": slot.name,
            "home": str(slot.home),
            "state": state,
            "reason": reason,
            "pid": run.ident.pid if run else None,
            "adopted": (not run.own) if run else False,
            "started_at": run.started_wall if run else None,
            "uptime_s": round(self.wall() - run.started_wall, 1) if run else None,
            "restarts": slot.restarts,
            "last_exit": slot.last_exit,
            "next_retry_at": slot.retry_at,
            "should_run": self.should_run(slot),
            "hold": {"kind": slot.hold.kind, "message": slot.hold.message} if slot.hold else None,
            "file_error": slot.file_error,
            "log_problem": slot.log_problem
            or ("this run's output is discarded: the log file system was full when it started"
                if run is not None and run.output_discarded else None),
        }

    def status_document(self) -> dict[str, Any]:
        from supervisor import status

        rows = []
        for slot in sorted(self.slots.values(), key=lambda s: (s.name != "default", s.name)):
            row = self.describe(slot)
            status.add_live_fields(row, slot.home, self._cpu_percent(slot))
            rows.append(row)
        return {
            "root": str(self.root),
            "supervisor": {
                "pid": os.getpid(),
                "running": True,
                "ready": self.ready,
                "config_problem": self.config_problem,
                "state_problem": self.state_problem,
                "command": self.command,
                "command_error": self.command_error,
            },
            "profiles": rows,
        }

    def _cpu_percent(self, slot: Slot) -> float | None:
        """CPU use since the previous status request (None on the first one)."""
        run = slot.run
        usage = identity.proc_usage(run.ident.pid) if run is not None else None
        if run is None or usage is None:
            return None
        now, before = self.clock(), run.cpu_sample
        run.cpu_sample = (now, usage[0])
        if before is None or now <= before[0]:
            return None
        return 100.0 * (usage[0] - before[1]) / (now - before[0])

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for slot in self.slots.values():
            st = self.describe(slot)["state"]
            counts[st] = counts.get(st, 0) + 1
        return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no profiles"

    # ----------------------------------------------------------------- control socket

    async def start_control(self) -> None:
        path = self.layout.socket
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # we hold the root lock, so any socket file here is stale
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(path), limit=MAX_REQUEST + 1)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import json

        try:
            sock = writer.get_extra_info("socket")
            uid = peer_uid(sock) if sock is not None else None
            if uid is None or (uid != os.getuid() and uid != 0):
                reply: dict[str, Any] = {"ok": False, "error": "permission denied: not the daemon's user"}
            else:
                try:
                    line = await asyncio.wait_for(reader.readuntil(b"\n"), READ_TIMEOUT)
                    reply = self.dispatch(decode_request(line.strip()))
                except asyncio.LimitOverrunError:
                    reply = {"ok": False, "error": f"request too large (limit {MAX_REQUEST} bytes)"}
                except asyncio.IncompleteReadError as exc:
                    if not exc.partial.strip():
                        return
                    reply = {"ok": False, "error": "malformed request: no newline before end of input"}
                except TimeoutError:
                    reply = {"ok": False, "error": f"request not received within {READ_TIMEOUT:.0f}s"}
                except ValueError as exc:
                    reply = {"ok": False, "error": str(exc)}
            writer.write(json.dumps(reply).encode() + b"\n")
            await asyncio.wait_for(writer.drain(), READ_TIMEOUT)
        except (ConnectionError, TimeoutError, OSError, asyncio.CancelledError):
            pass  # the client went away, or the daemon is shutting down mid-request
        except Exception:  # a bug in one request must not take down the daemon
            log.exception("control request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def dispatch(self, req: dict[str, Any]) -> dict[str, Any]:
        cmd = req["cmd"]
        profile = req.get("profile")
        try:
            if cmd == "ping":
                return {"ok": True, "pid": os.getpid(), "ready": self.ready, "root": str(self.root)}
            if cmd == "status":
                return {"ok": True, "status": self.status_document()}
            if cmd in ("start", "stop", "restart"):
                if not isinstance(profile, str):
                    return {"ok": False, "error": f"{cmd}: 'profile' must be a string"}
                if cmd == "start":
                    return {"ok": True, "result": self.op_start(profile)}
                if cmd == "stop":
                    return {"ok": True, "result": self.op_stop(profile)}
                return {"ok": True, "result": self.op_restart(profile, bool(req.get("graceful")))}
            if cmd == "shutdown":
                self.shutdown(keep_children=bool(req.get("keep_children")))
                return {"ok": True, "result": "shutting down"}
            if cmd == "reload":
                self.handle_reload()
                return {"ok": True, "result": "reloaded", "config_problem": self.config_problem}
        except KeyError as exc:
            return {"ok": False, "error": str(exc.args[0])}
        except ValueError as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": False, "error": f"unknown request {cmd[:40]!r}"}


def _exit_record(code: int | None, sig: int | None, when: float, kind: ExitKind, reason: str) -> dict[str, Any]:
    return {
        "code": code,
        "signal": _signame(sig),
        "at": when,
        "kind": kind.value,
        "reason": reason,
        "description": describe_exit(code, sig),
    }


def _digest(obj: object) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _signame(sig: int | None) -> str | int | None:
    if sig is None:
        return None
    try:
        return signal.Signals(sig).name
    except ValueError:
        return sig


def _note(path: Path, line: str) -> None:
    """Append hermesd's own line to a child's log (O_APPEND: never clobbers the child's)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n".encode())
        finally:
            os.close(fd)


def _flock_holder(path: Path) -> int | None:
    """The PID holding an flock on ``path``, from ``/proc/locks`` (the kernel's own answer).

    Asking the kernel avoids the window in which the winner holds the lock but has not yet
    written its PID anywhere.
    """
    try:
        st = path.stat()
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        parts = line.split()
        if len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == want and parts[4].isdigit():
            return int(parts[4])
    return None


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text()[:32].strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


