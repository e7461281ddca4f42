"""The decisions of a fleet operation, pure: which profiles, in which order, the canary, and whether a
restarted profile is healthy (the gate).

Inputs are ``status`` rows (dicts, as the daemon's ``status`` request returns them) and times given
by the caller; nothing here reads a clock, a file or a socket, so every rule is tested in-process
(``tests/upgrade/test_decisions.py``).

The gate ("serving as before"), checked on every poll after the restart was asked for. Serving is
:func:`supervisor.plan.readiness.judge`, the verdict ``status`` shows and ``start``/``restart`` wait for,
held to the platforms that served before the restart (a platform that was already down, a revoked
token, an unreachable network, does not block every later rollout) and to the API server wherever the
profile enables it, whether it answered before or not (it depends on nothing outside the machine: a
new gateway that does not answer there is broken):

- **fails at once** when the profile is held, in backoff or stopped, when its gateway exited after
  the restart other than by hermesd's own planned stop, when it was restarted more than once, when
  another profile became held (a token or port the new gateway took), when a platform of it reports
  a lock conflict it did not have, when it runs other code than the operation put in place, or when
  a channel that served before cannot serve without someone acting (``fatal``, ``paused``, its
  credential held by another gateway);
- **waits** while the old gateway is stopping, the new one is starting, its heartbeat is missing
  (for releases that write one), or it does not serve every channel it served before: the gateway
  has not reported ``running``, its heartbeat is old, a platform has not connected yet (a connect
  may take 30 s upstream), its API server has not answered from its own socket;
- **passes** once all of that has held without a break for the settle time; it fails when the
  timeout comes first, naming what it was still waiting for. A canary that runs but does not answer
  never lets a rollout move on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from profiles.upstream.apiserver import API_SERVER
from supervisor.hermes.codeid import CodeId, same_code
from supervisor.plan.readiness import judge

Row = Mapping[str, Any]
RUNNING = "running"


@dataclass(frozen=True, slots=True)
class Baseline:
    """A profile as it was before the operation touched it: what the gate holds the new gateway to."""

    name: str
    pid: int | None
    restarts: int
    serving: frozenset[str]  # the channels (platforms, the API server) that served
    lock_conflicts: frozenset[str]

    @staticmethod
    def of(row: Row) -> Baseline:
        return Baseline(
            name=str(row["name"]),
            pid=row.get("pid") if isinstance(row.get("pid"), int) else None,
            restarts=int(row["restarts"]) if isinstance(row.get("restarts"), int) else 0,
            serving=judge(row).serving_channels,
            lock_conflicts=frozenset(str(c.get("platform")) for c in row.get("lock_conflicts") or []),
        )

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self.pid, "restarts": self.restarts, "serving": sorted(self.serving),
                "lock_conflicts": sorted(self.lock_conflicts)}

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> Baseline:
        serving = raw.get("serving", raw.get("connected"))  # "connected": records written before serving was judged
        return Baseline(str(raw["name"]), raw.get("pid"), int(raw.get("restarts") or 0),
                        frozenset(serving or ()), frozenset(raw.get("lock_conflicts") or ()))


def held(rows: Sequence[Row]) -> frozenset[str]:
    return frozenset(str(r["name"]) for r in rows if r.get("state") == "held")


# ----------------------------------------------------------------------------- which profiles, in which order


@dataclass(frozen=True, slots=True)
class Order:
    """The profiles to restart (the canary first) and, for every other profile, why it is left alone."""

    canary: str | None
    rest: tuple[str, ...]
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        return ((self.canary,) if self.canary else ()) + self.rest


class PlanError(ValueError):
    """The operation cannot be planned as asked (an unknown or unsuitable canary, no profile to touch)."""


def stale_or_unknown(row: Row) -> str | None:
    """For an upgrade: restart a running gateway unless it provably runs the installed code already."""
    if row.get("state") != RUNNING:
        return _not_running(row)
    code = row.get("code") or {}
    if code.get("stale") is False:
        return "already runs the installed code"
    return None


def any_running(row: Row) -> str | None:
    """For a rolling restart: every running gateway."""
    return None if row.get("state") == RUNNING else _not_running(row)


def _not_running(row: Row) -> str:
    why = f": {row['reason']}" if row.get("reason") else ""
    return f"not running ({row.get('state')}{why}); it starts on the installed code whenever it starts"


def choose(rows: Sequence[Row], *, skip: Callable[[Row], str | None], canary: str | None = None,
           only: Sequence[str] | None = None) -> Order:
    """The order: the canary, then the rest in serving order (the order of ``rows``).

    ``skip(row)`` says why a profile is left alone (None: restart it). ``only``: restrict to these
    names. The canary defaults to the chosen profile that serves the fewest channels (the least for
    its users to lose if the new release is broken), a named profile before ``default``.
    """
    wanted = set(only) if only is not None else None
    chosen: list[Row] = []
    skipped: dict[str, str] = {}
    for row in rows:
        name = str(row["name"])
        if wanted is not None and name not in wanted:
            continue
        why = skip(row)
        if why is None:
            chosen.append(row)
        else:
            skipped[name] = why
    if not chosen:
        return Order(None, (), skipped)
    names = [str(r["name"]) for r in chosen]
    if canary is not None:
        if canary not in names:
            why = skipped.get(canary) or ("not among the profiles chosen" if wanted is not None and canary not in wanted
                                          else "not a profile of this root")
            raise PlanError(f"cannot use {canary!r} as the canary: {why}")
        first = canary
    else:
        first = min(chosen, key=lambda r: (len(Baseline.of(r).serving), r["name"] == "default",
                                           names.index(str(r["name"]))))["name"]
    return Order(str(first), tuple(n for n in names if n != first), skipped)


# ----------------------------------------------------------------------------- the gate


@dataclass(frozen=True, slots=True)
class GateRules:
    """What "healthy" means for one operation (see the module docstring)."""

    timeout_s: float = 120.0
    settle_s: float = 5.0
    heartbeat: bool = False  # the release writes state/gateway.heartbeat: require one (how old: judge's rule)
    code: CodeId | None = None  # the code the new gateway must run (None: any)


@dataclass(frozen=True, slots=True)
class Verdict:
    state: str  # "pending" | "passed" | "failed"
    why: str = ""

    @property
    def done(self) -> bool:
        return self.state != "pending"


class Gate:
    """One profile's health gate after its restart was asked for at ``start`` (monotonic) /
    ``start_wall`` (Unix time, to compare with the exit times in status rows)."""

    def __init__(self, baseline: Baseline, held_before: frozenset[str], rules: GateRules, *,
                 start: float, start_wall: float) -> None:
        self.baseline = baseline
        self.held_before = held_before
        self.rules = rules
        self.start = start
        self.start_wall = start_wall
        self.healthy_since: float | None = None
        self.last = Verdict("pending", "restart requested")

    def observe(self, rows: Sequence[Row], now: float) -> Verdict:
        """The verdict on one status document taken at ``now`` (monotonic)."""
        verdict = self._judge(rows, now)
        if verdict.state == "pending" and now - self.start >= self.rules.timeout_s:
            verdict = Verdict("failed", f"not healthy within {self.rules.timeout_s:g}s: {verdict.why}")
        self.last = verdict
        return verdict

    def _judge(self, rows: Sequence[Row], now: float) -> Verdict:
        name = self.baseline.name
        row = next((r for r in rows if r.get("name") == name), None)
        if row is None:
            return Verdict("failed", "the profile is no longer served")
        failed = self._failure(row, rows)
        if failed:
            self.healthy_since = None
            return Verdict("failed", failed)
        waiting = self._waiting(row)
        if waiting:
            self.healthy_since = None
            return Verdict("pending", waiting)
        serving = judge(row, required=self.baseline.serving | {API_SERVER})
        if not serving.ready:
            self.healthy_since = None
            return Verdict("failed", f"not serving: {serving.why}") if serving.settled else Verdict(
                "pending", f"not serving yet: {serving.why}")
        if self.healthy_since is None:
            self.healthy_since = now
        left = self.rules.settle_s - (now - self.healthy_since)
        if left > 0:
            return Verdict("pending", f"serving, settling ({left:.0f}s left)")
        return Verdict("passed", serving.why)

    def _failure(self, row: Row, rows: Sequence[Row]) -> str | None:
        state = row.get("state")
        last = row.get("last_exit") or {}
        at = last.get("at")
        if isinstance(at, int | float) and at >= self.start_wall and last.get("kind") not in (None, "planned"):
            what = last.get("description") or "exited"
            return f"the new gateway {what} ({last.get('kind')}: {last.get('reason') or '?'})"
        down = {"held": "held", "backoff": "in backoff after a failed start", "stopped": "stopped"}.get(str(state))
        if down:
            return f"{down}: {row.get('reason') or '?'}"
        restarts = row.get("restarts")
        if isinstance(restarts, int) and restarts > self.baseline.restarts + 1:
            return f"restarted {restarts - self.baseline.restarts} times since the restart was asked for"
        new_holds = sorted(held(rows) - self.held_before - {self.baseline.name})
        if new_holds:
            reasons = "; ".join(f"{r['name']}: {r.get('reason')}" for r in rows if r.get("name") in new_holds)
            return f"another profile became held: {reasons}"
        locks = {str(c.get("platform")): c for c in row.get("lock_conflicts") or []}
        new_locks = sorted(set(locks) - self.baseline.lock_conflicts)
        if new_locks and row.get("pid") != self.baseline.pid:
            return "blocked by another gateway: " + "; ".join(
                f"{p} ({locks[p].get('message') or locks[p].get('error_code')})" for p in new_locks)
        running = (row.get("code") or {}).get("running")
        if self.rules.code is not None and row.get("pid") != self.baseline.pid and running is not None \
                and not same_code(running, self.rules.code):
            return (f"the new gateway runs {running.get('version')} ({running.get('digest')}), not "
                    f"{self.rules.code}: the installed code changed during the operation")
        return None

    def _waiting(self, row: Row) -> str | None:
        state = row.get("state")
        if row.get("pid") is None or row.get("pid") == self.baseline.pid:
            return "the old gateway is stopping" if state == "stopping" else f"waiting for the new gateway ({state})"
        if state != RUNNING:
            return f"the new gateway is {state}"
        if self.rules.code is not None and (row.get("code") or {}).get("running") is None:
            return "which code the new gateway runs is not known yet"
        if self.rules.heartbeat and not isinstance(row.get("heartbeat_age_s"), int | float):
            return "no heartbeat yet"
        return None
