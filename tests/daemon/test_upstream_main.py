"""hermesd on upstream main after 0.22.2 (read, not run), with the fake gateway speaking that contract.

Every daemon here is a real ``hermesd run`` whose gateway command is ``python -m hermes_cli.main`` with
a fake installation first on ``PYTHONPATH`` whose ``gateway`` package has upstream main's modules
(``tests.fakegw.fake_install(main=True)``): hermesd's interpreter probe gives it the contract read
from upstream's code (``profiles.upstream.releases.UPSTREAM_MAIN``) by those modules, and the fake
behaves as that code does (attach check, host lock, ``identify``, tombstones, the start-up watchdog).
Every process a test starts is stopped by PID (the daemon's fixture stops its gateways).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from profiles.upstream.files import STARTUP_WATCHDOG_LOG, proc_start_time
from profiles.upstream.multiplex import FORCE_FLAG, HOST_RECORD
from supervisor.isolation.planning import hides_other_profiles
from supervisor.isolation.probing import probe
from supervisor.processes import identity
from supervisor.settings import IsolationSettings
from tests.fakegw import fake_install, write_behaviour
from tests.harness import REPO, Hermesd, wait_for, write_config

pytestmark = pytest.mark.live

STANDALONE = "gateway:\n  standalone: true\n"


@pytest.fixture
def main_daemon(tmp_path: Path) -> Iterator[Any]:
    """``make(names, **hermesd_yaml)``: a root whose named profiles are standalone, and a daemon on it.

    The root is a short folder: the fake gateway, like upstream, binds no ``gateway.sock`` whose path is
    over 100 bytes, and under pytest's per-worker tmp_path a named profile's was (its gateway then never
    answers the others' attach check)."""
    started: list[Hermesd] = []
    short = Path(tempfile.mkdtemp(prefix="hdm-", dir="/tmp"))

    def make(names: tuple[str, ...] = ("coder", "writer"), **config: object) -> Hermesd:
        root = short / "root"
        (root / "profiles").mkdir(parents=True)
        (root / "config.yaml").write_text("gateway:\n  auto_multiplex_migration: false\n")
        for name in names:
            (root / "profiles" / name).mkdir()
            (root / "profiles" / name / "config.yaml").write_text(STANDALONE)
        write_config(root, command=[sys.executable, "-m", "hermes_cli.main"], **config)
        top = fake_install(tmp_path, "0.21.3", main=True)  # upstream main's own version string
        d = Hermesd(root, env={"PYTHONPATH": f"{top}{os.pathsep}{REPO}"})
        started.append(d)
        return d

    yield make
    for d in started:
        d.close()
    shutil.rmtree(short, ignore_errors=True)


def _argv(pid: int) -> list[str]:
    return identity.proc_cmdline(pid)


def _lock_dir(d: Hermesd) -> Path:
    return Path(d.env["HOME"]) / ".local" / "state" / "hermes" / "gateway-locks"


def test_a_standalone_fleet_runs_without_force_where_the_attach_check_reaches_the_others(main_daemon) -> None:
    """Unconfined children get no --force (upstream's own attach check then guards each profile); a child
    whose private mount namespace hides the other homes gets it (the check could not reach them)."""
    d = main_daemon(isolation="off", profiles={"writer": {"isolation": "auto"}})
    d.start()
    pids = d.wait_running("default", "coder", "writer", timeout=40)
    hidden = hides_other_profiles(IsolationSettings(mode="auto"), probe())
    assert FORCE_FLAG not in _argv(pids["default"]) and FORCE_FLAG not in _argv(pids["coder"])
    assert (FORCE_FLAG in _argv(pids["writer"])) is hidden, (_argv(pids["writer"]), hidden)
    for name in ("default", "coder", "writer"):
        row = d.row(name)
        assert row["state"] == "running" and row.get("hold") is None, row
        home = d.root if name == "default" else d.root / "profiles" / name
        state = json.loads((home / "gateway_state.json").read_text())
        assert state["pid"] == pids[name] and state["served_profiles"] == [], state  # each serves itself only
    record = json.loads((_lock_dir(d) / HOST_RECORD).read_text())
    assert record["pid"] in (pids["default"], pids["coder"]), record  # an unconfined child owns the host
    status = d.status()
    assert status["supervisor"]["release_contract"] == "main", status["supervisor"]
    text = d.cli("status").stdout
    assert "upstream main after 0.22.2" in text and "read, not run" in text, text
    doctor = json.loads(d.cli("doctor", "--json").stdout)
    codes = {f["code"]: f for f in doctor["findings"]}
    assert "read, not run" in codes["release_newer_than_known"]["message"], codes
    assert "only a gateway whose confinement hides" in codes["release_multiplex_default"]["message"], codes


def test_a_transient_attach_verdict_is_retried_never_held(main_daemon, tmp_path: Path) -> None:
    """A live host owner that has not answered ``identify``: every child exits 75 before it writes any
    state (upstream: "transient, a supervisor must retry"). hermesd backs off and keeps trying, past the
    three attach exits that hold a profile on 0.22.2, names the owner, and runs it once the owner is gone."""
    d = main_daemon(("coder",), isolation="off")
    for home in (d.root, d.root / "profiles" / "coder"):
        write_behaviour(home, attach_wait=0.1)
    owner = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)  # a live PID; no socket answers for it
    try:
        folder = _lock_dir(d)
        folder.mkdir(parents=True)
        (folder / HOST_RECORD).write_text(json.dumps({
            "role": "gateway", "pid": owner.pid, "startTime": proc_start_time(owner.pid),
            "home": str(tmp_path / "elsewhere"), "profiles": []}))
        d.start()
        row = wait_for(lambda: (r := d.row("coder"))["restarts"] >= 4 and r, 40, what="4 attach exits of coder")
        assert row["state"] != "held" and row.get("hold") is None, row
        assert row["last_exit"]["kind"] == "attached" and row["last_exit"]["code"] == 75, row
        assert f"PID {owner.pid}" in row["last_exit"]["reason"], row
        assert "has not published its served set" in row["last_exit"]["reason"], row
    finally:
        owner.kill()
        owner.wait()
    d.wait_running("default", "coder", timeout=30)


@pytest.mark.parametrize("wedge", ["starting", "imports"])
def test_the_start_up_watchdog_is_a_start_up_failure_not_a_restart_request(main_daemon, wedge: str) -> None:
    """upstream's start-up watchdog exits 75, the code of a restart request. hermesd reads the record it
    left for that PID: a start-up that hung, backed off like a crash, whether or not the state file
    already named the process ("starting") or it never got that far (its imports)."""
    d = main_daemon(("coder",), isolation="off", environment={"HERMES_STARTUP_WATCHDOG_TIMEOUT_S": "0.5"})
    home = d.root / "profiles" / "coder"
    write_behaviour(home, startup_wedge=wedge, startup_watchdog_floor=0.1)
    d.start()
    d.wait_running("default", timeout=30)

    def events() -> list[dict[str, Any]]:
        return [json.loads(line) for line in d.cli("events", "coder", "--json").stdout.splitlines() if line.strip()]

    # Wait for two exits read as the watchdog's, not for two restarts: coder starts beside the default
    # gateway, and a first start that finds the host record before the default published its served
    # set exits 75 "attached" (upstream's transient attach verdict), which is a restart too.
    hung = wait_for(lambda: len(h := [e for e in events() if e["type"] == "exited" and e["kind"] == "startup_hung"])
                    >= 2 and h, 30, interval=0.5, what="two watchdog exits of coder")
    assert all(e["code"] == 75 for e in hung), hung
    row = d.row("coder")
    last = row["last_exit"]
    assert row["restarts"] >= 2 and (last["code"], last["kind"]) == (75, "startup_hung"), row
    assert "no live event loop after" in last["reason"] and STARTUP_WATCHDOG_LOG in last["reason"], last
    records = [json.loads(x) for x in (home / STARTUP_WATCHDOG_LOG).read_text().splitlines() if x.startswith("{")]
    assert {e["pid"] for e in hung} <= {r["pid"] for r in records}, (hung, records)  # each exit's own record
    assert {r["tag"] for r in records} == {"startup_watchdog.fired"}, records
    # counted as failures, backing off: the delay chosen after the second one counts both
    backoffs = [e for e in events() if e["type"] == "backoff" and e["seq"] > hung[1]["seq"]]
    assert backoffs and backoffs[0]["failures"] >= 2, (hung, backoffs)


def test_a_tombstone_stops_the_profile_at_once_and_only_identity_makes_a_profile(main_daemon) -> None:
    """``profiles/.deleted/NAME`` written while hermesd runs (upstream's delete) stops that profile's
    gateway without a reload and nothing else; removing it serves the profile again. A folder with no
    identity file is no profile until one appears."""
    d = main_daemon(isolation="off")
    ghost = d.root / "profiles" / "ghost"
    ghost.mkdir()
    tombstones = d.root / "profiles" / ".deleted"
    tombstones.mkdir()  # there already (an earlier delete): only a watch on it sees the next tombstone
    d.start()
    pids = d.wait_running("default", "coder", "writer", timeout=40)
    assert "ghost" not in {r["name"] for r in d.status()["profiles"]}
    (tombstones / "coder").write_text("deleted\n")
    wait_for(lambda: proc_start_time(pids["coder"]) is None, 15, what="coder's gateway stopped")
    wait_for(lambda: "coder" not in {r["name"] for r in d.status()["profiles"] if r["state"] != "absent"}, 10,
             what="coder no longer served")
    assert d.row("writer")["pid"] == pids["writer"] and d.row("default")["pid"] == pids["default"]
    (ghost / "config.yaml").write_text(STANDALONE)  # an identity file: now it is a profile
    d.wait_running("ghost", timeout=20)
    (tombstones / "coder").unlink()  # upstream's clear_named_profile_deleted (the profile re-created)
    d.wait_running("coder", timeout=20)
