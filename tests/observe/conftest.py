"""Helpers for the observe tests: a private events folder, scripted event sequences, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = ["-m", "supervisor"]  # the real entry point, as `hermesd` runs it


@pytest.fixture
def events_dir(tmp_path: Path) -> Path:
    d = tmp_path / "root" / ".hermesd"
    d.mkdir(parents=True, mode=0o700)
    (tmp_path / "root" / "profiles").mkdir()
    return d / "events"


@pytest.fixture
def events_root(events_dir: Path) -> Path:
    """The root above ``events_dir`` (its journal in ``.hermesd/events``)."""
    return events_dir.parent.parent


def run_cli(*args: str, timeout: float = 30.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``hermesd ARGS`` in a fresh interpreter, as a user would run it."""
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO), "LANG": "C.UTF-8",
                "HOME": os.environ.get("HOME", "/root"), "NO_COLOR": "1", **(env or {})}
    return subprocess.run([sys.executable, *CLI, *args], capture_output=True, text=True, timeout=timeout,
                          env=full_env, cwd="/")


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
