"""The two ways to serve several profiles on one host, each started fresh on its own root.

- :class:`HermesdSide`: hermesd supervises one real gateway per profile (the default profile off),
  with the settings in :data:`HERMESD_SETTINGS`.
- :class:`UpstreamSide`: upstream's multiplexed gateway, ONE process serving every profile through
  ``/p/<profile>/…`` (0.19.0 with ``gateway.multiplex_profiles: true``, or the 0.22 line's default),
  kept running the way upstream's own service unit keeps it (``Restart=always``, ``RestartSec=5``,
  upstream-contract §6): restarted 5 s after any exit, and nothing else. Without multiplexing it
  runs one profile's gateway by hand, the reference for what hermesd adds to a start.

Both answer the same questions: the endpoints to load, a profile's home, the PID of the process
serving a profile right now (:meth:`gateway_pid`, cheap enough to poll), and :meth:`close`, which
ends everything the side started, by PID.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Protocol

import yaml

from profiles.upstream import files as gf
from tests.harness import Hermesd
from tests.traffic.served import DEFAULT, Endpoint, home_of, write_multiplexed, write_own_server

# What hermesd runs the benchmark's and the test's gateways with (besides its defaults: isolation
# on, restart backoff 1 s doubling, 60 s up counts as healthy). The limits are what contain the
# runaway faults; hung_after is the shortest a real gateway's 30 s heartbeat allows with a margin.
HERMESD_SETTINGS: dict[str, Any] = {
    "limits": {"memory_max": "1G", "tasks_max": 200},
    "hung_after": 40,
    "stop_timeout": 20,
}
# Upstream's own unit: Restart=always, RestartSec=5 (upstream-contract §6).
UNIT_RESTART_SEC = 5.0


class Side(Protocol):
    name: str
    endpoints: list[Endpoint]

    def start(self) -> None: ...

    def home(self, profile: str) -> Path: ...

    def gateway_home(self, profile: str) -> Path: ...

    def gateway_pid(self, profile: str) -> int | None: ...

    def restart(self, profile: str) -> bool: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> list[int]: ...


def children(pid: int) -> list[int]:
    """The live children of ``pid`` (every thread's ``children`` list)."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as fh:
                out.extend(int(x) for x in fh.read().split())
    return out


def marked(name: str, value: str) -> list[int]:
    """Every process whose environment says ``name=value`` (inherited by all a process starts)."""
    needle = f"{name}={value}".encode()
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if needle in fh.read().split(b"\0"):
                        out.append(int(entry))
            except OSError:
                continue
    return out


class HermesdSide:
    """hermesd on a fresh root: one gateway per profile of ``profiles``, each on its own port."""

    def __init__(self, work: Path, profiles: tuple[str, ...], llm_url: str, hermes: Path,
                 settings: dict[str, Any] | None = None, name: str = "hermesd") -> None:
        self.name = name
        self.root = work / "root"
        self.root.mkdir(parents=True)
        self.profiles = profiles
        self.hermes = hermes
        self.settings = dict(HERMESD_SETTINGS if settings is None else settings)
        self.endpoints = [write_own_server(self.root, p, llm_url) for p in profiles]
        (self.root / "hermesd.yaml").write_text(yaml.safe_dump({
            "command": [str(hermes)], **self.settings, "profiles": {DEFAULT: {"enabled": False}}}))
        self.daemon = Hermesd(self.root)

    def start(self) -> None:
        self.daemon.start()

    def home(self, profile: str) -> Path:
        return home_of(self.root, profile)

    def gateway_home(self, profile: str) -> Path:
        """Where the gateway serving ``profile`` writes its files: the profile's own home."""
        return self.home(profile)

    def gateway_pid(self, profile: str) -> int | None:
        """hermesd's child for ``profile`` right now (a direct child of the daemon, by its tag)."""
        assert self.daemon.proc is not None
        for pid in children(self.daemon.proc.pid):
            if gf.proc_env(pid).get("HERMESD_PROFILE") == profile:
                return pid
        return None

    def restart(self, profile: str) -> bool:
        """``hermesd restart PROFILE``, as an operator would (returns once it runs again)."""
        out = self.daemon.cli("restart", profile, timeout=180)
        if out.returncode != 0:
            raise RuntimeError(f"hermesd restart {profile}: exit {out.returncode}: {out.stderr[-500:]}")
        return True

    def describe(self) -> dict[str, Any]:
        return {"kind": "hermesd", "gateway": str(self.hermes), "settings": self.settings,
                "processes": "one gateway per profile"}

    def close(self) -> list[int]:
        return self.daemon.close()


class UpstreamSide:
    """Upstream's gateway on a fresh root, started and restarted as upstream's unit would: the
    multiplexed one serving ``profiles`` or (``multiplex`` False) the default profile's own."""

    def __init__(self, work: Path, profiles: tuple[str, ...], llm_url: str, command: list[str], name: str,
                 multiplex: bool = True, restart_sec: float = UNIT_RESTART_SEC) -> None:
        self.name = name
        self.root = work / "root"
        self.root.mkdir(parents=True)
        self.profiles = profiles
        self.command = list(command)
        self.multiplex = multiplex
        self.restart_sec = restart_sec
        if multiplex:
            self.endpoints = write_multiplexed(self.root, profiles, llm_url)
        elif profiles == (DEFAULT,):
            self.endpoints = [write_own_server(self.root, DEFAULT, llm_url)]
        else:
            raise ValueError("a gateway of its own serves the default profile only here")
        home = work / "home"
        home.mkdir()
        self.marker = uuid.uuid4().hex
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
                    "HERMES_HOME": str(self.root), "TRAFFIC_SIDE": self.marker}
        self.log = work / "gateway.log"
        self.starts: list[tuple[float, int]] = []  # (time.monotonic(), PID) of every start
        self.exits: list[tuple[float, int]] = []  # (time.monotonic(), exit status)
        self._proc: subprocess.Popen[bytes] | None = None
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._keeper = threading.Thread(target=self._keep, name=f"unit-{name}", daemon=True)

    def start(self) -> None:
        self._spawn()
        self._keeper.start()

    def _spawn(self) -> None:
        with self.log.open("ab") as logf, self._lock:
            if self._closing.is_set():
                return
            self._proc = subprocess.Popen([*self.command, "gateway", "run"], env=self.env, cwd=str(self.root),
                                          stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, start_new_session=True)
            self.starts.append((time.monotonic(), self._proc.pid))

    def _keep(self) -> None:
        """``Restart=always`` with ``RestartSec``: whatever the exit, start again that much later."""
        while not self._closing.is_set():
            proc = self._proc
            if proc is None:
                return
            status = proc.wait()
            self.exits.append((time.monotonic(), status))
            if self._closing.wait(self.restart_sec):
                return
            self._spawn()

    def home(self, profile: str) -> Path:
        return home_of(self.root, profile)

    def gateway_home(self, profile: str) -> Path:
        """Where the one gateway writes its files: the root (the default profile's home)."""
        return self.root

    def gateway_pid(self, profile: str) -> int | None:
        """The one process serving every profile (``profile`` does not matter)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def restart(self, profile: str) -> bool:
        """One profile cannot be restarted alone: its gateway is every profile's."""
        return False

    def describe(self) -> dict[str, Any]:
        return {"kind": "multiplexed" if self.multiplex else "one gateway", "gateway": " ".join(self.command),
                "processes": "one gateway for every profile" if self.multiplex else "one gateway",
                "restart": f"as upstream's unit: Restart=always, RestartSec={self.restart_sec:g}"}

    def close(self) -> list[int]:
        """Stop restarting, then SIGKILL everything started here (found by the side's marker)."""
        self._closing.set()
        killed: list[int] = []
        for _ in range(20):
            pids = [p for p in marked("TRAFFIC_SIDE", self.marker) if p != os.getpid()]
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.1)
        with self._lock:
            proc = self._proc
        if proc is not None:
            proc.wait(30)
        if self._keeper.is_alive():
            self._keeper.join(30)
        return sorted(set(killed))
