"""What the world says about a gateway's end, read once for the planner's ``child_exited``.

The exit status alone is not the story (:func:`supervisor.plan.policy.classify_exit`): the
gateway's own state file says whether it asked for a restart or failed at start-up (only when it
names this very process), the confinement shim leaves one line in the log when it could not apply
the plan, and an exit 75 before the gateway ever ran means another gateway serves the profile.

That last one is upstream's "attach" on the multiplex-default line: a gateway that finds another
live gateway serving its profile (or an owner of the host lock whose served set it cannot learn)
exits 75 at once. That is no restart request, and the hold it ends in must name the other gateway
(:func:`who_serves`): upstream records the host gateway in ``host-gateway.json`` beside the
credential locks, and the child's own last words say the rest.

All of it is written by gateways, so it is read bounded and every string is escaped on its way to a
log or a terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from profiles.printable import printable
from profiles.safeio import Beneath
from profiles.upstream import files as gf
from profiles.upstream.multiplex import HOST_RECORD
from profiles.upstream.process import Exit, GatewayState, lock_dir, proc_start_time
from supervisor.isolation.shim_argv import EXIT_CANNOT_CONFINE
from supervisor.layout import Layout
from supervisor.plan.model import Ident
from supervisor.plan.policy import ExitKind, describe_exit
from supervisor.processes import logs

# What a gateway says before an attach exit (upstream's host_attach.py messages, 0.22.2 and main).
_CLUES = (b"already owns this host", b"already serves profile", b"has not published its served set",
          b"still serves profile")
# The kernel's own verdict on a tree it killed in the profile's cgroup.
_KILLED = {ExitKind.MEMORY_LIMIT: "the kernel's OOM killer ended the tree",
           ExitKind.TASKS_LIMIT: "the tree hit tasks_max"}


class ExitReport(NamedTuple):
    """The arguments of :meth:`supervisor.plan.planner.Planner.child_exited` beyond the status."""

    gateway_state: str | None  # its state file's word, when the file names this process
    restart_requested: bool
    stated: bool  # its state file names this process at all
    detail: str  # why the kernel killed it, or who serves the profile after an "attach"
    unconfined: str | None  # the confinement shim's reason: the gateway never ran
    startup_watchdog: bool  # upstream's start-up watchdog left its record for this process
    replaced_by: int | None = None  # the gateway that stopped it to serve the profile itself


def read_exit(env: Mapping[str, str], layout: Layout, name: str, home: Path | None, ident: Ident, *,
              code: int | None, cause: ExitKind | None, since: float, requested: bool = False) -> ExitReport:
    """Read what the gateway ``ident`` of ``name`` (``home``: None when the profile is gone) left behind.

    ``cause``: the kernel's verdict from the profile's cgroup (an OOM kill, the pids limit); ``since``:
    when it was started (epoch seconds), so an old watchdog record of a recycled PID is not taken for its;
    ``requested``: hermesd asked for this end. A clean stop it did not ask for is upstream's own
    stop; when a gateway hermesd did not start serves the profile at that moment, it is the one
    that stopped ours to take its place (``gateway run --replace`` SIGTERMs the running gateway and
    waits for it; ``gateway restart`` stops it and runs one in its own process).
    """
    gstate = gf.read_gateway_state(home) if home is not None else {}
    ours = gstate.get("pid") == ident.pid
    state = gstate.get("gateway_state") if ours and isinstance(gstate.get("gateway_state"), str) else None
    replaced_by = None
    if not requested and home is not None and code in (0, None) and state == GatewayState.STOPPED:
        try:
            other = gf.live_gateway(home)  # gateway.pid still names ours (gone): one pass over /proc
        except OSError:  # /proc unreadable now (out of descriptors): an outside stop, as far as is known
            other = None
        replaced_by = other.pid if other is not None and other.pid != ident.pid else None
    unconfined = None
    if code == EXIT_CANNOT_CONFINE and not ours and home is not None:
        unconfined = _shim_reason(layout, name) or "the confinement could not be applied"
    fired = None
    if code in (Exit.RESTART, None) and cause is None and home is not None:
        fired = gf.startup_watchdog_fired(home, ident.pid, since)
    if cause is not None:
        detail = _KILLED.get(cause, "")
    elif fired is not None:
        detail = _watchdog_detail(fired, home)
    elif code == Exit.RESTART and not ours:
        detail = who_serves(env, home or layout.root, layout.beneath(layout.child_log(name)))
    else:
        detail = ""
    return ExitReport(state, bool(gstate.get("restart_requested")) if ours else False, ours, detail, unconfined,
                      fired is not None, replaced_by)


def _watchdog_detail(record: Mapping[str, object], home: Path | None) -> str:
    """One line: how long the start-up ran and where upstream put every thread's stack."""
    def secs(key: str) -> str:
        value = record.get(key)
        return f"{value:g} s" if isinstance(value, int | float) and not isinstance(value, bool) else "?"

    where = (home / gf.STARTUP_WATCHDOG_LOG) if home is not None else gf.STARTUP_WATCHDOG_LOG
    return (f"no live event loop after {secs('elapsed_s')} (timeout {secs('timeout_s')}, "
            f"{gf.STARTUP_WATCHDOG_ENV}); every thread's stack is in {printable(str(where), 300)}")


def note(layout: Layout, name: str, pid: int, code: int | None, sig: int | None, kind: str) -> None:
    """hermesd's line in the child's log after its end: how it ended and how the planner classified it."""
    logs.note(layout.beneath(layout.child_log(name)), f"hermesd: PID {pid} {describe_exit(code, sig, kind)} ({kind})")


def who_serves(env: Mapping[str, str], home: Path, child_log: Beneath | Path) -> str:
    """One line: the live host gateway (PID, home, profiles) and the child's own reason, as far as known."""
    parts = []
    record = gf.read_json(Path(lock_dir(env)) / HOST_RECORD)
    if record is not None:
        pid = record.get("pid")
        alive = isinstance(pid, int) and not isinstance(pid, bool) and proc_start_time(pid) is not None
        served = record.get("profiles")
        names = ", ".join(printable(str(s), 64) for s in served[:20]) if isinstance(served, list) else "?"
        where = printable(str(record.get("home") or "?"), 200)
        parts.append(f"upstream's host gateway record names PID {pid} ({'alive' if alive else 'not running'}), "
                     f"launched from {where}, serving {names}")
    for line in reversed(logs.tail_lines(child_log, 30)):
        if any(clue in line for clue in _CLUES):
            parts.append("the gateway said: " + printable(line.decode("utf-8", "replace").strip(), 200))
            break
    return "; ".join(parts) if parts else f"no host gateway record found for {home}"


def _shim_reason(layout: Layout, name: str) -> str | None:
    """The confinement shim's one line of explanation, from the end of the child's log."""
    lines = [ln for ln in logs.tail_lines(layout.beneath(layout.child_log(name)), 5)
             if ln.startswith(b"hermesd: isolation")]
    return printable(lines[-1].decode("utf-8", "replace").strip(), 300) if lines else None
