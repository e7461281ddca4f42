"""One object the daemon's loop talks to: every event goes to the journal, the counters and the hooks.

Keeping the fan-out here means the planner has one action ("emit event") and the three consumers
cannot disagree: the counters are exactly what the journal says, and a hook fires only for an
event that was also journaled (or counted as a journal write error).

None of these calls blocks the loop for long: an emit is a ``json.dumps``, one ``write(2)`` and,
when a hook matches, one ``posix_spawn``. None raises into the loop: a journal that cannot be
written is counted (``hermesd_journal_write_errors_total``) and logged once per streak.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supervisor.observe.events import Stamper, bounded, validate
from supervisor.observe.hooks import HookRunner
from supervisor.observe.journal import Journal, JournalSettings, default_folder
from supervisor.observe.metrics import Counters, MetricsServer, render
from supervisor.observe.sections import ObserveSettings

log = logging.getLogger("hermesd")


@dataclass(slots=True)
class Observer:
    root: Path
    settings: ObserveSettings = field(default_factory=ObserveSettings)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    version: str = ""
    daemon_pid: int = field(default_factory=os.getpid)
    wall: Callable[[], float] = time.time
    folder: Path | None = None
    journal: Journal = field(init=False)
    counters: Counters = field(init=False, default_factory=Counters)
    hooks: HookRunner = field(init=False)
    stamper: Stamper = field(init=False)
    metrics_server: MetricsServer | None = field(init=False, default=None)
    _status: Callable[[], dict[str, Any]] | None = field(init=False, default=None)
    _warned: set[str] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        self.folder = self.folder or default_folder(self.root)
        self.journal = Journal(self.folder, self.settings.journal or JournalSettings())
        self.stamper = Stamper(self.daemon_pid)
        self.hooks = HookRunner(tuple(self.settings.hooks), env=self.env, root=self.root,
                                on_outcome=self.counters.hook_outcome)

    def open(self) -> None:
        """Open the journal. A folder that cannot be used is logged; events are then only counted."""
        try:
            self.journal.open()
        except OSError as exc:
            log.error("event journal unavailable (%s); events are not recorded this run", exc)

    def emit(self, type_: str, profile: str | None = None, /, **fields: Any) -> dict[str, Any]:
        """Stamp one event (ts, seq, daemon), journal it, count it, fire its hooks; returns it."""
        return self.record({"type": type_, "profile": profile, **fields})

    def record(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """The same for an event dict (the planner's ``Emit.event``). Stamped here unless it has a ``seq``."""
        if "seq" in event and "ts" in event:
            event = {k: bounded(v) for k, v in event.items()}
        else:
            fields = {k: v for k, v in event.items() if k not in ("type", "profile", "ts", "seq", "daemon")}
            event = self.stamper.stamp(str(event.get("type")), event.get("profile"), self.wall(), fields)
        for problem in validate(event):
            if problem not in self._warned:  # a schema slip is a bug to fix, not a reason to drop data
                self._warned.add(problem)
                log.warning("event schema: %s", problem)
        if not self.journal.append(event):
            self.counters.journal_failed += 1
        self.counters.observe(event)
        self.hooks.fire(event)
        return event

    async def start(self, status: Callable[[], dict[str, Any]]) -> None:
        """Start the metrics listener when one is configured (call once the loop runs)."""
        self._status = status
        await self._start_listener()

    async def _start_listener(self) -> None:
        m = self.settings.metrics
        if m is None:
            return
        server = MetricsServer(m, self._render_now)
        try:
            await server.start()
        except OSError as exc:
            log.error("metrics listener on %s not started: %s", m.listen, exc.strerror or exc)
            return
        self.metrics_server = server

    def _render_now(self) -> str:
        doc = self._status() if self._status is not None else {"profiles": [], "supervisor": {"running": True}}
        return self.metrics_text(doc)

    def metrics_text(self, status_document: Mapping[str, Any]) -> str:
        """The Prometheus text for ``status_document`` and this run's counters (what /metrics serves)."""
        return render(status_document, self.counters, version=self.version, now=self.wall(), process=True)

    def control_request(self, verb: str, outcome: str) -> None:
        self.counters.control_request(verb, outcome)

    def child_reaped(self, pid: int, status: int) -> bool:
        """From the daemon's ``waitpid(-1)`` reaper: True when ``pid`` was one of our hooks."""
        return self.hooks.child_reaped(pid, status)

    async def reconfigure(self, settings: ObserveSettings) -> None:
        """Apply a re-read hermesd.yaml: hooks at once, journal bounds from the next write, listener."""
        old = self.settings
        self.settings = settings
        self.hooks.configure(tuple(settings.hooks))
        self.journal.settings = settings.journal or JournalSettings()
        if settings.metrics != old.metrics:
            if self.metrics_server is not None:
                await self.metrics_server.close()
                self.metrics_server = None
            await self._start_listener()

    def housekeeping(self) -> None:
        """Cheap periodic check: re-open the journal if its folder was deleted or replaced."""
        if self.journal.reopen_if_moved():
            log.warning("event journal folder %s was replaced; writing to the new one", self.folder)

    async def aclose(self, hook_grace: float = 5.0) -> None:
        """Shutdown: let running hooks finish (up to ``hook_grace``), stop the listener, close the journal."""
        await self.hooks.aclose(hook_grace)
        if self.metrics_server is not None:
            await self.metrics_server.close()
            self.metrics_server = None
        self.journal.close()
