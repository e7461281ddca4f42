"""Doctor checks of the failure and trust domains: what the kernel offers for isolation and limits,
and settings that would make them misfire (a ``hung_after`` healthy gateways cannot meet, memory
nearly spent by profiles that have no ``memory_max``)."""

from __future__ import annotations

import os

from profiles.upstream.process import HEARTBEAT_INTERVAL_S
from supervisor.control.client import Client, ControlError, DaemonNotAnswering, DaemonNotRunning
from supervisor.daemon.domains import gateway_plan
from supervisor.doctor.scan import Scan
from supervisor.isolation import install, ownership
from supervisor.isolation.install import resolve_user
from supervisor.isolation.probing import Probe, best_mechanism, doctor_lines, probe, service_sockets
from supervisor.kanban.dispatch import kanban_findings
from supervisor.layout import Layout
from supervisor.limits import detect_only
from supervisor.limits.cgroup import doctor_findings, memory_pressure_findings
from supervisor.limits.procfs import host_memory_total
from supervisor.plan.verdict import ERROR, INFO, WARNING
from supervisor.processes.childspec import child_env
from supervisor.settings import default

_LEVEL = {"ok": INFO, "info": INFO, "warning": WARNING}


def hung_after_warning(hung_after: float | None, heartbeat_period: float) -> str | None:
    """A ``hung_after`` that healthy gateways cannot meet.

    Not an error, because test gateways beat faster than upstream's fixed 30 s; against the real
    gateway anything under one period plus a margin kills healthy gateways between two beats.
    """
    if hung_after is None or hung_after >= heartbeat_period + 5:
        return None
    return (
        f"hung_after {hung_after:g}s is shorter than the gateway's {heartbeat_period:g}s heartbeat period "
        f"plus a margin: healthy gateways would be killed between two beats (use at least "
        f"{heartbeat_period * 2:g}, default {default('hung_after'):g})"
    )


def check_isolation(scan: Scan) -> None:
    """What confinement each profile gets here; a warning only matters when some profile wants it."""
    if scan.config is None:
        return
    modes = {p.name: scan.config.isolation_for(p.name).mode for p in scan.profiles}
    wanted = [n for n, m in modes.items() if m != "off"]
    p = probe()
    best = best_mechanism(p)
    for level, text in doctor_lines(p):
        severity = _LEVEL.get(level, INFO) if wanted else INFO
        scan.add(severity, f"isolation_{level}" if level != "ok" else "isolation_available", None, text,
                 "see docs/isolation.md for what each mechanism hides"
                 if level != "ok" else "nothing to do")
    if best == "off":
        for name in sorted(n for n, m in modes.items() if m == "required"):
            scan.add(ERROR, "isolation_unavailable", name,
                     f"profile {name!r} requires isolation, and this machine offers no mechanism: hermesd "
                     "holds it (isolation_unavailable)",
                     "enable Landlock or mount namespaces (see the isolation lines above), or set isolation: auto")
    _check_accounts(scan)
    if wanted and best != "off":
        _check_walls(scan, p, wanted)
    off = sorted(n for n, m in modes.items() if m == "off")
    if off:
        scan.add(WARNING, "isolation_off", None,
                 f"isolation is off for {', '.join(repr(n) for n in off)}: their gateways and every command their "
                 "agents run can read the other profiles' tokens and signal their gateways",
                 "remove isolation: off from hermesd.yaml (auto is the default)")


def _check_walls(scan: Scan, facts: Probe, wanted: list[str]) -> None:
    """What each confined profile may still change or reach, in plain words: its ``writable``
    paths (or why they are refused), being root without an account, and the service sockets
    Landlock cannot close (they run commands for whoever connects, outside every wall)."""
    assert scan.config is not None
    homes = {p.name: p.home for p in scan.profiles}
    layout = Layout(scan.root)
    install_paths = tuple(install.discover_install_paths(scan.command)) if scan.command else ()
    as_root = []
    for name in wanted:
        settings = scan.config.isolation_for(name)
        env = child_env(scan.env, root=scan.root, profile=name, home=homes[name],
                        extra=scan.config.child_environment(name))
        plan = gateway_plan(layout, name, homes[name], env, probe=facts, isolation=settings,
                            other_homes=tuple(h for n, h in homes.items() if n != name), install_paths=install_paths)
        if isinstance(plan, str):
            continue  # an unknown account: _check_accounts says so
        if not plan.runnable and plan.reason.startswith("isolation.writable"):
            scan.add(ERROR, "isolation_writable_refused", name, f"profile {name!r}: {plan.reason}: hermesd holds it"
                     " (isolation_unavailable)", f"change profiles.{name}.isolation.writable (or the top level's)"
                     " in hermesd.yaml")
            continue
        if settings.writable:
            scan.add(INFO, "isolation_writable", name,
                     f"profile {name!r} may change {', '.join(settings.writable)} (isolation.writable): whatever later"
                     " runs code from there (a project's scripts, hooks, build files) runs what this profile put there",
                     "list only folders whose code you read before you run it")
        if plan.user is None and facts.is_root:
            as_root.append(name)
    sockets = service_sockets()
    here = f" (here: {', '.join(sockets)})" if sockets else ""
    if as_root:  # a deployment choice, stated: hermesd's own root line explains the remedy
        scan.add(INFO, "isolation_root_without_user", None,
                 f"{', '.join(repr(n) for n in as_root)} run as root (no isolation.user): their writes are walled, but"
                 f" root's services (systemd, D-Bus, a container engine) obey them through their sockets{here}, and"
                 " they can read every account's files outside the hidden folders",
                 "give each an account of its own: isolation: {user: NAME}, then hermesd isolate-user PROFILE NAME")
    elif sockets and not facts.is_root:
        scan.add(WARNING, "isolation_service_sockets", None,
                 f"confined profiles run as hermesd's account, which can connect to {', '.join(sockets)}: Landlock"
                 " cannot stop a connect() by path, and these services run commands for whoever connects"
                 " (systemd-run --user, docker run), outside any confinement",
                 "run hermesd as root and give the profiles accounts of their own (isolation.user), or stop the"
                 " service (for the user's systemd: no lingering session for hermesd's account)")


def _check_accounts(scan: Scan) -> None:
    """A profile run as its own account (``isolation.user``) whose home that account cannot use:
    the daemon holds it; say so, with the command that gives the home to the account."""
    assert scan.config is not None
    if os.geteuid() != 0:
        return
    for prof in scan.profiles:
        name = scan.config.isolation_for(prof.name).user
        if not name:
            continue
        try:
            account = resolve_user(name)
        except (KeyError, ValueError, OSError):
            scan.add(ERROR, "isolation_user_unknown", prof.name,
                     f"profile {prof.name!r} is to run as account {name!r}, which does not exist here: hermesd "
                     "holds it (isolation_unavailable)", f"create the account (useradd --system {name}) or change "
                     f"profiles.{prof.name}.isolation.user")
            continue
        trouble = ownership.problems(prof.home, account)
        if trouble:
            fixable = any(t.startswith(str(prof.home)) for t in trouble)
            scan.add(ERROR, "isolation_user_cannot_use_home", prof.name,
                     f"profile {prof.name!r} runs as {account.name}: " + "; ".join(trouble)
                     + ": hermesd holds it (isolation_unavailable)",
                     f"{ownership.fix_command(prof.name, account, scan.root)} (shows what it changes, asks first)"
                     if fixable else "move the root where every profile's account can reach it")


def check_limits(scan: Scan) -> None:
    """cgroup v2 delegation (or why limits are enforced by watching), and ``hung_after`` sanity."""
    if scan.config is None:
        return
    limits = {p.name: scan.config.limits_for(p.name) for p in scan.profiles}
    configured = any(not lim.empty for lim in limits.values())
    for f in _cgroup_findings(str(scan.root), configured):
        scan.add(f.severity, f.code, None, f.message, f.fix or "nothing to do")
    for prof in scan.profiles:
        warning = hung_after_warning(scan.config.hung_for(prof.name).hung_after, HEARTBEAT_INTERVAL_S)
        if warning:
            scan.add(WARNING, "hung_after_too_short", prof.name, warning,
                     f"raise hung_after for {prof.name!r} in hermesd.yaml (or set it to null to turn it off)")
    usage = _tree_memory(scan)
    if usage:
        for f in memory_pressure_findings(usage, limits, host_memory_total()):
            scan.add(f.severity, f.code, None, f.message, f.fix or "")


def _cgroup_findings(root: str, configured: bool) -> list:
    try:
        return doctor_findings(detect_only(root), limits_configured=configured)
    except OSError:
        return []


def _tree_memory(scan: Scan) -> dict[str, int]:
    """Each running profile's tree memory, from the daemon when it answers (doctor never measures
    trees itself: the daemon's figure is the one its limits act on)."""
    try:
        reply = Client(Layout(scan.root)).call("status", wait=2.0)
    except (DaemonNotRunning, DaemonNotAnswering, ControlError, OSError):
        return {}
    document = reply.get("status")
    rows = document.get("profiles") if isinstance(document, dict) else None
    out: dict[str, int] = {}
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and isinstance(row.get("memory_bytes"), int) and isinstance(row.get("name"), str):
            out[row["name"]] = row["memory_bytes"]
    return out


def check_kanban(scan: Scan) -> None:
    """Who dispatches the shared kanban board, against hermesd.yaml's choice (read, never locked)."""
    if scan.config is None:
        return
    for severity, code, profile, message, fix in kanban_findings(scan.root, scan.config):
        scan.add(severity, code, profile, message, fix)
