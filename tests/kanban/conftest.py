"""A real root with real ``hermes gateway`` children for the kanban tests, cleaned up by PID.

Nothing kanban-specific is injected: the dispatcher choice, ``HERMES_BIN`` and the hand-off
socket come from the daemon itself, and isolation is the default (``auto``) unless a test says.

Roots live under ``/var/tmp`` (see ``tests/isolation/conftest.py``). Every gateway is a
child of the test's daemon and is swept by :meth:`tests.harness.Hermesd.close` (root tag);
workers the daemon runs are untagged on purpose (they must survive the dispatcher's tree kill),
so every test also records their PIDs and kills what is left in ``close()``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Hermesd, wait_for

HERMES = Path(sys.executable).parent / "hermes"
DISPATCH_LINE = "kanban dispatcher: disabled via HERMES_KANBAN_DISPATCH_IN_GATEWAY env"
PROFILE_CONFIG = "kanban:\n  dispatch_interval_seconds: 1\n"


class Board:
    """A root (default, plus named profiles created on demand), hermesd.yaml and a daemon."""

    def __init__(self, names: tuple[str, ...], *, dispatcher: str,
                 chat: str = "", isolation: str = "auto") -> None:
        self.base = Path(tempfile.mkdtemp(prefix="hermesd-kanban-", dir="/var/tmp"))
        self.root = self.base / "root"
        (self.root / "profiles").mkdir(parents=True)
        (self.root / ".env").write_text("")  # offline: no platform, no provider
        (self.root / "config.yaml").write_text(PROFILE_CONFIG)
        for name in names:
            self.add_profile(name)
        self.bin = self.base / "bin"
        self.bin.mkdir()
        # The hermes command hermesd runs. For `chat` (a worker) a test may run a shell snippet first:
        # `sleep 8` to act while a worker is alive (the real worker, with no model, exits within a
        # second or two), `exit 42` to check exit codes, a probe of what the worker can reach.
        self.command = self._script("hermes", (
            f'case " $* " in *" chat "*) {chat} ;; esac\n' if chat else ""
        ) + f'exec {HERMES} "$@"\n')
        import yaml

        cfg: dict[str, Any] = {
            "command": [str(self.command)],
            "restart": {"initial_delay": 0.2, "max_delay": 2.0, "healthy_after": 3.0, "jitter": 0.0},
            "stop_timeout": 10,
            "isolation": isolation,
            "kanban": {"dispatcher": dispatcher},
        }
        (self.root / "hermesd.yaml").write_text(yaml.safe_dump(cfg))
        self.hermesd = Hermesd(self.root)
        self.pids: set[int] = set()

    def _script(self, name: str, body: str) -> Path:
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return path

    def add_profile(self, name: str) -> Path:
        home = self.root / "profiles" / name
        home.mkdir()
        (home / ".env").write_text("")
        (home / "config.yaml").write_text(PROFILE_CONFIG)
        return home

    def home(self, name: str) -> Path:
        return self.root if name == "default" else self.root / "profiles" / name

    def hermes(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """The real ``hermes`` CLI against this root, as a user's shell would run it."""
        env = {**self.hermesd.env, "HERMES_HOME": str(self.root)}
        return subprocess.run([str(HERMES), *args], capture_output=True, text=True, env=env, timeout=timeout)

    def create_task(self, assignee: str, title: str = "say hi") -> str:
        r = self.hermes("kanban", "create", title, "--assignee", assignee)
        assert r.returncode == 0, r.stderr
        return r.stdout.split()[1]  # "Created t_xxxxxxxx  (ready, assignee=p2)"

    def dispatch_decided(self, name: str) -> bool:
        """The gateway of ``name`` has logged that it will not dispatch (from the environment)."""
        text = ""
        for log in (self.home(name) / "logs").glob("*.log"):
            with contextlib.suppress(OSError):
                text += log.read_text(errors="replace")
        return DISPATCH_LINE in text

    def rows(self) -> dict[str, dict[str, Any]]:
        return {r["name"]: r for r in self.hermesd.status()["profiles"]}

    def close(self) -> None:
        leftovers = self.hermesd.close()
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.base, ignore_errors=True)
        assert not leftovers, f"tagged processes left behind: {leftovers}"


def proc_env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def children_of(pid: int) -> list[int]:
    out = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
    return out


@pytest.fixture
def need_hermes() -> None:
    if not HERMES.exists():
        pytest.skip(f"{HERMES} missing (hermes-agent not installed)")


@pytest.fixture
def boards() -> Iterator[list[Board]]:
    made: list[Board] = []
    try:
        yield made
    finally:
        for b in made:
            b.close()


__all__ = ["HERMES", "Board", "boards", "children_of", "need_hermes", "proc_env", "wait_for"]
