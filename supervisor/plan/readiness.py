"""Ready means serving: the one verdict on whether a profile's gateway serves its users now.

A process and a heartbeat say a gateway exists, not that anyone can reach it: a gateway stopped with
SIGSTOP keeps its PID, its state file says ``running`` and its platforms ``connected``. So the
verdict is taken over what the gateway itself reports (``gateway_state.json``, as its ``status`` row
carries it) and, where the profile enables upstream's API server, over whether that server answered
``GET /v1/health`` from the gateway's own socket (:mod:`supervisor.processes.apicheck`, the row's ``api``).
``hermesd status`` shows it, ``start``/``restart`` wait for it, and the health gate of ``upgrade`` and
``restart --rolling`` holds each restarted profile to it: all of them call :func:`judge`.

The rules, in order (the first that applies decides):

1. hermesd's state is not ``running``: not serving (``-``). Held or stopped is *settled* (waiting
   will not change it).
2. The gateway has not reported ``running`` (``starting``, ``draining``, ``degraded``, nothing yet):
   not serving.
3. Its heartbeat (releases that write one) is older than three of upstream's 30 s beats: not serving,
   its event loop may be stuck.
4. Each *channel* is judged: every platform the gateway reports since it started, and the API server
   where the profile's files give it a port. A platform serves when ``connected``. ``connecting``,
   ``retrying`` and ``disconnected`` may still connect; ``fatal``, ``paused``, ``disabled`` and a
   platform ``retrying`` because another gateway holds its credential (``<scope>_lock``) will not
   without someone acting (settled). The API server serves when its platform is (or is not reported)
   connected *and* its health check answered from the gateway's own socket; a check not made yet, a
   timeout, a refusal or another process's listener is not serving. Where the gateway listens on
   that port only on an address other than 127.0.0.1 hermesd does not probe it, and the platform
   state alone decides.
5. Ready when every required channel serves (``yes``); ``partly`` when some do, ``no`` when none
   does. A profile with no channel at all (no platform configured: upstream's gateway still runs,
   for scheduled jobs) is ready once rules 1-3 pass.

``required``: the channels that must serve (all of them by default). The upgrade gate passes the
channels that served before it restarted the profile, so that a platform already broken (a revoked
token) does not block every later rollout, while one that served before must serve again.

Pure: rows in, verdicts out; no clock, file or socket (``tests/plan/test_readiness.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from profiles.upstream.apiserver import API_SERVER
from profiles.upstream.process import HEARTBEAT_INTERVAL_S, GatewayState, PlatformState, is_lock_error

Row = Mapping[str, Any]

HEARTBEAT_MAX_S = 3 * HEARTBEAT_INTERVAL_S  # three missed beats: the event loop is not running
RUNNING = "running"

# Platform states that need someone to act before the platform can serve (see the module docstring).
_SETTLED = frozenset({PlatformState.FATAL, PlatformState.PAUSED, PlatformState.DISABLED})


class Outcome(enum.StrEnum):
    """What a check of the API server found (:mod:`supervisor.processes.apicheck`; the row's ``api.outcome``)."""

    ANSWERED = "answered"  # the gateway's own socket answered 200 {"status": "ok"}
    PENDING = "pending"  # this gateway has not been checked yet
    ELSEWHERE = "elsewhere"  # the gateway listens on that port, but not where 127.0.0.1 reaches it: not probed
    NO_LISTENER = "no_listener"
    NOT_ITS_OWN = "not_its_own"  # another process listens there: never connected
    REFUSED = "refused"
    TIMEOUT = "timeout"
    BAD_ANSWER = "bad_answer"
    UNTRACED = "untraced"  # an answer, but not from the gateway's own socket
    UNKNOWN = "unknown"  # its sockets could not be read in /proc


@dataclass(frozen=True, slots=True)
class Channel:
    """One way users reach the profile: a platform, or the API server."""

    name: str
    serving: bool
    settled: bool  # not serving, and waiting will not change that
    why: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "serving": self.serving, "settled": self.settled, "why": self.why}


@dataclass(frozen=True, slots=True)
class Serving:
    """The verdict on one profile (see the module docstring)."""

    ready: bool
    word: str  # "yes", "partly", "no", or "-" (not running)
    why: str
    settled: bool  # ready, or not ready for a reason waiting will not cure
    channels: tuple[Channel, ...] = ()

    @property
    def serving_channels(self) -> frozenset[str]:
        return frozenset(c.name for c in self.channels if c.serving)

    def to_json(self) -> dict[str, Any]:
        return {"ready": self.ready, "word": self.word, "why": self.why, "settled": self.settled,
                "channels": [c.to_json() for c in self.channels]}


def judge(row: Row, *, required: Collection[str] | None = None) -> Serving:
    """Whether the profile of this ``status`` row serves (see the module docstring)."""
    state = row.get("state")
    if state != RUNNING:
        return Serving(False, "-", f"not running ({state})", settled=state in ("held", "stopped"))
    reported = row.get("gateway_state")
    if reported != GatewayState.RUNNING:
        why = f"its gateway reports {reported}" if isinstance(reported, str) else "its gateway has not reported yet"
        return Serving(False, "no", why, settled=False)
    beat = row.get("heartbeat_age_s")
    if isinstance(beat, int | float) and not isinstance(beat, bool) and beat > HEARTBEAT_MAX_S:
        return Serving(False, "no", f"its heartbeat is {beat:.0f}s old: its event loop may be stuck", settled=False)
    channels = _channels(row)
    if not channels:
        return Serving(True, "yes", "running, no platform configured (it runs scheduled jobs only)", True)
    served = [c.name for c in channels if c.serving]
    down = [c for c in channels if not c.serving]
    word = "yes" if not down else "partly" if served else "no"
    failing = [c for c in down if required is None or c.name in required]
    if not failing:
        why = "serving: " + (", ".join(served) or "none of its channels")
        if down:
            why += "; not required here: " + _list(down)
        return Serving(True, word, why, True, channels)
    return Serving(False, word, _list(failing), settled=any(c.settled for c in failing), channels=channels)


def _list(channels: list[Channel]) -> str:
    return ", ".join(f"{c.name} ({c.why})" for c in channels)


def _channels(row: Row) -> tuple[Channel, ...]:
    raw = row.get("platforms")
    plats: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    out = [_platform(str(name), info) for name, info in sorted(plats.items(), key=lambda kv: str(kv[0]))
           if name != API_SERVER and isinstance(info, Mapping)]
    api = _api(plats.get(API_SERVER), row.get("api"))
    return tuple(sorted([*out, api], key=lambda c: c.name) if api is not None else out)


def _platform(name: str, info: Mapping[str, Any]) -> Channel:
    state = info.get("state") if isinstance(info.get("state"), str) else None
    if state == PlatformState.CONNECTED:
        return Channel(name, True, False, "connected")
    reason = " ".join(str(info.get("error_message") or info.get("error_code") or "").split())[:200]
    why = f"{state}: {reason}" if reason else str(state or "not reported")
    if state == PlatformState.RETRYING and is_lock_error(info.get("error_code")):
        held = "blocked: another gateway holds its credential"
        return Channel(name, False, True, f"{held}: {reason}" if reason else held)
    return Channel(name, False, state in _SETTLED, why)


def _api(info: object, check: object) -> Channel | None:
    """The API server: its platform state, and the health check where the profile gives it a port."""
    if not isinstance(check, Mapping):
        return _platform(API_SERVER, info) if isinstance(info, Mapping) else None
    if isinstance(info, Mapping) and info.get("state") != PlatformState.CONNECTED:
        return _platform(API_SERVER, info)
    outcome, detail = check.get("outcome"), str(check.get("detail") or check.get("outcome"))
    if outcome == Outcome.ANSWERED:
        return Channel(API_SERVER, True, False, detail)
    if outcome == Outcome.ELSEWHERE:
        connected = isinstance(info, Mapping)  # connected, as checked above
        return Channel(API_SERVER, connected, False, f"{'connected' if connected else 'not reported'} ({detail})")
    return Channel(API_SERVER, False, False, detail)
