"""A fake world for the planner: processes, timers and a clock, all in memory.

It performs the planner's actions the way the daemon's loop does (a spawn is answered at once with
``spawned``, ``spawn_failed`` or ``foreign``; timers fire when the test advances the clock) and
checks, on every action, what the daemon relies on: a spawn never lands on a profile that already
has a live child, and a signal or kill only ever names the child that is alive for that profile.
"""

from __future__ import annotations

import itertools
import random
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiles.snapshot import Claim, ProfileFacts
from supervisor.plan import model as m
from supervisor.plan.model import Ident
from supervisor.plan.planner import Planner, Settings
from supervisor.plan.policy import RestartPolicy


def facts(name: str, *, claims: tuple[Claim, ...] = (), problems: tuple[str, ...] = (),
          digest: str = "v1", home: Path | None = None, standalone: bool = False, parked: bool = False) -> ProfileFacts:
    home = home or (Path("/r") if name == "default" else Path("/r/profiles") / name)
    return ProfileFacts(name, home, {} if not problems else None, {} if not problems else None, problems,
                        claims if not problems else (), (), (), 0.0, digest, standalone=standalone, parked=parked)


TOKEN = Claim("credential", "telegram", "telegram-bot-token", "fp1")


@dataclass
class World:
    planner: Planner
    now: float = 1000.0
    alive: dict[str, Ident] = field(default_factory=dict)
    timers: dict[tuple[str, str], float] = field(default_factory=dict)
    signals: list[tuple[str, Ident, int]] = field(default_factory=list)
    kills: list[tuple[str, Ident]] = field(default_factory=list)
    spawns: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    fail_next: set[str] = field(default_factory=set)
    foreign_next: dict[str, int] = field(default_factory=dict)
    finished: bool = False
    pids: Any = field(default_factory=lambda: itertools.count(100))
    problems: list[str] = field(default_factory=list)
    auto_ready: bool = True  # a started gateway reports "running" at once
    unkillable: set[str] = field(default_factory=set)  # profiles whose child survives SIGKILL (D state)
    released: list[Ident] = field(default_factory=list)

    @classmethod
    def make(cls, names: tuple[str, ...] = ("default", "a", "b"), *, auto_ready: bool = True,
             claims: dict[str, tuple[Claim, ...]] | None = None, **settings: Any) -> World:
        world = cls(Planner(clock=lambda: 0.0, wall=lambda: 0.0, rng=random.Random(7)), auto_ready=auto_ready)
        world.planner.clock = lambda: world.now
        world.planner.wall = lambda: world.now + 1_000_000
        policy = settings.pop("policy", RestartPolicy(initial_delay=1, max_delay=8, jitter=0.0, healthy_after=10))
        world.run(world.planner.set_settings(Settings(policy=policy, **settings), None))
        world.run(world.planner.set_served([(n, facts(n).home) for n in names]))
        for n in names:
            world.run(world.planner.set_facts(n, facts(n, claims=(claims or {}).get(n, ()))))
        world.run(world.planner.start())
        return world

    # ------------------------------------------------------------------ performing actions

    def run(self, actions: list[m.Action]) -> None:
        for a in actions:
            if isinstance(a, m.Spawn):
                self.spawns.append(a.name)
                if a.name in self.alive:
                    self.problems.append(f"spawn of {a.name} while {self.alive[a.name]} lives")
                if a.name in self.fail_next:
                    self.fail_next.discard(a.name)
                    self.run(self.planner.spawn_failed(a.name, "exec failed (test)"))
                elif a.name in self.foreign_next:
                    self.run(self.planner.foreign(a.name, self.foreign_next.pop(a.name)))
                else:
                    ident = Ident(next(self.pids), 1)
                    self.alive[a.name] = ident
                    self.run(self.planner.spawned(a.name, ident))
                    if self.auto_ready and self.alive.get(a.name) == ident:
                        self.run(self.planner.gateway_reported(a.name, ident.pid, "running"))
            elif isinstance(a, m.Signal):
                self._check_target(a.name, a.ident, "signal")
                self.signals.append((a.name, a.ident, a.signal))
            elif isinstance(a, m.KillTree):
                self._check_target(a.name, a.ident, "kill")
                self.kills.append((a.name, a.ident))
            elif isinstance(a, m.Release):
                self._check_target(a.name, a.ident, "release")
                self.released.append(self.alive.pop(a.name))  # SIGKILL pending: it never acts again
            elif isinstance(a, m.Schedule):
                self.timers[(a.name, a.timer)] = self.now + a.delay
            elif isinstance(a, m.Cancel):
                self.timers.pop((a.name, a.timer), None)
            elif isinstance(a, m.Emit):
                self.events.append(a.event)
            elif isinstance(a, m.Finish):
                self.finished = True

    def _check_target(self, name: str, ident: Ident, what: str) -> None:
        if self.alive.get(name) != ident:
            self.problems.append(f"{what} of {ident} for {name}, whose live child is {self.alive.get(name)}")

    # ------------------------------------------------------------------ the world moving

    def exit(self, name: str, code: int | None = 1, sig: int | None = None, state: str | None = None, *,
             stated: bool = True, detail: str = "", startup_watchdog: bool = False) -> None:
        ident = self.alive.pop(name)
        self.run(self.planner.child_exited(name, ident, code, sig, state, stated=stated, detail=detail,
                                           startup_watchdog=startup_watchdog))

    def ready(self, name: str) -> None:
        self.run(self.planner.gateway_reported(name, self.alive[name].pid, "running"))

    def advance(self, seconds: float) -> None:
        """Move the clock, firing due timers in order (a stop's kill timer makes the child exit)."""
        end = self.now + seconds
        while True:
            due = sorted((t, k) for k, t in self.timers.items() if t <= end)
            if not due:
                break
            when, key = due[0]
            self.now = max(self.now, when)
            del self.timers[key]
            name, which = key
            self.run(self.planner.timer(name, which))
            if which == "kill" and name in self.alive and name not in self.unkillable and any(
                    k == (name, self.alive[name]) for k in self.kills):
                self.exit(name, None, signal.SIGKILL)
        self.now = end

    def obey_stops(self) -> None:
        """Children that were asked to stop do so (exit 0 after a planned stop, 75 after SIGUSR1), but
        for those in uninterruptible sleep (``unkillable``), which handle no signal."""
        for name, ident, sig in list(self.signals):
            if self.alive.get(name) == ident and name not in self.unkillable:
                self.exit(name, 75 if sig == signal.SIGUSR1 else 0, None, "stopped")

    def state(self, name: str) -> str:
        return self.planner.state_of(self.planner.profiles[name])[0]
