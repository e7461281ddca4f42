"""Helpers for tests that run the fake gateway (``fakegw.py``) instead of the real ``hermes``.

Configure hermesd to run ``fake_gateway_command()`` as its "hermes" executable; hermesd appends
``[-p NAME] gateway run --external-supervisor``. Tune each profile with
``write_behaviour(profile_home, **knobs)`` before (re)starting it; the fake reads
``<HERMES_HOME>/fakegw.json`` once at start (missing file = defaults; a bad file = exit 2).

Knobs (defaults and one-line meanings in ``fakegw.DEFAULTS``): ``exit_at_start``, ``exit_after``,
``exit_code``, ``exit_after_clean``, ``startup_delay``, ``running_delay``, ``startup_tail``,
``ignore_sigterm``, ``hang_on_exit``, ``exit_tail``, ``grandchildren``, ``grandchildren_setsid``,
``grandchildren_lifetime``, ``platforms``, ``active_agents``, ``heartbeat_interval``,
``poll_interval``, ``diagnostic_shell``, ``diagnostic_seconds``, ``print_env``, ``write_counter``,
``shell``, ``api_server``,
and for upstream main's line ``attach_wait``, ``startup_wedge``, ``startup_watchdog_floor``.

Which contract it speaks follows its installation's code, as hermesd's probe decides it: run plainly
it is hermes-agent 0.19.0's; run as ``python -m hermes_cli.main`` from a folder :func:`fake_install`
made with ``main=True`` (whose ``gateway`` package has upstream main's modules) it is upstream main's
after 0.22.2: identity files and tombstones decide what a profile is, a run without ``--force`` makes
upstream's attach check (host record and lock beside the credential locks, ``identify`` over each
gateway's ``gateway.sock``; a standalone profile starts beside the others, a transient verdict exits
75, a permanent one 78), and the start-up watchdog exits 75 leaving its record in
``logs/gateway-startup-watchdog.log``.

An unmarked SIGTERM ends the fake as it ends upstream, by phase: killed by the signal during
``startup_delay`` (upstream's imports); exit 0 with state ``running`` during start-up
(``running_delay``, ``startup_tail``); exit 1 with state ``running`` once started. With the
default knobs, "state is running" means "started".

Files the fake writes for tests, next to upstream's: ``fakegw.starts`` (one PID per start, with
``write_counter``) and ``fakegw.children`` (one JSON object per spawned grandchild or diagnostic
shell: ``pid, start_time, kind, setsid, parent``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

FAKEGW: Path = Path(__file__).resolve().with_name("fakegw.py")

BEHAVIOUR_FILE = "fakegw.json"
STARTS_FILE = "fakegw.starts"
SPAWNED_FILE = "fakegw.children"
ENV_REPORT_PREFIX = "fakegw env "

# Kept in step with fakegw.DEFAULTS (tests/test_fakegw.py checks it).
KNOBS: frozenset[str] = frozenset(
    {
        "exit_at_start",
        "exit_after",
        "exit_code",
        "exit_after_clean",
        "startup_delay",
        "running_delay",
        "startup_tail",
        "ignore_sigterm",
        "hang_on_exit",
        "exit_tail",
        "grandchildren",
        "grandchildren_setsid",
        "grandchildren_lifetime",
        "platforms",
        "active_agents",
        "heartbeat_interval",
        "poll_interval",
        "diagnostic_shell",
        "diagnostic_seconds",
        "print_env",
        "shell",
        "write_counter",
        "api_server",
        "attach_wait",
        "startup_wedge",
        "startup_watchdog_floor",
    }
)

# Modules whose presence makes the fake (and hermesd's probe) take an installation for upstream main's
# code (profiles/upstream/releases.py MAIN_MARKERS; host_attach stays there behind the compatibility layer).
MAIN_GATEWAY_MODULES = ("host_attach", "multiplex_mode", "profile_serving", "served_profiles")


def fake_gateway_command() -> list[str]:
    """The command to configure as hermesd's "hermes" executable."""
    return [sys.executable, str(FAKEGW)]


def fake_install(base: Path, version: str, *, main: bool = False) -> Path:
    """A folder to put first on ``PYTHONPATH``: a ``hermes_cli`` package of ``version`` whose ``main`` runs
    the fake gateway, and with ``main`` a ``gateway`` package holding upstream main's marker modules.

    hermesd's interpreter probe reads the version and the markers from it, exactly as from a real
    installation; run it as ``[sys.executable, "-m", "hermes_cli.main"]``.
    """
    top = base / (f"fake-{version}-main" if main else f"fake-{version}")
    pkg = top / "hermes_cli"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (pkg / "main.py").write_text(f"import runpy\nrunpy.run_path({str(FAKEGW)!r}, run_name='__main__')\n")
    if main:
        gateway = top / "gateway"
        gateway.mkdir()
        (gateway / "__init__.py").write_text("")
        for name in MAIN_GATEWAY_MODULES:
            (gateway / f"{name}.py").write_text("# a marker of upstream main's code layout (tests/fakegw)\n")
    return top


def write_behaviour(home: Path, **knobs: Any) -> Path:
    """Write ``<home>/fakegw.json`` (atomically) with exactly ``knobs``; returns its path.

    Only the names are checked here (a typo raises ``TypeError`` in the test, not exit 2 in
    the child); the fake checks the values when it starts.
    """
    unknown = sorted(set(knobs) - KNOBS)
    if unknown:
        raise TypeError(f"unknown fakegw knob(s): {', '.join(unknown)}")
    home.mkdir(parents=True, exist_ok=True)
    path = home / BEHAVIOUR_FILE
    tmp = path.with_name(f".{BEHAVIOUR_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(knobs, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_starts(home: Path) -> list[int]:
    """PIDs of the fake's starts in ``home`` (needs ``write_counter=True``), oldest first."""
    try:
        lines = (home / STARTS_FILE).read_text(encoding="utf-8").split()
    except FileNotFoundError:
        return []
    return [int(x) for x in lines]


def read_spawned(home: Path) -> list[dict[str, Any]]:
    """Grandchildren and diagnostic shells the fake spawned in ``home``, oldest first.

    Each is ``{"pid", "start_time", "kind": "grandchild"|"diagnostic", "setsid", "parent"}``;
    compare ``start_time`` with ``/proc/<pid>/stat`` before signalling a PID.
    """
    try:
        text = (home / SPAWNED_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def parse_env_report(output: str) -> dict[str, str | None]:
    """The ``print_env`` report in the fake's stdout: name -> value (``None`` when unset)."""
    report: dict[str, str | None] = {}
    for line in output.splitlines():
        if line.startswith(ENV_REPORT_PREFIX):
            report.update(json.loads(line[len(ENV_REPORT_PREFIX) :]))
    return report
