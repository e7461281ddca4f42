"""``hermesd status``: collect one row per profile and render it for people or scripts.

With the daemon up, rows come from it over the control socket. With the daemon down, they are
rebuilt from the files on disk (hermesd's state file, each gateway's PID and state files) and the
processes that exist, and the document says the supervisor is not running.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from profiles.upstream import files as gf

HEALTHY = "running"

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
}


def make_row(name: str, home: Path, cpu_percent: float | None = None, **fields: Any) -> dict[str, Any]:
    """One profile's row: the given fields over the defaults, then what the gateway's files and /proc say."""
    row: dict[str, Any] = {"name": name, "home": str(home), **_DEFAULTS, **fields}
    add_live_fields(row, home, cpu_percent)
    return row


def add_live_fields(row: dict[str, Any], home: Path, cpu_percent: float | None = None) -> None:
    """Fill the gateway's own view (state file, heartbeat) and the process's CPU and RSS.

    ``cpu_percent`` is the daemon's figure since its previous status request; without one, the
    average over the process's life is shown.
    """
    from supervisor import identity

    gstate = gf.read_gateway_state(home)
    mine = row.get("pid") is not None and gstate.get("pid") == row.get("pid")
    gstate_value = gstate.get("gateway_state") if mine else None
    row["gateway_state"] = gstate_value if isinstance(gstate_value, str) else None
    platforms = gstate.get("platforms") if mine else None
    row["platforms"] = _platforms(platforms)
    row["lock_conflicts"] = [
        {"platform": p, "error_code": v.get("error_code"), "message": v.get("error_message")}
        for p, v in row["platforms"].items()
        if str(v.get("error_code") or "").endswith("_lock")
    ]
    beat = gf.read_heartbeat(home)
    age = gf.heartbeat_age(beat) if row.get("pid") is not None and beat.get("pid") == row["pid"] else None
    row["heartbeat_age_s"] = round(age, 1) if age is not None else None
    row["rss_bytes"] = None
    row["cpu_percent"] = None
    usage = identity.proc_usage(row["pid"]) if row.get("pid") else None
    if usage is not None:
        cpu_s, row["rss_bytes"] = usage
        if cpu_percent is None and row.get("uptime_s"):
            cpu_percent = 100.0 * cpu_s / max(row["uptime_s"], 0.1)
        row["cpu_percent"] = round(cpu_percent, 1) if cpu_percent is not None else None


def _platforms(raw: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, dict):
        return {}
    out = {}
    for name, info in raw.items():
        if isinstance(name, str) and isinstance(info, dict):
            out[name] = {
                k: (v if isinstance(v := info.get(k), str) else None)
                for k in ("state", "error_code", "error_message", "updated_at")
            }
    return out


def offline_document(root: Path) -> dict[str, Any]:
    """Status without a daemon: what hermesd's state file, the gateways' files and /proc say."""
    from profiles.discovery import profiles_to_serve
    from supervisor import identity
    from supervisor import state as state_mod
    from supervisor.layout import Layout

    layout = Layout(root)
    saved = state_mod.load(layout.state, identity.boot_id())
    rows = []
    try:
        served = profiles_to_serve(True, root=root)
    except OSError:
        served = []
    for name, home in served:
        home = Path(home)
        rec = saved.profiles.get(name, {})
        live = gf.live_gateway(home)
        pid = live.pid if live is not None else None
        down = rec.get("down") if isinstance(rec.get("down"), str) else None
        started = identity.proc_start_wall(pid) if pid else None
        rows.append(make_row(
            name, home,
            state="running" if pid else "stopped",
            reason=("hermesd is not running" + (" (gateway running unsupervised)" if pid else ""))
            + (f"; {down}" if down else ""),
            pid=pid,
            started_at=started,
            uptime_s=round(max(0.0, time.time() - started), 1) if started is not None else None,
            restarts=state_mod.saved_int(rec, "restarts"),
            last_exit=state_mod.exit_record(rec.get("last_exit")),
            should_run=down is None,
            down=down,
        ))
    return {
        "root": str(root),
        "supervisor": {"pid": None, "running": False, "state_problem": saved.problem},
        "profiles": rows,
    }


def exit_code(doc: dict[str, Any]) -> int:
    """0 when every profile that should run is running and the supervisor is up; else 1 (3: down)."""
    if not doc["supervisor"].get("running"):
        return 3
    bad = [r for r in doc["profiles"] if r.get("should_run") and r["state"] != HEALTHY]
    bad += [r for r in doc["profiles"] if not r.get("should_run") and r["state"] in ("held", "backoff")]
    return 1 if bad else 0


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def _when(epoch: float | None) -> str:
    if not epoch:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).astimezone().strftime("%H:%M:%S")


def _last_exit_cell(last: dict[str, Any], now: float) -> str:
    at = last.get("at")
    when = f" {_ago(now - at)} ago" if isinstance(at, int | float) and not isinstance(at, bool) else ""
    return f"{last.get('description') or '-'}{when}"


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1048576:.0f}M"


_COLORS = {"running": "32", "starting": "36", "stopping": "36", "backoff": "33", "held": "31", "stopped": "90"}


def render(doc: dict[str, Any], now: float | None = None, *, color: bool = False) -> str:
    """A table, then one line per problem (why a profile is down, lock conflicts).

    ``color`` adds ANSI colours to the state column only (callers honour NO_COLOR and pipes).
    """
    now = time.time() if now is None else now
    sup = doc["supervisor"]
    head = (
        f"hermesd for {doc['root']}: "
        + (f"running (PID {sup['pid']})" if sup.get("running") else "NOT RUNNING (showing files on disk)")
    )
    lines = [head]
    for key in ("config_problem", "command_error", "state_problem"):
        if sup.get(key):
            lines.append(f"  ! {sup[key]}")
    cols = ["PROFILE", "STATE", "PID", "UPTIME", "RESTARTS", "LAST EXIT", "GATEWAY", "PLATFORMS", "BEAT", "CPU", "MEM"]
    table = [cols]
    notes = []
    for r in doc["profiles"]:
        last = r.get("last_exit") or {}
        plats = r.get("platforms") or {}
        ok = sum(1 for p in plats.values() if p.get("state") == "connected")
        table.append([
            r["name"],
            r["state"],
            str(r["pid"] or "-"),
            _ago(r.get("uptime_s")),
            str(r.get("restarts", 0)),
            _last_exit_cell(last, now),
            r.get("gateway_state") or "-",
            f"{ok}/{len(plats)}" if plats else "-",
            _ago(r.get("heartbeat_age_s")),
            "-" if r.get("cpu_percent") is None else f"{r['cpu_percent']:.0f}%",
            _mb(r.get("memory_bytes") if r.get("memory_bytes") is not None else r.get("rss_bytes")),
        ])
        if r["state"] != HEALTHY and r.get("reason"):
            retry = f"; retry at {_when(r['next_retry_at'])}" if r.get("next_retry_at") else ""
            notes.append(f"  {r['name']}: {r['state']}: {r['reason']}{retry}")
        if r["state"] != "held":
            notes.extend(f"  {r['name']}: {problem} (running on its last good files)" if r.get("pid")
                         else f"  {r['name']}: {problem}" for problem in r.get("file_problems") or [])
        for key in ("log_problem", "start_problem"):
            if r.get(key) and r["state"] != "backoff":
                notes.append(f"  {r['name']}: {r[key]}")
        for c in r.get("lock_conflicts") or []:
            why = c["message"] or c["error_code"]
            notes.append(f"  {r['name']}: {c['platform']} blocked by another gateway: {why}")
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for n, row in enumerate(table):
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        if color and n > 0 and row[1] in _COLORS:
            cells[1] = f"\x1b[{_COLORS[row[1]]}m{cells[1]}\x1b[0m"
        lines.append("  ".join(cells).rstrip())
    if notes:
        lines.append("")
        lines.extend(notes)
    return "\n".join(lines)
