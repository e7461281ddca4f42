"""The failure-domain guard: hung gateways and trees over their limits, judged on timers.

It owns the two kinds of timer that decide, while a gateway runs, that it must be killed: one per
profile for hang detection (the next moment its heartbeat can turn too old, see
:mod:`supervisor.limits.hung`) and one shared scan of the trees whose limits no cgroup enforces.
It only judges: each verdict goes to ``on_kill(name, ident, kind, detail, **event)`` (kill the
gateway ``ident`` of ``name``, record its end as ``kind``; ``event``: the fields of its
``hung_kill`` or ``limit_kill`` event), which the loop turns into the planner's ``kill_for``, so a
hung or oversized gateway is restarted through the normal backoff.
It reads the planner's profiles (which child runs) and never changes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from supervisor.daemon.domains import Domains
from supervisor.daemon.effective import Effective
from supervisor.plan.model import Profile
from supervisor.plan.policy import ExitKind, limit_exit


class Guard:
    """Hung and limit timers of one daemon (see the module docstring)."""

    def __init__(self, domains: Domains, profiles: Mapping[str, Profile], settings_of: Callable[[str], Effective],
                 on_kill: Callable[..., None]) -> None:
        self.domains = domains
        self.profiles = profiles
        self.settings_of = settings_of
        self.on_kill = on_kill
        self.hung_timers: dict[str, asyncio.Handle] = {}
        self.watch_timer: asyncio.Handle | None = None
        self.closed = False

    def start(self, name: str) -> None:
        """A child started or was adopted: judge it for hangs now, and (re)start the limits watch."""
        if self.closed:
            return
        loop = asyncio.get_running_loop()
        self.stop(name)
        self.hung_timers[name] = loop.call_soon(self.handle_hung, name)
        if self.watch_timer is None:
            self.watch_timer = loop.call_soon(self.handle_watch)

    def stop(self, name: str) -> None:
        """The profile's child is gone: no more hang checks for it."""
        handle = self.hung_timers.pop(name, None)
        if handle is not None:
            handle.cancel()

    def close(self) -> None:
        """hermesd is shutting down: no more verdicts."""
        self.closed = True
        for name in list(self.hung_timers):
            self.stop(name)
        if self.watch_timer is not None:
            self.watch_timer.cancel()
            self.watch_timer = None

    def handle_hung(self, name: str) -> None:
        """Is this profile's gateway hung (stopped, or its heartbeat too old)? A verdict if so."""
        self.hung_timers.pop(name, None)
        p = self.profiles.get(name)
        c = p.child if p is not None else None
        if p is None or c is None or c.stop_requested:
            return
        res = self.domains.check_hung(name, p.home, self.settings_of(name).hung)
        if res is None:
            return
        if res.hung is not None:
            self.on_kill(name, c.ident, ExitKind.HUNG, res.hung.detail, cause=res.hung.cause, age_s=res.heartbeat_age)
        elif res.next_check is not None:
            self.hung_timers[name] = asyncio.get_running_loop().call_at(res.next_check, self.handle_hung, name)

    def handle_watch(self) -> None:
        """One scan of the trees whose limits no cgroup enforces: a verdict for each tree over its limit."""
        self.watch_timer = None
        running = {n: self.settings_of(n).limits for n, p in self.profiles.items()
                   if p.child is not None and not p.child.stop_requested}
        breaches, delay = self.domains.scan(running)
        for name, breach in breaches.items():
            c = self.profiles[name].child
            kind = limit_exit(breach.reason)
            if c is not None and kind is not None:
                self.on_kill(name, c.ident, kind, breach.describe(), limit=breach.reason, value=breach.value,
                             max=breach.limit)
        if delay is not None and not self.closed:
            self.watch_timer = asyncio.get_running_loop().call_later(delay, self.handle_watch)
