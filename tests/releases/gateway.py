"""Run one real ``hermes gateway run`` in a scratch root and watch it, for the release contract tests.

Which ``hermes`` runs is chosen by ``HERMESD_TEST_HERMES`` (a path to a release's ``bin/hermes``;
default: the ``hermes`` beside the test interpreter, i.e. the hermes-agent of ``.[test]``).
``scripts/test-releases.sh`` sets it once per cached release environment.

Every process started here carries hermesd's root tag (``HERMESD_ROOT=<scratch root>``) in its
environment, so :meth:`Sandbox.close` finds and SIGKILLs, by PID, the gateway and anything it left
behind (upstream's detached diagnostic shell outlives the gateway by up to 5 s).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from profiles.upstream import files as gf
from profiles.upstream.process import FIXED_ENV, proc_start_time
from supervisor.processes.tags import TAG_PROFILE, TAG_ROOT
from tests.harness import kill_tagged

T = TypeVar("T")
HERMES_ENV = "HERMESD_TEST_HERMES"


def selected_hermes() -> Path:
    """The ``hermes`` executable under test (see the module docstring)."""
    chosen = os.environ.get(HERMES_ENV, "").strip()
    return Path(chosen) if chosen else Path(sys.executable).parent / "hermes"


def poll(pred: Callable[[], T], timeout: float, interval: float = 0.05) -> T | None:
    """``pred()``'s first truthy value before the deadline, else ``None`` (never raises on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or ``None`` when it is missing or (mid-rewrite) not valid JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@dataclass
class Run:
    """One started gateway process."""

    proc: subprocess.Popen[bytes]
    home: Path
    output: Path
    started: float  # time.monotonic() at spawn
    argv: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        """The gateway's stdout+stderr so far (upstream prints its banner and WARNING+ lines there)."""
        try:
            return self.output.read_text(errors="replace")
        except OSError:
            return ""

    def state(self) -> dict[str, Any]:
        data = read_json(self.home / "gateway_state.json")
        return data if isinstance(data, dict) else {}

    def wait_state(self, *states: str, timeout: float) -> dict[str, Any] | None:
        """The state file once ``gateway_state`` is one of ``states`` (``None``: timeout or the process died)."""
        def check() -> dict[str, Any] | None:
            st = self.state()
            if st.get("gateway_state") in states and st.get("pid") == self.pid:
                return st
            return {"__exited__": True} if self.proc.poll() is not None else None

        got = poll(check, timeout)
        return None if got is None or "__exited__" in got else got

    def wait_pid_file(self, timeout: float) -> bool:
        return bool(poll(lambda: (self.home / "gateway.pid").exists() or self.proc.poll() is not None, timeout)) \
            and (self.home / "gateway.pid").exists()

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def send(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)


class Sandbox:
    """A scratch Hermes root (``<tmp>/root``, profiles ``coder`` and ``writer``) and HOME (``<tmp>/home``).

    Each named profile has a ``config.yaml`` (``model: {}``): on the multiplex-default line a folder
    without an identity file is no profile at all, and every earlier release ignores the file.
    """

    def __init__(self, tmp: Path, hermes: Path) -> None:
        self.hermes = hermes
        self.root = (tmp / "root").resolve()
        self.home_dir = (tmp / "home").resolve()
        for name in ("coder", "writer"):
            (self.root / "profiles" / name).mkdir(parents=True, exist_ok=True)
            (self.root / "profiles" / name / "config.yaml").write_text("model: {}\n")
        self.home_dir.mkdir(parents=True, exist_ok=True)
        self.runs: list[Run] = []
        self._n = 0
        self.force = False  # every start passes --force (the multiplex-default line, as hermesd does)

    def profile_home(self, profile: str) -> Path:
        return self.root if profile == "default" else self.root / "profiles" / profile

    def env(
        self, home: Path, profile: str, extra: Mapping[str, str] | None = None, drop: tuple[str, ...] = ()
    ) -> dict[str, str]:
        """The environment hermesd gives a child (its FIXED_ENV), offline, minus ``drop``, plus ``extra``."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home_dir),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            "HERMES_HOME": str(home),
            TAG_ROOT: str(self.root),
            TAG_PROFILE: profile,
            **FIXED_ENV,
        }
        for name in drop:
            env.pop(name, None)
        env.update(extra or {})
        return env

    def start(
        self,
        profile: str = "default",
        *,
        flag: bool,
        p_flag: bool | None = None,
        home: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
        drop_env: tuple[str, ...] = (),
        args: tuple[str, ...] = (),
        force: bool | None = None,
    ) -> Run:
        """``hermes [-p NAME] gateway run [--external-supervisor] [--force]`` as hermesd would start it.

        ``p_flag`` defaults to "named profiles only", like hermesd; ``home`` overrides HERMES_HOME;
        ``force``: the multiplex-default line's ``--force`` (default: :attr:`force`, what hermesd passes).
        """
        force = self.force if force is None else force
        home = home if home is not None else self.profile_home(profile)
        use_p = (profile != "default") if p_flag is None else p_flag
        argv = [str(self.hermes), *(["-p", profile] if use_p else []), "gateway", "run",
                *(["--external-supervisor"] if flag else []), *(["--force"] if force else []), *args]
        self._n += 1
        out = self.root.parent / f"gateway-{self._n}.out"
        with out.open("wb") as fh:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                env=self.env(home, profile, extra_env, drop_env), cwd=str(self.home_dir),
                start_new_session=True,
            )
        run = Run(proc, home, out, time.monotonic(), argv)
        self.runs.append(run)
        return run

    def standalone(self, *names: str) -> None:
        """``gateway.standalone: true`` in each named profile's config.yaml (what ``hermesd standalone`` writes)."""
        for name in names:
            (self.profile_home(name) / "config.yaml").write_text("model: {}\ngateway:\n  standalone: true\n")

    def stop(self, run: Run, timeout: float = 60) -> int | None:
        """Planned stop (marker + SIGTERM), then SIGKILL at the deadline; the exit code, or None if killed."""
        if run.proc.poll() is not None:
            return run.proc.returncode
        write_planned_stop_marker(run.home, run.pid)
        run.send(signal.SIGTERM)
        code = run.wait_exit(timeout)
        if code is None:
            run.send(signal.SIGKILL)
            run.wait_exit(10)
        return code

    def close(self) -> None:
        """SIGKILL every process this sandbox started (and their tagged leftovers), by PID."""
        for run in self.runs:
            if run.proc.poll() is None:
                run.send(signal.SIGKILL)
                run.wait_exit(10)
        deadline = time.monotonic() + 10
        while kill_tagged(self.root) and time.monotonic() < deadline:
            time.sleep(0.1)


def write_planned_stop_marker(home: Path, pid: int) -> None:
    """Upstream's planned-stop record, written by hermesd's own writer (the gateway consumes it on SIGTERM)."""
    gf.write_planned_stop_marker(home, pid, proc_start_time(pid))
