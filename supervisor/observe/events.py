"""The event schema: what one line of the journal is, how it is stamped, checked and shown.

The schema is fixed by the daemon (the planner emits exactly these types); this module is the one
place that knows it, so the journal, the readers, the hooks, the metrics counters and the
``hermesd events`` rendering all agree. Every event is one flat JSON object::

    {"ts": 1717171717.123456, "seq": 42, "daemon": 4242, "type": "exited", "profile": "coder",
     "pid": 5151, "code": null, "signal": "SIGKILL", "kind": "crash", "reason": "...", "uptime_s": 3.2}

``ts`` is wall-clock Unix time, ``seq`` increases by one per event within one daemon run (it
restarts at 1 when hermesd restarts; ``daemon`` tells runs apart), ``profile`` is ``null`` for
daemon-wide events. No event ever carries a credential: conflicts name a credential only by
platform, kind and salted fingerprint.

Pure: nothing here reads a clock; :class:`Stamper` is given ``now``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from supervisor.plan import policy
from supervisor.plan.policy import FAILURES, ExitKind

# type -> the type-specific fields every such event carries (others may be added freely).
EVENT_FIELDS: dict[str, tuple[str, ...]] = {
    "daemon_started": (),
    "daemon_stopping": (),
    "config_applied": (),
    "config_rejected": ("error",),
    "started": ("pid", "argv0"),
    "ready": ("pid",),
    "exited": ("pid", "code", "signal", "kind", "reason", "uptime_s"),
    "backoff": ("delay_s", "failures", "retry_at"),
    "held": ("kind", "message"),
    "released": ("kind", "why"),
    "stopped": ("by",),
    "adopted": ("pid",),
    "foreign": ("pid",),
    "platform": ("platform", "state", "error_code", "error_message"),
    "hung_kill": ("pid",),  # plus age_s (stale heartbeat) or stopped (SIGSTOPped gateway)
    "limit_kill": ("pid", "limit", "value", "max"),
    "recovered": ("after_failures",),
    # A fleet operation (hermesd upgrade, its --rollback, restart --rolling), recorded step by step:
    # ``operation`` is upgrade | rollback | rolling_restart; ``id`` names its record under
    # <root>/.hermesd/upgrades/.
    "upgrade_started": ("id", "operation", "target"),
    "upgrade_installed": ("id", "release", "code"),
    "upgrade_restarting": ("id", "canary"),
    "upgrade_gate": ("id", "passed", "reason", "took_s"),
    "upgrade_restored": ("id", "files"),
    "upgrade_finished": ("id", "operation", "result", "reason"),
    # the multiplex-default line: a child serving other profiles, a second gateway beside ours,
    # a gateway's rewrite of the root's config.yaml
    "multiplexing": ("pid", "serves", "source"),
    "rival": ("pid", "ours", "how"),
    "config_rewritten": ("file", "marker"),
}
EVENT_TYPES: tuple[str, ...] = tuple(EVENT_FIELDS)
DAEMON_WIDE: frozenset[str] = frozenset({"daemon_started", "daemon_stopping", "config_applied", "config_rejected",
                                         "upgrade_started", "upgrade_installed", "upgrade_finished"})
# The events a command may ask the daemon to record (the control request ``record``): its own steps,
# never one of the daemon's (a client cannot forge an exit or a hold).
CLIENT_EVENTS: frozenset[str] = frozenset(t for t in EVENT_FIELDS if t.startswith("upgrade_"))

# How an exit was classified (the ``kind`` of an ``exited`` event), and which of those are a failure
# of the profile: the planner's own words (:mod:`supervisor.plan.policy`), never a copy.
EXIT_KINDS: tuple[str, ...] = tuple(kind.value for kind in ExitKind)
FAILURE_KINDS: frozenset[str] = frozenset(kind.value for kind in FAILURES)
STOPPED_BY: tuple[str, ...] = ("operator", "outside")

BASE_KEYS = ("ts", "seq", "daemon", "type", "profile")
# A gateway writes its own platform error messages; a reason may quote a file. Both are capped so
# that one event stays one small write and one short line.
MAX_STRING = 1000
MAX_LINE = 16 * 1024


@dataclass(slots=True)
class Stamper:
    """Stamps events of one daemon run: ``ts`` (given), ``seq`` (1, 2, …) and ``daemon`` (PID)."""

    daemon: int
    seq: int = 0

    def stamp(self, type_: str, profile: str | None, now: float, fields: Mapping[str, Any]) -> dict[str, Any]:
        self.seq += 1
        event: dict[str, Any] = {
            "ts": round(now, 6), "seq": self.seq, "daemon": self.daemon, "type": type_, "profile": profile,
        }
        for key, value in fields.items():
            if key not in event:
                event[key] = bounded(value)
        return event


def bounded(value: object, depth: int = 0) -> object:
    """``value`` cut to what an event may carry: strings of 1000 characters, shallow JSON only."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None  # NaN/inf are not JSON
    if isinstance(value, str):
        return value if len(value) <= MAX_STRING else value[: MAX_STRING - 1] + "…"
    if depth < 2 and isinstance(value, Mapping):
        return {str(k)[:100]: bounded(v, depth + 1) for k, v in list(value.items())[:50]}
    if depth < 2 and isinstance(value, list | tuple):
        return [bounded(v, depth + 1) for v in list(value)[:50]]
    return bounded(str(value), depth)


def validate(event: Mapping[str, Any]) -> list[str]:
    """Everything wrong with ``event`` against the schema (empty when it is well formed).

    For tests and for the readers' ``--strict`` use; the writer never refuses an event.
    """
    problems = []
    for key, kinds in (("ts", (int, float)), ("seq", (int,)), ("daemon", (int,)), ("type", (str,))):
        if not isinstance(event.get(key), kinds) or isinstance(event.get(key), bool):
            problems.append(f"{key}: missing or not a {kinds[0].__name__}")
    profile = event.get("profile", "missing")
    if profile is not None and not isinstance(profile, str):
        problems.append("profile: expected a string or null")
    type_ = event.get("type")
    if isinstance(type_, str):
        if type_ not in EVENT_FIELDS:
            problems.append(f"type: unknown event type {type_!r}")
        else:
            problems += [f"{type_}: missing field {f!r}" for f in EVENT_FIELDS[type_] if f not in event]
            if type_ in DAEMON_WIDE and profile is not None:
                problems.append(f"{type_}: a daemon-wide event has profile null")
            if type_ not in DAEMON_WIDE and not isinstance(profile, str):
                problems.append(f"{type_}: needs a profile")
            if type_ == "exited" and event.get("kind") not in EXIT_KINDS:
                problems.append(f"exited: unknown kind {event.get('kind')!r}")
            if type_ == "hung_kill" and "age_s" not in event and "stopped" not in event:
                problems.append("hung_kill: needs age_s or stopped")
            if type_ == "stopped" and event.get("by") not in STOPPED_BY:
                problems.append(f"stopped: 'by' must be one of {', '.join(STOPPED_BY)}")
    return problems


def is_event(obj: object) -> bool:
    """The minimum a reader needs to use a line: an object with a string type and a numeric ts."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("type"), str)
        and isinstance(obj.get("ts"), int | float)
        and not isinstance(obj.get("ts"), bool)
        and (obj.get("profile") is None or isinstance(obj.get("profile"), str))
    )


# --------------------------------------------------------------------------- rendering


def describe_exit(code: object, sig: object, kind: object = None) -> str:
    """``exit 1``, ``killed by SIGKILL``, or ``exit status unknown`` (an adopted gateway); a signal
    in the words of :func:`supervisor.plan.policy.describe_exit` (``kind``: the exit's kind)."""
    if sig is not None:
        return policy.describe_exit(None, sig if isinstance(sig, int | str) else str(sig),
                                    kind if isinstance(kind, str) else None)
    if code is not None:
        return f"exit {code}"
    return "exit status unknown"


def duration(seconds: object) -> str:
    """``850ms``, ``12.3s``, ``4m05s``, ``3h12m``, ``2d04h``: short and exact enough for a log line."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return "?"
    s = float(seconds)
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def clock(ts: object, *, date: bool = False) -> str:
    """Local time of ``ts`` (``HH:MM:SS``, with the date when asked)."""
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        return "?"
    try:
        when = datetime.fromtimestamp(ts, UTC).astimezone()
    except (OverflowError, OSError, ValueError):
        return "?"
    return when.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")


def _s(value: object) -> str:
    return "-" if value is None else str(value)


def summary(event: Mapping[str, Any]) -> str:
    """What happened, in words, without time or profile (``hermesd events`` and hook variables)."""
    t = event.get("type")
    e = event
    if t == "daemon_started":
        return f"hermesd started (PID {_s(e.get('daemon'))})"
    if t == "daemon_stopping":
        return "hermesd stopping" + (f": {e['reason']}" if e.get("reason") else "")
    if t == "config_applied":
        return "configuration applied"
    if t == "config_rejected":
        return f"configuration rejected, previous one kept: {_s(e.get('error'))}"
    if t == "started":
        return f"started PID {_s(e.get('pid'))} ({_s(e.get('argv0'))})"
    if t == "ready":
        return f"ready: gateway running (PID {_s(e.get('pid'))})"
    if t == "exited":
        what = describe_exit(e.get("code"), e.get("signal"), e.get("kind"))
        tail = f": {e['reason']}" if e.get("reason") else ""
        return f"PID {_s(e.get('pid'))} {what} after {duration(e.get('uptime_s'))} ({_s(e.get('kind'))}){tail}"
    if t == "backoff":
        n = e.get("failures")
        return (f"backoff: retry in {duration(e.get('delay_s'))} at {clock(e.get('retry_at'))}"
                f" ({_s(n)} failure{'' if n == 1 else 's'} in a row)")
    if t == "held":
        return f"held ({_s(e.get('kind'))}): {_s(e.get('message'))}"
    if t == "released":
        return f"released from {_s(e.get('kind'))}: {_s(e.get('why'))}"
    if t == "stopped":
        who = {"operator": "the operator", "outside": "someone outside hermesd"}.get(str(e.get("by")), _s(e.get("by")))
        return f"stopped by {who}; stays down until started"
    if t == "adopted":
        return f"adopted running gateway PID {_s(e.get('pid'))}"
    if t == "foreign":
        return f"a gateway hermesd did not start holds the profile (PID {_s(e.get('pid'))})"
    if t == "platform":
        err = " ".join(str(x) for x in (e.get("error_code"), e.get("error_message")) if x)
        return f"platform {_s(e.get('platform'))}: {_s(e.get('state'))}" + (f" ({err})" if err else "")
    if t == "hung_kill":
        why = "stopped (SIGSTOP)" if e.get("stopped") else f"heartbeat {duration(e.get('age_s'))} old"
        return f"hung, {why}: killed PID {_s(e.get('pid'))}"
    if t == "limit_kill":
        return f"{_s(e.get('limit'))} limit: killed PID {_s(e.get('pid'))} ({_s(e.get('value'))} > {_s(e.get('max'))})"
    if t == "recovered":
        n = e.get("after_failures")
        return f"recovered: running healthy again after {_s(n)} failure{'' if n == 1 else 's'}"
    if t is not None and str(t).startswith("upgrade_"):
        return _upgrade_summary(e)
    if t == "multiplexing":
        serves = ", ".join(str(x) for x in e.get("serves") or [])
        return f"PID {_s(e.get('pid'))} serves {serves} as well ({_s(e.get('source'))}): stopping it"
    if t == "rival":
        return (f"a second gateway PID {_s(e.get('pid'))} serves the profile beside hermesd's PID "
                f"{_s(e.get('ours'))} ({_s(e.get('how'))}): hermesd stops its own")
    if t == "config_rewritten":
        how = f"upstream's marker {e['marker']}" if e.get("marker") else "gateway.multiplex_profiles turned true"
        return f"a gateway rewrote {_s(e.get('file'))} ({how})"
    extra = " ".join(f"{k}={v}" for k, v in e.items() if k not in BASE_KEYS)
    return f"{_s(t)} {extra}".rstrip()


def _upgrade_summary(e: Mapping[str, Any]) -> str:
    t, tag = e.get("type"), f"{_s(e.get('operation') or 'upgrade')} {_s(e.get('id'))}"
    if t == "upgrade_started":
        return f"{tag} started" + (f": to {e['target']}" if e.get("target") else "")
    if t == "upgrade_installed":
        return f"{tag}: hermes-agent {_s(e.get('release'))} in place ({_s(e.get('code'))})"
    if t == "upgrade_restarting":
        return f"{tag}: restarting" + (" (canary)" if e.get("canary") else "")
    if t == "upgrade_gate":
        verdict = "passed" if e.get("passed") else "FAILED"
        return f"{tag}: health gate {verdict} after {duration(e.get('took_s'))}" + (
            f": {e['reason']}" if e.get("reason") else "")
    if t == "upgrade_restored":
        files = e.get("files")
        shown = ", ".join(map(str, files)) if isinstance(files, list) and files else "nothing to restore"
        return f"{tag}: files restored: {shown}"
    if t == "upgrade_finished":
        return f"{tag} {_s(e.get('result'))}" + (f": {e['reason']}" if e.get("reason") else "")
    return f"{_s(t)} {tag}"


def render_line(event: Mapping[str, Any], *, width: int = 12) -> str:
    """One readable line: local date and time, profile (``-`` for hermesd itself), summary."""
    profile = event.get("profile") or "-"
    return f"{clock(event.get('ts'), date=True)}  {profile:<{width}}  {summary(event)}"
