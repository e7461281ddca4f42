"""The rows of ``hermesd status``: one per profile, from the daemon's view or from the files.

The daemon fills what only it knows and calls :func:`make_row`; with the daemon down,
:func:`offline_document` rebuilds the rows from the files on disk (hermesd's state file, each
gateway's PID and state files) and the processes that exist, and says the supervisor is not
running. Rendering is :mod:`supervisor.ops.status`, which a status answered by the daemon needs alone
(this module's readers of ``/proc``, code identities and state files cost ``hermesd status`` 40 ms
there, measured).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from profiles.credentials import profile_ports
from profiles.discovery import profiles_to_serve
from profiles.errors import ProfileError
from profiles.upstream import files as gf
from profiles.upstream.apiserver import API_SERVER
from profiles.upstream.process import is_lock_error
from supervisor.daemon import state as state_mod
from supervisor.hermes import codeid
from supervisor.kanban.running import Snapshot, kanban_fields
from supervisor.layout import Layout
from supervisor.plan import readiness
from supervisor.plan.model import Ident
from supervisor.processes import apicheck, identity
from supervisor.processes.apicheck import ApiCheck

# Every row has every key, whether it comes from the daemon or from the files on disk.
_DEFAULTS: dict[str, Any] = {
    "state": "stopped",
    "reason": None,
    "pid": None,
    "adopted": False,
    "started_at": None,
    "uptime_s": None,
    "restarts": 0,
    "last_exit": None,
    "next_retry_at": None,
    "should_run": True,
    "hold": None,
    "pending": None,  # a running profile's changed files would be held at a restart: {kind, message}
    "file_problems": [],
    "log_problem": None,
    "down": None,
    "start_problem": None,
    "memory_bytes": None,
    "tasks": None,
    "limits": None,
    "mechanism": None,
    "limit_mechanisms": None,
    "isolation": None,
    "kanban": None,  # {dispatcher, dispatcher_pid, dispatcher_supervised, workers}: supervisor.kanban.running
    "requirements_missing": [],
    "code": None,  # supervisor.hermes.codeid.CodeView: the code the gateway runs against the code installed
    # What the child serves (the multiplex-default line reports it): names, where from, its identify answer.
    "serves": None,
    "serves_source": None,
    "serves_agree": None,
    "identify": None,
    # The last check of its API server (supervisor.processes.apicheck; None: not enabled or on a port chosen at
    # start), and the verdict of supervisor.plan.readiness on the whole row: whether the profile serves.
    "api": None,
    "serving": None,
}


def make_row(name: str, home: Path, cpu_percent: float | None = None, *, gstate: dict[str, Any] | None = None,
             usage: tuple[float, int] | None = None, kanban: dict[Path, Snapshot] | None = None,
             **fields: Any) -> dict[str, Any]:
    """One profile's row: the given fields over the defaults, then what the gateway's files and /proc say.

    ``gstate``, ``usage``: the gateway's state file and :func:`supervisor.processes.identity.proc_usage` when
    the caller already read them for this row (each read once per row); ``kanban``: the document's
    snapshots (:func:`supervisor.kanban.running.kanban_fields`).
    """
    row: dict[str, Any] = {"name": name, "home": str(home), **_DEFAULTS, **fields}
    add_live_fields(row, home, cpu_percent, gstate=gstate, usage=usage)

    row.update(kanban_fields(name, home, kanban))
    row["serving"] = readiness.judge(row).to_json()
    return row


def add_live_fields(row: dict[str, Any], home: Path, cpu_percent: float | None = None, *,
                    gstate: dict[str, Any] | None = None, usage: tuple[float, int] | None = None) -> None:
    """Fill the gateway's own view (state file, heartbeat) and the process's CPU and RSS.

    ``cpu_percent`` is the daemon's figure since its previous status request; without one, the
    average over the process's life is shown. ``gstate`` and ``usage``: already read (else read
    here). A row without a PID reads neither file: nothing in them could be its gateway's.
    """
    if row.get("pid") is None:
        gstate = {}
    elif gstate is None:
        gstate = gf.read_gateway_state(home)
    mine = row.get("pid") is not None and gstate.get("pid") == row.get("pid")
    gstate_value = gstate.get("gateway_state") if mine else None
    row["gateway_state"] = gstate_value if isinstance(gstate_value, str) else None
    platforms = gstate.get("platforms") if mine else None
    row["platforms"] = _platforms(platforms, since=row.get("started_at"))
    row["lock_conflicts"] = [
        {"platform": p, "error_code": v.get("error_code"), "message": v.get("error_message")}
        for p, v in row["platforms"].items()
        if is_lock_error(v.get("error_code"))
    ]
    beat = gf.read_heartbeat(home) if row.get("pid") is not None else {}
    age = gf.heartbeat_age(beat) if row.get("pid") is not None and beat.get("pid") == row["pid"] else None
    row["heartbeat_age_s"] = round(age, 1) if age is not None else None
    row["rss_bytes"] = None
    row["cpu_percent"] = None
    if usage is None and row.get("pid"):
        usage = identity.proc_usage(row["pid"])
    if usage is not None:
        cpu_s, row["rss_bytes"] = usage
        if cpu_percent is None and row.get("uptime_s"):
            cpu_percent = 100.0 * cpu_s / max(row["uptime_s"], 0.1)
        row["cpu_percent"] = round(cpu_percent, 1) if cpu_percent is not None else None


def _platforms(raw: Any, since: float | None = None) -> dict[str, dict[str, Any]]:
    """The platforms of ``gateway_state.json``, without those last written before ``since`` (this
    gateway's start): upstream merges the file with what the previous gateway left, so a platform
    removed from the profile's files would otherwise show its old state forever."""
    if not isinstance(raw, dict):
        return {}
    out = {}
    for name, info in raw.items():
        if isinstance(name, str) and isinstance(info, dict) and not _written_before(info.get("updated_at"), since):
            out[name] = {
                k: (v if isinstance(v := info.get(k), str) else None)
                for k in ("state", "error_code", "error_message", "updated_at")
            }
    return out


def _written_before(stamp: object, since: float | None) -> bool:
    """Whether an ISO-8601 ``updated_at`` is older than ``since`` (epoch seconds); unknown: no."""
    if since is None or not isinstance(stamp, str):
        return False
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return False
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp() < since


def offline_document(root: Path, why: str = "hermesd is not running") -> dict[str, Any]:
    """Status without a daemon's answer: what hermesd's state file, the gateways' files and /proc say.

    ``why`` heads each row's reason: the daemon is absent, or it holds the root but does not answer
    (frozen, overloaded), which is not the same thing and must never read as "not running".
    """
    layout = Layout(root)
    saved = state_mod.load(layout.beneath(layout.state), identity.boot_id())
    installed = codeid.installed_now(saved.dist_info)
    rows = []
    try:
        served = profiles_to_serve(True, root=root)
    except OSError:
        served = []
    lives: dict[str, Ident | None] = {}
    for name, home in served:
        live = identity.gateway_of(Path(home), name)
        if live is None and gf.read_pid_record(Path(home)) is not None:  # forged or stale: look for the real one
            live = identity.find_gateway(root, Path(home), name)
        lives[name] = live
    checks = _offline_api_checks({name: (Path(home), lives[name]) for name, home in served})
    kanban: dict[Path, Snapshot] = {}
    for name, home in served:
        home = Path(home)
        rec = saved.profiles.get(name, {})
        live = lives[name]
        pid = live.pid if live is not None else None
        down = rec.get("down") if isinstance(rec.get("down"), str) else None
        held = _saved_hold(rec) if pid is None else None
        started = identity.proc_start_wall(pid) if pid else None
        ticks = identity.proc_start_time(pid) if pid else None
        gstate = gf.read_gateway_state(home) if pid else {}
        code = codeid.view(home, pid, started_wall=started, installed=installed,
                           recorded=state_mod.recorded_code(rec, pid, ticks), gstate=gstate)
        rows.append(make_row(
            name, home, gstate=gstate, kanban=kanban,
            state="running" if pid else "stopped",
            reason=(why + (" (gateway running unsupervised)" if pid else ""))
            + (f"; {down}" if down else "") + (f"; when it last ran it held this profile: {held}" if held else ""),
            pid=pid,
            started_at=started,
            uptime_s=round(max(0.0, time.time() - started), 1) if started is not None else None,
            restarts=state_mod.saved_int(rec, "restarts"),
            last_exit=state_mod.exit_record(rec.get("last_exit")),
            should_run=down is None,
            down=down,
            code=code.to_json() if code is not None else None,
            api=checks.get(name),
            isolation=state_mod.recorded_isolation(rec, pid, ticks),
        ))
    _add_offline_requirements(root, rows)
    return {
        "root": str(root),
        "supervisor": {"pid": None, "running": False, "state_problem": saved.problem,
                       "installed_code": installed.code.to_json() if installed is not None else None},
        "profiles": rows,
    }


def _offline_api_checks(gateways: dict[str, tuple[Path, Ident | None]]) -> dict[str, dict[str, Any]]:
    """With the daemon down, check each live gateway's API server ourselves, all at once (at most
    :data:`supervisor.processes.apicheck.TIMEOUT_S` for the lot), on the port its files give it now."""
    targets = {}
    for name, (home, live) in gateways.items():
        if live is None:
            continue
        try:
            port = next((b.port for b in profile_ports(home) if b.platform == API_SERVER), None)
        except (ProfileError, OSError, ValueError):
            continue  # unreadable files: the row says nothing about its API server
        if port is not None:
            targets[name] = (live, port)
    if not targets:
        return {}

    async def every() -> list[ApiCheck]:
        return list(await asyncio.gather(*(apicheck.check(live.pid, live.start_time, port)
                                           for live, port in targets.values())))

    return {name: found.to_json() for name, found in zip(targets, asyncio.run(every()), strict=True)}


def _saved_hold(rec: dict[str, Any]) -> str | None:
    """``kind: message`` of the hold the state file records for a profile (hermesd's own file, still
    checked field by field), or ``None``."""
    hold = rec.get("hold")
    if not isinstance(hold, dict) or not isinstance(hold.get("kind"), str) or not isinstance(hold.get("message"), str):
        return None
    return f"{hold['kind']}: {hold['message']}"


def _add_offline_requirements(root: Path, rows: list[dict[str, Any]]) -> None:
    """With the daemon down, ask the gateway command's interpreter ourselves (once for every row).

    Never fails the status: a root without a usable command or hermesd.yaml simply shows nothing
    here (``doctor`` says why).
    """
    # Only without a daemon (which asks the interpreter itself): hermesd.yaml and the interpreter's
    # question are most of what an offline status costs, and none of what a running daemon's does.
    from supervisor.hermes import requirements  # offline only: see above

    try:
        findings = requirements.requirement_findings(root, profiles=[r["name"] for r in rows])
    except Exception:
        return
    by_name: dict[str, list[dict[str, Any]]] = {}
    for f in findings:
        by_name.setdefault(f.profile, []).append(
            {k: v for k, v in f.to_json().items() if k != "profile"})
    for r in rows:
        r["requirements_missing"] = by_name.get(r["name"], [])
