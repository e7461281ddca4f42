"""The planner's answers about gateways it did not start: one before ours, one beside ours, one of ours
that serves other profiles too.

A mixin of :class:`supervisor.plan.planner.Planner` (it uses the planner's profiles, its ``_stop``,
``_emit`` and ``_done``), kept apart because it is one idea: hermesd never signals a process it did
not start, so every answer here is about our own child (hold it, stop it) and about watching the
other process until it is gone. Pure, like the planner.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from supervisor.plan import model as m
from supervisor.plan.policy import OUTSIDE
from supervisor.plan.verdict import Hold, HoldKind

if TYPE_CHECKING:
    from supervisor.plan.model import Profile

log = logging.getLogger("hermesd")


class OtherGateways:
    """See the module docstring."""

    profiles: dict[str, Profile]
    _out: list[m.Action]

    def _stop(self, p: Profile, *, graceful: bool = False, then_restart: bool = False) -> None:
        raise NotImplementedError  # the planner's

    def _emit(self, event_type: str, profile: str | None, **fields: object) -> None:
        raise NotImplementedError  # the planner's

    def _done(self) -> list[m.Action]:
        raise NotImplementedError  # the planner's

    def foreign(self, name: str, pid: int) -> list[m.Action]:
        """A gateway hermesd did not start holds this profile (its gateway.pid names a live gateway)."""
        p = self.profiles.get(name)
        if p is None:
            return []
        p.spawning = False
        if p.down == OUTSIDE:  # stopped from outside, then served from outside: held for it, taken back after it
            p.down = None
        if p.foreign_pid == pid and p.runtime_hold is not None and p.runtime_hold.kind is HoldKind.FOREIGN_GATEWAY:
            return self._done()  # already held for this very gateway (with the reason it was found for)
        self._watch_foreign(p, pid)
        p.runtime_hold = Hold(HoldKind.FOREIGN_GATEWAY, f"foreign gateway (PID {pid}) holds this profile")
        return self._done()

    def _taken_over(self, p: Profile, pid: int) -> None:
        """Our gateway ended in a clean stop from outside while ``pid``, a gateway hermesd did not start,
        serves the profile: upstream's ``gateway run --replace`` (or ``gateway restart``) took its place.
        Held for that gateway, as one found first would be, and taken back when it exits."""
        self._watch_foreign(p, pid)
        p.runtime_hold = Hold(HoldKind.FOREIGN_GATEWAY, (
            f"a gateway hermesd did not start (PID {pid}) stopped hermesd's to serve this profile itself (upstream's "
            f"'gateway run --replace' or 'gateway restart'); hermesd takes the profile back when it exits"))

    def _watch_foreign(self, p: Profile, pid: int) -> None:
        if p.foreign_pid != pid:
            p.foreign_pid = pid
            self._emit("foreign", p.name, pid=pid)
            self._out.append(m.WatchForeign(p.name, pid))

    def foreign_gone(self, name: str) -> list[m.Action]:
        """The foreign gateway exited: take the profile back (also after an outside stop that preceded it)."""
        p = self.profiles.get(name)
        if p is None:
            return []
        p.foreign_pid = None
        if p.runtime_hold is not None and p.runtime_hold.kind is HoldKind.FOREIGN_GATEWAY:
            p.runtime_hold = None
            log.info("profile %s: the foreign gateway exited; hermesd takes the profile back", name)
        if p.down == OUTSIDE:
            p.down = None
        return self._done()


    def served(self, name: str, pid: int, others: Sequence[str], source: str) -> list[m.Action]:
        """The child ``pid`` reported (``source``: its state file or ``identify``) serving ``others`` too.

        A gateway of one profile that polls another profile's platforms breaks the one promise of a
        per-profile fleet (and, beside that profile's own gateway, polls its tokens twice): it is
        stopped and held until files or settings change, whatever made upstream fold them in.
        """
        p = self.profiles.get(name)
        c = p.child if p is not None else None
        if p is None or c is None or c.ident.pid != pid or not others or c.stop_requested:
            return []
        what = ", ".join(others)
        log.error("profile %s: PID %d serves %s as well (%s); stopping it", name, pid, what, source)
        self._emit("multiplexing", name, pid=pid, serves=list(others), source=source)
        p.runtime_hold = Hold(HoldKind.MULTIPLEXING, (
            f"its gateway (PID {pid}) served {what} as well ({source}): upstream folded other profiles into it; "
            "hermesd stopped it so that each profile is served by its own gateway only"))
        self._stop(p)
        return self._done()

    def rival(self, name: str, pid: int, how: str) -> list[m.Action]:
        """A second live gateway (``pid``, not ours) serves this profile beside our running child.

        Two pollers on one bot token is the harm; hermesd never signals a process it did not start, so
        it stops its own child and holds the profile as served by a foreign gateway until that one
        exits (then it takes the profile back), exactly as when the foreign gateway was there first.
        """
        p = self.profiles.get(name)
        c = p.child if p is not None else None
        if p is None or c is None or c.ident.pid == pid or c.stop_requested:
            return []
        log.error("profile %s: a second gateway PID %d serves it beside hermesd's PID %d (%s); stopping ours",
                  name, pid, c.ident.pid, how)
        self._emit("rival", name, pid=pid, ours=c.ident.pid, how=how)
        p.foreign_pid = pid
        self._out.append(m.WatchForeign(name, pid))
        p.runtime_hold = Hold(HoldKind.FOREIGN_GATEWAY, (
            f"a second gateway (PID {pid}, not started by hermesd; {how}) served this profile beside hermesd's; "
            "hermesd stopped its own and takes the profile back when that one exits"))
        self._stop(p)
        return self._done()
