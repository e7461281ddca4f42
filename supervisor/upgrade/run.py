"""Carrying out a rollout: the daemon's control socket, one profile at a time, each through the gate.

Restarts, stops and starts go through the daemon's own requests (``restart`` re-reads the profile's
files and refuses one whose files would not start, exactly as ``hermesd restart``); the gate reads
the daemon's ``status`` document every :data:`POLL_S` and leaves every decision to
:class:`supervisor.upgrade.decisions.Gate`. Every step is journaled by the daemon (the ``record``
request, event types ``upgrade_*``) and written to the operation's record.

Strings that come from a profile (a gateway's reasons and platform errors) are shown with control
characters escaped (:func:`shown`): they are written by an agent that may be hostile.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from profiles.progress import Progress
from supervisor.control.client import Client, ControlError, DaemonNotAnswering, DaemonNotRunning
from supervisor.layout import Layout
from supervisor.upgrade.decisions import Baseline, Gate, GateRules, Order, Verdict
from supervisor.upgrade.record import Record

POLL_S = 0.25
REQUEST_WAIT_S = 30.0


class OperationFailed(Exception):
    """The operation stopped: the message says where and why; ``code`` is the exit code (1, or 3: no daemon)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def shown(text: object, limit: int = 300) -> str:
    """``text`` safe for a terminal: control characters escaped, cut at ``limit``."""
    s = str(text)
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in s[:limit])
    return out + ("…" if len(s) > limit else "")


class Fleet:
    """The root's daemon as a fleet operation uses it."""

    def __init__(self, layout: Layout) -> None:
        self.client = Client(layout)
        self.root = layout.root

    def call(self, cmd: str, **payload: Any) -> dict[str, Any]:
        try:
            return self.client.call(cmd, wait=REQUEST_WAIT_S, **payload)
        except DaemonNotRunning:
            why = f"hermesd is not running for {self.root} (start it with 'hermesd start')"
            raise OperationFailed(why, 3) from None
        except DaemonNotAnswering as exc:
            raise OperationFailed(str(exc), 4) from None
        except ControlError as exc:
            raise OperationFailed(shown(exc, 1000)) from None

    def status(self) -> dict[str, Any]:
        return self.call("status")["status"]

    def rows(self) -> list[dict[str, Any]]:
        return list(self.status()["profiles"])

    def note(self, event: str, profile: str | None = None, **fields: Any) -> None:
        """Journal one step (never stops the operation: the record on disk has it too)."""
        with contextlib.suppress(OperationFailed):
            self.call("record", event=event, **({"profile": profile} if profile else {}), fields=fields)


@dataclass(slots=True)
class Reporter:
    """Progress for people (a line per step, a redrawn waiting line on a terminal) or nothing but the
    final document (``--json``)."""

    json_mode: bool = False
    stream: Any = field(default_factory=lambda: sys.stdout)
    _progress: Progress | None = None

    def line(self, text: str) -> None:
        self.clear()
        if not self.json_mode:
            print(text, file=self.stream, flush=True)

    def waiting(self, label: str, text: str) -> None:
        if self.json_mode:
            return
        if self._progress is None or self._progress.label != label:
            self.clear()
            self._progress = Progress(label)
        self._progress.note(text)

    def clear(self) -> None:
        if self._progress is not None:
            self._progress.done()
            self._progress = None


@dataclass(slots=True)
class Rollout:
    """One rollout's settings and collaborators (see :func:`roll`)."""

    fleet: Fleet
    record: Record
    reporter: Reporter
    operation: str
    rules: GateRules
    canary_rules: GateRules
    graceful: bool = False
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep


def gate(r: Rollout, label: str, baseline: Baseline, held_before: frozenset[str], rules: GateRules,
         start: float, start_wall: float) -> tuple[Verdict, float]:
    """Poll the daemon until the gate decides; the verdict and the seconds it took."""
    g = Gate(baseline, held_before, rules, start=start, start_wall=start_wall)
    while True:
        verdict = g.observe(r.fleet.rows(), r.clock())
        if verdict.done:
            r.reporter.clear()
            return verdict, r.clock() - start
        r.reporter.waiting(label, shown(verdict.why))
        r.sleep(POLL_S)


def step(r: Rollout, name: str, result: str, reason: str, took: float, **extra: Any) -> None:
    r.record.data["steps"].append({"profile": name, "result": result, "reason": reason, "took_s": round(took, 1),
                                   **extra})
    r.record.save()


def roll(r: Rollout, order: Order, baselines: Mapping[str, Baseline], held_before: frozenset[str]) -> bool:
    """Restart ``order``'s profiles one at a time, each gated; stop at the first failure (True: all passed)."""
    names = order.names
    for i, name in enumerate(names, 1):
        canary = name == order.canary
        label = f"[{i}/{len(names)}] {name}{' (canary)' if canary else ''}"
        rules = r.canary_rules if canary else r.rules
        r.fleet.note("upgrade_restarting", name, id=r.record.id, operation=r.operation, canary=canary)
        start, start_wall = r.clock(), r.wall()
        try:
            reply = r.fleet.call("restart", profile=name, graceful=r.graceful)
        except OperationFailed as exc:
            if exc.code != 1:
                raise
            verdict, took = Verdict("failed", f"restart refused: {exc}"), r.clock() - start
        else:
            r.reporter.waiting(label, shown(reply.get("result") or "restarting"))
            verdict, took = gate(r, label, baselines[name], held_before, rules, start, start_wall)
        passed = verdict.state == "passed"
        r.fleet.note("upgrade_gate", name, id=r.record.id, operation=r.operation, passed=passed,
                     reason=verdict.why, took_s=round(took, 1))
        step(r, name, "passed" if passed else "failed", verdict.why, took, canary=canary)
        if passed:
            r.reporter.line(f"  {label}: healthy after {took:.1f}s ({shown(verdict.why)})")
            continue
        r.reporter.line(f"  {label}: FAILED after {took:.1f}s: {shown(verdict.why)}")
        rest = names[i:]
        if rest:
            r.reporter.line(f"  stopped here; untouched: {', '.join(rest)}")
        return False
    return True


def wait_rows(r: Rollout, label: str, done: Callable[[Sequence[Mapping[str, Any]]], str | None],
              timeout: float) -> None:
    """Poll status until ``done(rows)`` says nothing is left to wait for (its text: what is awaited)."""
    deadline = r.clock() + timeout
    while True:
        waiting = done(r.fleet.rows())
        if waiting is None:
            r.reporter.clear()
            return
        if r.clock() >= deadline:
            r.reporter.clear()
            raise OperationFailed(f"{label}: still {waiting} after {timeout:g}s")
        r.reporter.waiting(label, waiting)
        r.sleep(POLL_S)
