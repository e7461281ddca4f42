"""Where "time to serve again" goes, measured from outside while it happens.

After a fault, a :class:`Watcher` thread polls every 20 ms what a profile's next gateway shows of
itself and notes the first moment (``time.monotonic()``) of each milestone:

- ``spawned``: a process other than the old one serves the profile (hermesd's child, by its tag;
  the multiplexed gateway's restart);
- ``pid_file``: the profile's ``gateway.pid`` names it (upstream writes it once its command-line
  code has loaded, before the gateway's own imports);
- ``running``: its ``gateway_state.json`` says ``running``;
- ``connected``: the state file says the API-server platform is ``connected``;
- ``port_open``: its port accepts a TCP connection.

The stub adds when the profile's agent first reached it (:meth:`tests.traffic.llm.LLMStub.contacts`:
``first_call``, the model probes of its set-up; ``first_completion``) and the load generator's
records the first right answer. :func:`breakdown` turns the milestones into consecutive phases.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profiles.upstream import files as gf

MILESTONES = ("spawned", "pid_file", "running", "connected", "port_open")
ORDER = ("fault", *MILESTONES, "first_call", "first_completion", "first_answer")
PHASES = {  # phase -> (from, to), what each part of the wait is
    "respawn": ("fault", "spawned"),
    "start_to_pid_file": ("spawned", "pid_file"),
    "to_running": ("pid_file", "running"),
    "platform_connect": ("running", "connected"),
    "port_open": ("connected", "port_open"),
    "first_request_setup": ("port_open", "first_completion"),
    "answer": ("first_completion", "first_answer"),
}


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        try:
            s.connect((host, port))
        except OSError:
            return False
    return True


class Watcher:
    """Notes the milestones of the gateway that serves ``home`` after ``old_pid``."""

    def __init__(self, pid_of: Callable[[], int | None], home: Path, port: int, old_pid: int | None,
                 interval: float = 0.02) -> None:
        self.pid_of = pid_of
        self.home = home
        self.port = port
        self.old_pid = old_pid
        self.interval = interval
        self.seen: dict[str, float] = {}
        self.pid: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="phases", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        return self

    def _note(self, key: str, when: float) -> None:
        self.seen.setdefault(key, when)

    def _run(self) -> None:
        while not self._stop.wait(self.interval) and len(self.seen) < len(MILESTONES):
            now = time.monotonic()
            with contextlib.suppress(OSError):
                self._look(now)

    def _look(self, now: float) -> None:
        pid = self.pid_of()
        if pid is not None and pid != self.old_pid:
            if self.pid != pid:  # a newer one (a first respawn died at once): its milestones count
                self.pid = pid
                for key in MILESTONES:
                    self.seen.pop(key, None)
            self._note("spawned", now)
        if self.pid is None:
            return
        rec = gf.read_pid_record(self.home)
        if rec is not None and rec.pid == self.pid:
            self._note("pid_file", now)
        state = gf.read_gateway_state(self.home)
        if state.get("pid") == self.pid:
            if state.get("gateway_state") == "running":
                self._note("running", now)
            api = (state.get("platforms") or {}).get("api_server") or {}
            if isinstance(api, dict) and api.get("state") == "connected":
                self._note("connected", now)
        if "spawned" in self.seen and port_open(self.port):
            self._note("port_open", now)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(5)
        return dict(self.seen)


def breakdown(marks: dict[str, float | None]) -> dict[str, Any]:
    """Seconds of each phase of :data:`PHASES` (None where a milestone was not seen), and each
    milestone's time after the fault."""
    def at(key: str) -> float | None:
        return marks.get(key)

    fault = at("fault")
    phases = {}
    for name, (a, b) in PHASES.items():
        ta, tb = at(a), at(b)
        phases[name] = None if ta is None or tb is None else tb - ta
    after = {k: (None if at(k) is None or fault is None else at(k) - fault) for k in ORDER[1:]}  # type: ignore[operator]
    return {"phases_s": phases, "after_fault_s": after}
