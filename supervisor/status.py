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

from profiles.discovery import profiles_to_serve
from profiles.printable import printable_tree
from profiles.upstream import files as gf
from supervisor import codeid, identity
from supervisor import state as state_mod
from supervisor.kanban.observe import kanban_fields
from supervisor.layout import Layout

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
    "kanban": None,  # {dispatcher, dispatcher_pid, dispatcher_supervised, workers}: supervisor.kanban.observe
    "requirements_missing": [],
    "code": None,  # supervisor.codeid.CodeView: the code the gateway runs against the code installed
    # What the child serves (the multiplex-default line reports it): names, where from, its identify answer.
    "serves": None,
    "serves_source": None,
    "serves_agree": None,
    "identify": None,
}


def make_row(name: str, home: Path, cpu_percent: float | None = None, **fields: Any) -> dict[str, Any]:
    """One profile's row: the given fields over the defaults, then what the gateway's files and /proc say."""
    row: dict[str, Any] = {"name": name, "home": str(home), **_DEFAULTS, **fields}
    add_live_fields(row, home, cpu_percent)

    row.update(kanban_fields(name, home))
    return row


def add_live_fields(row: dict[str, Any], home: Path, cpu_percent: float | None = None) -> None:
    """Fill the gateway's own view (state file, heartbeat) and the process's CPU and RSS.

    ``cpu_percent`` is the daemon's figure since its previous status request; without one, the
    average over the process's life is shown.
    """
    gstate = gf.read_gateway_state(home)
    mine = row.get("pid") is not None and gstate.get("pid") == row.get("pid")
    gstate_value = gstate.get("gateway_state") if mine else None
    row["gateway_state"] = gstate_value if isinstance(gstate_value, str) else None
    platforms = gstate.get("platforms") if mine else None
    row["platforms"] = _platforms(platforms, since=row.get("started_at"))
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
    for name, home in served:
        home = Path(home)
        rec = saved.profiles.get(name, {})
        live = identity.gateway_of(home, name)
        if live is None and gf.read_pid_record(home) is not None:  # forged or stale: look for the real one
            live = identity.find_gateway(root, home, name)
        pid = live.pid if live is not None else None
        down = rec.get("down") if isinstance(rec.get("down"), str) else None
        started = identity.proc_start_wall(pid) if pid else None
        code = codeid.view(home, pid, started_wall=started, installed=installed,
                           recorded=state_mod.recorded_code(rec, pid, identity.proc_start_time(pid) if pid else None))
        rows.append(make_row(
            name, home,
            state="running" if pid else "stopped",
            reason=(why + (" (gateway running unsupervised)" if pid else ""))
            + (f"; {down}" if down else ""),
            pid=pid,
            started_at=started,
            uptime_s=round(max(0.0, time.time() - started), 1) if started is not None else None,
            restarts=state_mod.saved_int(rec, "restarts"),
            last_exit=state_mod.exit_record(rec.get("last_exit")),
            should_run=down is None,
            down=down,
            code=code.to_json() if code is not None else None,
        ))
    _add_offline_requirements(root, rows)
    return {
        "root": str(root),
        "supervisor": {"pid": None, "running": False, "state_problem": saved.problem,
                       "installed_code": installed.code.to_json() if installed is not None else None},
        "profiles": rows,
    }


def _add_offline_requirements(root: Path, rows: list[dict[str, Any]]) -> None:
    """With the daemon down, ask the gateway command's interpreter ourselves (once for every row).

    Never fails the status: a root without a usable command or hermesd.yaml simply shows nothing
    here (``doctor`` says why).
    """
    # Only without a daemon (which asks the interpreter itself): hermesd.yaml and the interpreter's
    # question are most of what an offline status costs, and none of what a running daemon's does.
    from supervisor import requirements  # offline only: see above

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


def exit_code(doc: dict[str, Any]) -> int:
    """0 when every profile that should run is running, with what its platforms need, and the
    supervisor is up; else 1 (3: down, 4: holds the root but does not answer). A running gateway
    whose enabled platform lacks its library is not healthy: upstream silently never starts it."""
    if not doc["supervisor"].get("running"):
        return 3
    if doc["supervisor"].get("answering") is False:
        return 4  # held but silent: neither "up" nor "down" (supervisor.exits.EXIT_NOT_ANSWERING)
    bad = [r for r in doc["profiles"]
           if r.get("should_run") and (r["state"] != HEALTHY or r.get("requirements_missing"))]
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


def _platforms_cell(ok: int, plats: dict[str, Any], missing: list[dict[str, Any]]) -> str:
    """``connected/known``, plus ``!req`` when an enabled platform cannot start for lack of a library."""
    cell = f"{ok}/{len(plats)}" if plats else "-"
    return f"{cell} !req" if missing else cell


def _serves_cell(row: dict[str, Any]) -> str:
    """``coder`` (only itself), ``default,coder!`` (others too), ``-`` (not running or not reported)."""
    served = row.get("serves")
    if served is None:
        return "-"
    others = [s for s in served if s != row["name"]]
    disagree = "?" if row.get("serves_agree") is False else ""
    return ",".join(served or [row["name"]]) + ("!" if others else "") + disagree


def platform_notes(row: dict[str, Any]) -> list[str]:
    """One line per platform that is not connected (its state and the gateway's reason), and one per
    enabled platform whose requirements the gateway's interpreter lacks (with the install command).

    Lock conflicts have their own line (see :func:`render`), so they are not repeated here.
    """
    out = []
    for name, info in sorted((row.get("platforms") or {}).items()):
        state = info.get("state")
        code = str(info.get("error_code") or "")
        if state in (None, "connected") or code.endswith("_lock"):
            continue
        why = " ".join(str(info.get("error_message") or code or "").split())[:200]
        out.append(f"{name}: {state}" + (f": {why}" if why else ""))
    for m in row.get("requirements_missing") or []:
        what = ", ".join(m.get("missing") or [])
        fix = f"; install with: {m['install']}" if m.get("install") else ""
        hint = f"; {m['hint']}" if m.get("hint") else ""
        also = " (or: hermesd install-deps)" if m.get("install") else ""
        out.append(f"{m.get('platform')}: cannot start, missing {what}{fix}{hint}{also}")
    return out


def _code_label(code: dict[str, Any] | None) -> str:
    if not isinstance(code, dict):
        return "?"
    return f"{code.get('version')} ({code.get('digest')})"


def stale_note(code: dict[str, Any]) -> str:
    """One line for a gateway that runs older code than is installed (status and doctor)."""
    running = code.get("running")
    if running:
        what = f"runs hermes-agent {_code_label(running)}"
    elif code.get("how") == "gateway":
        what = f"reports hermes-agent {code.get('reported_version')}"
    else:
        what = "started before the installed hermes-agent changed"
    return f"stale code: {what}, {_code_label(code.get('installed'))} is installed; restart it to load it"


_COLORS = {"running": "32", "starting": "36", "stopping": "36", "backoff": "33", "held": "31", "stopped": "90"}


def render(doc: dict[str, Any], now: float | None = None, *, color: bool = False) -> str:
    """A table, then one line per problem (why a profile is down, lock conflicts).

    ``color`` adds ANSI colours to the state column only (callers honour NO_COLOR and pipes).
    """
    now = time.time() if now is None else now
    doc = printable_tree(doc)  # reasons, platform messages and names come from the profiles' own files
    sup = doc["supervisor"]
    if sup.get("answering") is False:
        state = "NOT ANSWERING (it holds the root; showing files on disk)"
    elif sup.get("running"):
        state = f"running (PID {sup['pid']})"
    else:
        state = "NOT RUNNING (showing files on disk)"
    lines = [f"hermesd for {doc['root']}: {state}"]
    for key in ("problem", "config_problem", "command_error", "state_problem", "self_problem", "release_problem",
                "rewrite_note"):
        if sup.get(key):
            lines.append(f"  ! {sup[key]}")
    if sup.get("release_note"):
        lines.append(f"  note: {sup['release_note']}")
    stale = [r["code"] for r in doc["profiles"] if (r.get("code") or {}).get("stale")]
    if stale:
        runs = "gateways run" if len(stale) > 1 else "gateway runs"
        lines.append(f"  ! {len(stale)} {runs} older code than the installed hermes-agent "
                     f"{_code_label(stale[0].get('installed'))}: 'hermesd upgrade' restarts them onto it one at a time")
    cols = ["PROFILE", "STATE", "PID", "UPTIME", "RESTARTS", "LAST EXIT", "GATEWAY", "PLATFORMS", "BEAT", "CPU", "MEM"]
    serves_column = any(r.get("serves") is not None for r in doc["profiles"])
    if serves_column:
        cols.append("SERVES")
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
            _platforms_cell(ok, plats, r.get("requirements_missing") or []),
            _ago(r.get("heartbeat_age_s")),
            "-" if r.get("cpu_percent") is None else f"{r['cpu_percent']:.0f}%",
            _mb(r.get("memory_bytes") if r.get("memory_bytes") is not None else r.get("rss_bytes")),
            *([_serves_cell(r)] if serves_column else []),
        ])
        if r.get("serves_agree") is False:
            notes.append(f"  {r['name']}: its gateway_state.json and its gateway.sock identify disagree about what "
                         f"it serves (identify: {', '.join(r.get('serves') or [])})")
        if r["state"] != HEALTHY and r.get("reason"):
            retry = f"; retry at {_when(r['next_retry_at'])}" if r.get("next_retry_at") else ""
            notes.append(f"  {r['name']}: {r['state']}: {r['reason']}{retry}")
        if r["state"] != "held":
            notes.extend(f"  {r['name']}: {problem} (running on its last good files)" if r.get("pid")
                         else f"  {r['name']}: {problem}" for problem in r.get("file_problems") or [])
        pending = r.get("pending")
        if r.get("pid") and isinstance(pending, dict) and pending.get("kind") != "config_error":
            notes.append(f"  {r['name']}: its files changed, but a restart would be held ({pending.get('kind')}: "
                         f"{pending.get('message')}); it keeps running on its last good configuration")
        for key in ("log_problem", "start_problem"):
            if r.get(key) and r["state"] != "backoff":
                notes.append(f"  {r['name']}: {r[key]}")
        for c in r.get("lock_conflicts") or []:
            why = c["message"] or c["error_code"]
            notes.append(f"  {r['name']}: {c['platform']} blocked by another gateway: {why}")
        notes.extend(f"  {r['name']}: {line}" for line in platform_notes(r))
        if (r.get("code") or {}).get("stale"):
            notes.append(f"  {r['name']}: {stale_note(r['code'])}")
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for n, row in enumerate(table):
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        if color and n > 0 and row[1] in _COLORS:
            cells[1] = f"\x1b[{_COLORS[row[1]]}m{cells[1]}\x1b[0m"
        lines.append("  ".join(cells).rstrip())
    if notes:
        lines.append("")
        lines.extend(notes)
    domains = domain_lines(doc["profiles"])
    if domains:
        lines.append("")
        lines.extend(domains)
    return "\n".join(lines)


def _printable(value: object, limit: int = 120) -> str:
    """``value`` as text safe for a terminal: control characters escaped, cut at ``limit``."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))
    return text if len(text) <= limit else text[:limit] + "…"


def _limit_words(r: dict[str, Any]) -> str | None:
    given = r.get("limits")
    limits: dict[str, Any] = given if isinstance(given, dict) else {}
    parts = []
    for key, used, word in (("memory_max", r.get("memory_bytes"), "memory"), ("tasks_max", r.get("tasks"), "tasks")):
        cap = limits.get(key)
        if cap is not None:
            have = "-" if used is None else (_mb(used) if key == "memory_max" else str(used))
            parts.append(f"{word} {have} of {_mb(cap) if key == 'memory_max' else cap}")
    if limits.get("cpu_weight") is not None:
        parts.append(f"cpu weight {limits['cpu_weight']}")
    if not parts:
        return None
    how = f" ({r['mechanism']})" if r.get("mechanism") else ""
    return ", ".join(parts) + how


def domain_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Compact lines for what ``--json`` details per profile: its confinement (one line per distinct
    plan, naming its profiles), its resource limits and use, the kanban dispatcher and workers."""
    out = []
    plans: dict[str, list[str]] = {}
    for r in rows:
        iso = r.get("isolation")
        if isinstance(iso, dict) and iso.get("summary"):
            plans.setdefault(_printable(iso["summary"], 200), []).append(r["name"])
    out += [f"  isolation  {', '.join(names)}: {summary}" for summary, names in plans.items()]
    out += [f"  limits     {r['name']}: {words}" for r in rows if (words := _limit_words(r))]
    for r in rows:
        given = r.get("kanban")
        k: dict[str, Any] = given if isinstance(given, dict) else {}
        if k.get("dispatcher"):
            who = "hermesd's child" if k.get("dispatcher_supervised") else "not hermesd's child"
            out.append(f"  kanban     {r['name']}: dispatcher (PID {k.get('dispatcher_pid')}, {who})")
        for w in k.get("workers") or []:
            tree = w.get("tree")
            where = "in hermesd's tree" if tree == "hermesd" else (
                f"in {_printable(tree, 64)}'s tree" if tree else "outside hermesd")
            out.append(f"  kanban     {r['name']}: worker for task {_printable(w.get('task'), 64)} "
                       f"(PID {w.get('pid')}, {where})")
    return out
