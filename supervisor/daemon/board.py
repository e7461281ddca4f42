"""The kanban board's side of the daemon (issue 16): the workers hermesd runs for the board in
their assignee's domain, and the chosen dispatcher's hand-off (its ``HERMES_BIN`` launcher and the
restricted socket through which it hands each worker to hermesd).

Why workers end where they do: they are hermesd's children, each in a cgroup of its own beside the
assignee's (its limits, never charged to the assignee's gateway), so a stop or restart of the
*assignee* ends them, and a restart of the *dispatcher* does not. They also end with hermesd
itself, even when the gateways are left running: no daemon would be left to report a worker's
end to its dispatcher.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from supervisor import config as config_mod
    from supervisor.daemon.loop import Daemon

log = logging.getLogger("hermesd")


class Board:
    """Workers and hand-off of one daemon (see the module docstring)."""

    def __init__(self, daemon: Daemon) -> None:
        from supervisor.daemon.requests import kanban_handlers
        from supervisor.kanban.handoff import Handoff
        from supervisor.kanban.workers import Workers

        self.d = daemon
        self.workers = Workers(daemon.root, daemon.env, keeper_log=daemon.layout.child_log,
                               on_end=lambda run: daemon.domains.end_session("worker", run.assignee, run.pid))
        self.handoff = Handoff(daemon.layout.dir, kanban_handlers(daemon), self.gateway_pid,
                               in_tree=daemon.domains.member_of)

    def gateway_pid(self, name: str) -> int | None:
        """The PID of ``name``'s current gateway, if hermesd runs one (the hand-off's peer check)."""
        p = self.d.planner.profiles.get(name)
        return p.child.ident.pid if p is not None and p.child is not None else None

    async def sync(self, cfg: config_mod.Config) -> None:
        """Follow hermesd.yaml's dispatcher choice (its launcher, socket and account)."""
        self.handoff.set_rate(cfg.kanban_requests_per_minute)
        await self.handoff.sync(cfg.kanban_dispatcher, _account_of(cfg, cfg.kanban_dispatcher))

    def env_for(self, name: str) -> dict[str, str]:
        """``HERMES_BIN`` for the chosen dispatcher's gateway; nothing for any other profile."""
        return self.handoff.env_for(name)

    def plan_extras(self, name: str) -> dict[str, Any]:
        """The dispatcher's extras in its isolation plan: its hand-off folder (read-only) and the
        other profiles' homes as empty placeholders (upstream claims a task only when the
        assignee's folder exists). Nothing for any other profile."""
        if name != self.handoff.profile or not self.handoff.env_for(name):
            return {}
        others = tuple(q.home for n, q in self.d.planner.profiles.items() if n != name and q.present)
        return {"grants": ((self.handoff.folder(name), "ro"),), "placeholders": others}

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


def _account_of(cfg: config_mod.Config, name: str) -> tuple[int, int] | None:
    """uid and gid of ``name``'s ``isolation.user`` (None: none, or unknown)."""
    from supervisor.kanban.dispatch import OFF

    if name == OFF:
        return None
    user = cfg.isolation_for(name).user
    if not user:
        return None
    from supervisor.isolation import install

    try:
        ids = install.resolve_user(user)
    except (KeyError, ValueError, OSError):
        return None
    return ids.uid, ids.gid



