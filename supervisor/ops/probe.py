"""``hermesd probe PROFILE --ready|--live``: is this profile's gateway serving, from its files alone.

Kubernetes (or compose, or a monitoring script) runs this every few seconds inside the gateway's
own container, where no hermesd daemon exists. So it asks no daemon, loads neither YAML nor asyncio
(``tests/ops/test_probe.py`` runs ``hermesd probe`` and checks what it imported), and reads
three small files the gateway writes in its HERMES_HOME.

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

``--ready`` additionally fails (the rule, also in ``--help``):

4. while any platform in ``gateway_state.json`` is in the ``fatal`` state (it will not come back
   without a change: a bad token, a port in use). ``retrying``, ``connecting`` and the rest pass:
   they are transient and the gateway keeps trying.
5. while a platform the profile's files enable lacks a library, a program or a file it needs in the
   gateway's own interpreter (the one its command line was started with, on its own ``PATH``, as
   :func:`supervisor.hermes.release.interpreter_argv` decides for status and doctor too; asked once
   per probe through :mod:`supervisor.hermes.requirements`): such a platform is silently never started under
   ``HERMES_DISABLE_LAZY_INSTALLS=1``, so the gateway looks healthy while it cannot serve. This
   step (the only one that leaves the standard library) reads the profile's YAML and runs the
   interpreter (about 0.2 s); ``--no-requirements`` skips it where that is too slow, and it is
   skipped when the interpreter cannot be seen (another PID namespace), when the profile has
   neither ``.env`` nor ``config.yaml`` (nothing can enable a platform), and when PyYAML or the
   profile's files cannot be read (the state rules have spoken).

Exit 0 with one line on stdout, or 1 with the reason on one line on stderr.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from profiles.names import DEFAULT_PROFILE, parse_profile_name
from profiles.paths import PROFILES_DIRNAME, resolve_root
from profiles.upstream import files as gf
from profiles.upstream.process import proc_start_time
from supervisor.processes.identity import prove_gateway

READY_RULE = ("--ready fails while the gateway is not 'running', while any platform in gateway_state.json is "
              "'fatal', or while a platform the profile enables lacks a library, program or file in the "
              "gateway's interpreter (such a platform is silently never started).")
READY_STATES = frozenset({"running"})
LIVE_STATES = frozenset({"running", "degraded", "draining"})
DEFAULT_MAX_AGE = 90.0


def check(home: Path, mode: str, max_age: float = DEFAULT_MAX_AGE, *,
          requirements: bool = False) -> tuple[bool, str]:
    """``(ok, reason)`` for the gateway of ``home``; ``mode`` is ``ready`` or ``live``.

    ``requirements``: for ``ready``, also check the enabled platforms' requirements (rule 5).
    """
    accepted = READY_STATES if mode == "ready" else LIVE_STATES
    state = gf.read_gateway_state(home)
    pid, start = _pid_of(state)
    rec = gf.read_pid_record(home)
    # gateway.pid instead when the state file names no process, or a dead one while gateway.pid names
    # a live one: a new gateway writes its PID file before its first state.
    if rec is not None and rec.pid != pid and (
        pid is None or (_process_matches(pid, start, home) is not True
                        and _process_matches(rec.pid, rec.start_time, home))
    ):
        pid, start, state = rec.pid, rec.start_time, {}  # the state file is about another process
    if pid is None:
        return False, "no gateway: neither gateway_state.json nor gateway.pid names a process"
    gstate = state.get("gateway_state") if isinstance(state.get("gateway_state"), str) else None
    beat = gf.read_heartbeat(home)
    beat_age = gf.heartbeat_age(beat) if beat.get("pid") == pid else None

    seen = _process_matches(pid, start, home)
    if seen is False:
        return False, (f"gateway PID {pid} is not running, or is not this profile's gateway (state file says "
                       f"{gstate or 'nothing'})")
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
    if mode == "ready":
        fatal = _fatal_platforms(state)
        if fatal:
            return False, f"gateway PID {pid} is {gstate}, but platform {fatal}"
        if requirements and seen is True:
            lacking = _lacking(home, pid)
            if lacking:
                return False, f"gateway PID {pid} is {gstate}, but {lacking}"
    beat_text = f", heartbeat {beat_age:.0f}s ago" if beat_age is not None else ", no heartbeat yet"
    return True, f"{gstate or 'alive'} (PID {pid}{beat_text})"


def _fatal_platforms(state: dict[str, Any]) -> str | None:
    """``telegram is fatal: <reason>`` for the first platform in the ``fatal`` state, else None."""
    plats = state.get("platforms")
    if not isinstance(plats, dict):
        return None
    for name, info in sorted(plats.items(), key=lambda kv: str(kv[0])):
        if isinstance(info, dict) and info.get("state") == "fatal":
            why = info.get("error_message") or info.get("error_code") or "no reason given"
            return f"{name} is fatal: {' '.join(str(why).split())[:200]}"
    return None


_LOOKUP_VARIABLES = frozenset({"PATH", "HOME", "PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONUSERBASE",
                               "VIRTUAL_ENV", "LANG", "LC_ALL"})


def _lacking(home: Path, pid: int) -> str | None:
    """What an enabled platform lacks in the interpreter of gateway ``pid``, or None (also when unknown)."""
    if not (home / ".env").is_file() and not (home / "config.yaml").is_file():
        return None  # no file can enable a platform: stay stdlib-only and fast
    try:
        cmdline = [a.decode("utf-8", "surrogateescape")
                   for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    # Only what decides which modules and programs that interpreter finds: nothing else of the
    # gateway's environment (which may hold secrets) is passed on.
    env = {k: v for item in raw.decode("utf-8", "replace").split("\0") if "=" in item
           for k, v in [item.split("=", 1)] if k in _LOOKUP_VARIABLES}
    try:
        # Here only: PyYAML and the gateway's interpreter, for --ready with a live gateway's files,
        # never on the rest of a health check that runs every few seconds.
        from supervisor.hermes import requirements  # here only: see above
        from supervisor.hermes.release import interpreter_argv  # here only: see above

        # The interpreter as the gateway was started (status and doctor ask the same function of
        # the configured command); /proc/PID/exe would name the file a venv's python links to.
        interp = interpreter_argv(cmdline, env.get("PATH"))
        if interp is None:
            return None
        reqs = requirements.profile_requirements(home, None, None)
        report = requirements.check_requirements([*interp, "-m", "hermes_cli.main"], reqs, env=env)
    except Exception:  # unreadable files, no yaml here: the state rules above have spoken
        return None
    missing = report.missing
    if not missing:
        return None
    first = missing[0]
    fix = f" (install: {report.install})" if report.install else (f" ({first.hint})" if first.hint else "")
    return f"platform {first.platform} cannot start: missing {', '.join(first.missing)}{fix}"


def _pid_of(state: dict[str, Any]) -> tuple[int | None, int | None]:
    pid, start = state.get("pid"), state.get("start_time")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return None, None
    return pid, start if isinstance(start, int) and not isinstance(start, bool) else None


def _process_matches(pid: int, start: int | None, home: Path) -> bool | None:
    """True: that exact process lives here and is this home's gateway. False: it does not (or it is
    another process: the state files are the profile's, and may name anything). None: no such PID
    here, so it may live in another PID namespace (or this system has no ``/proc``)."""
    if not os.path.exists("/proc/self/stat"):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None  # maybe another PID namespace or host: let the heartbeat decide
        except PermissionError:
            return True
        return True
    live = proc_start_time(pid)
    if live is None:
        return None if not os.path.exists(f"/proc/{pid}") else False
    return prove_gateway(pid, start, home=home, profile=gf.home_profile(home)) is not None


def _error_hint(state: dict[str, Any]) -> str:
    reason = state.get("exit_reason")
    return f" ({' '.join(str(reason).split())[:200]})" if reason else ""


def resolve_home(profile: str, root: str | None) -> Path:
    """The profile's HERMES_HOME, without YAML or the profile scan (probes must be cheap)."""
    name = parse_profile_name(profile)
    base = Path(root).expanduser() if root else resolve_root()
    return base if name == DEFAULT_PROFILE else base / PROFILES_DIRNAME / name
