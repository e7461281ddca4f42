"""The daemon's answers to control requests: one small handler per verb of ``protocol.REQUESTS``.

Each handler takes the request's declared arguments, checks what only the daemon can check (the
profile exists, an event may be recorded by a command), asks the loop through :class:`Operations`
and words the reply. What a request may make the daemon do is exactly that interface: the loop
implements it, and performs every change itself. ``record`` journals a step of a fleet operation
(``hermesd upgrade``) for the command that performs it; ``restart`` and ``check`` judge the
profile's files as they are now (the loop re-reads them first), never from a stale read.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from profiles.names import no_such_profile, normalize_name
from supervisor.observe.events import CLIENT_EVENTS, DAEMON_WIDE
from supervisor.plan.verdict import Hold

Handler = Callable[..., Awaitable[dict[str, Any]]]


class Operations(Protocol):
    """What a control request may ask of the daemon."""

    @property
    def root(self) -> Path: ...

    @property
    def ready(self) -> bool: ...

    @property
    def config_problem(self) -> str | None:
        """Why the last hermesd.yaml was rejected (every profile is held while there was never a good one)."""
        ...

    def present(self) -> list[str]:
        """The profiles hermesd serves now."""
        ...

    def start_profile(self, name: str) -> str: ...

    def stop_profile(self, name: str) -> str: ...

    async def restart_profile(self, name: str, *, graceful: bool, force: bool) -> str: ...

    async def check_profile(self, name: str) -> Hold | None: ...

    def shutdown(self, *, keep_children: bool) -> None: ...

    async def reload(self) -> str | None:
        """Re-read everything; the problem with hermesd.yaml that is left, if any."""
        ...

    def status(self) -> dict[str, Any]: ...

    def metrics(self) -> str: ...

    def record(self, event: dict[str, Any]) -> None: ...


def handlers(ops: Operations, extra: dict[str, Handler]) -> dict[str, Handler]:
    """The request table (``extra``: the kanban board's verbs, :meth:`supervisor.daemon.board.Board.handlers`)."""

    def profile(name: str) -> str:
        canon = normalize_name(name)
        present = ops.present()
        if canon not in present:
            raise KeyError(str(no_such_profile(name, present)))
        return canon

    async def ping() -> dict[str, Any]:
        return {"ok": True, "pid": os.getpid(), "ready": ops.ready, "root": str(ops.root),
                "config_problem": ops.config_problem}

    async def get_status() -> dict[str, Any]:
        return {"ok": True, "status": ops.status()}

    async def start(profile: str) -> dict[str, Any]:
        return {"ok": True, "result": ops.start_profile(profile_(profile))}

    async def stop(profile: str) -> dict[str, Any]:
        return {"ok": True, "result": ops.stop_profile(profile_(profile))}

    async def restart(profile: str, graceful: bool = False, force: bool = False) -> dict[str, Any]:
        name = profile_(profile)
        result = await ops.restart_profile(name, graceful=graceful, force=force)
        refused = result.startswith("refused")
        return {"ok": not refused, "result": result, **({"error": f"{name}: {result}"} if refused else {})}

    async def check(profile: str) -> dict[str, Any]:
        hold = await ops.check_profile(profile_(profile))
        return {"ok": True, "hold": hold.to_json() if hold else None}

    async def shutdown(keep_children: bool = False) -> dict[str, Any]:
        ops.shutdown(keep_children=keep_children)
        return {"ok": True, "result": "shutting down"}

    async def reload() -> dict[str, Any]:
        return {"ok": True, "result": "reloaded", "config_problem": await ops.reload()}

    async def metrics() -> dict[str, Any]:
        return {"ok": True, "metrics": ops.metrics()}

    async def record(event: str, profile: str | None = None, fields: dict[str, Any] | None = None) -> dict[str, Any]:
        if event not in CLIENT_EVENTS:
            return {"ok": False, "error": f"record: {event[:40]!r} is not an event a command may record "
                                          f"(known: {', '.join(sorted(CLIENT_EVENTS))})"}
        if (event in DAEMON_WIDE) != (profile is None):
            need = "takes no" if event in DAEMON_WIDE else "needs a"
            return {"ok": False, "error": f"record: {event} {need} profile"}
        name = profile_(profile) if profile is not None else None
        extra_fields = {str(k): v for k, v in (fields or {}).items()
                        if k not in ("type", "profile", "ts", "seq", "daemon")}
        ops.record({"type": event, "profile": name, **extra_fields})
        return {"ok": True}

    profile_ = profile
    return {"ping": ping, "status": get_status, "start": start, "stop": stop, "restart": restart,
            "check": check, "shutdown": shutdown, "reload": reload, "metrics": metrics, "record": record, **extra}
