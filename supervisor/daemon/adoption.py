"""What survives a hermesd restart: the state file it writes, and the gateways and leftovers its
predecessor left behind, found again.

Processes are the truth: every child carries ``HERMESD_ROOT``/``HERMESD_PROFILE`` in its
environment, inherited by everything it starts. A tagged session leader whose command line is a
gateway's and whose ``HERMES_HOME`` is the profile's is a gateway of ours; everything else tagged
is a leftover. The state file adds only history and which identity was hermesd's own child.

:func:`survey` reads all of it into a :class:`Survey` and changes nothing; the loop takes over
what it lists (pins each gateway, tells the planner), then :func:`kill_duplicates` and
:func:`kill_leftovers` end what must not run on.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from profiles.upstream import files as gf
from supervisor.daemon import state as state_mod
from supervisor.daemon.domains import Domains
from supervisor.hermes.codeid import CodeId
from supervisor.layout import Layout
from supervisor.plan.model import Ident
from supervisor.plan.planner import Planner
from supervisor.processes import child, identity

log = logging.getLogger("hermesd")


@dataclass(slots=True)
class Found:
    """What /proc holds for one root: verified gateways per profile, best candidate first, and every tagged PID."""

    gateways: dict[str, list[Ident]] = field(default_factory=dict)
    tagged: dict[str, list[int]] = field(default_factory=dict)


def scan(root: Path, homes: Mapping[str, Path], saved: dict[str, dict[str, Any]]) -> Found:
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


# --------------------------------------------------------------------------- what was found


class History(NamedTuple):
    """One profile's saved history, for :meth:`~supervisor.plan.planner.Planner.restore`."""

    name: str
    home: Path
    present: bool
    restarts: int
    failures: int
    last_exit: dict[str, Any] | None
    down: str | None


class Survivor(NamedTuple):
    """A verified gateway a previous hermesd started, to adopt (``duplicates``: more of the same
    profile, to kill; ``stopping``: that hermesd had begun to stop or restart it)."""

    name: str
    home: Path
    ident: Ident
    started_wall: float | None
    stopping: bool
    then_restart: bool
    code: CodeId | None
    duplicates: tuple[Ident, ...] = ()
    isolation: dict[str, Any] | None = None  # the confinement it was started under, as recorded then


class Recorded(NamedTuple):
    """The gateway the state file names for a profile: if it was not adopted, it ended while nobody watched."""

    name: str
    ident: Ident
    started_wall: float | None
    stopping: bool
    then_restart: bool


class Survey(NamedTuple):
    problem: str | None  # why the state file was ignored
    history: list[History]
    survivors: list[Survivor]
    recorded: list[Recorded]
    tagged: dict[str, list[int]]  # every tagged process, per profile
    saved: frozenset[str]  # the profiles the state file names


def survey(root: Path, layout: Layout, boot: str, homes: Mapping[str, Path]) -> Survey:
    """Read the state file and /proc (``homes``: the profiles present now). Changes nothing."""
    saved = state_mod.load(layout.beneath(layout.state), boot)
    if saved.problem:
        log.error("%s", saved.problem)
    history = []
    recorded = []
    for name, rec in saved.profiles.items():
        down = rec.get("down")
        history.append(History(name, homes.get(name, root), name in homes, state_mod.saved_int(rec, "restarts"),
                               state_mod.saved_int(rec, "failures"), state_mod.exit_record(rec.get("last_exit")),
                               down if isinstance(down, str) else None))
        pid, start, started = rec.get("pid"), rec.get("start_time"), rec.get("started_at")
        if isinstance(pid, int) and isinstance(start, int):
            recorded.append(Recorded(name, Ident(pid, start),
                                     float(started) if isinstance(started, int | float) else None,
                                     rec.get("stopping") is True, rec.get("then_restart") is True))
    found = scan(root, homes, saved.profiles)
    survivors = []
    for name, idents in found.gateways.items():
        rec = saved.profiles.get(name, {})
        main = idents[0]
        mine = (main.pid, main.start_time) == (rec.get("pid"), rec.get("start_time"))
        survivors.append(Survivor(
            name, homes.get(name) or Path(str(rec.get("home") or root)), main, identity.proc_start_wall(main.pid),
            stopping=mine and rec.get("stopping") is True, then_restart=mine and rec.get("then_restart") is True,
            code=state_mod.recorded_code(rec, main.pid, main.start_time), duplicates=tuple(idents[1:]),
            isolation=state_mod.recorded_isolation(rec, main.pid, main.start_time)))
    return Survey(saved.problem, history, survivors, recorded, found.tagged, frozenset(saved.profiles))


def kill_duplicates(survivor: Survivor) -> None:
    """More than one verified gateway of one profile: all but the adopted one go."""
    for extra in survivor.duplicates:
        fd = identity.open_pidfd(extra)
        if fd is not None:
            log.warning("profile %s: duplicate gateway PID %d; killing it", survivor.name, extra.pid)
            child.kill_group(extra, fd)
            os.close(fd)


def kill_leftovers(root: Path, salt: bytes, tagged: Mapping[str, list[int]], adopted: set[Ident]) -> None:
    """Everything tagged by this root that is not an adopted gateway or one of its descendants."""
    keep: set[int] = set()
    for ident in adopted:
        keep |= {ident.pid, *identity.descendants(ident.pid)}
    for name in tagged:
        strays = child.kill_strays(root, name, keep=keep, salt=salt)
        if strays:
            log.warning("profile %s: killed leftovers of a dead gateway: %s", name, strays)


def final_sweep(root: Path, salt: bytes, domains: Domains, reap: Callable[[], None], budget: float = 2.0) -> None:
    """Before exiting, kill every process left in a profile's (or a kanban worker's) cgroup and
    every process still tagged, with its token, by this root (``reap``: collects what was killed,
    hermesd being their subreaper).

    A gateway's last act may be a detached helper (upstream's diagnostic shell) that forks
    after the per-exit sweep looked; repeat until a pass finds nothing, within ``budget``.
    """
    deadline = time.monotonic() + budget
    while True:
        killed = domains.sweep_all()
        names = {name for _pid, name, _env in identity.find_tagged(root)}
        killed += [pid for name in names for pid in child.kill_strays(root, name, keep=set(), salt=salt)]
        reap()
        if not killed or time.monotonic() > deadline:
            if killed:
                log.warning("processes still appearing at exit: %s", killed)
            return
        log.info("killed %d leftover process(es) at exit: %s", len(killed), killed)
        time.sleep(0.02)


# --------------------------------------------------------------------------- the state file


def save(layout: Layout, boot: str, planner: Planner, now: float, dist_info: str | None,
         problem: str | None, isolation: Mapping[str, dict[str, Any]] | None = None) -> str | None:
    """Write what must survive a hermesd restart (operator stops, restart counts, our children's
    identities and the confinement each was started under, ``isolation``); returns the problem in
    force after it (``problem``: the one before), which status shows and housekeeping retries."""
    try:
        state_mod.save(layout.beneath(layout.state), boot, os.getpid(), state_mod.records(planner, isolation), now,
                       dist_info=dist_info)
    except OSError as exc:
        failed = f"cannot write {layout.state}: {exc.strerror or exc} (operator stops and restart counts " \
                 "will not survive a hermesd restart until this is fixed)"
        if failed != problem:
            log.error("%s", failed)
        return failed
    if problem and problem.startswith(f"cannot write {layout.state}"):
        log.info("%s is writable again", layout.state)
        return None
    return problem
