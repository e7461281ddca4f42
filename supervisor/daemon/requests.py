"""The daemon's answers to control requests: one small handler per verb of ``protocol.REQUESTS``.

Each handler takes the request's declared arguments and returns the reply. Operator verbs go to the
planner; ``record`` journals a step of a fleet operation (``hermesd upgrade``) for the command that
performs it; ``restart`` first re-reads the profile's files, so the check it makes (would the files as
they are now start a gateway?) never works from a stale read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from supervisor import codeid, identity, status
from supervisor.daemon import interpreter
from supervisor.observe.events import CLIENT_EVENTS, DAEMON_WIDE

if TYPE_CHECKING:
    from supervisor.codeid import Installed
    from supervisor.daemon.loop import Daemon
    from supervisor.plan.model import Ident, Profile


def handlers(d: Daemon) -> dict[str, Callable[..., Awaitable[dict[str, Any]]]]:
    """The request table for daemon ``d``."""

    def profile(name: str) -> Profile:
        from profiles.names import normalize_name

        canon = normalize_name(name)
        p = d.planner.profiles.get(canon)
        if p is None or not p.present:
            from profiles.names import no_such_profile

            raise KeyError(str(no_such_profile(name, [n for n, q in d.planner.profiles.items() if q.present])))
        return p

    async def ping() -> dict[str, Any]:
        return {"ok": True, "pid": os.getpid(), "ready": d.ready, "root": str(d.root)}

    async def get_status() -> dict[str, Any]:
        return {"ok": True, "status": document(d)}

    async def start(profile: str) -> dict[str, Any]:
        p = profile_(profile)
        result, actions = d.planner.request_start(p.name)
        d.execute(actions)
        return {"ok": True, "result": result}

    async def stop(profile: str) -> dict[str, Any]:
        p = profile_(profile)
        result, actions = d.planner.request_stop(p.name)
        d.execute(actions)
        return {"ok": True, "result": result}

    async def restart(profile: str, graceful: bool = False, force: bool = False) -> dict[str, Any]:
        p = profile_(profile)
        await d._read(p.name)  # judge the files as they are now, not as the last event left them
        result, actions = d.planner.request_restart(p.name, graceful=graceful, force=force)
        d.execute(actions)
        return {"ok": not result.startswith("refused"), "result": result,
                **({"error": f"{p.name}: {result}"} if result.startswith("refused") else {})}

    async def check(profile: str) -> dict[str, Any]:
        p = profile_(profile)
        await d._read(p.name)
        hold = d.planner.check_restart(p.name)
        return {"ok": True, "hold": hold.to_json() if hold else None}

    async def shutdown(keep_children: bool = False) -> dict[str, Any]:
        d.shutdown(keep_children=keep_children)
        return {"ok": True, "result": "shutting down"}

    async def reload() -> dict[str, Any]:
        await d.reload()
        return {"ok": True, "result": "reloaded", "config_problem": d.config_problem}

    async def metrics() -> dict[str, Any]:
        return {"ok": True, "metrics": d.observer.metrics_text(document(d))}

    async def record(event: str, profile: str | None = None, fields: dict[str, Any] | None = None) -> dict[str, Any]:
        if event not in CLIENT_EVENTS:
            return {"ok": False, "error": f"record: {event[:40]!r} is not an event a command may record "
                                          f"(known: {', '.join(sorted(CLIENT_EVENTS))})"}
        if (event in DAEMON_WIDE) != (profile is None):
            need = "takes no" if event in DAEMON_WIDE else "needs a"
            return {"ok": False, "error": f"record: {event} {need} profile"}
        name = profile_(profile).name if profile is not None else None
        extra = {str(k): v for k, v in (fields or {}).items() if k not in ("type", "profile", "ts", "seq", "daemon")}
        d._emit({"type": event, "profile": name, **extra})
        return {"ok": True}

    profile_ = profile
    return {"ping": ping, "status": get_status, "start": start, "stop": stop, "restart": restart,
            "check": check, "shutdown": shutdown, "reload": reload, "metrics": metrics, "record": record,
            **kanban_handlers(d)}


def kanban_handlers(d: Daemon) -> dict[str, Callable[..., Awaitable[dict[str, Any]]]]:
    """``kanban_worker`` and ``kanban_wait``: served on the control socket (the operator) and, alone,
    on the dispatcher's hand-off socket (:mod:`supervisor.kanban.handoff`)."""
    from supervisor.kanban.workers import WorkerError, printable

    async def kanban_worker(assignee: str, argv: list[Any], env: dict[str, Any], log: str) -> dict[str, Any]:
        from profiles.names import normalize_name

        name = normalize_name(assignee)
        p = d.planner.profiles.get(name)
        if p is None or not p.present:
            return {"ok": False, "error": f"kanban_worker: no profile {printable(assignee, 80)!r}"}
        if d.command is None:
            return {"ok": False, "error": d.command_error or "no hermes command"}
        if not d.config.isolation_for(p.name).kanban:
            return {"ok": False, "error": f"kanban_worker: profile {p.name} does not share the kanban board"
                                          " (isolation.kanban: false)"}
        if not all(isinstance(a, str) for a in argv) or not all(isinstance(v, str) for v in env.values()):
            return {"ok": False, "error": "kanban_worker: argv and env must hold strings"}
        try:
            run = d.board.workers.start(assignee=p.name, command=d.command, argv=argv, env=env, log=log,
                                        per_profile=d.config.kanban_workers_per_profile)
        except WorkerError as exc:
            return {"ok": False, "error": f"kanban_worker: {exc}"}
        return {"ok": True, "pid": run.pid}

    async def kanban_wait(pid: int) -> dict[str, Any]:
        try:
            return {"ok": True, "code": await d.board.workers.wait(pid)}
        except WorkerError as exc:
            return {"ok": False, "error": f"kanban_wait: {exc}"}

    return {"kanban_worker": kanban_worker, "kanban_wait": kanban_wait}


def document(d: Daemon) -> dict[str, Any]:
    """The whole status document, as the daemon sees it (see :mod:`supervisor.status`)."""
    rows = []
    planner = d.planner
    installed = interpreter.installed(d)
    for p in sorted(planner.profiles.values(), key=lambda q: (q.name != "default", q.name)):
        state, reason = planner.state_of(p)
        c = p.child
        discarded = ("this run's output is discarded: the log file system was full when it started"
                     if c is not None and c.output_discarded else None)
        rows.append(status.make_row(
            p.name, p.home, cpu_percent(d, c.ident) if c is not None else None,
            **d.domains.fields(p.name, d.config.limits_for(p.name)),
            state=state,
            reason=reason,
            pid=c.ident.pid if c else None,
            adopted=(not c.own) if c else False,
            started_at=c.started_wall if c else None,
            uptime_s=round(d.wall() - c.started_wall, 1) if c else None,
            restarts=p.restarts,
            last_exit=p.last_exit,
            next_retry_at=p.retry_at_wall,
            should_run=planner.wants(p),
            hold=p.hold.to_json() if p.hold else None,
            pending=p.pending.to_json() if p.pending else None,
            file_problems=list(p.facts.problems) if p.facts else [],
            log_problem=p.extra.get("log_problem") or discarded,
            down=p.down,
            start_problem=p.last_start_problem,
            code=_code(p, installed),
            **_serves(p.name, c.ident.pid, p.extra) if c is not None else {},
        ))
    return {
        "root": str(d.root),
        "supervisor": {
            "pid": os.getpid(),
            "running": True,
            "ready": d.ready,
            "config_problem": d.config_problem,
            "state_problem": d.state_problem,
            # hermesd's own limits or scheduling changed by another process and not undone, a
            # starved descriptor budget (supervisor.daemon.selfcheck); and the latest undone changes
            "self_problem": "; ".join(d.own.problems) or None,
            "self_restored": list(d.own.restored),
            "command": d.command,
            "command_error": d.command_error,
            # The hermes-agent release the gateway command runs, as the daemon last read it.
            "hermes_release": getattr(d.domains.facts, "version", None),
            # The hermes-agent code on disk now (supervisor.codeid): each row's "code" compares with it.
            "installed_code": installed.code.to_json() if installed is not None else None,
            "release_problem": d.release_problem,
            # The measured release whose contract hermesd follows, its line, and why when no row names it.
            "release_contract": d.contract.release if d.contract is not None else None,
            "release_line": d.contract.line.value if d.contract is not None else None,
            "release_note": _release_note(d),
            "rewrite_note": d.serving.rewrite_note,
            "cgroups": _cgroups(d),
        },
        "profiles": rows,
    }


def _code(p: Profile, installed: Installed | None) -> dict[str, Any] | None:
    c = p.child
    if c is None:
        return None
    found = codeid.view(p.home, c.ident.pid, recorded=c.code, started_wall=c.started_wall, installed=installed)
    return found.to_json() if found is not None else None


def _release_note(d: Daemon) -> str | None:
    """Which contract a release no measured row names runs with, and why (status shows it, not only the log)."""
    from profiles.upstream.releases import newer_than_known_note

    if d.contract is None or d.contract.exact:
        return None
    return newer_than_known_note(getattr(d.domains.facts, "version", None) or "?", d.contract)


def _serves(name: str, pid: int, extra: dict[str, Any]) -> dict[str, Any]:
    """What the running child ``pid`` serves: its own ``identify`` answer first, else its state file's list
    (either only once it is about this very child; a restart leaves the previous one's for a moment)."""
    if extra.get("serving_pid") != pid:
        return {}
    ident = extra.get("identify")
    state = extra.get("served_state")
    state_set = sorted(set(state) or {name}) if isinstance(state, list) else None  # []: only itself
    if isinstance(ident, dict) and isinstance(ident.get("served"), list):
        served = sorted(set(ident["served"]))
        return {"serves": served, "serves_source": "identify", "identify": ident,
                "serves_agree": state_set is None or state_set == served}
    if state_set is not None:
        return {"serves": state_set, "serves_source": "state file", "identify": ident, "serves_agree": None}
    return {"identify": ident}


def _cgroups(d: Daemon) -> dict[str, Any] | None:
    det = d.domains.cgroups
    if det is None:
        return None
    return {"usable": det.usable, "via": det.via, "base": det.base, "controllers": sorted(det.controllers),
            "kill": det.kill, "problems": list(det.problems)}


def cpu_percent(d: Daemon, ident: Ident) -> float | None:
    """CPU use since the previous status request (None on the first one)."""
    usage = identity.proc_usage(ident.pid)
    if usage is None:
        return None
    now, before = time.monotonic(), d.cpu_samples.get(ident)
    d.cpu_samples[ident] = (now, usage[0])
    if before is None or now <= before[0]:
        return None
    return 100.0 * (usage[0] - before[1]) / (now - before[0])


def summary(d: Daemon) -> str:
    """One line of counts per state (the service manager's STATUS=, the log's "ready" line)."""
    counts: dict[str, int] = {}
    for p in d.planner.profiles.values():
        state = d.planner.state_of(p)[0]
        counts[state] = counts.get(state, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no profiles"
