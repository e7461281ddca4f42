"""The files a Hermes gateway writes in its HERMES_HOME, read as upstream writes them.

Every reader tolerates junk: a truncated, empty or hand-edited file yields ``None`` (or an
empty mapping) and a reason, never an exception, because one profile's broken file must not
stop anyone from looking at the others. Only ``/proc`` reads live here, never a signal: this
package knows files, the supervisor owns processes.

Every file here lives in a home the gateway (and its agent) can write, so each is read and written
by :mod:`profiles.safeio`'s rule: resolved beneath the home without following a link, regular files
only, temp files ``O_EXCL``. ``gateway.pid`` is a *claim*: :func:`live_gateway` only says that the
PID it names is alive and looks like a gateway; ``supervisor.identity`` proves it is this
profile's before anything acts on it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from profiles.safeio import Beneath, beneath, home_file, read_regular_or_none, replace_bytes

PID_FILE = "gateway.pid"
LOCK_FILE = "gateway.lock"
STATE_FILE = "gateway_state.json"
HEARTBEAT_FILE = "state/gateway.heartbeat"
PLANNED_STOP_MARKER = ".gateway-planned-stop.json"
DRAIN_MARKER = ".drain_request.json"
# A gateway's top-level runtime files: meaningless in a copy, an export or a clone.
RUNTIME_TOP_FILES = frozenset({PID_FILE, LOCK_FILE, STATE_FILE, PLANNED_STOP_MARKER, DRAIN_MARKER, "processes.json"})

# Files no bigger than this are upstream's; anything larger is junk and is not parsed.
_MAX_JSON_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class PidRecord:
    """``gateway.pid``: who claims to be this profile's gateway."""

    pid: int
    start_time: int | None
    argv: tuple[str, ...]


def proc_start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks since boot), as upstream records it.

    ``None`` when the process does not exist or is a zombie.

    The command name (field 2) may contain spaces and parentheses, so fields are counted
    from the last ``)``.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    try:
        after = raw[raw.rindex(b")") + 2 :].split()
        # after[0] is field 3 (state); field 22 is after[19].
        if after[0] in (b"Z", b"X"):
            return None  # dead, merely not reaped yet: no longer the process anyone meant
        return int(after[19])
    except (ValueError, IndexError):
        return None


def read_json(where: Beneath | Path) -> dict[str, Any] | None:
    """A JSON object from ``where`` (a path: a file directly in a home), or ``None`` when missing, a
    link, not a regular file, oversized, or not an object."""
    data = read_regular_or_none(beneath(where), _MAX_JSON_BYTES)
    return None if data is None else _json_object(data)


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _as_pid(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value < 1 << 22 else None


def read_pid_record(home: Path) -> PidRecord | None:
    """Parse ``gateway.pid``: one JSON object, or a bare integer (older writers)."""
    raw = read_regular_or_none(home_file(home, PID_FILE), _MAX_JSON_BYTES)
    if raw is None:
        return None
    text = raw[:4096].decode("utf-8", "replace").strip()
    if text.isdigit():
        pid = _as_pid(int(text))
        return PidRecord(pid, None, ()) if pid else None
    obj = _json_object(raw)
    if obj is None:
        return None
    pid = _as_pid(obj.get("pid"))
    if pid is None:
        return None
    start = obj.get("start_time")
    argv = obj.get("argv")
    return PidRecord(
        pid,
        start if isinstance(start, int) and not isinstance(start, bool) else None,
        tuple(str(a) for a in argv) if isinstance(argv, list) else (),
    )


def read_gateway_state(home: Path) -> dict[str, Any]:
    """``gateway_state.json`` as a mapping; empty when missing or unreadable."""
    return read_json(home_file(home, STATE_FILE)) or {}


def read_heartbeat(home: Path) -> dict[str, Any]:
    """``state/gateway.heartbeat`` as a mapping; empty when missing or unreadable."""
    return read_json(home_file(home, HEARTBEAT_FILE)) or {}


def heartbeat_age(beat: dict[str, Any], now: datetime | None = None) -> float | None:
    """Seconds since a heartbeat record (from :func:`read_heartbeat`) was written, if it says."""
    stamp = beat.get("updated_at")
    if not isinstance(stamp, str):
        return None
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, ((now or datetime.now(UTC)) - when).total_seconds())


def live_gateway(home: Path) -> PidRecord | None:
    """The gateway ``gateway.pid`` claims, if a process with that PID and start time is alive.

    A recorded start time must match the live process's, so a recycled PID is never taken
    for the gateway, and the live command line must mention ``gateway``. This is a claim, good for
    showing a PID; before acting on the process (a signal, a marker, a hold) the supervisor proves
    it is this home's gateway (``supervisor.identity.gateway_of``): the file is the profile's.
    """
    rec = read_pid_record(home)
    if rec is None:
        return None
    live = proc_start_time(rec.pid)
    if live is None or (rec.start_time is not None and rec.start_time != live):
        return None
    try:
        cmdline = Path(f"/proc/{rec.pid}/cmdline").read_bytes()
    except OSError:
        return None
    # Even a matching start time can be a hand-written or copied file naming some other process.
    return rec if b"gateway" in cmdline else None


def write_planned_stop_marker(home: Path, pid: int, start_time: int | None) -> None:
    """Tell the gateway ``pid`` that the coming SIGTERM is a planned stop (so it exits 0).

    Written atomically (temp file + rename) in upstream's format; the gateway consumes it.
    """
    record = {
        "target_pid": pid,
        "target_start_time": start_time,
        "stopper_pid": os.getpid(),
        "written_at": datetime.now(UTC).isoformat(),
    }
    # Lives seconds (60 s TTL): no fsync. The temp file is O_EXCL under a random name and the rename
    # is between descriptors of the home: a link the profile planted is never written through.
    write_json_atomic(home_file(home, PLANNED_STOP_MARKER), record, durable=False)


def write_json_atomic(where: Beneath | Path, obj: object, mode: int = 0o600, *, durable: bool = True) -> None:
    """Write JSON so that readers see the old or the new file, never a torn one (:func:`safeio.replace_bytes`).

    ``durable=False`` skips the fsync, for short-lived files that need not survive a power cut.
    """
    replace_bytes(beneath(where), json.dumps(obj, sort_keys=True).encode("utf-8"), mode, durable=durable)
