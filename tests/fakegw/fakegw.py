#!/usr/bin/env python3
"""A fake ``hermes gateway run``: the upstream process contract, without the 84 MiB gateway.

Run it as the "hermes" executable: ``python3 fakegw.py [-p NAME] gateway run --external-supervisor``.
It follows /work/shared/upstream-contract.md (measured on hermes-agent 0.19.0) closely enough for
the supervisor's tests: the same files in ``HERMES_HOME`` in the same formats (``gateway.pid``,
``gateway.lock``, ``gateway_state.json``, ``state/gateway.heartbeat``), the same planned-stop
marker, the same signals and exit codes. Its behaviour is tuned per profile by
``$HERMES_HOME/fakegw.json`` (see ``DEFAULTS``), read once at start.

Standard library only, small imports, no work at import time beyond reading argv and the
environment: ``HERMES_HOME`` is read once, at import, into module-level path constants, as
upstream does. Deliberate differences from upstream, all on the safe side for tests: an unset
``HERMES_HOME`` is refused (exit 2) instead of falling back to ``~/.hermes``; ``-p NAME`` must be
the basename of ``HERMES_HOME`` (upstream resolves it under the root instead). Not modelled: the
drain marker's instantiation epoch (the fake treats ``.drain_request.json`` as presence-only, which
is upstream's behaviour for a marker without an epoch), logs/, sessions, platforms' real I/O.
Modelled besides: without ``-p`` and without ``HERMES_S6_SUPERVISED_CHILD``, a root's sticky
``active_profile`` redirects the gateway to that profile; the ``--replace`` takeover marker
``.gateway-takeover.json`` makes a SIGTERM planned, like the planned-stop marker.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

T0_EPOCH = time.time()

KIND = "hermes-gateway"
PLANNED_STOP_TTL_S = 60
RESTART_EXIT_CODE = 75
FATAL_CONFIG_EXIT_CODE = 78
RESTART_REASON = "Gateway restart requested"
PLATFORM_STATES = frozenset({"connecting", "connected", "retrying", "fatal", "paused", "disabled", "disconnected"})
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP, signal.SIGQUIT)
_RESERVED_PROFILES = frozenset({"hermes", "test", "tmp", "root", "sudo"})
_NAME_FIRST = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_NAME_REST = _NAME_FIRST | {"_", "-"}
USAGE = "usage: fakegw.py [-p NAME] gateway run [--external-supervisor]"

# Knobs of $HERMES_HOME/fakegw.json, with their defaults (a missing file means all defaults).
#
# An unmarked SIGTERM has three outcomes upstream, by phase, and the fake keeps them apart:
# during startup_delay (upstream: imports, no handlers yet) it kills the process (-15, no
# clean-up); during start-up proper (lock taken .. "running" written, then startup_tail) it
# exits 0 and leaves "running"; once started it exits 1 and leaves "running".
DEFAULTS: dict[str, Any] = {
    "exit_at_start": None,  # int: exit with it after taking the lock, before gateway.pid (78: startup_failed)
    "exit_after": None,  # float seconds after "running": exit with exit_code
    "exit_code": 1,  # code for exit_after
    "exit_after_clean": False,  # False: crash (no clean-up); True: graceful exit path with exit_code
    "startup_delay": 0.0,  # seconds of "imports" before the lock and gateway.pid (upstream: ~0.7)
    "running_delay": 0.0,  # seconds spent in "starting" after gateway.pid, before "running"
    "startup_tail": 0.0,  # seconds still in start-up after writing "running" (upstream's runner.start())
    "ignore_sigterm": False,  # ignore SIGTERM, SIGINT, SIGUSR1 and the planned-stop marker
    "hang_on_exit": 0.0,  # seconds to hang in the shutdown path (state "draining")
    "grandchildren": 0,  # long-lived `sleep` children spawned once running
    "grandchildren_setsid": False,  # True: all in a new session; int k: the first k of them
    "grandchildren_lifetime": 600.0,  # seconds each grandchild sleeps
    "platforms": {},  # {name: {state, error_code, error_message}} written with "running"
    "active_agents": 0,  # written into gateway_state.json
    "heartbeat_interval": 30.0,  # seconds between state/gateway.heartbeat rewrites
    "poll_interval": 0.5,  # seconds between planned-stop / drain marker polls
    "diagnostic_shell": False,  # spawn a detached (setsid) diagnostic shell per shutdown signal
    "diagnostic_seconds": 5.0,  # how long that shell lives
    "print_env": [],  # env var names to report on stdout at start
    "write_counter": False,  # append our pid to $HERMES_HOME/fakegw.starts on every start
    "shell": None,  # str: a /bin/sh -c command run once, when running (what an agent's terminal tool runs)
    # {port, health, after}: an API server on 127.0.0.1:port from `after` seconds after "running" (default 0);
    # GET /v1/health answers 200 {"status": "ok"} ("ok"), 500 ("error"), or never ("hang")
    "api_server": None,
}


# ---------------------------------------------------------------------------------------------
# argv and HERMES_HOME, resolved once at import (no side effects: errors are reported by main).


def _valid_profile_name(name: str) -> bool:
    return (
        0 < len(name) <= 64
        and name[0] in _NAME_FIRST
        and all(c in _NAME_REST for c in name)
        and name not in _RESERVED_PROFILES
    )


def _parse_argv(argv: list[str]) -> tuple[str | None, list[str], str | None]:
    """``(profile, argv as upstream records it, error)``; upstream strips ``-p NAME`` from argv."""
    rest = argv[1:]
    profile: str | None = None
    kept: list[str] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg in ("-p", "--profile"):
            if i + 1 >= len(rest):
                return None, argv[:1] + kept, f"{arg} needs a profile name"
            profile = rest[i + 1]
            i += 2
            continue
        if arg.startswith("--profile="):
            profile = arg.split("=", 1)[1]
        else:
            kept.append(arg)
        i += 1
    positional = [a for a in kept if not a.startswith("-")]
    error = None if positional[:2] == ["gateway", "run"] else USAGE
    return profile, argv[:1] + kept, error


def _resolve_home(env_home: str, profile: str | None) -> tuple[Path, str | None, int, str | None]:
    """``(home, error, exit code for the error, note)`` like upstream's profile override."""
    if not env_home:
        return Path(), "HERMES_HOME is not set (the fake never falls back to ~/.hermes)", 2, None
    home = Path(env_home)
    if profile is not None:
        if profile == "default":
            if home.parent.name == "profiles":
                return home, f"Error: -p default, but HERMES_HOME={home} is a named profile", 1, None
            return home, None, 0, None
        if not _valid_profile_name(profile):
            return home, f"Error: invalid profile name {profile!r}", 1, None
        if home.name != profile:
            return home, f"Error: -p {profile} does not match HERMES_HOME={home}", 1, None
        if not home.is_dir():
            return home, f"Error: Profile '{profile}' does not exist.", 1, None
        return home, None, 0, None
    # No -p: upstream follows a sticky <root>/active_profile unless HERMES_S6_SUPERVISED_CHILD is set.
    if not os.environ.get("HERMES_S6_SUPERVISED_CHILD") and home.parent.name != "profiles":
        try:
            active = (home / "active_profile").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            active = ""
        if active and active != "default":
            target = home / "profiles" / active
            if not target.is_dir():
                return home, f"Error: Profile '{active}' does not exist.", 1, None
            note = f"following {home}/active_profile to {target} (HERMES_S6_SUPERVISED_CHILD unset)"
            return target, None, 0, note
    return home, None, 0, None


PROFILE, RECORDED_ARGV, ARGV_ERROR = _parse_argv(sys.argv)
HERMES_HOME, HOME_ERROR, HOME_ERROR_CODE, HOME_NOTE = _resolve_home(os.environ.get("HERMES_HOME", "").strip(), PROFILE)
PID_PATH = HERMES_HOME / "gateway.pid"
LOCK_PATH = HERMES_HOME / "gateway.lock"
STATE_PATH = HERMES_HOME / "gateway_state.json"
HEARTBEAT_PATH = HERMES_HOME / "state" / "gateway.heartbeat"
PLANNED_STOP_PATH = HERMES_HOME / ".gateway-planned-stop.json"
TAKEOVER_PATH = HERMES_HOME / ".gateway-takeover.json"
DRAIN_PATH = HERMES_HOME / ".drain_request.json"
DIAG_LOG_PATH = HERMES_HOME / "logs" / "gateway-shutdown-diag.log"
BEHAVIOUR_PATH = HERMES_HOME / "fakegw.json"
STARTS_PATH = HERMES_HOME / "fakegw.starts"
SPAWNED_PATH = HERMES_HOME / "fakegw.children"


# ---------------------------------------------------------------------------------------------
# Small helpers.


def say(msg: str) -> None:
    print(msg, flush=True)


def warn(msg: str) -> None:
    print(f"WARNING fakegw: {msg}", file=sys.stderr, flush=True)


def error(msg: str) -> None:
    print(f"ERROR fakegw: {msg}", file=sys.stderr, flush=True)


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, start time)`` from ``/proc/<pid>/stat``; field 22 is the start time in ticks."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        after = raw[raw.rindex(b")") + 2 :].split()
        return after[0].decode(), int(after[19])
    except (OSError, ValueError, IndexError):
        return None


def proc_start_time(pid: int) -> int | None:
    stat = proc_stat(pid)
    return stat[1] if stat else None


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        raw = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not raw:
        return None
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


_tmp_counter = 0


def write_json_atomic(path: Path, obj: object, **dump_kwargs: Any) -> None:
    """temp file + fsync + rename, like upstream's ``atomic_json_write``."""
    global _tmp_counter
    _tmp_counter += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}_{os.getpid()}_{threading.get_ident()}_{_tmp_counter}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, ensure_ascii=False, **dump_kwargs)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def append_line(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def which(name: str) -> str | None:
    for d in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin", "/bin"]:
        candidate = os.path.join(d or ".", name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


# ---------------------------------------------------------------------------------------------
# Behaviour knobs.


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _exit_code_ok(v: object) -> bool:
    return _is_int(v) and 0 <= v <= 255


def _platforms_ok(v: object) -> bool:
    if not isinstance(v, dict):
        return False
    for name, entry in v.items():
        if not isinstance(name, str) or not isinstance(entry, dict):
            return False
        if set(entry) - {"state", "error_code", "error_message"}:
            return False
        if "state" in entry and entry["state"] not in PLATFORM_STATES:
            return False
        for key in ("error_code", "error_message"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                return False
    return True


def _api_server_ok(v: object) -> bool:
    return (isinstance(v, dict) and not set(v) - {"port", "health", "after"} and _is_int(v.get("port"))
            and 0 < v["port"] < 65536 and v.get("health", "ok") in ("ok", "error", "hang")
            and _is_num(v.get("after", 0)) and v.get("after", 0) >= 0)


_CHECKS: dict[str, tuple[Any, str]] = {
    "exit_at_start": (lambda v: v is None or _exit_code_ok(v), "null or an exit code 0-255"),
    "exit_after": (lambda v: v is None or (_is_num(v) and v >= 0), "null or seconds >= 0"),
    "exit_code": (_exit_code_ok, "an exit code 0-255"),
    "exit_after_clean": (lambda v: isinstance(v, bool), "a boolean"),
    "startup_delay": (lambda v: _is_num(v) and v >= 0, "seconds >= 0"),
    "running_delay": (lambda v: _is_num(v) and v >= 0, "seconds >= 0"),
    "startup_tail": (lambda v: _is_num(v) and v >= 0, "seconds >= 0"),
    "ignore_sigterm": (lambda v: isinstance(v, bool), "a boolean"),
    "hang_on_exit": (lambda v: _is_num(v) and v >= 0, "seconds >= 0"),
    "grandchildren": (lambda v: _is_int(v) and 0 <= v <= 64, "an integer 0-64"),
    "grandchildren_setsid": (lambda v: isinstance(v, bool) or (_is_int(v) and v >= 0), "a boolean or int"),
    "grandchildren_lifetime": (lambda v: _is_num(v) and v > 0, "seconds > 0"),
    "platforms": (_platforms_ok, "{name: {state, error_code, error_message}} with a known state"),
    "active_agents": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "heartbeat_interval": (lambda v: _is_num(v) and v >= 0.05, "seconds >= 0.05"),
    "poll_interval": (lambda v: _is_num(v) and v >= 0.01, "seconds >= 0.01"),
    "diagnostic_shell": (lambda v: isinstance(v, bool), "a boolean"),
    "shell": (lambda v: v is None or isinstance(v, str), "null or a shell command"),
    "api_server": (lambda v: v is None or _api_server_ok(v),
                   "null or {port: 1-65535, health: ok|error|hang, after: seconds}"),
    "diagnostic_seconds": (lambda v: _is_num(v) and v > 0, "seconds > 0"),
    "print_env": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of names"),
    "write_counter": (lambda v: isinstance(v, bool), "a boolean"),
}
assert set(_CHECKS) == set(DEFAULTS)


def load_behaviour(path: Path) -> tuple[dict[str, Any], str | None]:
    """The knobs from ``path`` over ``DEFAULTS``, or an error message."""
    knobs = dict(DEFAULTS)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return knobs, None
    except (OSError, UnicodeDecodeError) as exc:
        return knobs, f"cannot read {path}: {exc}"
    try:
        data = json.loads(raw)
    except ValueError as exc:
        return knobs, f"{path} is not valid JSON: {exc}"
    if not isinstance(data, dict):
        return knobs, f"{path} must hold a JSON object"
    unknown = sorted(set(data) - set(DEFAULTS))
    if unknown:
        return knobs, f"{path}: unknown knob(s) {', '.join(unknown)}; known: {', '.join(sorted(DEFAULTS))}"
    for key, value in data.items():
        check, want = _CHECKS[key]
        if not check(value):
            return knobs, f"{path}: {key} must be {want}, got {value!r}"
    knobs.update(data)
    return knobs, None


# ---------------------------------------------------------------------------------------------
# The gateway.


class FakeGateway:
    def __init__(self, knobs: dict[str, Any]) -> None:
        self.k = knobs
        self.pid = os.getpid()
        self.start_time = proc_start_time(self.pid)
        self.record: dict[str, Any] = {
            "pid": self.pid,
            "kind": KIND,
            "argv": RECORDED_ARGV,
            "start_time": self.start_time,
        }
        self.lock_fd: int | None = None
        self.phase = "init"  # init, starting, running, stopping
        self.started_up = False  # past upstream's runner.start(): an unmarked SIGTERM now exits 1
        self._handlers_installed = False
        self.external_drain = False
        self.state_lock = threading.Lock()
        self.children: list[Any] = []  # subprocess.Popen objects, reaped by the watcher
        self.children_lock = threading.Lock()
        # Signal handlers and the watcher only append to _events and poke the pipe (the signal
        # wakeup fd): no locks and no printing in a handler, which may run between any two bytecodes.
        self._events: list[str] = []
        self._seen = 0
        self.request: str | None = None
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self.watcher_stop = threading.Event()
        self._marker_posted = False

    def install_signal_handlers(self) -> None:
        if self._handlers_installed:
            return
        self._handlers_installed = True
        # A process-directed signal may land on any thread, and then nothing interrupts the
        # main thread's select(): the wakeup fd is written by the C-level handler whichever
        # thread takes the signal, and the watcher blocks these signals besides.
        signal.set_wakeup_fd(self._wfd, warn_on_full_buffer=False)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, self._on_signal)
        for sig in (signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)  # killed by the kernel: no clean-up, like upstream

    # -- events ---------------------------------------------------------------------------------

    def _post(self, event: str) -> None:
        self._events.append(event)
        with contextlib.suppress(OSError):  # pipe full: the reader is already due to wake
            os.write(self._wfd, b"!")

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._events.append(signal.Signals(signum).name)  # the wakeup fd already woke us

    def _poll_requests(self) -> str | None:
        try:
            while os.read(self._rfd, 4096):
                pass
        except BlockingIOError:
            pass
        while self._seen < len(self._events):
            event = self._events[self._seen]
            self._seen += 1
            if self.k["ignore_sigterm"] and event in ("SIGTERM", "SIGINT", "SIGUSR1"):
                warn(f"ignoring {event} (ignore_sigterm)")
            elif self.request is None:
                self.request = event
            else:
                warn(f"{event} while already stopping ({self.request}): ignored")
        return self.request

    def _wait(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True as soon as a stop is requested."""
        deadline = time.monotonic() + seconds
        while True:
            if self._poll_requests() is not None:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            select.select([self._rfd], [], [], left)

    # -- files ----------------------------------------------------------------------------------

    def write_state(self, platforms: dict[str, dict[str, Any]] | None = None, **fields: Any) -> None:
        """Read-merge-write ``gateway_state.json`` like upstream's ``write_runtime_status``."""
        with self.state_lock:
            self._write_state_locked(platforms, **fields)

    def _write_state_locked(self, platforms: dict[str, dict[str, Any]] | None, **fields: Any) -> None:
        payload = read_json(STATE_PATH) or {
            **self.record,
            "gateway_state": "starting",
            "exit_reason": None,
            "restart_requested": False,
            "active_agents": 0,
            "platforms": {},
            "updated_at": now_iso(),
        }
        if not isinstance(payload.get("platforms"), dict):
            payload["platforms"] = {}
        payload.update(self.record)
        payload["updated_at"] = now_iso()
        payload.update(fields)
        for name, entry in (platforms or {}).items():
            merged = payload["platforms"].get(name)
            merged = dict(merged) if isinstance(merged, dict) else {}
            merged.update(entry)
            merged["updated_at"] = now_iso()
            payload["platforms"][name] = merged
        write_json_atomic(STATE_PATH, payload, indent=None, separators=(",", ":"))

    def write_heartbeat(self) -> None:
        beat = {
            "pid": self.pid,
            "updated_at": now_iso(),
            "monotonic": time.monotonic(),
            "start_time": T0_EPOCH,
        }
        try:
            write_json_atomic(HEARTBEAT_PATH, beat, indent=None)
        except OSError as exc:
            warn(f"heartbeat write failed: {exc}")

    def acquire_lock(self) -> bool:
        import fcntl

        HERMES_HOME.mkdir(parents=True, exist_ok=True)
        fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self.record).encode(), 0)
        self.lock_fd = fd
        return True

    def release_lock(self) -> None:
        if self.lock_fd is not None:
            import fcntl

            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)
            os.close(self.lock_fd)
            self.lock_fd = None

    def _existing_pid_owner(self) -> int | None:
        """Remove a stale ``gateway.pid``; the PID of a live gateway still named in it, if any."""
        try:
            text = PID_PATH.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError):
            text = ""
        rec: Any
        try:
            rec = json.loads(text)
        except ValueError:
            rec = None
        if _is_int(rec):
            rec = {"pid": rec}
        pid = rec.get("pid") if isinstance(rec, dict) else None
        recorded_start = rec.get("start_time") if isinstance(rec, dict) else None
        if _is_int(pid) and pid != self.pid:
            stat = proc_stat(pid)
            if stat is not None and stat[0] != "Z" and recorded_start in (None, stat[1]):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    cmdline = b""
                if b"gateway" in cmdline:
                    return pid
        warn(f"removing stale {PID_PATH.name} ({text[:200]!r})")
        PID_PATH.unlink(missing_ok=True)
        return None

    def write_pid_file(self) -> None:
        fd = os.open(PID_PATH, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # mode 0o777 & ~umask, like upstream
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(self.record))

    def remove_pid_file(self) -> None:
        rec = read_json(PID_PATH)
        if rec is not None and rec.get("pid") != self.pid:
            return  # not ours: leave it alone, like upstream
        PID_PATH.unlink(missing_ok=True)

    # -- markers --------------------------------------------------------------------------------

    @staticmethod
    def _stale(written_at: object) -> bool:
        try:
            age = (datetime.now(UTC) - datetime.fromisoformat(str(written_at))).total_seconds()
        except (TypeError, ValueError):
            return True
        return age > PLANNED_STOP_TTL_S

    def _marker_matches(self, record: dict[str, Any]) -> bool:
        if record.get("target_pid") != self.pid:
            return False
        target_start = record.get("target_start_time")
        if target_start is not None and self.start_time is not None:
            return bool(target_start == self.start_time)
        return True

    def planned_stop_targets_self(self) -> bool:
        """Non-destructive probe (the watcher's); drops malformed and stale markers."""
        record = read_json(PLANNED_STOP_PATH)
        if not record:
            return False
        if not _is_int(record.get("target_pid")) or self._stale(record.get("written_at")):
            PLANNED_STOP_PATH.unlink(missing_ok=True)
            return False
        return self._marker_matches(record)

    def consume_marker(self, path: Path) -> bool:
        """Authoritative check (the shutdown handler's): unlinks the marker, True if it names us."""
        record = read_json(path)
        if not record:
            return False
        if not _is_int(record.get("target_pid")) or self._stale(record.get("written_at")):
            path.unlink(missing_ok=True)
            return False
        replacer_home = record.get("replacer_hermes_home")
        if replacer_home is not None and replacer_home != str(HERMES_HOME):
            return False  # another profile's takeover: leave it for them
        matches = self._marker_matches(record)
        path.unlink(missing_ok=True)
        return matches

    # -- children -------------------------------------------------------------------------------

    def _record_child(self, proc: Any, kind: str, setsid: bool) -> None:
        with self.children_lock:
            self.children.append(proc)
        entry = {
            "pid": proc.pid,
            "start_time": proc_start_time(proc.pid),
            "kind": kind,
            "setsid": setsid,
            "parent": self.pid,
        }
        append_line(SPAWNED_PATH, json.dumps(entry))
        say(f"fakegw: spawned {kind} pid={proc.pid} setsid={setsid}")

    def spawn_grandchildren(self) -> None:
        import subprocess

        count = self.k["grandchildren"]
        setsid_knob = self.k["grandchildren_setsid"]
        n_setsid = (count if setsid_knob else 0) if isinstance(setsid_knob, bool) else setsid_knob
        lifetime = f"{self.k['grandchildren_lifetime']:g}"
        sleep = which("sleep")
        cmd = [sleep, lifetime] if sleep else [sys.executable, "-c", f"import time; time.sleep({lifetime})"]
        for i in range(count):
            setsid = i < n_setsid
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=setsid, close_fds=True)
            self._record_child(proc, "grandchild", setsid)

    def spawn_diagnostic(self, signal_name: str) -> None:
        """Upstream's detached ``timeout 5 bash -c 'ps …'`` shutdown diagnostic, minus the ps."""
        import subprocess

        secs = self.k["diagnostic_seconds"]
        script = (
            f"echo '=== shutdown diagnostic @ {signal_name} (fakegw pid {self.pid}) ==='; "
            f"date -u +%Y-%m-%dT%H:%M:%SZ; sleep {secs + 1:g}"
        )
        timeout = which("timeout")
        cmd = [timeout, f"{secs:g}", "sh", "-c", script] if timeout else ["sh", "-c", script]
        try:
            DIAG_LOG_PATH.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(DIAG_LOG_PATH, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            warn(f"diagnostic log: {exc}")
            return
        try:
            proc = subprocess.Popen(
                cmd,
                stdout=fd,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            warn(f"diagnostic shell: {exc}")
            return
        finally:
            os.close(fd)
        self._record_child(proc, "diagnostic", True)

    def _reap_children(self) -> None:
        with self.children_lock:
            self.children = [p for p in self.children if p.poll() is None]

    # -- API server -----------------------------------------------------------------------------

    def serve_api(self) -> None:
        """Upstream's API server, as far as its health route goes (a thread; connections kept alive)."""
        import socket

        signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
        knob = self.k["api_server"]
        if self.watcher_stop.wait(knob.get("after", 0)):
            return
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", knob["port"]))
        except OSError as exc:
            warn(f"api_server: cannot bind 127.0.0.1:{knob['port']}: {exc}")
            return
        listener.listen(16)
        say(f"fakegw: api_server listening on 127.0.0.1:{knob['port']} (health: {knob.get('health', 'ok')})")
        while True:
            conn, _ = listener.accept()
            say("fakegw: api_server connection")
            threading.Thread(target=self._answer_api, args=(conn, knob.get("health", "ok")), daemon=True).start()

    @staticmethod
    def _answer_api(conn: Any, health: str) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
        with conn:
            data = b""
            while True:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
                while b"\r\n\r\n" in data:
                    _request, data = data.split(b"\r\n\r\n", 1)
                    if health == "hang":
                        continue
                    body = json.dumps({"status": "ok", "platform": "hermes-agent", "version": "fake"}).encode()
                    status = "200 OK" if health == "ok" else "500 Internal Server Error"
                    conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
                                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

    # -- watcher thread -------------------------------------------------------------------------

    def _watch(self) -> None:
        """Planned-stop and drain markers (upstream polls them every 0.5 s and 1 s)."""
        signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
        while True:
            try:
                self._reap_children()
                if self.phase == "running" and self.request is None:
                    if not self.k["ignore_sigterm"] and not self._marker_posted and self.planned_stop_targets_self():
                        self._marker_posted = True
                        self._post("planned-stop-marker")
                    self._watch_drain()
            except Exception as exc:  # keep polling whatever happens, like upstream
                warn(f"watcher: {exc!r}")
            if self.watcher_stop.wait(self.k["poll_interval"]):
                return

    def _watch_drain(self) -> None:
        present = DRAIN_PATH.exists()
        with self.state_lock:
            if self.phase != "running" or present == self.external_drain:
                return
            self.external_drain = present
            self._write_state_locked(None, gateway_state="draining" if present else "running")
        warn(f"external drain {'engaged' if present else 'released'} ({DRAIN_PATH.name})")

    # -- exits ----------------------------------------------------------------------------------

    def _exit(self, code: int, *, clean: bool = True) -> NoReturn:
        if clean:
            try:
                self.remove_pid_file()
            except OSError as exc:
                warn(f"removing {PID_PATH.name}: {exc}")
            self.release_lock()
        warn(f"exit {code}{'' if clean else ' (crash: no clean-up)'}")
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)

    def _set_stopping(self, **fields: Any) -> None:
        with self.state_lock:
            self.phase = "stopping"
            self._write_state_locked(None, **fields)
        self.watcher_stop.set()

    def shutdown(self, request: str) -> NoReturn:
        """The shutdown handler: classify the request, drain, persist the final state, exit."""
        if request == "SIGUSR1":
            self._set_stopping(gateway_state="draining", restart_requested=True)
            if self.k["hang_on_exit"]:
                time.sleep(self.k["hang_on_exit"])
            self.write_state(gateway_state="stopped", exit_reason=RESTART_REASON, restart_requested=True)
            self._exit(RESTART_EXIT_CODE)
        planned = self.consume_marker(TAKEOVER_PATH)
        if not planned:
            planned = request == "SIGINT" or self.consume_marker(PLANNED_STOP_PATH)
        warn(f"received {request}: {'planned stop' if planned else 'unexpected, will exit 1'}")
        if self.k["diagnostic_shell"]:
            self.spawn_diagnostic(request)
        self._set_stopping(gateway_state="draining")
        if self.k["hang_on_exit"]:
            time.sleep(self.k["hang_on_exit"])
        if planned:
            self.write_state(gateway_state="stopped", exit_reason=None)
            self._exit(0)
        # Unexpected SIGTERM: upstream persists "running" on purpose, and exits 1 -- or 0 when the
        # signal lands while runner.start() is still running (the "not runner._running" path).
        self.write_state(gateway_state="running", exit_reason=None)
        self._exit(1 if self.started_up else 0)

    def exit_after(self) -> NoReturn:
        code = self.k["exit_code"]
        if not self.k["exit_after_clean"]:
            warn(f"simulated crash after {self.k['exit_after']:g}s")
            self._exit(code, clean=False)
        if code == RESTART_EXIT_CODE:
            self.shutdown("SIGUSR1")
        reason = f"fakegw: exit_after {self.k['exit_after']:g}s with exit code {code}"
        if code == FATAL_CONFIG_EXIT_CODE:
            self._set_stopping(gateway_state="startup_failed", exit_reason=reason)
        else:
            self._set_stopping(gateway_state="draining")
            self.write_state(gateway_state="stopped", exit_reason=reason if code else None)
        self._exit(code)

    # -- main -----------------------------------------------------------------------------------

    def run(self) -> NoReturn:
        if self.k["exit_at_start"] is not None:
            code = self.k["exit_at_start"]
            if code == FATAL_CONFIG_EXIT_CODE:
                self.write_state(
                    gateway_state="startup_failed",
                    exit_reason="fakegw: fatal configuration (exit_at_start)",
                )
            error(f"exit_at_start={code}")
            self._exit(code)

        owner = self._existing_pid_owner()
        if owner is not None:
            say(f"another gateway is already running (PID {owner}, HERMES_HOME={HERMES_HOME})")
            self._exit(1)
        try:
            self.write_pid_file()
        except FileExistsError:
            say("another gateway is already running (lost the gateway.pid race)")
            self._exit(1)
        self.phase = "starting"
        self.write_state(gateway_state="starting", exit_reason=None)
        if self._wait(self.k["running_delay"]):
            self.shutdown(self.request or "")

        if self.k["grandchildren"]:
            self.spawn_grandchildren()
        if self.k["shell"]:
            import subprocess

            proc = subprocess.Popen(["/bin/sh", "-c", self.k["shell"]], stdin=subprocess.DEVNULL, close_fds=True)
            self._record_child(proc, "shell", False)
        if self._poll_requests() is not None:
            self.shutdown(self.request or "")
        tail = self.k["startup_tail"]
        # Without a tail, start-up ends before "running" is written, so that a test that waits
        # for "running" and then signals gets the same exit code every time.
        self.started_up = not tail
        with self.state_lock:
            self.phase = "running"
            self._write_state_locked(
                self.k["platforms"],
                gateway_state="running",
                exit_reason=None,
                restart_requested=False,
                active_agents=self.k["active_agents"],
            )
        if not self.k["platforms"]:
            warn("No messaging platforms enabled.")
        self.write_heartbeat()
        threading.Thread(target=self._watch, name="planned-stop-watcher", daemon=True).start()
        if self.k["api_server"]:
            threading.Thread(target=self.serve_api, name="api-server", daemon=True).start()
        if tail and self._wait(tail):
            self.shutdown(self.request or "")
        self.started_up = True

        interval = self.k["heartbeat_interval"]
        next_beat = time.monotonic() + interval
        deadline = None if self.k["exit_after"] is None else time.monotonic() + self.k["exit_after"]
        while True:
            due = next_beat if deadline is None else min(next_beat, deadline)
            if self._wait(max(0.0, due - time.monotonic())):
                self.shutdown(self.request or "")
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                self.exit_after()
            if now >= next_beat:
                self.write_heartbeat()
                next_beat = max(next_beat + interval, now)


def main() -> NoReturn:
    if ARGV_ERROR:
        print(f"fakegw: {ARGV_ERROR}", file=sys.stderr, flush=True)
        os._exit(2)
    if HOME_ERROR:
        print(HOME_ERROR, file=sys.stderr, flush=True)
        os._exit(HOME_ERROR_CODE)
    knobs, problem = load_behaviour(BEHAVIOUR_PATH)
    if problem:
        print(f"fakegw: bad behaviour file: {problem}", file=sys.stderr, flush=True)
        os._exit(2)
    gw = FakeGateway(knobs)
    if knobs["ignore_sigterm"]:
        gw.install_signal_handlers()  # ignored from the first moment
    else:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_DFL)  # until the handlers are in: killed by the signal
    say(f"fakegw: Hermes Gateway Starting (pid={gw.pid} HERMES_HOME={HERMES_HOME} argv={sys.argv[1:]})")
    if HOME_NOTE:
        warn(HOME_NOTE)
    if "--external-supervisor" not in RECORDED_ARGV:
        warn("started without --external-supervisor")
    if knobs["write_counter"]:
        append_line(STARTS_PATH, str(gw.pid))
    for name in knobs["print_env"]:
        say("fakegw env " + json.dumps({name: os.environ.get(name)}))
    if knobs["startup_delay"]:
        time.sleep(knobs["startup_delay"])  # upstream's imports: no handlers, no lock yet
    gw.install_signal_handlers()
    if not gw.acquire_lock():
        say(f"another gateway is already running (gateway.lock held, HERMES_HOME={HERMES_HOME})")
        os._exit(1)
    gw.run()


if __name__ == "__main__":
    main()
