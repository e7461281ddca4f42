"""Starting one gateway: its command line and environment, its log, its confinement and cgroup, and
the pidfd that pins it, as one step with one outcome.

The planner decided to spawn; this performs it and says how it went (:class:`Launched`, or
:class:`NotStarted`: refused as configured, a hold, or failed for now, a backoff). It changes
nothing of the loop's: the loop records the new child and tells the planner.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from profiles.safeio import Beneath
from supervisor.daemon.board import Extras
from supervisor.daemon.domains import Domains, Prepared
from supervisor.daemon.effective import InForce
from supervisor.daemon.selfcheck import fd_budget_problem
from supervisor.hermes import codeid
from supervisor.hermes.codeid import CodeId
from supervisor.layout import Layout
from supervisor.plan.model import Ident
from supervisor.processes import child, childspec, logs

log = logging.getLogger("hermesd")

LOG_SPACE_MIN = 64 * 1024  # below this, a child's log counts as full


class Launched(NamedTuple):
    ident: Ident
    fd: int  # its pidfd
    argv0: str
    started_wall: float  # taken before the spawn: the child's files are all younger
    output_discarded: bool  # its log's file system was full: its output goes nowhere this run
    code: CodeId | None  # the hermes-agent code installed when it started


class NotStarted(NamedTuple):
    """Why the gateway was not started: ``refused`` (True) when it may not be started as configured
    (its confinement cannot be set up: a hold), else it could not be started now (no command, out of
    descriptors, exec failed…: a backoff)."""

    reason: str
    refused: bool = False


def _now(step: Callable[[], object]) -> None:
    step()


class Launcher:
    """Starts gateways for one root (see the module docstring)."""

    def __init__(self, root: Path, layout: Layout, env: Mapping[str, str], domains: Domains,
                 wall: Callable[[], float]) -> None:
        self.root = root
        self.layout = layout
        self.env = env
        self.domains = domains
        self.wall = wall

    def launch(self, name: str, home: Path, in_force: InForce, *, salt: bytes, others: tuple[Path, ...],
               kanban: Extras, later: Callable[[Callable[[], object]], None] = _now) -> Launched | NotStarted:
        """Start ``name``'s gateway (``others``: the other profiles' homes, hidden from it). ``later``
        takes hermesd's "started" line for the child's log, so that the caller can write it after
        lines it still holds back (the previous run's exit, written after this spawn)."""
        problem = fd_budget_problem()
        if problem is not None or in_force.command is None:
            return NotStarted(problem or in_force.command_error or "no gateway command")
        settings = in_force.of(name)
        argv = childspec.child_argv(list(in_force.command), name, in_force.contract, hidden=settings.hidden)
        env = childspec.child_env(self.env, root=self.root, profile=name, home=home,
                                  extra={**settings.environment, **kanban.env}, salt=salt, scrub=in_force.scrub)
        logfile: Beneath | Path = self.layout.beneath(self.layout.child_log(name))
        free = logs.free_bytes(self.layout.logs)
        if free is not None and free < LOG_SPACE_MIN:
            # A gateway dies at its first write to a full log; discarding its output keeps it up.
            log.error("profile %s: log file system full (%d bytes free): discarding this run's output", name, free)
            logfile = Path(os.devnull)
        prepared = self.domains.prepare(name, home, argv, env, isolation=settings.isolation, limits=settings.limits,
                                        other_homes=others, grants=kanban.grants, placeholders=kanban.placeholders)
        if not isinstance(prepared, Prepared):
            return NotStarted(prepared, refused=True)
        before = self.wall()
        try:
            ident = child.spawn(prepared.argv, env, logfile)
            self.domains.attach(name, ident, settings.limits)
            fd = os.pidfd_open(ident.pid)
        except child.SpawnError as exc:
            return NotStarted(str(exc))
        except OSError as exc:  # no pidfd (out of descriptors): never run a child we cannot pin
            child.reap_now(ident.pid)
            return NotStarted(f"cannot pin the new gateway: {exc.strerror or exc}")
        started = f"hermesd: started {' '.join(argv)} as PID {ident.pid} (isolation: {prepared.plan.summary()})"
        later(lambda: logs.note(logfile, started))
        # The code on disk at the spawn, not at the last probe: a pip install the daemon was not
        # told about is still recorded right.
        found = codeid.installed_now(in_force.release.dist_info)
        return Launched(ident, fd, argv[0], before, logfile == Path(os.devnull), found.code if found else None)
