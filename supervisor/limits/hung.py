"""Hung gateways: a frozen event loop or a stopped process, judged from the heartbeat file.

A running upstream gateway rewrites ``state/gateway.heartbeat`` (JSON ``{pid, updated_at,
monotonic, start_time}``) every 30 s from an asyncio task, starting the moment it reaches
``running``; a blocked event loop stops the beats while the process lives on. A process stopped
by SIGSTOP (state ``T``) or a tracer (``t``) cannot beat either, and upstream's own status code
treats it as stale.

Verdict (:func:`check_hung`, pure):

- ``hung_after`` ``None``: detection is off, never a verdict.
- state ``T``/``t`` at an evaluation: hung, cause ``stopped``.
- a heartbeat of *this* process (same PID, and written after this process started: see
  :func:`beat_age`) at least ``hung_after`` old: hung, cause ``heartbeat``, with the age.
- no heartbeat of this process yet and ``startup_grace`` seconds since it started: hung, cause
  ``no_heartbeat``. A heartbeat left by the previous gateway (another PID) is not this one's.
- the gateway's own event-loop watchdog (the multiplex-default line) wrote ``gateway_state:
  degraded`` with ``exit_reason: loop_liveness_watchdog`` into a state file naming this process:
  hung, cause ``watchdog``, at once. Upstream then exits 75 by itself; that exit is a hang too
  (:func:`supervisor.plan.policy.classify_exit`), backed off like one, not a restart request.

Clock: **monotonic** (``time.monotonic()``, ``CLOCK_MONOTONIC``). The heartbeat carries the
gateway's own ``time.monotonic()``, which on Linux is the same system-wide clock for every process
of one boot and time namespace (hermesd's children share both), so the age survives wall-clock
steps (an NTP jump must not restart every gateway at once). ``updated_at`` (wall, ISO-8601 UTC) is
only the fallback for a heartbeat without a usable ``monotonic``; ``now_wall`` is Unix time.

Cadence (what the loop must do): evaluate each running profile at the ``next_check`` the previous
evaluation returned (one ``call_at`` timer per profile, or one heap), plus right after spawn or
adoption. Each evaluation costs one ``stat`` read and one ~150-byte file read. ``next_check`` is
the moment the current beat turns ``hung_after`` old (or the grace ends, or, before the first beat,
at most ``hung_after`` later), so a gateway that stops beating at time t is judged at
t + ``hung_after`` (+ 5 ms), whichever way it froze; the kill and respawn then take milliseconds,
which meets "restarted within hung_after + 1 s". A stopped gateway is caught at the next
evaluation, which comes no later than that moment (its state ``T`` is seen at once, its beat need
not age first). With 20 profiles and the defaults this is one wake-up per profile per
~90-120 s. No inotify: a watch on the heartbeat would wake the daemon on every beat (20 profiles:
2 wake-ups every 3 s) and still needs a timer, because hung is the *absence* of a write; upstream
also writes it by temp file + rename, so a watch on the file itself is lost after the first beat.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from profiles.upstream import files as gf
from profiles.upstream.multiplex import WATCHDOG_REASON
from profiles.upstream.process import GatewayState
from supervisor.limits.procfs import state_letter
from supervisor.settings import HungSettings

STOPPED_STATES = frozenset("Tt")
_TOLERANCE = 1.0  # seconds: /proc start times have tick (10 ms) resolution, clocks are read apart
_EPSILON = 0.005  # timers may fire a hair early; never hand back a deadline that is "now"

HungCause = Literal["stopped", "heartbeat", "no_heartbeat", "watchdog"]


@dataclass(frozen=True, slots=True)
class Hung:
    """Why a gateway is judged hung; goes into the exit record with reason ``hung``."""

    cause: HungCause
    detail: str


@dataclass(frozen=True, slots=True)
class HungCheck:
    """One evaluation: a verdict (or ``None``), the heartbeat age for status, and when to look again."""

    hung: Hung | None
    heartbeat_age: float | None  # this gateway's beat, seconds; None: none of its own yet
    next_check: float | None  # monotonic; None: nothing to wait for (off, hung, or process gone)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _iso_to_unix(value: object) -> float | None:
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def beat_age(
    beat: Mapping[str, Any] | None,
    *,
    pid: int,
    start_mono: float,
    now_mono: float,
    now_wall: float,
    start_wall: float | None = None,
) -> float | None:
    """Seconds since this process's last heartbeat, or ``None`` when the file holds none of its own.

    Its own means: the same ``pid``, and a ``monotonic`` stamp between this process's start and
    now (a stamp from before the start is an earlier process that had the same PID; one from the
    future is another boot or clock). Without a usable ``monotonic``: ``updated_at`` against
    ``now_wall``, and not before ``start_wall`` when that is known.
    """
    if not isinstance(beat, Mapping):
        return None
    owner = beat.get("pid")
    if isinstance(owner, bool) or owner != pid:
        return None
    mono = _number(beat.get("monotonic"))
    if mono is not None:
        if mono < start_mono - _TOLERANCE or mono > now_mono + _TOLERANCE:
            return None
        return max(0.0, now_mono - mono)
    wall = _iso_to_unix(beat.get("updated_at"))
    if wall is None or (start_wall is not None and wall < start_wall - _TOLERANCE):
        return None
    return max(0.0, now_wall - wall)


def check_hung(
    *,
    pid: int,
    start_mono: float,
    proc_state: str | None,
    beat: Mapping[str, Any] | None,
    settings: HungSettings,
    now_mono: float,
    now_wall: float,
    start_wall: float | None = None,
    gateway_state: Mapping[str, Any] | None = None,
) -> HungCheck:
    """Is the running gateway ``pid`` hung? See the module docstring for the rules and the cadence.

    ``start_mono``: when the process started (:func:`supervisor.limits.procfs.start_clock`), on
    the monotonic clock; for an adopted gateway too (its real start, not the adoption).
    ``proc_state``: field 3 of ``/proc/<pid>/stat``; ``None`` or ``Z``/``X``: the process is gone
    and its exit is being handled elsewhere, so no verdict and no further check.
    ``beat``: the parsed heartbeat file (``{}`` when missing or junk); ``gateway_state``: the parsed
    ``gateway_state.json`` (only its watchdog verdict for this very PID counts).
    """
    age = beat_age(beat, pid=pid, start_mono=start_mono, now_mono=now_mono, now_wall=now_wall, start_wall=start_wall)
    after = settings.hung_after
    if after is None or proc_state is None or proc_state in ("Z", "X"):
        return HungCheck(None, age, None)
    if proc_state in STOPPED_STATES:
        how = "by a signal (SIGSTOP)" if proc_state == "T" else "by a tracer"
        return HungCheck(Hung("stopped", f"stopped {how}"), age, None)
    if watchdog_fired(gateway_state, pid):
        return HungCheck(Hung("watchdog", "the gateway's own event-loop watchdog found its loop stalled "
                                               f"(gateway_state degraded, {WATCHDOG_REASON})"), age, None)
    if age is not None:
        if age >= after:
            return HungCheck(Hung("heartbeat", f"heartbeat {age:.0f}s old (hung_after {after:g}s)"), age, None)
        return HungCheck(None, age, now_mono + (after - age) + _EPSILON)
    # No heartbeat of its own yet: the start-up grace, then "no heartbeat".
    up = max(0.0, now_mono - start_mono)
    grace = settings.startup_grace
    if grace is not None and up >= grace:
        detail = f"no heartbeat {up:.0f}s after start (startup_grace {grace:g}s)"
        return HungCheck(Hung("no_heartbeat", detail), None, None)
    # Look again no later than hung_after from now: a first beat seen then is at most hung_after
    # old, so its deadline is still ahead and the hung_after promise holds from the first beat on.
    nxt = now_mono + after
    if grace is not None:
        nxt = min(nxt, start_mono + grace)
    return HungCheck(None, None, max(nxt, now_mono) + _EPSILON)


def watchdog_fired(gateway_state: Mapping[str, Any] | None, pid: int) -> bool:
    """The state file names ``pid`` and says its event-loop watchdog fired (``degraded``, loop_liveness_watchdog)."""
    if not isinstance(gateway_state, Mapping) or gateway_state.get("pid") != pid:
        return False
    return gateway_state.get("gateway_state") == GatewayState.DEGRADED and \
        gateway_state.get("exit_reason") == WATCHDOG_REASON


def observe(home: Path, pid: int) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """I/O for :func:`check_hung`: the process's state letter, the heartbeat and the state file (``{}`` if
    absent/junk).

    Both files are read through the gateway-files reader (``O_NONBLOCK``, regular files only, 1 MiB
    cap), so a FIFO or a symlink to ``/dev/zero`` planted there costs one ``open``.
    """
    return state_letter(pid), gf.read_heartbeat(home), gf.read_gateway_state(home)
