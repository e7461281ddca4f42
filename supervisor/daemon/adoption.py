"""What survives a hermesd restart: the state file it writes, and the gateways and leftovers its
predecessor left behind, found again.

Processes are the truth: every child carries ``HERMESD_ROOT``/``HERMESD_PROFILE`` in its
environment, inherited by everything it starts. A tagged session leader whose command line is a
gateway's and whose ``HERMES_HOME`` is the profile's is a gateway of ours; everything else tagged
is a leftover. The state file adds only history and which identity was hermesd's own child.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profiles.upstream import files as gf
from supervisor import child, identity
from supervisor import state as state_mod
from supervisor.plan.model import Ident

if TYPE_CHECKING:
    from supervisor.daemon.loop import Daemon

log = logging.getLogger("hermesd")


@dataclass(slots=True)
class Found:
    """What /proc holds for one root: verified gateways per profile, best candidate first, and every tagged PID."""

    gateways: dict[str, list[Ident]] = field(default_factory=dict)
    tagged: dict[str, list[int]] = field(default_factory=dict)


def scan(root: Path, homes: dict[str, Path], saved: dict[str, dict[str, Any]]) -> Found:
    """Every tagged process of ``root``; per profile, its verified gateways ranked for adoption.

    Rank: the identity the previous hermesd recorded, then the PID in the profile's gateway.pid,
    then the youngest. A saved profile whose folder is gone is still found (by its saved home), so
    its gateway is adopted and then stopped rather than left running.
    """
    found = Found()
    for pid, name, env in identity.find_tagged(root):
        found.tagged.setdefault(name, []).append(pid)
        if identity.session_id(pid) != pid or not env.get("HERMES_HOME"):
            continue
        if not identity.is_gateway_cmdline(identity.proc_cmdline(pid)):
            continue
        home = homes.get(name) or Path(str(saved.get(name, {}).get("home") or ""))
        start = identity.proc_start_time(pid)
        if start is None or not str(home) or not identity.verify(Ident(pid, start), home=home, root=root, profile=name):
            continue
        found.gateways.setdefault(name, []).append(Ident(pid, start))
    for name, idents in found.gateways.items():
        rec = saved.get(name, {})
        home = homes.get(name) or Path(str(rec.get("home") or ""))
        recorded = gf.read_pid_record(home)
        saved_ident = (rec.get("pid"), rec.get("start_time"))
        idents.sort(key=lambda i: (
            (i.pid, i.start_time) == saved_ident,
            recorded is not None and recorded.pid == i.pid,
            -i.start_time,
        ), reverse=True)
    return found


# --------------------------------------------------------------------------- taking over


def adopt_existing(d: Daemon) -> None:
    """Take over every gateway a previous hermesd of this root left running.

    Also finishes what that hermesd left half done: a stop or restart it had begun is issued
    again, a gateway that ended while nobody watched is accounted for like any exit, and
    leftovers of dead gateways are killed.
    """
    saved = state_mod.load(d.layout.beneath(d.layout.state), d.boot)
    d.state_problem = saved.problem
    if saved.problem:
        log.error("%s", saved.problem)
    homes = {n: p.home for n, p in d.planner.profiles.items() if p.present}
    for name, rec in saved.profiles.items():
        down = rec.get("down")
        d.planner.restore(
            name, homes.get(name, d.root), present=name in homes,
            restarts=state_mod.saved_int(rec, "restarts"), failures=state_mod.saved_int(rec, "failures"),
            last_exit=state_mod.exit_record(rec.get("last_exit")), down=down if isinstance(down, str) else None,
        )
    found = scan(d.root, homes, saved.profiles)
    for name, idents in found.gateways.items():
        rec = saved.profiles.get(name, {})
        main, extras = idents[0], idents[1:]
        fd = identity.open_pidfd(main)
        if fd is None:
            continue
        d.pidfds[main] = fd
        d.adopted[main] = name
        d.loop().add_reader(fd, d.handle_adopted_exit, name, main)
        mine = (main.pid, main.start_time) == (rec.get("pid"), rec.get("start_time"))
        home = homes.get(name) or Path(str(rec.get("home") or d.root))
        d.domains.adopt(name, main)
        d.guard.start(name)
        d.execute(d.planner.adopt(
            name, home, main, identity.proc_start_wall(main.pid) or d.wall(),
            stopping=mine and rec.get("stopping") is True, then_restart=mine and rec.get("then_restart") is True,
            code=state_mod.recorded_code(rec, main.pid, main.start_time),
        ))
        for extra in extras:
            xfd = identity.open_pidfd(extra)
            if xfd is not None:
                log.warning("profile %s: duplicate gateway PID %d; killing it", name, extra.pid)
                child.kill_group(extra, xfd)
                os.close(xfd)
    for name, rec in saved.profiles.items():
        p = d.planner.profiles.get(name)
        pid, start = rec.get("pid"), rec.get("start_time")
        if p is not None and p.child is None and isinstance(pid, int) and isinstance(start, int):
            started = rec.get("started_at")
            d.execute(d.planner.ended_while_down(
                name, Ident(pid, start), float(started) if isinstance(started, int | float) else d.wall(),
                stopping=rec.get("stopping") is True, then_restart=rec.get("then_restart") is True,
            ))
    # A profile whose gateway did not survive hermesd's absence: what is left in its cgroup is a
    # dead gateway's (membership is the kernel's; an adopted gateway's cgroup is left alone).
    for name in set(d.planner.profiles) | set(saved.profiles):
        if name not in d.adopted.values():
            d.domains.sweep(name)
    keep: set[int] = set()
    for ident in d.adopted:
        keep |= {ident.pid, *identity.descendants(ident.pid)}
    for name in found.tagged:
        strays = child.kill_strays(d.root, name, keep=keep, salt=d.salt)
        if strays:
            log.warning("profile %s: killed leftovers of a dead gateway: %s", name, strays)

def final_sweep(d: Daemon, budget: float = 2.0) -> None:
    """Before exiting, kill every process left in a profile's (or a kanban worker's) cgroup and
    every process still tagged, with its token, by this root.

    A gateway's last act may be a detached helper (upstream's diagnostic shell) that forks
    after the per-exit sweep looked; repeat until a pass finds nothing, within ``budget``.
    """
    deadline = time.monotonic() + budget
    while True:
        killed = d.domains.sweep_all()
        names = {name for _pid, name, _env in identity.find_tagged(d.root)}
        killed += [pid for name in names for pid in child.kill_strays(d.root, name, keep=set(), salt=d.salt)]
        d.handle_sigchld()  # reap what we just killed (we are their subreaper)
        if not killed or time.monotonic() > deadline:
            if killed:
                log.warning("processes still appearing at exit: %s", killed)
            return
        log.info("killed %d leftover process(es) at exit: %s", len(killed), killed)
        time.sleep(0.02)


def save_state(d: Daemon) -> None:
    """Write what must survive a hermesd restart (operator stops, restart counts, our children's
    identities); a failure is kept as ``state_problem`` for status and retried by housekeeping."""
    from supervisor.daemon.requests import summary

    if d.ready and d.notifier.enabled:
        d.notifier.status(summary(d))  # repeats are dropped by the notifier
    try:
        state_mod.save(d.layout.beneath(d.layout.state), d.boot, os.getpid(), state_mod.records(d.planner), d.wall(),
                       dist_info=getattr(d.domains.facts, "dist_info", None))
    except OSError as exc:
        problem = f"cannot write {d.layout.state}: {exc.strerror or exc} (operator stops and restart counts " \
                  "will not survive a hermesd restart until this is fixed)"
        if problem != d.state_problem:
            log.error("%s", problem)
        d.state_problem = problem
        return
    if d.state_problem and d.state_problem.startswith(f"cannot write {d.layout.state}"):
        log.info("%s is writable again", d.layout.state)
        d.state_problem = None
