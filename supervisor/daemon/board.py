"""The kanban board's side of the daemon: the workers hermesd runs for the board in their
assignee's domain, and the chosen dispatcher's hand-off (its ``HERMES_BIN`` launcher and the
restricted socket through which it hands each worker to hermesd).

Why workers end where they do: they are hermesd's children, each in a cgroup of its own beside the
assignee's (its limits, never charged to the assignee's gateway), so a stop or restart of the
*assignee* ends them, and a restart of the *dispatcher* does not. They also end with hermesd
itself, even when the gateways are left running: no daemon would be left to report a worker's
end to its dispatcher.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from profiles.names import normalize_name
from supervisor.daemon.domains import Domains
from supervisor.isolation import install
from supervisor.kanban.dispatch import OFF
from supervisor.kanban.handoff import Handoff
from supervisor.kanban.workers import WorkerError, Workers, printable
from supervisor.layout import Layout
from supervisor.plan.model import Profile

if TYPE_CHECKING:
    from supervisor.daemon.effective import InForce

log = logging.getLogger("hermesd")

Handler = Callable[..., Awaitable[dict[str, Any]]]


class Extras(NamedTuple):
    """What the board adds to one gateway's spawn: nothing, except for the chosen dispatcher."""

    env: Mapping[str, str]  # its HERMES_BIN launcher (empty: not the dispatcher)
    grants: tuple[tuple[Path, str], ...] = ()  # its hand-off folder, read-only, in its confinement
    placeholders: tuple[Path, ...] = ()  # the other profiles' homes as empty folders (see :meth:`Board.extras`)


class Board:
    """Workers and hand-off of one daemon (see the module docstring).

    ``profiles``: the planner's, read to learn which gateway runs (the hand-off's peer check) and
    whether an assignee exists; ``in_force``: the settings in force now.
    """

    def __init__(self, root: Path, env: Mapping[str, str], layout: Layout, domains: Domains,
                 profiles: Mapping[str, Profile], in_force: Callable[[], InForce]) -> None:
        self.profiles = profiles
        self.in_force = in_force
        self.workers = Workers(root, env, keeper_log=layout.child_log,
                               on_end=lambda run: domains.end_session("worker", run.assignee, run.pid))
        self.handoff = Handoff(layout.dir, self.handlers(), self.gateway_pid, in_tree=domains.member_of)

    def gateway_pid(self, name: str) -> int | None:
        """The PID of ``name``'s current gateway, if hermesd runs one (the hand-off's peer check)."""
        p = self.profiles.get(name)
        return p.child.ident.pid if p is not None and p.child is not None else None

    async def sync(self, in_force: InForce) -> None:
        """Follow the dispatcher choice of the settings about to be in force (its launcher, socket and account)."""
        cfg = in_force.config
        self.handoff.set_rate(cfg.kanban_requests_per_minute)
        await self.handoff.sync(cfg.kanban_dispatcher, _account_of(in_force, cfg.kanban_dispatcher))

    def extras(self, name: str, others: tuple[Path, ...]) -> Extras:
        """The chosen dispatcher's extras at its spawn: ``HERMES_BIN``, its hand-off folder (read-only) and
        the other profiles' homes (``others``) as empty placeholders (upstream claims a task only when the
        assignee's folder exists). Nothing for any other profile."""
        env = self.handoff.env_for(name)
        if name != self.handoff.profile or not env:
            return Extras(env)
        return Extras(env, ((self.handoff.folder(name), "ro"),), others)

    def stop_workers(self, name: str, how: str) -> None:
        pids = self.workers.stop_of(name)
        if pids:
            log.info("profile %s %s: ending its kanban worker(s) %s", name, how, pids)

    def stop_all(self) -> None:
        pids = self.workers.stop_all()
        if pids:
            log.info("shutting down: ending kanban worker(s) %s", pids)

    def close(self) -> None:
        self.workers.kill()  # what the shutdown's SIGTERM did not end
        self.handoff.close()

    def handlers(self) -> dict[str, Handler]:
        """``kanban_worker`` and ``kanban_wait``: served on the control socket (the operator) and, alone,
        on the dispatcher's hand-off socket (:mod:`supervisor.kanban.handoff`)."""

        async def kanban_worker(assignee: str, argv: list[Any], env: dict[str, Any], log: str) -> dict[str, Any]:
            p = self.profiles.get(normalize_name(assignee))
            if p is None or not p.present:
                return {"ok": False, "error": f"kanban_worker: no profile {printable(assignee, 80)!r}"}
            in_force = self.in_force()
            if in_force.command is None:
                return {"ok": False, "error": in_force.command_error or "no hermes command"}
            if not in_force.of(p.name).isolation.kanban:
                return {"ok": False, "error": f"kanban_worker: profile {p.name} does not share the kanban board"
                                              " (isolation.kanban: false)"}
            if not all(isinstance(a, str) for a in argv) or not all(isinstance(v, str) for v in env.values()):
                return {"ok": False, "error": "kanban_worker: argv and env must hold strings"}
            try:
                run = self.workers.start(assignee=p.name, command=in_force.command, argv=argv, env=env, log=log,
                                         per_profile=in_force.config.kanban_workers_per_profile)
            except WorkerError as exc:
                return {"ok": False, "error": f"kanban_worker: {exc}"}
            return {"ok": True, "pid": run.pid}

        async def kanban_wait(pid: int) -> dict[str, Any]:
            try:
                return {"ok": True, "code": await self.workers.wait(pid)}
            except WorkerError as exc:
                return {"ok": False, "error": f"kanban_wait: {exc}"}

        return {"kanban_worker": kanban_worker, "kanban_wait": kanban_wait}


def _account_of(in_force: InForce, name: str) -> tuple[int, int] | None:
    """uid and gid of ``name``'s ``isolation.user`` (None: none, or unknown)."""
    if name == OFF:
        return None
    user = in_force.of(name).isolation.user
    if not user:
        return None
    try:
        ids = install.resolve_user(user)
    except (KeyError, ValueError, OSError):
        return None
    return ids.uid, ids.gid
