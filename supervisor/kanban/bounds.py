"""Bounds of the kanban hand-off, pure: how many workers an assignee runs, how often a dispatcher asks.

Why bounds at all: the dispatcher is one profile asking hermesd to run agents *as other profiles*.
Unbounded, a compromised dispatcher turns the hand-off into a lever on every other profile: eight
workers assigned to alpha would once have been charged to alpha's limits and got alpha's gateway
killed; a loop of requests would keep the daemon busy. Each worker now runs in a cgroup of its own
with limits of its own (:mod:`supervisor.limits.session`), and here:

* :func:`too_many_workers`: at most ``per_profile`` workers of one assignee at once
  (``kanban.workers_per_profile``), on top of the daemon-wide cap;
* :class:`RateLimit`: a token bucket per dispatcher over every hand-off request (``kanban_worker``
  and ``kanban_wait`` alike: one connection each), ``per_minute`` requests a minute with bursts of
  up to a quarter of that (at least 4). A refused request is answered at once and costs the
  daemon one ``accept`` and one ``getsockopt``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


def too_many_workers(running: int, per_profile: int, assignee: str) -> str | None:
    """Why another worker of ``assignee`` is refused (``running`` of its workers run now), or None."""
    if running >= per_profile:
        return (f"{assignee} already runs {running} kanban worker(s), its limit (kanban.workers_per_profile:"
                f" {per_profile}): try again when one has ended")
    return None


@dataclass
class RateLimit:
    """A token bucket: ``per_minute`` tokens a minute, at most ``burst`` saved up."""

    per_minute: int
    burst: int = 0  # 0: a quarter of per_minute, at least 4
    clock: Callable[[], float] = time.monotonic
    _tokens: float = field(default=-1.0, init=False)
    _at: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if self.burst <= 0:
            self.burst = max(4, self.per_minute // 4)

    def take(self) -> bool:
        """Spend one token if there is one (True), else refuse (False)."""
        now = self.clock()
        if self._tokens < 0:
            self._tokens, self._at = float(self.burst), now
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.per_minute / 60.0)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
