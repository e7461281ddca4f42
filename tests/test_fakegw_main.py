"""The fake gateway speaks upstream main's contract (after 0.22.2) when its installation's code is main's.

What it follows was read in NousResearch/hermes-agent (docs/upstream.md names files and commits):
``gateway/host_attach.py`` (attach, standalone beside a standalone owner, transient verdicts),
``gateway/run.py`` (the host lock), ``hermes_cli/gateway.py`` (75 transient, 78 permanent),
``profiles/registry.py`` and ``hermes_constants.py`` (identity files, tombstones), and
``hermes_startup_watchdog.py``. Each test runs real fake gateways with deadlines and polling; every
process started here is killed by PID at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from profiles.upstream.files import STARTUP_WATCHDOG_LOG, STARTUP_WATCHDOG_TAG, proc_start_time
from profiles.upstream.multiplex import HOST_RECORD
from tests.fakegw import fake_install, write_behaviour
from tests.harness import wait_for

pytestmark = pytest.mark.live  # every test here runs the fake gateway

STANDALONE = "gateway:\n  standalone: true\n"


class Host:
    """A root with the default profile, ``coder`` (standalone) and ``writer`` (not), run by main's fake."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "root"
        for name, config in (("coder", STANDALONE), ("writer", "model: {default: x}\n")):
            (self.root / "profiles" / name).mkdir(parents=True)
            (self.root / "profiles" / name / "config.yaml").write_text(config)
        (self.root / "config.yaml").write_text("")
        self.lock_dir = tmp / "home" / ".local" / "state" / "hermes" / "gateway-locks"
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp / "home"),
                    "PYTHONPATH": str(fake_install(tmp, "0.21.3", main=True))}
        self.procs: list[subprocess.Popen[str]] = []

    def home(self, name: str) -> Path:
        return self.root if name == "default" else self.root / "profiles" / name

    def run(self, name: str, *flags: str, supervised: bool = True, **env: str) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "hermes_cli.main", *(["-p", name] if name != "default" else []),
                "gateway", "run", *(("--external-supervisor",) if supervised else ()), *flags]
        proc = subprocess.Popen(argv, env={**self.env, "HERMES_HOME": str(self.home(name)), **env},
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.procs.append(proc)
        return proc

    def state(self, name: str) -> dict[str, Any]:
        try:
            return json.loads((self.home(name) / "gateway_state.json").read_text())
        except (OSError, ValueError):
            return {}

    def running(self, name: str, proc: subprocess.Popen[str]) -> dict[str, Any]:
        return wait_for(lambda: (s := self.state(name)).get("pid") == proc.pid and s.get("gateway_state") == "running"
                        and s, 15, what=f"{name} running")

    def ended(self, proc: subprocess.Popen[str]) -> tuple[int, str]:
        out, _ = proc.communicate(timeout=20)
        return proc.returncode, out

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=10)


@pytest.fixture
def host() -> Iterator[Host]:
    # A short folder: the fake, like upstream, binds no gateway.sock whose path is over 100 bytes, and
    # pytest's tmp_path under a worker (popen-gwN/) made coder's 105: its gateway never answered identify.
    short = Path(tempfile.mkdtemp(prefix="fgw-", dir="/tmp"))
    h = Host(short)
    try:
        yield h
    finally:
        h.close()
        shutil.rmtree(short, ignore_errors=True)


def test_a_standalone_profile_starts_without_force_beside_the_hosts_gateway(host: Host) -> None:
    default = host.run("default")
    state = host.running("default", default)
    assert state["served_profiles"] == ["default", "writer"], state  # the host multiplexes what is not standalone
    record = json.loads((host.lock_dir / HOST_RECORD).read_text())
    assert (record["pid"], record["home"], record["profiles"]) == (default.pid, str(host.root), ["default", "writer"])
    coder = host.run("coder")
    assert host.running("coder", coder)["served_profiles"] == []  # itself only
    assert json.loads((host.lock_dir / HOST_RECORD).read_text())["pid"] == default.pid


def test_a_profile_the_host_serves_attaches_75_supervised_0_by_hand(host: Host) -> None:
    default = host.run("default")
    host.running("default", default)
    code, out = host.ended(host.run("writer"))
    assert code == 75 and "already serves profile 'writer'" in out, out
    code, out = host.ended(host.run("writer", supervised=False, HERMES_S6_SUPERVISED_CHILD=""))
    assert code == 0 and "already serves profile 'writer'" in out, out
    assert not (host.home("writer") / "gateway.pid").exists() and not host.state("writer")


def test_a_named_profile_without_standalone_gets_no_gateway_of_its_own_78(host: Host) -> None:
    code, out = host.ended(host.run("writer"))
    assert code == 78 and "does not get a gateway of its own" in out, out
    proc = host.run("writer", "--force")  # the one escape
    host.running("writer", proc)


def test_an_owner_that_has_not_answered_is_a_transient_verdict_75(host: Host, tmp_path: Path) -> None:
    owner = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    try:
        host.lock_dir.mkdir(parents=True)
        (host.lock_dir / HOST_RECORD).write_text(json.dumps({"pid": owner.pid, "startTime": proc_start_time(owner.pid),
                                                             "home": str(tmp_path / "nowhere")}))
        write_behaviour(host.home("coder"), attach_wait=0.2)
        t0 = time.monotonic()
        code, out = host.ended(host.run("coder"))
        assert code == 75 and "has not published its served set" in out and f"PID {owner.pid}" in out, out
        assert time.monotonic() - t0 >= 0.2  # it gave the owner its window first
    finally:
        owner.kill()
        owner.wait()
    coder = host.run("coder")  # the owner gone, its record stale: it starts and owns the host
    host.running("coder", coder)
    assert json.loads((host.lock_dir / HOST_RECORD).read_text())["pid"] == coder.pid


def test_a_second_gateway_for_a_standalone_profile_is_refused_transient(host: Host) -> None:
    # The second one asks the first for its served set for attach_wait seconds (upstream: 5 s); on a
    # loaded machine the first one's control socket may answer later than that, which is the other
    # transient verdict ("not published yet"), not the one this test is about.
    write_behaviour(host.home("coder"), attach_wait=15.0)
    first = host.run("coder")
    host.running("coder", first)
    code, out = host.ended(host.run("coder"))
    assert code == 75 and "still serves profile 'coder'" in out, out


@pytest.mark.parametrize("case", ["tombstone", "no identity"])
def test_a_tombstoned_or_identityless_folder_is_no_profile(host: Host, case: str) -> None:
    if case == "tombstone":
        (host.root / "profiles" / ".deleted").mkdir()
        (host.root / "profiles" / ".deleted" / "coder").write_text("deleted\n")
    else:
        (host.home("coder") / "config.yaml").unlink()
    code, out = host.ended(host.run("coder", "--force"))
    assert code == 1 and "Profile 'coder' does not exist" in out, out


@pytest.mark.parametrize("wedge", ["starting", "imports"])
def test_the_start_up_watchdog_exits_75_and_leaves_its_record(host: Host, wedge: str) -> None:
    write_behaviour(host.home("coder"), startup_wedge=wedge, startup_watchdog_floor=0.1)
    proc = host.run("coder", HERMES_STARTUP_WATCHDOG_TIMEOUT_S="0.3")
    code, out = host.ended(proc)
    assert code == 75 and "did not reach a live event loop" in out, out
    (line, *_rest) = (host.home("coder") / STARTUP_WATCHDOG_LOG).read_text().splitlines()
    record = json.loads(line)
    assert (record["tag"], record["pid"], record["timeout_s"]) == (STARTUP_WATCHDOG_TAG, proc.pid, 0.3), record
    assert record["elapsed_s"] >= 0.3
    assert host.state("coder").get("gateway_state") == ("starting" if wedge == "starting" else None)


def test_the_per_profile_fake_knows_none_of_it(tmp_path: Path) -> None:
    """Run plainly (no main markers in its interpreter) the fake is 0.19.0's: no socket, no host record."""
    home = tmp_path / "root" / "profiles" / "coder"
    home.mkdir(parents=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"), "HERMES_HOME": str(home)}
    from tests.fakegw import fake_gateway_command

    proc = subprocess.Popen([*fake_gateway_command(), "-p", "coder", "gateway", "run", "--external-supervisor"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (home / "gateway_state.json").exists() and json.loads(
            (home / "gateway_state.json").read_text()).get("gateway_state") == "running", 15, what="running")
        state = json.loads((home / "gateway_state.json").read_text())
        assert "served_profiles" not in state and "hermes_home" not in state
        assert not (home / "gateway.sock").exists() and not (tmp_path / "home" / ".local").exists()
    finally:
        proc.kill()
        proc.wait()
