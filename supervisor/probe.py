"""``hermesd probe PROFILE --ready|--live``: is this profile's gateway serving, from its files alone.

Kubernetes (or compose, or a monitoring script) runs this every few seconds inside the gateway's
own container, where no hermesd daemon exists. So it asks no daemon, imports only the standard
library (plus the stdlib-only ``profiles.paths``, ``profiles.names`` and
``profiles.upstream.files``), and reads three small files the gateway writes in its HERMES_HOME.

Evidence, strongest first:

1. ``gateway_state.json`` names a PID whose start time (field 22 of ``/proc/<pid>/stat``) matches
   the one recorded: that exact process is alive. Its ``gateway_state`` must be ``running`` for
   ``--ready``; ``running``, ``degraded`` or ``draining`` for ``--live`` (a draining gateway is
   finishing turns: alive, but not ready for new ones).
2. ``state/gateway.heartbeat`` is rewritten every 30 s by a running gateway's event loop. A
   heartbeat of that same PID older than ``--max-age`` (90 s: three missed beats) fails both
   probes even though the process exists: a frozen event loop is exactly what a liveness probe
   is for. A gateway that has not written its first beat yet is judged by its state alone.
3. When the recorded PID does not exist here, the gateway may live in another PID namespace
   (probing a container's bind-mounted profile from the host) or on a system without ``/proc``:
   a heartbeat of that PID younger than ``--max-age`` with an acceptable state is then taken as
   the answer. The price: a gateway that died in this namespace less than ``--max-age`` ago
   still passes. Inside the gateway's own container (Kubernetes, compose) the PID is always
   visible and this fallback never applies. A PID that exists with another start time is a
   recycled PID and always fails.

Exit 0 with one line on stdout, or 1 with the reason on one line on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from profiles.upstream import files as gf

READY_STATES = frozenset({"running"})
LIVE_STATES = frozenset({"running", "degraded", "draining"})
DEFAULT_MAX_AGE = 90.0


def check(home: Path, mode: str, max_age: float = DEFAULT_MAX_AGE) -> tuple[bool, str]:
    """``(ok, reason)`` for the gateway of ``home``; ``mode`` is ``ready`` or ``live``."""
    accepted = READY_STATES if mode == "ready" else LIVE_STATES
    state = gf.read_gateway_state(home)
    pid, start = _pid_of(state)
    rec = gf.read_pid_record(home)
    # gateway.pid instead when the state file names no process, or a dead one while gateway.pid names
    # a live one: a new gateway writes its PID file before its first state.
    if rec is not None and rec.pid != pid and (
        pid is None or (_process_matches(pid, start) is not True and _process_matches(rec.pid, rec.start_time))
    ):
        pid, start, state = rec.pid, rec.start_time, {}  # the state file is about another process
    if pid is None:
        return False, "no gateway: neither gateway_state.json nor gateway.pid names a process"
    gstate = state.get("gateway_state") if isinstance(state.get("gateway_state"), str) else None
    beat = gf.read_heartbeat(home)
    beat_age = gf.heartbeat_age(beat) if beat.get("pid") == pid else None

    seen = _process_matches(pid, start)
    if seen is False:
        return False, f"gateway PID {pid} is not running (state file says {gstate or 'nothing'})"
    if seen is None:  # cannot see the process from here: the heartbeat decides
        if beat_age is None:
            return False, f"gateway PID {pid} is not visible here and has no heartbeat"
        if beat_age > max_age:
            return False, f"gateway PID {pid} is not visible here and its heartbeat is {beat_age:.0f}s old"
    if gstate is None and mode == "ready":
        return False, f"gateway PID {pid} has not reported its state yet"
    if gstate is not None and gstate not in accepted:
        return False, f"gateway PID {pid} is {gstate}" + _error_hint(state)
    if beat_age is not None and beat_age > max_age:
        return False, f"gateway PID {pid} heartbeat is {beat_age:.0f}s old (limit {max_age:.0f}s): event loop stuck?"
    beat_text = f", heartbeat {beat_age:.0f}s ago" if beat_age is not None else ", no heartbeat yet"
    return True, f"{gstate or 'alive'} (PID {pid}{beat_text})"


def _pid_of(state: dict[str, Any]) -> tuple[int | None, int | None]:
    pid, start = state.get("pid"), state.get("start_time")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None, None
    return pid, start if isinstance(start, int) and not isinstance(start, bool) else None


def _process_matches(pid: int, start: int | None) -> bool | None:
    """True: that exact process lives here. False: it does not. None: no such PID here, so it may
    live in another PID namespace (or this system has no ``/proc``)."""
    if not os.path.exists("/proc/self/stat"):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None  # maybe another PID namespace or host: let the heartbeat decide
        except PermissionError:
            return True
        return True
    live = gf.proc_start_time(pid)
    if live is None:
        return None if not os.path.exists(f"/proc/{pid}") else False
    if start is not None:
        return live == start
    try:
        return b"gateway" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _error_hint(state: dict[str, Any]) -> str:
    reason = state.get("exit_reason")
    return f" ({' '.join(str(reason).split())[:200]})" if reason else ""


def resolve_home(profile: str, root: str | None) -> Path:
    """The profile's HERMES_HOME, without YAML or the profile scan (probes must be cheap)."""
    from profiles.names import DEFAULT_PROFILE, parse_profile_name
    from profiles.paths import PROFILES_DIRNAME, resolve_root

    name = parse_profile_name(profile)
    base = Path(root).expanduser() if root else resolve_root()
    return base if name == DEFAULT_PROFILE else base / PROFILES_DIRNAME / name


# --------------------------------------------------------------------------- command line


def cmd_probe(args: argparse.Namespace) -> int:
    from profiles.errors import ProfileError

    name = args.profile
    try:
        home = resolve_home(args.profile, args.root)
    except ProfileError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 1
    if not home.is_dir():
        print(f"{name}: no such profile ({home} is not a directory)", file=sys.stderr)
        return 1
    ok, reason = check(home, "ready" if args.ready else "live", args.max_age)
    print(f"{name}: {reason}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("profile", metavar="PROFILE", help="profile name ('default' is the root)")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--ready", action="store_true", help="exit 0 only when the gateway state is 'running'")
    mode.add_argument("--live", action="store_true",
                      help="exit 0 when the gateway is running, degraded or draining")
    p.add_argument("--max-age", type=float, default=DEFAULT_MAX_AGE, metavar="SECONDS",
                   help=f"oldest acceptable heartbeat (default {DEFAULT_MAX_AGE:.0f}; the gateway beats every 30)")
    p.add_argument("--root", help="Hermes root (default: resolved from HERMES_HOME as upstream does)")
    p.set_defaults(func=cmd_probe)


HELP = "health probe for one profile's gateway, from its files (no daemon needed; for Kubernetes)"
EXAMPLE = "hermesd probe coder --ready --root /opt/hermes"


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hermesd probe`` to the CLI."""
    p = subparsers.add_parser(
        "probe", help=HELP, description=HELP + ".\nExit 0 healthy, 1 not (the reason on stderr).",
        epilog=f"example:\n  {EXAMPLE}", formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _configure(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m supervisor.probe``: the same probe without loading the rest of the CLI."""
    parser = argparse.ArgumentParser(prog="hermesd probe", description=HELP, epilog=f"example:\n  {EXAMPLE}",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _configure(parser)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
