"""Pure decisions about a child's exit: what it means and what to do next.

Nothing here reads a clock, a file or a process. The planner passes in the facts (exit status,
the gateway's own last words from ``gateway_state.json``, whether hermesd asked for the stop or
killed the gateway for a reason of its own, uptime) and gets back a decision, so every rule is
testable without sleeping. A different backoff policy is a change to :func:`backoff_delay` alone.
"""

from __future__ import annotations

import enum
import math
import random
import signal
from dataclasses import dataclass

from profiles.upstream.process import Exit, GatewayState, stop_timeout
from supervisor.settings import default


class ExitKind(enum.Enum):
    PLANNED = "planned"  # hermesd asked for this stop
    RESTART_REQUESTED = "restart_requested"  # 75 / restart_requested: restart now, unless it keeps coming quickly
    ATTACHED = "attached"  # 75 before the gateway ever ran: another gateway serves this profile
    STARTUP_HUNG = "startup_hung"  # 75 from upstream's start-up watchdog: no live event loop in time
    CONFIG_ERROR = "config_error"  # 78 / startup_failed: hold until files change
    EXTERNAL_STOP = "external_stop"  # clean stop hermesd did not ask for: stay stopped
    CRASH = "crash"  # anything else: restart with backoff
    HUNG = "hung"  # killed by hermesd: heartbeat stale or process stopped
    MEMORY_LIMIT = "memory_limit"  # killed by hermesd or the kernel: the tree exceeded memory_max
    TASKS_LIMIT = "tasks_limit"  # killed by hermesd: the tree exceeded tasks_max
    SPAWN_ERROR = "spawn_error"  # the gateway could not be started at all


# Exits nobody asked for: the profile failed. A configuration error is one too, though it holds the
# profile instead of backing off (:func:`decide`); the rest were asked for by hermesd, the gateway
# itself or someone outside. Status, events and metrics count failures by this one set.
FAILURES = frozenset({ExitKind.CRASH, ExitKind.HUNG, ExitKind.MEMORY_LIMIT, ExitKind.TASKS_LIMIT,
                      ExitKind.SPAWN_ERROR, ExitKind.CONFIG_ERROR, ExitKind.ATTACHED, ExitKind.STARTUP_HUNG})

# The limits layer names a breached limit by these words (``supervisor.limits``: the watcher's
# breach, the kernel's cgroup events); a tree killed for one ends as that kind of exit.
_LIMIT_EXITS = {"memory_limit": ExitKind.MEMORY_LIMIT, "tasks_limit": ExitKind.TASKS_LIMIT}


def limit_exit(limit: str | None) -> ExitKind | None:
    """The exit kind of a tree killed for the limit ``limit`` names (None: no limit, or not one of ours)."""
    return _LIMIT_EXITS.get(limit or "")


# Seconds a SIGKILLed gateway gets to end before hermesd stops waiting for it (model.Release): an
# ordinary process ends within milliseconds, a large one within a second or two; one still there
# after this is in uninterruptible sleep, and a stop must not wait for the kernel forever.
KILL_WAIT = 10.0


def stop_timeout_for(own: float | None, everyone: float | None, drain_s: float) -> float:
    """Seconds from SIGTERM to SIGKILL: the profile's setting, the global one, or upstream's rule."""
    if own is not None:
        return own
    return everyone if everyone is not None else stop_timeout(drain_s)


@dataclass(frozen=True, slots=True)
class ExitFacts:
    """What is known about one child's end.

    ``code``/``signal`` are ``None`` for an adopted child, whose status cannot be waited for;
    then ``gateway_state`` and ``restart_requested`` (read from ``gateway_state.json`` only when
    it names this very process) carry the whole story. ``killed_for`` is set when hermesd killed
    the gateway on purpose (hung, over a limit): that reason beats whatever the exit looked like.
    ``stated``: the state file names this process at all. A 75 from a gateway that never wrote
    its state is no restart request: on the multiplex-default line it is upstream's "attach"
    (another gateway already serves this profile), which a restart only repeats.
    ``startup_watchdog``: upstream's start-up watchdog left its record for this process (it exits 75
    when ``gateway run`` has no live event loop in time): a start-up that hung, whatever the state file says.
    """

    code: int | None
    signal: int | None
    requested_by_us: bool
    gateway_state: str | None = None
    restart_requested: bool = False
    killed_for: ExitKind | None = None
    stated: bool = True
    startup_watchdog: bool = False


# The signals a stop sends (upstream's ``gateway stop`` and hermesd's own stopper: SIGTERM; Ctrl-C: SIGINT).
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def classify_exit(f: ExitFacts) -> ExitKind:
    """Combine the exit status with the gateway's state file: codes alone are not consistent."""
    if f.killed_for is not None:
        return f.killed_for
    if f.requested_by_us:
        return ExitKind.PLANNED
    if f.startup_watchdog and f.code in (Exit.RESTART, None):
        return ExitKind.STARTUP_HUNG
    if f.code == Exit.RESTART and not f.stated:
        return ExitKind.ATTACHED
    if f.code in (Exit.RESTART, None) and f.gateway_state == GatewayState.DEGRADED:
        # upstream's event-loop watchdog leaves "degraded" (loop_liveness_watchdog) and exits 75: a hang
        return ExitKind.HUNG
    if f.code == Exit.RESTART or (f.restart_requested and f.code in (None, 0)):
        return ExitKind.RESTART_REQUESTED
    if f.code == Exit.CONFIG or f.gateway_state == GatewayState.STARTUP_FAILED:
        return ExitKind.CONFIG_ERROR
    clean = f.signal in _STOP_SIGNALS or (f.signal is None and f.code in (0, None))
    if f.gateway_state == GatewayState.STOPPED and clean:
        # A clean, planned stop by someone else (``hermes gateway stop``). Exit 0 alone is not
        # enough: upstream also exits 0, leaving "running", on a bare SIGTERM during start-up. Its
        # own marker watcher (0.5 s poll) may have begun the stop before the stopper's SIGTERM
        # arrives, and the signal then ends the process that already said "stopped".
        return ExitKind.EXTERNAL_STOP
    if f.signal is not None:
        return ExitKind.CRASH
    return ExitKind.CRASH


def signame(sig: int | str | None) -> str | int | None:
    """``SIGKILL`` for 9; a number no signal has stays a number (a name, as the journal keeps it, stays a name)."""
    if sig is None or isinstance(sig, str):
        return sig
    try:
        return signal.Signals(sig).name
    except ValueError:
        return sig


def describe_exit(code: int | None, sig: int | str | None, kind: ExitKind | str | None = None) -> str:
    """``exit 1``, ``killed by SIGKILL`` or ``gone (not our child)``, for status, logs and the journal.

    A planned stop's own SIGTERM that ended the gateway before upstream's handler was installed (a
    stop during start-up) is the stop working: ``stopped by SIGTERM``, not "killed", which reads as a
    failure."""
    if sig is not None:
        name = signame(sig)
        if name == "SIGTERM" and kind in (ExitKind.PLANNED, ExitKind.PLANNED.value):
            return "stopped by SIGTERM"
        return f"killed by {name}" if isinstance(name, str) else f"killed by signal {sig}"
    if code is not None:
        return f"exit {code}"
    return "exited (adopted: status unknown)"


# The reason a profile stays down after a clean exit hermesd did not ask for (the planner's ``down``).
OUTSIDE = "stopped outside hermesd (clean exit it did not ask for)"

# Consecutive quick "attach" exits (75 before the gateway ever ran) after which hermesd stops trying:
# another gateway serves the profile, and each restart would only ask it again.
ATTACH_LOOP = 3


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Backoff settings (``restart.*`` in hermesd.yaml, their defaults declared in :mod:`supervisor.settings`)."""

    initial_delay: float = default("restart.initial_delay")
    max_delay: float = default("restart.max_delay")
    factor: float = default("restart.factor")
    jitter: float = default("restart.jitter")
    healthy_after: float = default("restart.healthy_after")


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


_REASONS = {
    ExitKind.ATTACHED: "exit 75 before start-up: another gateway serves this profile",
    ExitKind.STARTUP_HUNG: "exit 75 from upstream's start-up watchdog: the gateway never reached a live event loop",
    ExitKind.HUNG: "killed: hung",
    ExitKind.MEMORY_LIMIT: "killed: over its memory limit",
    ExitKind.TASKS_LIMIT: "killed: over its tasks limit",
    ExitKind.SPAWN_ERROR: "could not be started",
}


def decide(
    kind: ExitKind,
    *,
    failures: int,
    uptime: float,
    policy: RestartPolicy,
    rng: random.Random | None = None,
    hold_attach: bool = True,
) -> Decision:
    """What to do after an exit of ``kind`` that followed ``uptime`` seconds of running.

    ``failures`` counts consecutive short-lived failures before this one. A healthy run
    (``uptime >= healthy_after``) wipes it, so the first crash after a healthy run restarts at
    once; each further one doubles the wait up to the cap. Hung and over-limit kills, failed
    spawns and attach exits back off like crashes: a profile that keeps hitting its limit is a
    crash loop. A restart request is honoured at once after a healthy run or as the first quick
    exit; one that comes quickly again counts like a crash, so no exit code restarts without limit.
    A start-up the watchdog ended never ran, however long it took: it wipes no failures.
    ``hold_attach``: :data:`ATTACH_LOOP` attach exits in a row hold the profile; False where the
    release makes every attach exit a transient verdict a supervisor must keep retrying.
    """
    if kind is ExitKind.PLANNED:
        return Decision(Action.STOP, 0.0, 0, "stopped by hermesd")
    if kind is ExitKind.RESTART_REQUESTED:
        if uptime >= policy.healthy_after:
            # At once, but it uses the one immediate restart: a quick exit right after backs off.
            return Decision(Action.RESTART, 0.0, 1, "gateway requested a restart")
        if failures == 0:
            return Decision(Action.RESTART, 0.0, 1, "gateway requested a restart (quick exit: counted)")
        return Decision(Action.RESTART, backoff_delay(failures, policy, rng), failures + 1,
                        "gateway requested a restart again after a short run: backing off")
    if kind is ExitKind.CONFIG_ERROR:
        return Decision(Action.HOLD, 0.0, failures, "configuration error: fix the profile's files")
    if kind is ExitKind.EXTERNAL_STOP:
        return Decision(Action.STOP, 0.0, 0, OUTSIDE)
    if kind is ExitKind.STARTUP_HUNG:
        uptime = 0.0
    if uptime >= policy.healthy_after:
        failures = 0
    if kind is ExitKind.ATTACHED and hold_attach and failures + 1 >= ATTACH_LOOP:
        return Decision(Action.HOLD, 0.0, failures + 1,
                        f"exit 75 before start-up {failures + 1} times in a row: another gateway serves this profile")
    prefix = _REASONS.get(kind)
    if failures == 0 and kind is not ExitKind.SPAWN_ERROR:
        why = "crashed after a healthy run" if uptime >= policy.healthy_after else "crashed (first failure)"
        return Decision(Action.RESTART, 0.0, 1, f"{prefix}; restarting at once" if prefix else why)
    delay = backoff_delay(max(1, failures), policy, rng)
    return Decision(Action.RESTART, delay, failures + 1, prefix or "crash loop")


def backoff_delay(failures: int, policy: RestartPolicy, rng: random.Random | None = None) -> float:
    """Delay before restart after ``failures`` consecutive failed runs (>= 1), jittered, never above the cap.

    The exponent is bounded before it is computed: after 1,025 failures ``factor ** n`` would
    overflow a float, and a profile must back off at the cap forever rather than stop.
    """
    exponent = max(0, failures - 1)
    if policy.initial_delay <= 0:
        return 0.0
    try:
        base = policy.initial_delay * math.pow(policy.factor, min(exponent, 4096))
    except OverflowError:
        base = policy.max_delay
    base = min(policy.max_delay, base)
    spread = (rng or random).uniform(-policy.jitter, policy.jitter)
    return max(0.0, min(policy.max_delay, base * (1 + spread)))
