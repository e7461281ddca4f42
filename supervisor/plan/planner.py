"""The planner: every decision the daemon makes, as a pure function of state and one event.

The loop (:mod:`supervisor.daemon.loop`) turns the world into calls here (a child exited, a
profile's files were read, a timer fired, the operator asked for something) and performs the
actions each call returns (spawn, signal, kill, schedule, save, emit). Time and randomness are
injected and nothing here touches a file, a process or a socket, so every rule, and every
interleaving of events, is tested in-process without sleeping (``tests/plan/``).

Invariants (checked by the state-machine tests): at most one child per profile, alive or being
spawned; signals only ever name the child the planner holds; a profile that should run and does
not has a reason (a hold, a retry time, a start slot it waits for); no exit, 75 included, restarts a
profile at once twice without time passing; backoff never exceeds the cap.
"""

from __future__ import annotations

import logging
import random
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profiles.snapshot import ProfileFacts
from profiles.upstream.process import GatewayState
from supervisor.plan import model as m
from supervisor.plan import words
from supervisor.plan.model import Child, Ident, Profile
from supervisor.plan.others import OtherGateways
from supervisor.plan.policy import (
    KILL_WAIT,
    OUTSIDE,
    Action,
    ExitFacts,
    ExitKind,
    RestartPolicy,
    classify_exit,
    decide,
    describe_exit,
    signame,
    stop_timeout_for,
)
from supervisor.plan.verdict import Candidate, Hold, HoldKind, ReleaseRules, judge

if TYPE_CHECKING:
    from supervisor.hermes.codeid import CodeId

log = logging.getLogger("hermesd")

OPERATOR = "stopped by operator"
_CURED_BY_CONFIG = frozenset({HoldKind.STARTUP_FAILED, HoldKind.ISOLATION, HoldKind.SERVED_ELSEWHERE,
                              HoldKind.MULTIPLEXING})


@dataclass(frozen=True, slots=True)
class Settings:
    """What the planner needs from hermesd.yaml, already validated."""

    policy: RestartPolicy = field(default_factory=RestartPolicy)
    disabled: frozenset[str] = frozenset()
    stop_timeout: float | None = None  # every profile; None: upstream's max(60, drain + 30)
    stop_timeouts: Mapping[str, float] = field(default_factory=dict)  # per profile
    specs: Mapping[str, str] = field(default_factory=dict)  # per profile: digest of its hermesd.yaml settings
    default_spec: str = ""  # the same for profiles hermesd.yaml does not name
    max_starting: int | None = 2  # gateways in start-up at once (None: no bound)
    start_slot_s: float = 60.0  # a start-up slot is given back after this long without "running"
    release: ReleaseRules | None = None  # what the installed release asks of the profiles' files

    def enabled(self, name: str) -> bool:
        return name not in self.disabled

    def stop_timeout_for(self, name: str, facts: ProfileFacts | None) -> float:
        return stop_timeout_for(self.stop_timeouts.get(name), self.stop_timeout, facts.drain_s if facts else 0.0)


class Planner(OtherGateways):
    """Desired vs actual, per profile; see the module docstring."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        clock: Callable[[], float],
        wall: Callable[[], float],
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.clock = clock
        self.wall = wall
        self.rng = rng or random.Random()
        self.profiles: dict[str, Profile] = {}
        self.order: list[str] = []
        self.root_hold: Hold | None = None
        self.shutting_down = False
        self.keep_children = False
        self.live = False  # reconciling starts once the initial read and adoption are done
        self._out: list[m.Action] = []

    # ------------------------------------------------------------------------- queries

    def spec(self, p: Profile) -> str:
        """Everything a spawn of ``p`` would use, as its files' and its settings' digests; a difference
        means restart. Asked for every profile at every step, so it joins two digests, not hashes again."""
        own = self.settings.specs.get(p.name, self.settings.default_spec)
        return f"{p.facts.digest if p.facts else ''}/{own}"

    def wants(self, p: Profile) -> bool:
        return p.present and not self.shutting_down and self.settings.enabled(p.name) and p.down is None

    def state_of(self, p: Profile) -> tuple[str, str | None]:
        """``(state, reason)`` as ``status`` shows it."""
        return words.state_of(p, enabled=self.settings.enabled(p.name), shutting_down=self.shutting_down)

    def starting_count(self) -> int:
        return sum(1 for p in self.profiles.values() if p.spawning or (
            p.child is not None and not p.child.ready and not p.child.stop_requested))

    # ------------------------------------------------------------------------- inputs: configuration

    def set_settings(self, settings: Settings, root_hold: Hold | None) -> list[m.Action]:
        """hermesd.yaml was (re)loaded; a config change may cure holds that files earned."""
        changed = settings != self.settings or root_hold != self.root_hold
        self.settings, self.root_hold = settings, root_hold
        if changed:
            for p in self.profiles.values():
                _cure(p)
        return self._done()

    def set_served(self, served: Sequence[tuple[str, Path]]) -> list[m.Action]:
        """The profiles folder was listed: new profiles appear, removed ones go away."""
        seen = set()
        self.order = [name for name, _ in served]
        for name, home in served:
            seen.add(name)
            p = self.profiles.get(name)
            if p is None:
                self.profiles[name] = Profile(name, Path(home))
                log.info("profile %s: found at %s", name, home)
                continue
            if not p.present or p.home != Path(home):
                log.info("profile %s: found at %s", name, home)
                p.home, p.present, p.facts = Path(home), True, None
        for name, p in self.profiles.items():
            if name not in seen and p.present:
                p.present = False
                log.info("profile %s: folder gone", name)
        return self._done()

    def set_facts(self, name: str, facts: ProfileFacts) -> list[m.Action]:
        """A profile's files were (re)read."""
        p = self.profiles.get(name)
        if p is None or not p.present or p.home != facts.home:
            return []
        before = p.facts.digest if p.facts else None
        p.facts = facts
        if facts.digest != before:
            if before is not None:
                log.info("profile %s: files changed", name)
            if facts.problems:
                log.error("profile %s: %s", name, "; ".join(facts.problems))
            _cure(p)
            # Another profile's files decide whether a gateway folds it in (gateway.standalone).
            for q in self.profiles.values():
                if q.runtime_hold is not None and q.runtime_hold.kind is HoldKind.MULTIPLEXING:
                    q.runtime_hold = None
        return self._done()

    # ------------------------------------------------------------------------- inputs: start-up

    def restore(self, name: str, home: Path, *, present: bool, restarts: int, failures: int,
                last_exit: dict[str, Any] | None, down: str | None) -> None:
        """History from the state file of the previous hermesd."""
        p = self.profiles.setdefault(name, Profile(name, Path(home), present=present))
        p.restarts, p.failures, p.last_exit, p.down = restarts, failures, last_exit, down

    def adopt(self, name: str, home: Path, ident: Ident, started_wall: float, *,
              stopping: bool = False, then_restart: bool = False, code: CodeId | None = None) -> list[m.Action]:
        """A gateway the previous hermesd started (with ``code``, as it recorded) is running: take it over."""
        p = self.profiles.setdefault(name, Profile(name, Path(home)))
        p.home = Path(home)
        started = self.clock() - max(0.0, self.wall() - started_wall)
        p.child = Child(ident, False, started, started_wall, spec="", ready=True, code=code)
        self._emit("adopted", name, pid=ident.pid)
        log.info("profile %s: adopted running gateway PID %d", name, ident.pid)
        if stopping:
            why = f"finishing the {'restart' if then_restart else 'stop'} the previous hermesd began"
            log.info("profile %s: %s", name, why)
            self._stop(p, then_restart=then_restart, why=why)
        return self._take()

    def ended_while_down(self, name: str, ident: Ident, started_wall: float, *, stopping: bool,
                         then_restart: bool) -> list[m.Action]:
        """The gateway the previous hermesd recorded is gone: decide about its end as if we had seen it."""
        p = self.profiles.get(name)
        if p is None:
            return []
        log.info("profile %s: gateway PID %d ended while hermesd was not running", name, ident.pid)
        ghost = Child(ident, False, self.clock() - max(0.0, self.wall() - started_wall), started_wall, spec="",
                      stop_requested=stopping, then_restart=then_restart)
        self._conclude(p, ghost, ExitFacts(None, None, stopping))
        return self._take()

    def start(self) -> list[m.Action]:
        """Initial files read and adoption done: from now on every event reconciles."""
        self.live = True
        for p in self.profiles.values():
            if p.child is not None and not p.child.spec:
                p.child.spec = self.spec(p)
                p.child.claims = p.kept = p.facts.claims if p.facts else ()
        return self._done()

    # ------------------------------------------------------------------------- inputs: processes

    def spawned(self, name: str, ident: Ident, *, output_discarded: bool = False, argv0: str = "",
                started_wall: float | None = None, code: CodeId | None = None) -> list[m.Action]:
        p = self.profiles[name]
        p.spawning, p.last_start_problem, p.retry_at, p.retry_at_wall = False, None, None, None
        wall = self.wall() if started_wall is None else started_wall
        p.child = Child(ident, True, self.clock(), wall, self.spec(p), p.facts.claims if p.facts else (),
                        output_discarded=output_discarded, code=code)
        p.kept = p.child.claims
        self._emit("started", name, pid=ident.pid, argv0=argv0)
        log.info("profile %s: started PID %d", name, ident.pid)
        self._out += [m.Schedule(name, "start_slot", self.settings.start_slot_s), m.Save()]
        return self._done()

    def spawn_failed(self, name: str, error: str) -> list[m.Action]:
        """The gateway could not be started (exec failed, log unwritable, out of descriptors…): back off."""
        p = self.profiles[name]
        p.spawning = False
        p.last_start_problem = error
        log.error("profile %s: cannot start the gateway: %s", name, error)
        now = self.clock()
        self._conclude(p, Child(Ident(0, 0), True, now, self.wall(), spec=""),
                       ExitFacts(None, None, False, killed_for=ExitKind.SPAWN_ERROR), detail=error)
        return self._done()

    def spawn_refused(self, name: str, reason: str) -> list[m.Action]:
        """The gateway may not be started as configured (its confinement cannot be set up): hold it."""
        p = self.profiles[name]
        p.spawning = False
        p.runtime_hold = Hold(HoldKind.ISOLATION, reason)
        return self._done()

    def child_exited(self, name: str, ident: Ident, code: int | None, sig: int | None,
                     gateway_state: str | None = None, restart_requested: bool = False, *,
                     killed_for: ExitKind | None = None, detail: str = "",
                     unconfined: str | None = None, stated: bool = True,
                     replaced_by: int | None = None, startup_watchdog: bool = False) -> list[m.Action]:
        """The child ``ident`` ended. The keywords are what the loop read about that end
        (:class:`supervisor.daemon.exit_report.ExitReport` says what each means); an ``unconfined``
        child never ran the gateway (a hold, not a crash loop), and one ``replaced_by`` a gateway
        hermesd did not start is held for that gateway."""
        p = self.profiles.get(name)
        if p is None or p.child is None or p.child.ident != ident:
            return []
        c = p.child
        p.child = None
        self._out += [m.Cancel(name, "kill"), m.Cancel(name, "release"), m.Cancel(name, "start_slot"), m.Sweep(name)]
        if c.killed_for is None and killed_for is not None:
            c.killed_for, c.kill_detail = killed_for, detail
        facts = ExitFacts(code, sig, c.stop_requested, gateway_state, restart_requested, c.killed_for, stated,
                          startup_watchdog)
        self._conclude(p, c, facts, code=code, sig=sig, detail=c.kill_detail or (detail if killed_for is None else ""),
                       replaced_by=replaced_by)
        if unconfined is not None and not c.stop_requested:
            p.runtime_hold = Hold(HoldKind.ISOLATION, unconfined)
            self._cancel_retry(p)
        return self._done()

    def gateway_reported(self, name: str, pid: int, state: str | None,
                         platforms: Mapping[str, Mapping[str, Any]] | None = None) -> list[m.Action]:
        """The child's ``gateway_state.json`` changed: readiness (frees a start-up slot) and platform states."""
        p = self.profiles.get(name)
        c = p.child if p is not None else None
        if p is None or c is None or c.ident.pid != pid:
            return []
        if state == GatewayState.RUNNING and not c.ready:
            c.ready = True
            self._out.append(m.Cancel(name, "start_slot"))
            self._emit("ready", name, pid=pid)
            if p.failures:
                self._emit("recovered", name, after_failures=p.failures)
        for plat, info in (platforms or {}).items():
            now = (info.get("state"), info.get("error_code"), info.get("error_message"))
            if p.platform_states.get(plat) != now:
                p.platform_states[plat] = now
                self._emit("platform", name, platform=plat, state=now[0], error_code=now[1], error_message=now[2])
        return self._done()

    def kill_for(self, name: str, ident: Ident, kind: ExitKind, detail: str, **event: Any) -> list[m.Action]:
        """hermesd kills a running gateway on purpose (hung, over a limit); its exit is recorded as ``kind``."""
        p = self.profiles.get(name)
        if p is None or p.child is None or p.child.ident != ident or p.child.killed_for is not None:
            return []
        p.child.killed_for, p.child.kill_detail = kind, detail
        log.warning("profile %s: killing PID %d: %s", name, ident.pid, detail)
        self._emit("hung_kill" if kind is ExitKind.HUNG else "limit_kill", name, pid=ident.pid, **event)
        self._out += [m.KillTree(name, ident), m.Schedule(name, "release", KILL_WAIT), m.Save()]
        return self._take()

    def timer(self, name: str, which: str) -> list[m.Action]:
        p = self.profiles.get(name)
        if p is None:
            return []
        if which == "retry":
            if p.retry_at is None:
                return []
            p.retry_at = p.retry_at_wall = None
        elif which == "kill":
            c = p.child
            if c is None or not (c.stop_requested or c.killed_for is not None):
                return []
            log.warning("profile %s: PID %d did not stop in time; SIGKILL to its tree", name, c.ident.pid)
            self._out += [m.KillTree(name, c.ident), m.Schedule(name, "release", KILL_WAIT)]
            return self._take()
        elif which == "release":
            return self._release(p)
        elif which == "start_slot":
            if p.child is None or p.child.ready:
                return []
            p.child.ready = True  # not "running" yet, but it no longer holds back other start-ups
        return self._done()

    def _release(self, p: Profile) -> list[m.Action]:
        """SIGKILLed ``KILL_WAIT`` s ago and still there (uninterruptible sleep): its SIGKILL stays pending and
        ends it when it wakes; stop waiting, so that no stop, restart or exit waits on the kernel forever."""
        if (c := p.child) is None or not (c.stop_requested or c.killed_for is not None):
            return []
        detail = f"PID {c.ident.pid} did not end {KILL_WAIT:g}s after SIGKILL (uninterruptible sleep?); left behind"
        log.error("profile %s: %s", p.name, detail)
        c.stop_reason, p.child = f"{c.stop_reason or 'stopped by hermesd'}; {detail}", None  # a planned end's record
        self._out += [m.Release(p.name, c.ident), m.Cancel(p.name, "start_slot"), m.Sweep(p.name)]
        self._conclude(p, c, ExitFacts(None, signal.SIGKILL, c.stop_requested, None, False, c.killed_for, False),
                       sig=signal.SIGKILL, detail=detail)
        return self._done()

    # ------------------------------------------------------------------------- inputs: the operator

    def request_start(self, name: str) -> tuple[str, list[m.Action]]:
        p = self.profiles[name]
        p.down = None
        _cure(p)
        p.failures = 0
        self._cancel_retry(p)
        self._out.append(m.Save())
        actions = self._done()
        state, reason = self.state_of(p)
        return (state if reason is None else f"{state}: {reason}"), actions

    def request_stop(self, name: str) -> tuple[str, list[m.Action]]:
        p = self.profiles[name]
        if p.down != OPERATOR:
            p.down = OPERATOR
            self._emit("stopped", name, by="operator")
        self._out.append(m.Save())
        actions = self._done()
        return ("stopping" if p.child else "stopped"), actions

    def check_restart(self, name: str) -> Hold | None:
        """What would keep ``name`` from starting again with its files as they are now (nginx -t)."""
        p = self.profiles[name]
        return self._judge().get(name) or p.runtime_hold

    def request_restart(self, name: str, *, graceful: bool = False, force: bool = False) -> tuple[str, list[m.Action]]:
        """Restart one profile; refused (the running gateway untouched) when its files could not start it."""
        p = self.profiles[name]
        if p.child is None:
            return self.request_start(name)
        hold = self.check_restart(name)
        if hold is not None and not force:
            return (f"refused: {hold.kind.value}: {hold.message} (the running gateway keeps its last good "
                    "configuration; --force restarts it anyway)"), []
        p.down = None
        self._stop(p, graceful=graceful, then_restart=True,
                   why="restarted by the operator" + (" (graceful: drained first)" if graceful else ""))
        return "restarting", self._done()

    def shutdown(self, *, keep_children: bool) -> list[m.Action]:
        if self.shutting_down and not keep_children:
            return []
        self.shutting_down, self.keep_children = True, keep_children
        self._emit("daemon_stopping", None, keep_children=keep_children)
        if keep_children:
            self._out += [m.Save(), m.Finish()]
            return self._take()
        for p in self.profiles.values():
            self._cancel_retry(p)
        return self._done()

    # ------------------------------------------------------------------------- the step

    def _judge(self, names: list[str] | None = None) -> dict[str, Hold | None]:
        # A gateway whose profile is no longer wanted is stopped by this very step (judged first).
        candidates = [
            Candidate(p.facts, p.name, active=p.child is not None or p.retry_at is not None or p.kept is not None,
                      running=p.child is not None, wants=(want := self.wants(p)) and p.runtime_hold is None,
                      in_use=p.child.claims if p.child is not None else p.kept or (),
                      doing=words.doing(p) if want or p.child is None else "stopping")
            for name in (_serving_order(self.order, self.profiles) if names is None else names)
            if (p := self.profiles.get(name)) is not None and (p.present or p.child is not None)
        ]
        return judge(candidates, self.root_hold, self.settings.release)

    def _done(self) -> list[m.Action]:
        """Reconcile every profile, hand out start-up slots, and return the actions collected."""
        if self.live:
            names = _serving_order(self.order, self.profiles)
            verdicts = self._judge(names)
            for name in names:
                p = self.profiles.get(name)
                if p is not None:
                    self._reconcile(p, verdicts.get(name))
            self._start_queued()
            self._forget_gone()
            if self.shutting_down and all(p.child is None and not p.spawning for p in self.profiles.values()):
                self._out += [m.Save(), m.Finish()]
        return self._take()

    def _take(self) -> list[m.Action]:
        out, self._out = self._out, []
        return out

    def _reconcile(self, p: Profile, judged: Hold | None) -> None:
        want = self.wants(p)
        c = p.child
        if c is not None:
            # A running gateway is never "held": a broken or conflicting edit leaves it on its last good files.
            self._set_hold(p, None)
            p.queued = False
            changed = want and not c.stop_requested and p.facts is not None and c.spec != self.spec(p)
            self._set_pending(p, judged if changed else None)
            if not want:
                if not c.stop_requested:
                    self._stop(p, why=words.why_down(p, enabled=self.settings.enabled(p.name),
                                                     shutting_down=self.shutting_down))
            elif changed and judged is None and p.runtime_hold is None:
                why = words.what_changed(c.spec, self.spec(p))
                log.info("profile %s: %s; restarting it", p.name, why)
                self._stop(p, then_restart=True, why=f"restarting: {why}")
            return
        self._set_pending(p, None)
        if self.shutting_down:  # nothing starts any more, and a stop cures no hold: it stands as it was
            p.queued = False
            return
        hold = (p.runtime_hold or judged) if want else None
        self._set_hold(p, hold)
        if not want or hold is not None:
            p.kept = None  # stopped for good: what its gateway had may go to another profile
        if p.spawning:
            return
        if not want or hold is not None or p.facts is None:
            p.queued = False
            if not want:
                self._cancel_retry(p)
            return
        if p.retry_at is None:
            p.queued = True

    def _set_hold(self, p: Profile, hold: Hold | None) -> None:
        """Record the hold in force; one ``held`` event per incident (a new kind), never one per rewording
        (the holder of a token going from "running" to "restarting" is the same hold)."""
        if hold == p.hold:
            return
        before, p.hold = p.hold, hold
        self._out.append(m.Save())
        if hold is not None and before is not None and hold.kind is before.kind:
            return
        if hold is not None:
            log.warning("profile %s: held: %s", p.name, hold.message)
            self._emit("held", p.name, kind=hold.kind.value, message=hold.message)
        elif before is not None:
            log.info("profile %s: hold released (%s)", p.name, before.kind.value)
            self._emit("released", p.name, kind=before.kind.value, why="cured")

    def _set_pending(self, p: Profile, hold: Hold | None) -> None:
        before, p.pending = p.pending, hold
        if hold is not None and (before is None or before.kind is not hold.kind):
            log.warning("profile %s: files changed, but its gateway keeps its last good configuration: a restart "
                        "would be held: %s: %s", p.name, hold.kind.value, hold.message)

    def _start_queued(self) -> None:
        room = self.settings.max_starting
        busy = self.starting_count()
        for name in self.order:
            p = self.profiles.get(name)
            if p is None or not p.queued:
                continue
            if room is not None and busy >= room:
                return
            p.queued, p.spawning = False, True
            busy += 1
            self._out.append(m.Spawn(name, self.spec(p)))

    def _forget_gone(self) -> None:
        for name in [n for n, p in self.profiles.items() if not p.present and p.child is None and not p.spawning]:
            self._cancel_retry(self.profiles.pop(name))

    def _cancel_retry(self, p: Profile) -> None:
        if p.retry_at is not None:
            p.retry_at = p.retry_at_wall = None
            self._out.append(m.Cancel(p.name, "retry"))

    def _stop(self, p: Profile, *, graceful: bool = False, then_restart: bool = False, why: str = "") -> None:
        c = p.child
        assert c is not None
        c.then_restart = c.then_restart or then_restart
        if c.stop_requested:
            return
        c.stop_requested = True
        c.stop_reason = why
        if graceful:
            self._out.append(m.Signal(p.name, c.ident, signal.SIGUSR1))  # upstream drains, then exits 75
        else:
            self._out.append(m.Signal(p.name, c.ident, signal.SIGTERM, planned=True))
        timeout = self.settings.stop_timeout_for(p.name, p.facts)
        log.info("profile %s: stopping PID %d (timeout %.0fs)", p.name, c.ident.pid, timeout)
        self._out += [m.Schedule(p.name, "kill", timeout), m.Save()]

    def _conclude(self, p: Profile, c: Child, facts: ExitFacts, *, code: int | None = None,
                  sig: int | None = None, detail: str = "", replaced_by: int | None = None) -> None:
        """Classify the end of ``c`` and decide: restart now or later, hold, or stay down."""
        kind = classify_exit(facts)
        if kind is not ExitKind.EXTERNAL_STOP:
            replaced_by = None
        uptime = max(0.0, self.clock() - c.started)
        what = describe_exit(code, sig, kind) if kind is not ExitKind.SPAWN_ERROR else "could not be started"
        now = self.wall()
        self._out.append(m.Save())
        if kind is ExitKind.PLANNED:
            decision = None
            reason = c.stop_reason or "stopped by hermesd"
            log.info("profile %s: PID %d stopped (%s): %s", p.name, c.ident.pid, what, reason)
        else:
            rules = self.settings.release
            decision = decide(kind, failures=p.failures, uptime=uptime, policy=self.settings.policy, rng=self.rng,
                              hold_attach=rules is None or not rules.retry_attach)
            p.failures = decision.failures
            reason = f"{decision.reason}: {detail}" if detail else decision.reason
            if replaced_by is not None:
                reason = f"replaced by a gateway hermesd did not start (PID {replaced_by})"
            if kind is not ExitKind.SPAWN_ERROR:
                log.warning("profile %s: PID %d %s after %.1fs: %s", p.name, c.ident.pid, what, uptime, reason)
        p.last_exit = {"code": code, "signal": signame(sig), "at": now, "kind": kind.value, "reason": reason,
                       "description": what, "uptime_s": round(uptime, 1)}
        self._emit("exited", p.name, pid=c.ident.pid or None, code=code, signal=signame(sig), kind=kind.value,
                   reason=reason, uptime_s=round(uptime, 1))
        if decision is None:
            if c.then_restart:
                p.restarts += 1
                p.failures = 0
            return
        if decision.action is Action.RESTART:
            if kind is not ExitKind.SPAWN_ERROR:
                p.restarts += 1
            if decision.delay > 0 and not self.shutting_down:
                p.retry_at = self.clock() + decision.delay
                p.retry_at_wall = now + decision.delay
                self._out.append(m.Schedule(p.name, "retry", decision.delay))
                self._emit("backoff", p.name, delay_s=round(decision.delay, 3), failures=p.failures,
                           retry_at=p.retry_at_wall)
                log.info("profile %s: retry in %.1fs", p.name, decision.delay)
        elif decision.action is Action.HOLD and kind is ExitKind.ATTACHED:
            p.runtime_hold = Hold(HoldKind.SERVED_ELSEWHERE, reason)
        elif decision.action is Action.HOLD:
            p.runtime_hold = Hold(HoldKind.STARTUP_FAILED, f"gateway {what}: {decision.reason}")
        elif replaced_by is not None:
            self._taken_over(p, replaced_by)
        else:
            p.down = OUTSIDE
            self._emit("stopped", p.name, by="outside")

    def _emit(self, event_type: str, profile: str | None, **fields: Any) -> None:
        self._out.append(m.Emit({"type": event_type, "profile": profile, **fields}))


def _serving_order(order: list[str], profiles: Mapping[str, Profile]) -> list[str]:
    """Every profile, in serving order first (the profiles folder's), then the ones no longer listed
    (a set: this runs at every step, for every profile)."""
    listed = set(order)
    return [*order, *(n for n in profiles if n not in listed)]


def _cure(p: Profile) -> None:
    """Files, settings or the operator's start changed: a run-time hold they may cure goes."""
    if p.runtime_hold is not None and p.runtime_hold.kind in _CURED_BY_CONFIG:
        p.runtime_hold = None
