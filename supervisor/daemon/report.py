"""The daemon's status document (``hermesd status``, the metrics, the service manager's status line).

One row per profile as :mod:`supervisor.daemon.status_rows` shapes it, from the planner's view (state, reason,
holds, exits), the domains' (memory, tasks, limits, isolation), what each child serves, whether its
API server answers, and what is missing (log problems, libraries), plus the daemon's own state. It reads all of
these and changes none of them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from profiles.upstream import files as gf
from profiles.upstream.releases import newer_than_known_note
from supervisor.daemon import status_rows
from supervisor.daemon.apiwatch import ApiWatch
from supervisor.daemon.domains import Domains
from supervisor.daemon.effective import InForce
from supervisor.daemon.interpreter import Requirements
from supervisor.daemon.selfcheck import SelfCheck
from supervisor.daemon.serving import Serving
from supervisor.hermes import codeid
from supervisor.hermes.codeid import Installed
from supervisor.kanban.running import Snapshot
from supervisor.plan.model import Ident, Profile
from supervisor.plan.planner import Planner
from supervisor.processes import identity
from supervisor.processes.childspec import unmodelled_note


class Report:
    """Builds the status document of one daemon (see the module docstring).

    ``log_problems``: the loop's note per profile of why its log cannot be written, read when a
    document is made.
    """

    def __init__(self, root: Path, planner: Planner, domains: Domains, serving: Serving, apiwatch: ApiWatch,
                 requirements: Requirements, own: SelfCheck, log_problems: Mapping[str, str | None],
                 wall: Callable[[], float]) -> None:
        self.root = root
        self.planner = planner
        self.domains = domains
        self.serving = serving
        self.apiwatch = apiwatch
        self.requirements = requirements
        self.own = own
        self.log_problems = log_problems
        self.wall = wall
        self._cpu: dict[Ident, tuple[float, float]] = {}  # per child: (when, CPU seconds) at the last document

    def document(self, *, ready: bool, in_force: InForce, config_problem: str | None,
                 state_problem: str | None) -> dict[str, Any]:
        """The whole status document, as the daemon sees it (see :mod:`supervisor.daemon.status_rows`)."""
        planner = self.planner
        installed = codeid.installed_now(in_force.release.dist_info)
        now = self.wall()
        rows = []
        kanban: dict[Path, Snapshot] = {}
        for p in sorted(planner.profiles.values(), key=lambda q: (q.name != "default", q.name)):
            state, reason = planner.state_of(p)
            c = p.child
            discarded = ("this run's output is discarded: the log file system was full when it started"
                         if c is not None and c.output_discarded else None)
            # each read once per row: the state file (code and live fields), the process's CPU and RSS
            gstate = gf.read_gateway_state(p.home) if c is not None else {}
            usage = identity.proc_usage(c.ident.pid) if c is not None else None
            rows.append(status_rows.make_row(
                p.name, p.home, self._cpu_percent(c.ident, usage) if c is not None else None,
                gstate=gstate, usage=usage, kanban=kanban,
                **self.domains.fields(p.name, in_force.of(p.name).limits),
                requirements_missing=self.requirements.of(p.name),
                state=state,
                reason=reason,
                pid=c.ident.pid if c else None,
                adopted=(not c.own) if c else False,
                started_at=c.started_wall if c else None,
                uptime_s=round(now - c.started_wall, 1) if c else None,
                restarts=p.restarts,
                last_exit=p.last_exit,
                next_retry_at=p.retry_at_wall,
                should_run=planner.wants(p),
                hold=p.hold.to_json() if p.hold else None,
                pending=p.pending.to_json() if p.pending else None,
                file_problems=list(p.facts.problems) if p.facts else [],
                log_problem=self.log_problems.get(p.name) or discarded,
                down=p.down,
                start_problem=p.last_start_problem,
                code=_code(p, installed, gstate),
                api=self.apiwatch.api(p.name, c) if c is not None else None,
                **self.serving.fields(p.name, c.ident.pid) if c is not None else {},
            ))
        live = {p.child.ident for p in planner.profiles.values() if p.child is not None}
        self._cpu = {i: v for i, v in self._cpu.items() if i in live}
        contract = in_force.contract
        return {
            "root": str(self.root),
            "supervisor": {
                "pid": os.getpid(),
                "running": True,
                "ready": ready,
                "config_problem": config_problem,
                "state_problem": state_problem,
                # hermesd's own limits or scheduling changed by another process and not undone, a
                # starved descriptor budget (supervisor.daemon.selfcheck); and the latest undone changes
                "self_problem": "; ".join(self.own.problems) or None,
                "self_restored": list(self.own.restored),
                "command": list(in_force.command) if in_force.command is not None else None,
                "command_error": in_force.command_error,
                # The hermes-agent release the gateway command runs, as the daemon last read it.
                "hermes_release": in_force.release.version,
                # The hermes-agent code on disk now (supervisor.hermes.codeid): each row's "code" compares with it.
                "installed_code": installed.code.to_json() if installed is not None else None,
                "release_problem": in_force.release.problem,
                # The measured release whose contract hermesd follows, its line, and why when no row names it.
                "release_contract": contract.release if contract is not None else None,
                "release_line": contract.line.value if contract is not None else None,
                "release_note": (newer_than_known_note(in_force.release.version or "?", contract)
                                 if contract is not None and not contract.exact else None),
                # Platforms the release ships that hermesd has no rules for (their conflicts are not checked).
                "unmodelled_platforms": sorted(in_force.unmodelled),
                "platforms_note": unmodelled_note(in_force.release.version, in_force.unmodelled),
                "rewrite_note": self.serving.rewrite_note,
                "cgroups": self._cgroups(),
            },
            "profiles": rows,
        }

    def _cpu_percent(self, ident: Ident, usage: tuple[float, int] | None) -> float | None:
        """CPU use since the previous status request (None on the first one); ``usage``: the child's
        :func:`~supervisor.processes.identity.proc_usage` now."""
        if usage is None:
            return None
        now, before = time.monotonic(), self._cpu.get(ident)
        self._cpu[ident] = (now, usage[0])
        if before is None or now <= before[0]:
            return None
        return 100.0 * (usage[0] - before[1]) / (now - before[0])

    def _cgroups(self) -> dict[str, Any] | None:
        det = self.domains.cgroups
        if det is None:
            return None
        return {"usable": det.usable, "via": det.via, "base": det.base, "controllers": sorted(det.controllers),
                "kill": det.kill, "problems": list(det.problems)}


def _code(p: Profile, installed: Installed | None, gstate: dict[str, Any]) -> dict[str, Any] | None:
    c = p.child
    if c is None:
        return None
    found = codeid.view(p.home, c.ident.pid, recorded=c.code, started_wall=c.started_wall, installed=installed,
                        gstate=gstate)
    return found.to_json() if found is not None else None


def summary(planner: Planner) -> str:
    """One line of counts per state (the service manager's STATUS=, the log's "ready" line)."""
    counts: dict[str, int] = {}
    for p in planner.profiles.values():
        state = planner.state_of(p)[0]
        counts[state] = counts.get(state, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no profiles"
