"""The daemon's answers to control requests: one small handler per verb of ``protocol.REQUESTS``.

Each handler takes the request's declared arguments and returns the reply. Operator verbs go to the
planner; ``restart`` first re-reads the profile's files, so the check it makes (would the files as
they are now start a gateway?) never works from a stale read.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from supervisor import status

if TYPE_CHECKING:
    from supervisor.daemon.loop import Daemon
    from supervisor.plan.model import Profile


def handlers(d: Daemon) -> dict[str, Callable[..., Awaitable[dict[str, Any]]]]:
    """The request table for daemon ``d``."""

    def profile(name: str) -> Profile:
        from profiles.names import normalize_name

        canon = normalize_name(name)
        p = d.planner.profiles.get(canon)
        if p is None or not p.present:
            from supervisor.cli.common import no_such_profile

            raise KeyError(no_such_profile(name, [n for n, q in d.planner.profiles.items() if q.present]))
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

    profile_ = profile
    return {"ping": ping, "status": get_status, "start": start, "stop": stop, "restart": restart,
            "check": check, "shutdown": shutdown, "reload": reload, "metrics": metrics}


def document(d: Daemon) -> dict[str, Any]:
    """The whole status document, as the daemon sees it (see :mod:`supervisor.status`)."""
    rows = []
    planner = d.planner
    for p in sorted(planner.profiles.values(), key=lambda q: (q.name != "default", q.name)):
        state, reason = planner.state_of(p)
        c = p.child
        discarded = ("this run's output is discarded: the log file system was full when it started"
                     if c is not None and c.output_discarded else None)
        rows.append(status.make_row(
            p.name, p.home, d.cpu_percent(c.ident) if c is not None else None,
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
            file_problems=list(p.facts.problems) if p.facts else [],
            log_problem=p.extra.get("log_problem") or discarded,
            down=p.down,
            start_problem=p.last_start_problem,
        ))
    return {
        "root": str(d.root),
        "supervisor": {
            "pid": os.getpid(),
            "running": True,
            "ready": d.ready,
            "config_problem": d.config_problem,
            "state_problem": d.state_problem,
            "command": d.command,
            "command_error": d.command_error,
            "cgroups": _cgroups(d),
        },
        "profiles": rows,
    }


def _cgroups(d: Daemon) -> dict[str, Any] | None:
    det = d.domains.cgroups
    if det is None:
        return None
    return {"usable": det.usable, "via": det.via, "base": det.base, "controllers": sorted(det.controllers),
            "kill": det.kill, "problems": list(det.problems)}
