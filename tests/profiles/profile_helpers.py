"""Helpers shared by the profile tests (imported by name: this folder is on sys.path under pytest)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from profiles.upstream.process import proc_start_time


def PYTHON() -> list[str]:
    """The interpreter upstream's profile code runs in: this virtualenv's, which has hermes-agent 0.19.0."""
    return [sys.executable]


def make_profile(root: Path, name: str, files: dict[str, str] | None = None) -> Path:
    """A named profile folder with the given files (relative path -> text)."""
    home = root / "profiles" / name
    home.mkdir(parents=True, exist_ok=True)
    for rel, text in (files or {}).items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return home


@dataclass
class CliResult:
    rc: int
    out: str
    err: str

    def json(self) -> object:
        return json.loads(self.out)


class FakeLiveGateway:
    """A real process recorded in ``gateway.pid`` the way upstream writes it (pid + start time), and
    that home's gateway by upstream's rules (``-p NAME gateway run`` with ``HERMES_HOME`` the home)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        named = ["-p", home.name] if home.parent.name == "profiles" else []
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "import sys, time; sys.stdin.read()", *named, "gateway", "run"],
            stdin=subprocess.PIPE, env={**os.environ, "HERMES_HOME": str(home)},
        )
        # Wait until the child has exec'd: between fork and exec (and during exec) its
        # /proc/PID/cmdline is the parent's or empty, and a reader checking for "gateway" in it
        # then takes the live gateway for a stale record (this made two lifecycle tests flaky).
        start = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            start = proc_start_time(self.proc.pid)
            try:
                cmdline = Path(f"/proc/{self.proc.pid}/cmdline").read_bytes()
            except OSError:
                cmdline = b""
            if start is not None and b"gateway" in cmdline:
                break
            time.sleep(0.005)
        record = {"pid": self.proc.pid, "kind": "hermes-gateway", "argv": ["hermes", "gateway", "run"],
                  "start_time": start}
        (home / "gateway.pid").write_text(json.dumps(record))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)
        if self.proc.stdin:
            self.proc.stdin.close()


def scratch_left(root: Path) -> list[str]:
    """Dot-named scratch folders left in ``profiles/`` (there must never be any)."""
    folder = root / "profiles"
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) if folder.is_dir() else []


def env_for(root: Path, **extra: str) -> dict[str, str]:
    """A process-independent environment mapping for functions that take ``env``."""
    env = {"HOME": str(root.parent / "home"), "PATH": os.defpath}
    env.update(extra)
    return env
