"""The failure-domain guard: hung gateways and trees over their limits, judged on timers.

The daemon owns the loop and the planner; this owns the two kinds of timer that decide, while a
gateway runs, that it must be killed: one per profile for hang detection (the next moment its
heartbeat can turn too old, see :mod:`supervisor.limits.hung`) and one shared scan of the trees
whose limits no cgroup enforces. Its verdicts go to the planner as ``kill_for`` events, so a hung
or oversized gateway is restarted through the normal backoff.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from supervisor.plan.policy import ExitKind

if TYPE_CHECKING:
    from supervisor.daemon.loop import Daemon


class Guard:
    """Hung and limit timers of one daemon (see the module docstring)."""

    def __init__(self, daemon: Daemon) -> None:
        self.d = daemon
        self.hung_timers: dict[str, asyncio.Handle] = {}
        self.watch_timer: asyncio.Handle | None = None

    def start(self, name: str) -> None:
        """A child started or was adopted: judge it for hangs now, and (re)start the limits watch."""
        loop = self.d.loop()
        self.stop(name)
        self.hung_timers[name] = loop.call_soon(self.handle_hung, name)
        if self.watch_timer is None:
            self.watch_timer = loop.call_soon(self.handle_watch)

    def stop(self, name: str) -> None:
        """The profile's child is gone: no more hang checks for it."""
        handle = self.hung_timers.pop(name, None)
        if handle is not None:
            handle.cancel()

    def handle_hung(self, name: str) -> None:
        """Is this profile's gateway hung (stopped, or its heartbeat too old)? Kill its tree if so."""
        d = self.d
        self.hung_timers.pop(name, None)
        p = d.planner.profiles.get(name)
        c = p.child if p is not None else None
        if p is None or c is None:
            return
        hung = d.config.hung_for(name)
        if d.contract is not None and not d.contract.heartbeat:
            # This release writes no heartbeat, so "no beat" or an old beat says nothing: off.
            hung = dataclasses.replace(hung, hung_after=None)
        res = d.domains.check_hung(name, p.home, hung) if not c.stop_requested else None
        if res is None:
            return
        p.extra["heartbeat_age"] = res.heartbeat_age
        if res.hung is not None:
            d.execute(d.planner.kill_for(name, c.ident, ExitKind.HUNG, res.hung.detail,
                                         cause=res.hung.cause, age_s=res.heartbeat_age))
        elif res.next_check is not None:
            self.hung_timers[name] = d.loop().call_at(res.next_check, self.handle_hung, name)

    def handle_watch(self) -> None:
        """One scan of the trees whose limits no cgroup enforces: kill a tree over its limit."""
        d = self.d
        self.watch_timer = None
        running = {n: d.config.limits_for(n) for n, p in d.planner.profiles.items()
                   if p.child is not None and not p.child.stop_requested}
        breaches, delay = d.domains.scan(running)
        for name, breach in breaches.items():
            c = d.planner.profiles[name].child
            if c is not None:
                kind = ExitKind.MEMORY_LIMIT if breach.reason == "memory_limit" else ExitKind.TASKS_LIMIT
                d.execute(d.planner.kill_for(name, c.ident, kind, breach.describe(), limit=breach.reason,
                                             value=breach.value, max=breach.limit))
        if delay is not None and not d.planner.shutting_down:
            self.watch_timer = d.loop().call_later(delay, self.handle_watch)
