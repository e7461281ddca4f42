"""How the planner puts its decisions into words: the state and reason ``status`` shows for a
profile, and why hermesd stops or restarts a gateway (the reason its exit event and log line carry).

Pure functions of the planner's data, so status, events and logs say the same thing.
"""

from __future__ import annotations

from profiles.snapshot import changed_files
from supervisor.plan.model import Profile


def state_of(p: Profile, *, enabled: bool, shutting_down: bool) -> tuple[str, str | None]:
    """``(state, reason)`` as ``status`` shows it."""
    c = p.child
    if c is not None:
        if c.stop_requested:
            return "stopping", "restarting" if c.then_restart else None
        return ("running", None) if c.ready else ("starting", None)
    if p.spawning:
        return "starting", None
    if p.retry_at is not None:
        return "backoff", (p.last_exit or {}).get("reason") or "restarting"
    if p.hold is not None:
        return "held", f"{p.hold.kind.value}: {p.hold.message}"
    if p.queued:
        return "starting", "waiting for a start-up slot (other gateways are starting)"
    foreign = f"; a gateway hermesd did not start (PID {p.foreign_pid}) runs it" if p.foreign_pid else ""
    return "stopped", _not_wanted(p, enabled=enabled, shutting_down=shutting_down) or (p.down or "stopped") + foreign


def doing(p: Profile) -> str:
    """One word for what ``p``'s gateway process is doing (a conflict it wins names it by this word):
    ``starting``, ``running``, ``stopping`` or ``restarting``; ``running`` when it has none."""
    c = p.child
    if c is None or (c.ready and not c.stop_requested):
        return "running"
    if c.stop_requested:
        return "restarting" if c.then_restart else "stopping"
    return "starting"


def why_down(p: Profile, *, enabled: bool, shutting_down: bool) -> str:
    """Why a running gateway is being stopped for good."""
    return _not_wanted(p, enabled=enabled, shutting_down=shutting_down) or p.down or "stopped by hermesd"


def _not_wanted(p: Profile, *, enabled: bool, shutting_down: bool) -> str | None:
    if not p.present:
        return "profile folder removed"
    if not enabled:
        return "disabled in hermesd.yaml"
    if shutting_down:
        return "hermesd is shutting down"
    return None


def what_changed(spec_then: str, spec_now: str) -> str:
    """Which part of what a spawn uses changed: the profile's files, its settings in hermesd.yaml, or
    both (a spec is ``<files digest>/<settings digest>``, see :meth:`Planner.spec`)."""
    files_then, _, settings_then = spec_then.partition("/")
    files_now, _, settings_now = spec_now.partition("/")
    which = changed_files(files_then, files_now) if files_then != files_now else []
    files = "its files" if not which else "its " + (f"{', '.join(which[:-1])} and {which[-1]}" if len(which) > 1
                                                    else which[0])
    parts = [what for what, changed in ((files, files_then != files_now),
                                        ("its settings in hermesd.yaml", settings_then != settings_now)) if changed]
    return " and ".join(parts or ["its effective configuration"]) + " changed"
