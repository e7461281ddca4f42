"""Whether each running child's API server answers: one chain of checks per gateway, kept for ``status``.

A gateway is checked (:mod:`supervisor.processes.apicheck`) from the moment it reports ``running`` (upstream
connects its platforms, the API server among them, before it writes that), then every
:data:`CHECK_EVERY_S` while it answers and every :data:`RETRY_S` while it does not: a wait
(``hermesd restart``) sees a gateway serve within about a second of its first answer, and ``status``
sees one stop answering within :data:`CHECK_EVERY_S` plus the check's timeout. A check's request
runs on the loop under a timeout and its kernel lookups in the reader thread, so a gateway that
accepts and never answers costs a timer, never the loop. The port is the ``api_server`` port the
child was started with (``Child.claims``): a gateway listens where its files said when it started.
Only the loop's own task runs a chain; a chain ends when its gateway is no longer the profile's child.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Mapping
from concurrent.futures import Executor
from typing import Any

from profiles.snapshot import Claim
from profiles.upstream.apiserver import API_SERVER
from supervisor.plan.model import Child, Ident, Profile
from supervisor.processes import apicheck
from supervisor.processes.apicheck import ApiCheck

CHECK_EVERY_S = 5.0
RETRY_S = 1.0


def api_port(claims: Iterable[Claim]) -> int | None:
    """The API server's port among a child's claims (none: not enabled, or on a port chosen at start)."""
    for c in claims:
        if c.kind == "port" and c.platform == API_SERVER and c.key.isdigit():
            return int(c.key)
    return None


class ApiWatch:
    """See the module docstring. ``profiles``: the planner's, read only; ``spawn``: runs a coroutine as
    one of the loop's tasks; ``pool``: the reader thread."""

    def __init__(self, pool: Executor, profiles: Mapping[str, Profile],
                 spawn: Callable[[Coroutine[Any, Any, None]], None]) -> None:
        self.pool = pool
        self.profiles = profiles
        self.spawn = spawn
        self._last: dict[str, ApiCheck] = {}
        self._chains: dict[str, Ident] = {}  # per profile, the gateway whose checks are running
        self._closed = False

    def follow(self, name: str) -> None:
        """The profile's gateway reported: start its chain of checks once it runs (once per gateway)."""
        p = self.profiles.get(name)
        c = p.child if p is not None else None
        if self._closed or c is None or not c.ready or self._chains.get(name) == c.ident:
            return
        port = api_port(c.claims)
        if port is None:
            return
        self._chains[name] = c.ident
        self.spawn(self._check(name, c.ident, port))

    def close(self) -> None:
        """Start no further check (the daemon is shutting down)."""
        self._closed = True

    async def _check(self, name: str, ident: Ident, port: int) -> None:
        if self._closed or not self._current(name, ident):
            self._end(name, ident)
            return
        try:
            result = await apicheck.check(ident.pid, ident.start_time, port, executor=self.pool)
        except RuntimeError:  # the reader thread is shut down: the daemon is exiting
            self._end(name, ident)
            return
        if not self._current(name, ident):
            self._end(name, ident)
            return
        self._last[name] = result
        delay = CHECK_EVERY_S if result.answered else RETRY_S
        asyncio.get_running_loop().call_later(delay, lambda: self.spawn(self._check(name, ident, port)))

    def _current(self, name: str, ident: Ident) -> bool:
        p = self.profiles.get(name)
        return p is not None and p.child is not None and p.child.ident == ident

    def _end(self, name: str, ident: Ident) -> None:
        if self._chains.get(name) == ident:
            del self._chains[name]
        last = self._last.get(name)
        if last is not None and last.pid == ident.pid:
            del self._last[name]

    def api(self, name: str, child: Child) -> dict[str, Any] | None:
        """For ``status``: the last check of this child's API server (None: it has no port to check)."""
        port = api_port(child.claims)
        if port is None:
            return None
        last = self._last.get(name)
        if last is None or last.pid != child.ident.pid:
            return apicheck.pending(child.ident.pid, port)
        return last.to_json()
