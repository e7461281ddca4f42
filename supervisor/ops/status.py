"""``hermesd status``: render the per-profile rows for people, and the exit code for scripts.

The rows come from the daemon over the control socket or, with the daemon down, from
:mod:`supervisor.daemon.status_rows`.
"""

from __future__ import annotations

import time
from typing import Any

from profiles.printable import printable_tree

HEALTHY = "running"

def serves(row: dict[str, Any]) -> bool:
    """The row's verdict of :func:`supervisor.plan.readiness.judge` (a daemon too old to give one: running is
    enough)."""
    verdict = row.get("serving")
    return bool(verdict.get("ready")) if isinstance(verdict, dict) else row.get("state") == HEALTHY


def exit_code(doc: dict[str, Any]) -> int:
    """0 when every profile that should run is running and serving, with what its platforms need,
    and the supervisor is up; else 1 (3: down, 4: holds the root but does not answer). A running
    gateway whose enabled platform lacks its library is not healthy: upstream silently never starts it."""
    if not doc["supervisor"].get("running"):
        return 3
    if doc["supervisor"].get("answering") is False:
        return 4  # held but silent: neither "up" nor "down" (supervisor.exits.EXIT_NOT_ANSWERING)
    bad = [r for r in doc["profiles"] if r.get("should_run") and (
        r["state"] != HEALTHY or not serves(r) or r.get("requirements_missing"))]
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
    return time.strftime("%H:%M:%S", time.localtime(epoch))  # local time, without importing datetime (~1.5 ms)


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


def api_note(row: dict[str, Any]) -> str | None:
    """What the last check of a running profile's API server found, when it did not simply answer."""
    api = row.get("api")
    if row.get("state") != HEALTHY or not isinstance(api, dict) or api.get("outcome") in ("answered", "pending"):
        return None
    return f"api_server: {api.get('detail') or api.get('outcome')}"


def _code_label(code: dict[str, Any] | None) -> str:
    if not isinstance(code, dict):
        return "?"
    return f"{code.get('version')} ({code.get('digest')})"


def stale_note(code: dict[str, Any], *, rolling: bool = False) -> str:
    """One line for a gateway that runs older code than is installed (status and doctor); ``rolling``:
    a fleet operation is restarting the gateways onto it now."""
    running = code.get("running")
    if running:
        what = f"runs hermes-agent {_code_label(running)}"
    elif code.get("how") == "gateway":
        what = f"reports hermes-agent {code.get('reported_version')}"
    else:
        what = "started before the installed hermes-agent changed"
    todo = "the fleet operation running now restarts it" if rolling else "restart it to load it"
    return f"stale code: {what}, {_code_label(code.get('installed'))} is installed; {todo}"


_COLORS = {"running": "32", "starting": "36", "stopping": "36", "backoff": "33", "held": "31", "stopped": "90"}


def render(doc: dict[str, Any], now: float | None = None, *, color: bool = False) -> str:
    """A table, then one line per problem (why a profile is down, lock conflicts).

    ``color`` adds ANSI colours to the state column only (callers honour NO_COLOR and pipes).
    """
    now = time.time() if now is None else now
    doc = printable_tree(_shown(doc))  # reasons, platform messages and names come from the profiles' own files
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
    for key in ("release_note", "platforms_note"):
        if sup.get(key):
            lines.append(f"  note: {sup[key]}")
    stale = [r["code"] for r in doc["profiles"] if (r.get("code") or {}).get("stale")]
    rolling = sup.get("fleet_operation")
    if stale:
        runs = "gateways run" if len(stale) > 1 else "gateway runs"
        todo = (f"a fleet operation (PID {rolling}: hermesd upgrade or restart --rolling) is restarting them one "
                "at a time" if rolling else "'hermesd upgrade' restarts them onto it one at a time")
        lines.append(f"  ! {len(stale)} {runs} older code than the installed hermes-agent "
                     f"{_code_label(stale[0].get('installed'))}: {todo}")
    elif rolling:
        lines.append(f"  note: a fleet operation (PID {rolling}: hermesd upgrade or restart --rolling) is running")
    cols = ["PROFILE", "STATE", "PID", "UPTIME", "RESTARTS", "LAST EXIT", "GATEWAY", "PLATFORMS", "SERVING", "BEAT",
            "CPU", "MEM"]
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
            str((r.get("serving") or {}).get("word") or "-"),
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
        if note := api_note(r):
            notes.append(f"  {r['name']}: {note}")
        if (r.get("code") or {}).get("stale"):
            notes.append(f"  {r['name']}: {stale_note(r['code'], rolling=bool(rolling))}")
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for n, row in enumerate(table):
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        if color and n > 0 and row[1] in _COLORS:
            cells[1] = f"\x1b[{_COLORS[row[1]]}m{cells[1]}\x1b[0m"
        lines.append("  ".join(cells).rstrip())
    if notes:
        lines.append("")
        lines.extend(notes)
    domains = domain_lines(doc["profiles"], supervised=bool(sup.get("running")))
    if domains:
        lines.append("")
        lines.extend(domains)
    return "\n".join(lines)


def _shown(doc: dict[str, Any]) -> dict[str, Any]:
    """The document as far as :func:`render` reads it: each row's isolation plan cut to its summary,
    the one field of it shown (:func:`domain_lines`). The plans are two thirds of the daemon's answer
    (~3 KB a row), so escaping the rest costs a 100-profile status ~4 ms less (measured)."""
    rows = []
    for r in doc["profiles"]:
        iso = r.get("isolation")
        if isinstance(iso, dict):
            r = {**r, "isolation": {"summary": iso["summary"]} if "summary" in iso else {}}
        rows.append(r)
    return {**doc, "profiles": rows}


def _printable(value: object, limit: int = 120) -> str:
    """``value`` as text safe for a terminal: control characters escaped, cut at ``limit``."""
    text = str(value)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
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


def domain_lines(rows: list[dict[str, Any]], *, supervised: bool = True) -> list[str]:
    """Compact lines for what ``--json`` details per profile: its confinement (one line per distinct
    plan, naming its profiles), its resource limits and use, the kanban dispatcher and workers.
    ``supervised``: a daemon holds the root (with none, a gateway hermesd started is nobody's child)."""
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
            who = ("hermesd's child" if supervised else "started by hermesd, unsupervised while hermesd is not running"
                   ) if k.get("dispatcher_supervised") else "not hermesd's child"
            out.append(f"  kanban     {r['name']}: dispatcher (PID {k.get('dispatcher_pid')}, {who})")
        for w in k.get("workers") or []:
            tree = w.get("tree")
            where = "in hermesd's tree" if tree == "hermesd" else (
                f"in {_printable(tree, 64)}'s tree" if tree else "outside hermesd")
            out.append(f"  kanban     {r['name']}: worker for task {_printable(w.get('task'), 64)} "
                       f"(PID {w.get('pid')}, {where})")
    return out
