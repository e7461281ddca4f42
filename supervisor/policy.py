"""Pure decisions about a child's exit: what it means and what to do next.

Nothing here reads a clock, a file or a process. The daemon passes in the facts (exit status,
the gateway's own last words from ``gateway_state.json``, whether hermesd asked for the stop,
uptime) and gets back a decision, so every rule is testable without sleeping.
"""

from __future__ import annotations

import enum
import random
import signal
from dataclasses import dataclass

EXIT_RESTART_REQUESTED = 75  # EX_TEMPFAIL: upstream's "restart me now"
EXIT_CONFIG = 78  # EX_CONFIG: upstream's "do not restart until the configuration changes"


class ExitKind(enum.Enum):
    PLANNED = "planned"  # hermesd asked for this stop
    RESTART_REQUESTED = "restart_requested"  # 75 / restart_requested: restart now, no penalty
    CONFIG_ERROR = "config_error"  # 78 / startup_failed: hold until files change
    EXTERNAL_STOP = "external_stop"  # clean stop hermesd did not ask for: stay stopped
    CRASH = "crash"  # anything else: restart with backoff


@dataclass(frozen=True, slots=True)
class ExitFacts:
    """What is known about one child's end.

    ``code``/``signal`` are ``None`` for an adopted child, whose status cannot be waited for;
    then ``gateway_state`` and ``restart_requested`` (read from ``gateway_state.json`` only when
    it names this very process) carry the whole story.
    """

    code: int | None
    signal: int | None
    requested_by_us: bool
    gateway_state: str | None = None
    restart_requested: bool = False


def classify_exit(f: ExitFacts) -> ExitKind:
    """Combine the exit status with the gateway's state file: codes alone are not consistent."""
    if f.requested_by_us:
        return ExitKind.PLANNED
    if f.code == EXIT_RESTART_REQUESTED or (f.restart_requested and f.code in (None, 0)):
        return ExitKind.RESTART_REQUESTED
    if f.code == EXIT_CONFIG or f.gateway_state == "startup_failed":
        return ExitKind.CONFIG_ERROR
    if f.signal is not None:
        return ExitKind.CRASH
    if f.code in (0, None) and f.gateway_state == "stopped":
        # A clean, planned stop by someone else (``hermes gateway stop``). Exit 0 alone is not
        # enough: upstream also exits 0, leaving "running", on a bare SIGTERM during start-up.
        return ExitKind.EXTERNAL_STOP
    return ExitKind.CRASH


def describe_exit(code: int | None, sig: int | None) -> str:
    """``exit 1``, ``killed by SIGKILL`` or ``gone (not our child)``, for status and logs."""
    if sig is not None:
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    if code is not None:
        return f"exit {code}"
    return "exited (adopted: status unknown)"


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Backoff settings. Defaults: 1 s doubling to 300 s, ±10 % jitter, reset after 60 s up."""

    initial_delay: float = 1.0
    max_delay: float = 300.0
    factor: float = 2.0
    jitter: float = 0.1
    healthy_after: float = 60.0


class Action(enum.Enum):
    RESTART = "restart"
    HOLD = "hold"  # down until files change or the operator starts it
    STOP = "stop"  # down until the operator starts it


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    delay: float  # seconds before the restart (0: at once)
    failures: int  # consecutive failures after this exit
    reason: str


def decide(
    kind: ExitKind,
    *,
    failures: int,
    uptime: float,
    policy: RestartPolicy,
    rng: random.Random | None = None,
) -> Decision:
    """What to do after an exit of ``kind`` that followed ``uptime`` seconds of running.

    ``failures`` counts consecutive short-lived crashes before this one. A healthy run
    (``uptime >= healthy_after``) wipes it, so the first crash after a healthy run restarts at
    once; each further crash doubles the wait up to the cap.
    """
    if kind is ExitKind.PLANNED:
        return Decision(Action.STOP, 0.0, 0, "stopped by hermesd")
    if kind is ExitKind.RESTART_REQUESTED:
        return Decision(Action.RESTART, 0.0, 0, "gateway requested a restart")
    if kind is ExitKind.CONFIG_ERROR:
        return Decision(Action.HOLD, 0.0, failures, "configuration error: fix the profile's files")
    if kind is ExitKind.EXTERNAL_STOP:
        return Decision(Action.STOP, 0.0, 0, "stopped outside hermesd (clean exit it did not ask for)")
    if uptime >= policy.healthy_after:
        failures = 0
    if failures == 0:
        why = "crashed after a healthy run" if uptime >= policy.healthy_after else "crashed (first failure)"
        return Decision(Action.RESTART, 0.0, 1, why)
    return Decision(Action.RESTART, backoff_delay(failures, policy, rng), failures + 1, "crash loop")


def backoff_delay(failures: int, policy: RestartPolicy, rng: random.Random | None = None) -> float:
    """Delay before restart after ``failures`` consecutive failed runs (>= 1), jittered."""
    base = min(policy.max_delay, policy.initial_delay * policy.factor ** max(0, failures - 1))
    spread = (rng or random).uniform(-policy.jitter, policy.jitter)
    return max(0.0, min(policy.max_delay, base * (1 + spread)))
