"""Random event sequences against the planner, checking its invariants after every step.

Events: exits of every kind (75 with and without a state file naming the child), hung kills,
operator start/stop/restart, file edits (fine, broken, sharing a token), spawn failures, foreign
gateways (before a start and beside a running child), a child reporting that it serves another
profile, time passing, profiles appearing and disappearing, shutdown. Invariants: never two
children for one profile; a signal or kill only ever names the live child; a profile that should
run and does not always has a reason; no exit restarts a profile at once twice without time
passing; backoff never exceeds its cap; after shutdown, once every child is gone, the planner
says it is finished.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from supervisor.plan.policy import KILL_WAIT, ExitKind
from tests.plan.world import TOKEN, World, facts

NAMES = ("default", "a", "b")
CAP = 8.0


class PlannerMachine(RuleBasedStateMachine):
    @initialize(slots=st.sampled_from([1, 2, None]), auto_ready=st.booleans())
    def start(self, slots: int | None, auto_ready: bool) -> None:
        self.w = World.make(NAMES, max_starting=slots, auto_ready=auto_ready, stop_timeout=5)
        self.version = 0
        self.immediate: dict[tuple[str, float], int] = {}  # respawns at once after an exit, per instant
        self.shutdown_at: float | None = None

    # ------------------------------------------------------------------ the world

    @rule(name=st.sampled_from(NAMES), code=st.sampled_from([0, 1, 75, 78, None]),
          state=st.sampled_from([None, "stopped", "running", "startup_failed"]), stated=st.booleans())
    def child_exits(self, name: str, code: int | None, state: str | None, stated: bool) -> None:
        if name in self.w.alive:
            before = len(self.w.spawns)
            child = self.w.planner.profiles[name].child
            planned = child is not None and child.stop_requested  # hermesd's own stop ending: its restart
            self.w.exit(name, code, 9 if code is None else None, state, stated=stated or state is not None)
            if name in self.w.alive and len(self.w.spawns) > before and not planned:
                key = (name, self.w.now)
                self.immediate[key] = self.immediate.get(key, 0) + 1

    @rule(name=st.sampled_from(NAMES), other=st.sampled_from(NAMES))
    def gateway_reports_serving_another(self, name: str, other: str) -> None:
        if name in self.w.alive and other != name:
            self.w.run(self.w.planner.served(name, self.w.alive[name].pid, (other,), "state file"))

    @rule(name=st.sampled_from(NAMES))
    def a_second_gateway_appears_beside_ours(self, name: str) -> None:
        if name in self.w.alive:
            self.w.run(self.w.planner.rival(name, 9000 + NAMES.index(name), "its gateway.pid"))

    @rule(name=st.sampled_from(NAMES))
    def becomes_ready(self, name: str) -> None:
        if name in self.w.alive:
            self.w.ready(name)

    @rule(name=st.sampled_from(NAMES), kind=st.sampled_from([ExitKind.HUNG, ExitKind.MEMORY_LIMIT]))
    def killed_for_a_reason(self, name: str, kind: ExitKind) -> None:
        if name in self.w.alive:
            self.w.run(self.w.planner.kill_for(name, self.w.alive[name], kind, "test"))

    @rule(name=st.sampled_from(NAMES), stuck=st.booleans())
    def sigkill_stops_working(self, name: str, stuck: bool) -> None:
        """The profile's gateway enters (or leaves) uninterruptible sleep: a SIGKILL does not end it."""
        (self.w.unkillable.add if stuck else self.w.unkillable.discard)(name)

    @rule(seconds=st.sampled_from([0.5, 1, 3, 9, 31, 100]))
    def time_passes(self, seconds: float) -> None:
        self.w.advance(seconds)

    @rule()
    def stopping_children_obey(self) -> None:
        self.w.obey_stops()

    @rule(name=st.sampled_from(NAMES))
    def next_spawn_fails(self, name: str) -> None:
        self.w.fail_next.add(name)

    @rule(name=st.sampled_from(NAMES))
    def a_foreign_gateway_takes_it(self, name: str) -> None:
        self.w.foreign_next[name] = 9000 + len(self.w.spawns)

    @rule(name=st.sampled_from(NAMES))
    def the_foreign_gateway_ends(self, name: str) -> None:
        self.w.run(self.w.planner.foreign_gone(name))

    @rule(name=st.sampled_from(NAMES), kind=st.sampled_from(["fine", "broken", "token"]))
    def files_change(self, name: str, kind: str) -> None:
        self.immediate.clear()  # a configuration change restarts afresh (failures cleared by the planned stop)
        if name not in self.w.planner.profiles or not self.w.planner.profiles[name].present:
            return
        self.version += 1
        f = facts(name, digest=f"v{self.version}", claims=(TOKEN,) if kind == "token" else (),
                  problems=(f"/r/{name}/.env:1: broken",) if kind == "broken" else ())
        self.w.run(self.w.planner.set_facts(name, f))

    @rule(keep=st.sets(st.sampled_from(NAMES[1:])))
    def profiles_folder_changes(self, keep: set[str]) -> None:
        self.immediate.clear()  # a profile that comes back is a new profile, with no failures
        served = [(n, facts(n).home) for n in NAMES if n == "default" or n in keep]
        self.w.run(self.w.planner.set_served(served))
        for n, _home in served:
            if self.w.planner.profiles[n].facts is None:
                self.w.run(self.w.planner.set_facts(n, facts(n)))

    # ------------------------------------------------------------------ the operator

    @rule(name=st.sampled_from(NAMES), verb=st.sampled_from(["start", "stop", "restart", "graceful", "force"]))
    def operator(self, name: str, verb: str) -> None:
        self.immediate.clear()  # "hermesd start" clears a backoff on purpose
        p = self.w.planner.profiles.get(name)
        if p is None or not p.present:
            return
        if verb == "start":
            _, actions = self.w.planner.request_start(name)
        elif verb == "stop":
            _, actions = self.w.planner.request_stop(name)
        else:
            _, actions = self.w.planner.request_restart(name, graceful=verb == "graceful", force=verb == "force")
        self.w.run(actions)

    @precondition(lambda self: not self.w.planner.shutting_down)
    @rule(keep=st.booleans())
    def shutdown(self, keep: bool) -> None:
        self.shutdown_at = self.w.now
        self.w.run(self.w.planner.shutdown(keep_children=keep))

    # ------------------------------------------------------------------ invariants

    @invariant()
    def the_world_saw_no_misdirected_action(self) -> None:
        assert self.w.problems == []

    @invariant()
    def one_child_per_profile_and_the_planner_knows_it(self) -> None:
        for name, ident in self.w.alive.items():
            p = self.w.planner.profiles.get(name)
            assert p is not None and p.child is not None and p.child.ident == ident, (name, ident)
        for name, p in self.w.planner.profiles.items():
            if p.child is not None:
                assert self.w.alive.get(name) == p.child.ident

    @invariant()
    def down_always_has_a_reason(self) -> None:
        planner = self.w.planner
        for p in planner.profiles.values():
            if planner.wants(p) and p.child is None and not p.spawning:
                assert p.hold is not None or p.retry_at is not None or p.queued or p.facts is None, p
                state, reason = planner.state_of(p)
                assert state in ("held", "backoff", "starting") and (state != "held" or reason)

    @invariant()
    def no_exit_restarts_at_once_twice_without_time_passing(self) -> None:
        """Whatever the exit (75 included), a second immediate respawn needs time, an operator or a file edit.

        Counted: respawns after exits hermesd did not ask for. The end of a stop hermesd asked for (an
        operator's restart, a file edit, a rival) starting the profile again is that request carried
        out, not a restart after a failure."""
        assert all(n <= 1 for n in self.immediate.values()), self.immediate

    @invariant()
    def backoff_is_bounded(self) -> None:
        for (_, which), when in self.w.timers.items():
            if which == "retry":
                assert when - self.w.now <= CAP + 1e-9

    @invariant()
    def shutdown_finishes(self) -> None:
        planner = self.w.planner
        if planner.shutting_down and not planner.keep_children and not self.w.alive:
            assert self.w.finished

    @invariant()
    def shutdown_ends_in_bounded_time_whatever_the_children_do(self) -> None:
        """SIGTERM ignored, SIGKILL ineffective (uninterruptible sleep): the stop timeout (5 s here)
        plus ``KILL_WAIT`` after hermesd is told to stop, it has finished."""
        if self.shutdown_at is not None and not self.w.planner.keep_children \
                and self.w.now - self.shutdown_at >= 5 + KILL_WAIT:
            assert self.w.finished, (self.w.alive, self.w.timers)


TestPlannerMachine = PlannerMachine.TestCase
TestPlannerMachine.settings = settings(max_examples=150, stateful_step_count=40)
