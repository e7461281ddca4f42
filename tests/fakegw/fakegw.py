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
from typing import Any, NamedTuple, NoReturn

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
    # null, or seconds a clean exit lingers *after* removing gateway.pid and releasing gateway.lock
    # before it appends logs/gateway-exit-diag.log (mkdir -p) and exits: upstream's own order
    # (gateway/run.py removes both early in its shutdown, hermes_cli/gateway.py's atexit hook writes
    # the log last). The window a stop that watched the files instead of the process fell into.
    "exit_tail": None,
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
    # Upstream main's line only (see LINE):
    "attach_wait": 5.0,  # seconds to wait for the host gateway's control socket (upstream: ATTACH_CHANNEL_WAIT_S)
    "startup_wedge": None,  # "imports": hang before the lock; "starting": hang after "starting" (the watchdog's case)
    "startup_watchdog_floor": 30.0,  # the floor of HERMES_STARTUP_WATCHDOG_TIMEOUT_S (upstream: 30 s); lower in tests
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


# Upstream main after 0.22.2 moved the multiplex verdict, the serving policy and the served-set reader
# into ``gateway/``; hermesd tells that code by these modules (profiles/upstream/releases.py
# MAIN_MARKERS), and so does the fake: it speaks main's contract when its interpreter has one of them.
MAIN_MODULES = ("multiplex_mode", "profile_serving", "served_profiles")
IDENTITY_MARKERS = ("config.yaml", ".env", "SOUL.md", "profile.yaml", "auth.json", "state.db")
TOMBSTONES = ".deleted"


def _code_line() -> str:
    """``main`` when the interpreter's ``gateway`` package has one of :data:`MAIN_MODULES` (found, not
    imported), else ``per-profile`` (hermes-agent 0.19.0's contract, the fake's default)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("gateway")
    except (ImportError, ValueError):
        return "per-profile"
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        if any(os.path.exists(os.path.join(folder, m + ".py")) for m in MAIN_MODULES):
            return "main"
    return "per-profile"


def _has_identity(home: Path) -> bool:
    """upstream's named_profile_has_identity: a marker file, or a link named like one (even dangling)."""
    return any((home / m).is_file() or (home / m).is_symlink() for m in IDENTITY_MARKERS)


def _tombstoned(home: Path) -> bool:
    """upstream's named_profile_is_deleted: ``profiles/.deleted/<name>`` exists."""
    return (home.parent / TOMBSTONES / home.name).exists()


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


def _resolve_home(env_home: str, profile: str | None, line: str) -> tuple[Path, str | None, int, str | None]:
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
        if not home.is_dir() or (line == "main" and (not _has_identity(home) or _tombstoned(home))):
            # main: a folder with no identity file, or with a tombstone, is no profile (named_profile_is_live)
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
LINE = _code_line()
HERMES_HOME, HOME_ERROR, HOME_ERROR_CODE, HOME_NOTE = _resolve_home(os.environ.get("HERMES_HOME", "").strip(), PROFILE,
                                                                    LINE)
NAMED = HERMES_HOME.parent.name == "profiles"
ROOT = HERMES_HOME.parent.parent if NAMED else HERMES_HOME
MY_PROFILE = HERMES_HOME.name if NAMED else "default"
FORCE = "--force" in RECORDED_ARGV
PID_PATH = HERMES_HOME / "gateway.pid"
LOCK_PATH = HERMES_HOME / "gateway.lock"
STATE_PATH = HERMES_HOME / "gateway_state.json"
HEARTBEAT_PATH = HERMES_HOME / "state" / "gateway.heartbeat"
PLANNED_STOP_PATH = HERMES_HOME / ".gateway-planned-stop.json"
TAKEOVER_PATH = HERMES_HOME / ".gateway-takeover.json"
DRAIN_PATH = HERMES_HOME / ".drain_request.json"
DIAG_LOG_PATH = HERMES_HOME / "logs" / "gateway-shutdown-diag.log"
EXIT_DIAG_PATH = HERMES_HOME / "logs" / "gateway-exit-diag.log"
BEHAVIOUR_PATH = HERMES_HOME / "fakegw.json"
STARTS_PATH = HERMES_HOME / "fakegw.starts"
SPAWNED_PATH = HERMES_HOME / "fakegw.children"
SOCKET_PATH = HERMES_HOME / "gateway.sock"
WATCHDOG_LOG_PATH = HERMES_HOME / "logs" / "gateway-startup-watchdog.log"


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
    "exit_tail": (lambda v: v is None or (_is_num(v) and v >= 0), "null or seconds >= 0"),
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
    "attach_wait": (lambda v: _is_num(v) and v >= 0, "seconds >= 0"),
    "startup_wedge": (lambda v: v in (None, "imports", "starting"), 'null, "imports" or "starting"'),
    "startup_watchdog_floor": (lambda v: _is_num(v) and v > 0, "seconds > 0"),
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
# Upstream main's host gateway (LINE == "main"), read in NousResearch/hermes-agent: gateway/host_attach.py
# (the attach decision), gateway/run.py _claim_host_gateway_role (the host lock), hermes_cli/gateway.py
# _host_decision_exit_code (75 for a transient verdict, 78 for a permanent one), gateway/profile_serving.py
# (standalone, parked, what a multiplexer serves), hermes_startup_watchdog.py. Simplified on purpose:
# a multiplexer never rescans to take a profile in (it refuses, 78), a socket path over 100 bytes is not
# bound (upstream binds one in /tmp), the root's config.yaml is never rewritten.

HOST_LOCK = "host-gateway.lock"
HOST_RECORD = "host-gateway.json"
CONTROL_PROTOCOL = 1
WATCHDOG_TAG = "startup_watchdog.fired"
START, ATTACH, REFUSE = "start", "attach", "refuse"
_TRUE_WORDS = frozenset({"true", "yes", "on", "1", "y"})


def _supervised() -> bool:
    """upstream's is_gateway_supervisor_process: argv or a service manager's marker."""
    return ("--external-supervisor" in RECORDED_ARGV or bool(os.environ.get("INVOCATION_ID"))
            or bool(os.environ.get("HERMES_S6_SUPERVISED_CHILD"))
            or os.environ.get("XPC_SERVICE_NAME", "0") not in ("", "0"))


def _lock_dir() -> Path:
    """The per-user folder of upstream's credential locks and host record (as hermesd's ``lock_dir``)."""
    if os.environ.get("HERMES_GATEWAY_LOCK_DIR"):
        return Path(os.environ["HERMES_GATEWAY_LOCK_DIR"])
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "hermes" / "gateway-locks"


def _standalone(home: Path) -> bool:
    """``gateway.standalone`` truthy in a NAMED home's config.yaml (ignored on the default profile).

    A line reader (the fake is stdlib only): ``gateway:`` at the top level, then an indented
    ``standalone:``, or the flow form ``gateway: {standalone: true}``; anchors and tags are not modelled.
    """
    if home.parent.name != "profiles":
        return False
    try:
        text = (home / "config.yaml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    inside = False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            key, _, rest = line.partition(":")
            inside = key.strip() == "gateway"
            if inside and rest.strip().startswith("{"):
                for item in rest.strip().strip("{}").split(","):
                    k, _, v = item.partition(":")
                    if k.strip() == "standalone":
                        return v.strip().strip("'\"").lower() in _TRUE_WORDS
            continue
        key, _, value = line.strip().partition(":")
        if inside and key == "standalone":
            return value.strip().strip("'\"").lower() in _TRUE_WORDS
    return False


def _parked(home: Path) -> bool:
    return (home / "gateway.parked").exists()


def _named_homes() -> list[Path]:
    """The named profiles this process can see (upstream's _iter_named_profile_dirs: id, identity, no tombstone)."""
    try:
        entries = sorted((ROOT / "profiles").iterdir())
    except OSError:
        return []
    return [e for e in entries if e.name != "default" and e.name[:1] in _NAME_FIRST and len(e.name) <= 64
            and all(c in _NAME_REST for c in e.name) and e.is_dir() and _has_identity(e) and not _tombstoned(e)]


def served_set() -> list[str]:
    """What this gateway serves: ``[]`` (itself only) for a standalone profile or a host with nothing else
    to serve; else the launching profile and every visible profile that is neither standalone nor parked."""
    if NAMED and _standalone(HERMES_HOME):
        return []
    servable = ["default", *(h.name for h in _named_homes() if not _standalone(h) and not _parked(h))]
    if MY_PROFILE not in servable:
        servable.insert(0, MY_PROFILE)  # a named profile run with --force serves the default a second time
    return servable if len(servable) >= 2 else []


class Peer(NamedTuple):
    """A live gateway as the attach check sees it; ``served`` None: it has not answered ``identify``."""

    pid: int
    home: Path
    served: tuple[str, ...] | None
    multiplex: bool | None = None

    def serves(self, profile: str) -> bool:
        return self.served is not None and profile in self.served

    def describe(self) -> str:
        what = "not published yet (its control socket has not answered)" if self.served is None else (
            ", ".join(self.served) or "nothing")
        return f"PID {self.pid} (launched from {self.home}; serves: {what})"


def _identify(home: Path, timeout: float = 3.0) -> dict[str, Any] | None:
    """The ``identify`` result of the gateway whose socket is ``<home>/gateway.sock``, or None."""
    import socket

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(home / "gateway.sock"))
            sock.sendall(json.dumps({"verb": "identify", "id": 1, "protocol": CONTROL_PROTOCOL}).encode() + b"\n")
            data = b""
            while b"\n" not in data and len(data) < 65536:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        reply = json.loads(data.split(b"\n", 1)[0])
    except (OSError, ValueError):
        return None
    result = reply.get("result") if isinstance(reply, dict) and reply.get("ok") is True else None
    return result if isinstance(result, dict) else None


def _peer(pid: int, home: Path) -> Peer:
    answer = _identify(home)
    if answer is None or answer.get("pid") != pid or answer.get("hermes_home") not in (None, str(home)):
        return Peer(pid, home, None)
    served = answer.get("served_profiles")
    names = tuple(str(x) for x in served) if isinstance(served, list) and served else (
        str(answer.get("profile") or "default"),)
    multiplex = answer.get("multiplex")
    return Peer(pid, home, names, multiplex if isinstance(multiplex, bool) else None)


def _live(pid: object, start: object) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or pid == os.getpid():
        return False
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z" and start in (None, stat[1])


def host_owner(wait: float) -> Peer | None:
    """The live owner of the host record, asked ``identify`` for up to ``wait`` seconds; None: no owner."""
    record = read_json(_lock_dir() / HOST_RECORD)
    if record is None or not _live(record.get("pid"), record.get("startTime")):
        return None
    home = Path(str(record.get("home") or ROOT))
    deadline = time.monotonic() + wait
    while True:
        peer = _peer(record["pid"], home)
        if peer.served is not None or time.monotonic() >= deadline:
            return peer
        time.sleep(0.25)


def _coexisting(owner: Peer | None) -> list[Peer]:
    """The owner and every other live gateway of a profile this process can see (standalone ones included)."""
    peers = [owner] if owner is not None else []
    seen = {p.pid for p in peers}
    for home in (ROOT, *_named_homes()):
        rec = read_json(home / "gateway.pid") or {}
        pid = rec.get("pid")
        if not isinstance(pid, int) or not _live(pid, rec.get("start_time")) or pid in seen:
            continue
        seen.add(pid)
        peers.append(_peer(pid, home))
    return peers


def _unknown_message(peer: Peer) -> str:
    return (f"A gateway already owns this host and has not published its served set yet.\n   {peer.describe()}\n"
            f"   Whether it will serve profile '{MY_PROFILE}' is unknown; nothing was started (transient).")


def standalone_decision(owner: Peer | None) -> tuple[str, str, bool]:
    """A standalone profile starts only once every live gateway confirms it does not serve it."""
    for peer in _coexisting(owner):
        if peer.served is None:
            return REFUSE, _unknown_message(peer), True
        if peer.serves(MY_PROFILE):
            return REFUSE, (f"The host gateway still serves profile '{MY_PROFILE}'; gateway.standalone is not live "
                            f"yet. {peer.describe()}"), True
    return START, "", False


def attach_decision(wait: float) -> tuple[str, str, bool]:
    """``(outcome, message, transient)`` of upstream's host_attach.decide, for a run without --force."""
    owner = host_owner(0.0)
    if owner is not None and owner.served is None:
        owner = host_owner(wait)  # the owner's record lands a moment before its socket binds
    if NAMED and _standalone(HERMES_HOME):
        return standalone_decision(owner)
    if owner is None:
        return START, "", False
    if owner.served is None:
        return REFUSE, _unknown_message(owner), True
    if owner.serves(MY_PROFILE):
        return ATTACH, (f"The host gateway already serves profile '{MY_PROFILE}' -- nothing to start.\n"
                        f"  {owner.describe()}"), True
    if owner.multiplex is False:
        return START, "", False  # another profile's standalone gateway: start beside it
    return REFUSE, (f"A gateway already owns this host and will not serve profile '{MY_PROFILE}'.\n"
                    f"   {owner.describe()}"), False


class ControlSocket:
    """``gateway.sock``: one JSON line in, one out, per connection (``identify`` only)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.sock: Any = None

    def start(self) -> None:
        import socket

        if len(str(SOCKET_PATH).encode()) > 100:
            warn(f"{SOCKET_PATH}: path too long for a unix socket; not bound (upstream uses /tmp)")
            return
        with contextlib.suppress(FileNotFoundError):
            SOCKET_PATH.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(SOCKET_PATH))
            sock.listen(8)
        except OSError as exc:
            sock.close()
            warn(f"control socket: {exc}")
            return
        self.sock = sock
        threading.Thread(target=self._serve, name="control-socket", daemon=True).start()

    def _serve(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(1.0)
                    line = conn.recv(65536).split(b"\n", 1)[0]
                    verb = json.loads(line).get("verb")
                    reply = ({"ok": True, "protocol": CONTROL_PROTOCOL, "result": self.answer()} if verb == "identify"
                             else {"ok": False, "error": f"unknown verb: {verb!r}", "protocol": CONTROL_PROTOCOL})
                    conn.sendall(json.dumps(reply).encode() + b"\n")
                except (OSError, ValueError, AttributeError):
                    continue

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            with contextlib.suppress(OSError):
                SOCKET_PATH.unlink()


def watchdog_timeout(floor: float) -> float:
    """upstream's resolve_startup_watchdog_timeout: the variable, else 300 s; junk or <= 0: 300 s; floor-clamped."""
    raw = os.environ.get("HERMES_STARTUP_WATCHDOG_TIMEOUT_S", "").strip()
    try:
        value = float(raw) if raw else 300.0
    except ValueError:
        value = 300.0
    return max(value if value > 0 else 300.0, floor)


class StartupWatchdog:
    """Armed at process entry, disarmed once "running" is written; on expiry it appends its record and a
    stack dump to logs/gateway-startup-watchdog.log and exits 75 (os._exit, no clean-up), like upstream's."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.armed_at = time.monotonic()
        self.disarmed = threading.Event()
        threading.Thread(target=self._run, name="startup-watchdog", daemon=True).start()

    def _run(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
        if self.disarmed.wait(self.timeout):
            return
        elapsed = time.monotonic() - self.armed_at
        record = {"ts": now_iso(), "tag": WATCHDOG_TAG, "pid": os.getpid(), "timeout_s": self.timeout,
                  "elapsed_s": round(elapsed, 3), "extensions": 0, "lease_count": 0, "last_lease_phase": None,
                  "exit_code": RESTART_EXIT_CODE}
        with contextlib.suppress(OSError):
            WATCHDOG_LOG_PATH.parent.mkdir(parents=True, exist_ok=True)
            append_line(WATCHDOG_LOG_PATH, json.dumps(record))
            append_line(WATCHDOG_LOG_PATH, f"Thread 0x{threading.get_ident():x} (most recent call first):\n"
                                           '  File "fakegw.py", line 1 in startup_wedge')
        error(f"Gateway startup did not reach a live event loop within {self.timeout:.0f}s; exiting with code "
              f"{RESTART_EXIT_CODE} so the service supervisor can restart it")
        os._exit(RESTART_EXIT_CODE)


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
        if LINE == "main":
            self.record["hermes_home"] = str(HERMES_HOME)  # gateway.pid and the state file carry it (0.20+)
        self.served: list[str] = []  # main: what this gateway serves ([]: its own profile only)
        self.host_fd: int | None = None  # main: the host lock, when this gateway owns the host
        self.control: ControlSocket | None = None
        self.watchdog: StartupWatchdog | None = None
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

    # -- upstream main's host gateway -----------------------------------------------------------

    def identify(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "protocol": CONTROL_PROTOCOL, "kind": KIND, "pid": self.pid, "start_time": self.start_time,
            "hermes_home": str(HERMES_HOME), "profile": MY_PROFILE,
            "supervisor": "external" if _supervised() else None, "multiplex": bool(self.served),
        }
        if self.served:
            answer["served_profiles"] = list(self.served)
        return answer

    def publish_host(self) -> None:
        """The host record beside the credential locks (gateway/host_rendezvous.py's fields)."""
        if self.host_fd is None:
            return
        write_json_atomic(_lock_dir() / HOST_RECORD, {
            "role": "gateway", "home": str(HERMES_HOME), "pid": self.pid, "startTime": self.start_time,
            "createTime": T0_EPOCH, "profiles": list(self.served) or [MY_PROFILE], "updatedAt": now_iso(),
        }, indent=2)

    def claim_host(self) -> None:
        """gateway/run.py _claim_host_gateway_role: take the host lock, or prove this gateway may run beside
        its owner; otherwise exit 75 (a lost race is a runtime verdict a supervisor retries)."""
        import fcntl

        standalone = NAMED and _standalone(HERMES_HOME)
        if standalone:
            outcome, message, _ = standalone_decision(None)
            if outcome == REFUSE:
                say(message)
                self._exit(RESTART_EXIT_CODE)
        folder = _lock_dir()
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / HOST_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
        else:
            self.host_fd = fd
            self.publish_host()
            return
        owner = host_owner(self.k["attach_wait"])
        if standalone:
            outcome, message, _ = standalone_decision(owner)
            if outcome == START:
                return
            say(message)
            self._exit(RESTART_EXIT_CODE)
        if owner is not None and owner.multiplex is False:
            warn(f"another profile's standalone gateway owns this host ({owner.describe()}); starting beside it")
            return
        say(f"A gateway already owns this host; refusing to be the second one "
            f"({owner.describe() if owner else 'owner unknown'}).")
        self._exit(RESTART_EXIT_CODE)

    def release_host(self) -> None:
        if self.control is not None:
            self.control.close()
        if self.host_fd is None:
            return
        record = read_json(_lock_dir() / HOST_RECORD)
        if record is not None and record.get("pid") == self.pid:
            with contextlib.suppress(OSError):
                (_lock_dir() / HOST_RECORD).unlink()
        os.close(self.host_fd)
        self.host_fd = None

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
            self.release_host()
            self.release_lock()
            if self.k["exit_tail"] is not None:
                self._exit_tail(code)
        warn(f"exit {code}{'' if clean else ' (crash: no clean-up)'}")
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)

    def _exit_tail(self, code: int) -> None:
        """Still alive with neither gateway.pid nor gateway.lock, then the late write into the home."""
        time.sleep(self.k["exit_tail"])  # the process's own behaviour, not a test's wait
        try:
            EXIT_DIAG_PATH.parent.mkdir(parents=True, exist_ok=True)
            with EXIT_DIAG_PATH.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"ts": datetime.now(UTC).isoformat(), "tag": "atexit.hook",
                                     "pid": self.pid, "code": code}) + "\n")
        except OSError as exc:
            warn(f"exit diag: {exc}")

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
        if LINE == "main":
            if not FORCE:
                self.claim_host()
            self.served = served_set()
            self.control = ControlSocket(self.identify)
            self.control.start()
        self.phase = "starting"
        main_fields: dict[str, Any] = {"served_profiles": self.served} if LINE == "main" else {}
        self.write_state(None, gateway_state="starting", exit_reason=None, **main_fields)
        if self._wait(self.k["running_delay"]):
            self.shutdown(self.request or "")
        if self.k["startup_wedge"] == "starting":
            warn("startup_wedge: hanging in start-up (no event loop)")
            while not self._wait(3600.0):
                pass
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
        self.publish_host()  # the served set in the host record before anyone reads "running"
        with self.state_lock:
            self.phase = "running"
            self._write_state_locked(
                self.k["platforms"],
                gateway_state="running",
                exit_reason=None,
                restart_requested=False,
                active_agents=self.k["active_agents"],
            )
        if self.watchdog is not None:
            self.watchdog.disarmed.set()  # a live event loop: the start-up watchdog stands down
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
    watchdog_off = os.environ.get("HERMES_STARTUP_WATCHDOG", "").strip().lower() in ("0", "false", "no", "off")
    if LINE == "main" and not watchdog_off:
        gw.watchdog = StartupWatchdog(watchdog_timeout(knobs["startup_watchdog_floor"]))  # armed at process entry
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
    if knobs["startup_wedge"] == "imports":
        warn("startup_wedge: hanging in the imports (no handlers, no lock)")
        while True:
            time.sleep(3600.0)
    gw.install_signal_handlers()
    if LINE == "main" and not FORCE:
        attach(knobs)
    if not gw.acquire_lock():
        say(f"another gateway is already running (gateway.lock held, HERMES_HOME={HERMES_HOME})")
        os._exit(1)
    gw.run()


def attach(knobs: dict[str, Any]) -> None:
    """hermes_cli/gateway.py _attach_to_host_gateway_or_guard, before the lock: attach, refuse or go on."""
    outcome, message, transient = attach_decision(knobs["attach_wait"])
    if outcome == ATTACH:
        say(message)
        os._exit(RESTART_EXIT_CODE if _supervised() else 0)  # a supervised unit is retried, never parked
    if outcome == REFUSE:
        say(message)
        os._exit(RESTART_EXIT_CODE if transient else FATAL_CONFIG_EXIT_CODE)
    if NAMED and not _standalone(HERMES_HOME):
        say(f"Profile '{MY_PROFILE}' does not get a gateway of its own (gateway.standalone: true in its "
            f"config.yaml, or --force)")
        os._exit(FATAL_CONFIG_EXIT_CODE)


if __name__ == "__main__":
    main()
