"""Who keeps a shared bot token or port: it changes hands only when its holder stops for good.

Random sequences of restarts (operator, graceful, forced), crashes (quick and after a healthy
run), hung kills, exit 75 and 78, outside stops, token edits, broken files, hermesd.yaml reloads
that restart or disable some profiles, folders removed and restored, spawn failures and time
passing, over three profiles that compete for one token and one port. The test keeps its own
account of ownership, from what it did and what the planner announced:

- a gateway is born with the claims its files had when it was spawned;
- its profile then owns those claims, until it stops for good: the operator stops it, its folder
  is removed, hermesd.yaml disables it, it is held (a ``held`` event), or it stops outside hermesd
  (a ``stopped`` event); or until it is born again without the claim.

Properties: a gateway is never born with a claim another profile owns; two live gateways never
share a claim; and an owner is never held because of the very claim it owns.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from profiles.snapshot import Claim
from supervisor.plan.policy import ExitKind, RestartPolicy
from tests.plan.world import TOKEN, World, facts

NAMES = ("alpha", "beta", "gamma")
PORT = Claim("port", "api_server", "port", "8642")
POOL = (TOKEN, PORT)


@pytest.fixture(autouse=True)
def _quiet_planner():
    """Thousands of steps: the planner's log lines would cost more than the steps themselves."""
    log = logging.getLogger("hermesd")
    level = log.level
    log.setLevel(logging.CRITICAL)
    yield
    log.setLevel(level)


claim_sets = st.sets(st.sampled_from(POOL)).map(lambda s: tuple(c for c in POOL if c in s))


class OwnershipMachine(RuleBasedStateMachine):
    @initialize(first=claim_sets, second=claim_sets, third=claim_sets, slots=st.sampled_from([1, 2, None]),
                auto_ready=st.booleans())
    def start(self, first, second, third, slots, auto_ready) -> None:
        self.files = {"alpha": first, "beta": second, "gamma": third}
        self.broken: set[str] = set()
        self.version = 0
        self.w = World.make(NAMES, claims=self.files, max_starting=slots, auto_ready=auto_ready, stop_timeout=5,
                            policy=RestartPolicy(initial_delay=1, max_delay=8, jitter=0.0, healthy_after=10))
        self.base = self.w.planner.settings
        self.claims_of: dict[tuple[str, int], tuple[Claim, ...]] = {}  # (profile, pid) -> what it was born with
        self.owner: dict[Claim, str] = {}
        self.released: dict[Claim, bool] = {}  # its owner stopped for good since it took it
        self.seen_events = 0
        self.account()

    # ------------------------------------------------------------------ the test's own account

    def release(self, name: str) -> None:
        for claim, who in self.owner.items():
            if who == name:
                self.released[claim] = True

    def account(self) -> None:
        """Walk the planner's events since the last step, in order: check each birth, follow each release."""
        for e in self.w.events[self.seen_events:]:
            name = e.get("profile")
            if e["type"] == "started":
                self.born(name, e["pid"])
            elif e["type"] == "held":
                for claim, who in self.owner.items():
                    if who == name and not self.released[claim]:
                        assert claim.describe() not in e["message"], f"owner {name} held for its own claim: {e}"
                self.release(name)
            elif e["type"] == "stopped" and e.get("by") == "outside":
                self.release(name)
        self.seen_events = len(self.w.events)

    def born(self, name: str, pid: int) -> None:
        claims = () if name in self.broken else self.files[name]
        for claim, who in list(self.owner.items()):
            if who == name and claim not in claims:
                del self.owner[claim]  # born again without it: given up
        for claim in claims:
            before = self.owner.get(claim)
            assert before in (None, name) or self.released[claim], (
                f"{name} was born with {claim.describe()} while {before} owns it and never stopped for good")
            for other, live in self.w.alive.items():
                if other != name and (other, live.pid) in self.claims_of:
                    assert claim not in self.claims_of[(other, live.pid)], f"{name} and {other} both use {claim}"
            if before != name:
                self.owner[claim], self.released[claim] = name, False
        self.claims_of[(name, pid)] = claims

    def present(self, name: str) -> bool:
        p = self.w.planner.profiles.get(name)
        return p is not None and p.present

    # ------------------------------------------------------------------ the world

    @rule(name=st.sampled_from(NAMES), claims=claim_sets, broken=st.booleans())
    def files_change(self, name, claims, broken) -> None:
        if not self.present(name):
            return
        self.version += 1
        self.files[name] = claims
        if broken:
            self.broken.add(name)
        else:
            self.broken.discard(name)
        problems = (f"/r/profiles/{name}/.env:1: broken",) if broken else ()
        self.w.run(self.w.planner.set_facts(name, facts(name, claims=claims, problems=problems,
                                                        digest=f"edit{self.version}")))
        self.account()

    @rule(name=st.sampled_from(NAMES), how=st.sampled_from(["crash", "killed", "exit75", "exit78", "outside"]),
          after=st.sampled_from([0.5, 30]))
    def gateway_ends(self, name, how, after) -> None:
        self.w.advance(after)
        self.account()
        if name not in self.w.alive:
            return
        code, sig, state = {"crash": (1, None, None), "killed": (None, 9, None), "exit75": (75, None, "stopped"),
                            "exit78": (78, None, "startup_failed"), "outside": (0, None, "stopped")}[how]
        self.w.exit(name, code, sig, state)
        self.account()

    @rule(name=st.sampled_from(NAMES))
    def hung(self, name) -> None:
        if name in self.w.alive:
            self.w.run(self.w.planner.kill_for(name, self.w.alive[name], ExitKind.HUNG, "test"))
            self.account()

    @rule(name=st.sampled_from(NAMES))
    def becomes_ready(self, name) -> None:
        if name in self.w.alive:
            self.w.ready(name)
            self.account()

    @rule(seconds=st.sampled_from([0.5, 2, 9, 31]))
    def time_passes(self, seconds) -> None:
        self.w.advance(seconds)
        self.account()

    @rule()
    def stopping_children_obey(self) -> None:
        self.w.obey_stops()
        self.account()

    @rule(name=st.sampled_from(NAMES))
    def next_spawn_fails(self, name) -> None:
        self.w.fail_next.add(name)

    @rule(name=st.sampled_from(NAMES))
    def next_spawn_finds_a_foreign_gateway(self, name) -> None:
        self.w.foreign_next[name] = 9000 + len(self.w.spawns)

    @rule(name=st.sampled_from(NAMES))
    def the_foreign_gateway_ends(self, name) -> None:
        self.w.run(self.w.planner.foreign_gone(name))
        self.account()

    @rule(keep=st.sets(st.sampled_from(NAMES), min_size=1))
    def profiles_folder_changes(self, keep) -> None:
        for name in NAMES:
            if name not in keep and self.present(name):
                self.release(name)
        served = [(n, facts(n).home) for n in NAMES if n in keep]
        self.w.run(self.w.planner.set_served(served))
        for n, _home in served:
            if self.w.planner.profiles[n].facts is None:
                self.broken.discard(n)
                self.w.run(self.w.planner.set_facts(n, facts(n, claims=self.files[n], digest=f"edit{self.version}")))
        self.account()

    @rule(restart=st.sets(st.sampled_from(NAMES)), disabled=st.sets(st.sampled_from(NAMES)))
    def hermesd_yaml_reloaded(self, restart, disabled) -> None:
        """A hermesd.yaml edit: profiles in ``restart`` get new settings (a restart), ``disabled`` stop."""
        self.version += 1
        specs = {**self.w.planner.settings.specs, **{n: f"s{self.version}" for n in restart}}
        for name in disabled - self.w.planner.settings.disabled:
            self.release(name)
        new = dataclasses.replace(self.base, specs=specs, disabled=frozenset(disabled))
        self.w.run(self.w.planner.set_settings(new, None))
        self.account()

    # ------------------------------------------------------------------ the operator

    @rule(name=st.sampled_from(NAMES), verb=st.sampled_from(["start", "stop", "restart", "graceful", "force"]))
    def operator(self, name, verb) -> None:
        if not self.present(name):
            return
        if verb == "start":
            _, actions = self.w.planner.request_start(name)
        elif verb == "stop":
            self.release(name)
            _, actions = self.w.planner.request_stop(name)
        else:
            _, actions = self.w.planner.request_restart(name, graceful=verb == "graceful", force=verb == "force")
        self.w.run(actions)
        self.account()

    # ------------------------------------------------------------------ invariants

    @invariant()
    def the_world_saw_no_misdirected_action(self) -> None:
        assert self.w.problems == []


TestOwnership = OwnershipMachine.TestCase
TestOwnership.settings = settings(max_examples=150, stateful_step_count=40)


def test_the_property_sees_ownership_move():
    """Not vacuous: in the issue's sequence the token does change hands (alpha gives it up in its
    files, beta takes it), and the account above follows it."""
    m = OwnershipMachine()
    m.start((TOKEN,), (TOKEN,), (), 2, True)
    assert m.owner == {TOKEN: "alpha"}
    m.files_change("alpha", (), False)
    m.stopping_children_obey()
    assert m.owner == {TOKEN: "beta"}
    m.files_change("alpha", (TOKEN,), False)
    m.stopping_children_obey()
    for step in (lambda: m.operator("beta", "restart"), lambda: m.gateway_ends("beta", "crash", 30),
                 lambda: m.hermesd_yaml_reloaded({"beta"}, set())):
        step()
        m.stopping_children_obey()
        m.time_passes(9)
        assert m.owner == {TOKEN: "beta"}
    m.operator("beta", "stop")  # for good: alpha, running without the token, restarts into it
    m.stopping_children_obey()
    m.stopping_children_obey()
    assert m.owner == {TOKEN: "alpha"}
    m.teardown()
