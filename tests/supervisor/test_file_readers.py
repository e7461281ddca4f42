"""Junk in the files hermesd reads is read as nothing, never as a PID to act on or an exception.

The readers of a gateway's ``gateway.pid``, ``gateway_state.json`` and heartbeat, of hermesd's
``state.json`` and of its PID file, on every kind of junk a crash, a full disk or a hand edit leaves
(the fault suite, ``tests/faults/test_junk_files.py``, starts a daemon on the same junk).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from profiles.upstream import files as gf
from profiles.upstream.process import proc_start_time
from supervisor.daemon import state
from supervisor.layout import Layout
from supervisor.processes.lockholder import owner_pid, read_pid

VALID_PID = {"pid": 4242, "kind": "hermes-gateway", "argv": ["hermes", "gateway", "run"], "start_time": 99}
JUNK = {
    "empty": b"",
    "garbage": b"garbage",
    "truncated": json.dumps(VALID_PID).encode()[:23],
    "binary": bytes(range(256)) * 8,
    "nul_bytes": b"\x00" * 64,
    "wrong_types": json.dumps({"version": 1, "pid": "4242", "start_time": [1], "profiles": [],
                               "gateway_state": {"x": 1}, "updated_at": 12}).encode(),
    "not_an_object": b"[4242]",
    "pid_beyond_pid_max": b"99999999",
    "negative_pid": b"-1",
    "huge": b'{"pid": ' + b"9" * (3 << 20) + b"}",
}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "state").mkdir()
    return tmp_path


@pytest.mark.parametrize("kind", list(JUNK))
def test_gateway_files_of_junk_name_no_gateway(home, kind):
    for rel in (gf.PID_FILE, gf.STATE_FILE, gf.HEARTBEAT_FILE):
        (home / rel).write_bytes(JUNK[kind])
    assert gf.read_pid_record(home) is None
    assert gf.live_gateway(home) is None
    state_doc, beat = gf.read_gateway_state(home), gf.read_heartbeat(home)
    if kind == "wrong_types":  # an object: passed on as it is, each field checked where it is used
        assert state_doc["pid"] == "4242" and beat["updated_at"] == 12
        assert gf.heartbeat_age(beat) is None
    else:
        assert state_doc == {} and beat == {}


def test_a_fifo_is_not_read(home):
    os.mkfifo(home / gf.PID_FILE)
    os.mkfifo(home / gf.STATE_FILE)
    assert gf.read_pid_record(home) is None and gf.read_gateway_state(home) == {}


def test_a_live_pid_with_another_start_time_is_not_the_gateway(home):
    """PID 1 is alive, but not the process that started at tick 5: never taken for the gateway."""
    (home / gf.PID_FILE).write_text(json.dumps({"pid": 1, "start_time": 5}))
    assert gf.read_pid_record(home) == gf.PidRecord(1, 5, ())
    assert gf.live_gateway(home) is None


def test_a_live_process_that_is_no_gateway_is_not_the_gateway(home):
    """The right PID and start time of a process whose command line is not a gateway's (this one)."""
    me = os.getpid()
    (home / gf.PID_FILE).write_text(json.dumps({"pid": me, "start_time": proc_start_time(me)}))
    assert gf.read_pid_record(home) is not None
    assert gf.live_gateway(home) is None


@pytest.mark.parametrize("kind", list(JUNK))
def test_hermesd_state_of_junk_is_ignored_and_said(tmp_path, kind):
    path = tmp_path / "state.json"
    path.write_bytes(JUNK[kind])
    saved = state.load(path, "boot")
    assert saved.profiles == {}
    assert saved.problem == f"{path}: unreadable or not hermesd state; starting with empty history"


def test_hermesd_state_keeps_only_well_formed_profiles(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 1, "boot_id": "boot", "profiles": {
        "coder": {"restarts": 3, "pid": 4242}, "writer": [1], "7": "x"}}))
    saved = state.load(path, "boot")
    assert saved.problem is None and saved.profiles == {"coder": {"restarts": 3, "pid": 4242}}
    # from another boot, the history stays and the process identities go
    assert state.load(path, "another boot").profiles == {"coder": {"restarts": 3}}


@pytest.mark.parametrize("kind", list(JUNK))
def test_hermesd_pid_file_of_junk_names_no_daemon(tmp_path, kind):
    layout = Layout(tmp_path)
    layout.pidfile.parent.mkdir(parents=True)
    layout.pidfile.write_bytes(JUNK[kind])
    assert read_pid(layout.pidfile) == (99999999 if kind == "pid_beyond_pid_max" else None)
    assert owner_pid(layout) is None  # a PID is only named once a live process answers to it


def _fired(pid: int, ts: str, **extra: object) -> bytes:
    return json.dumps({"ts": ts, "tag": gf.STARTUP_WATCHDOG_TAG, "pid": pid, "timeout_s": 300.0,
                       "elapsed_s": 300.1, **extra}).encode() + b"\n"


def test_the_start_up_watchdog_record_names_its_process_and_its_time(home):
    """upstream's start-up watchdog appends one JSON record, then every thread's stack: the record of this
    PID written since the process started is found past junk and stacks; an older one (a recycled PID),
    another PID's, a link or a FIFO in its place is not."""
    log = home / gf.STARTUP_WATCHDOG_LOG
    log.parent.mkdir()
    stacks = b"".join(b'  File "gateway/run.py", line %d in main\n' % i for i in range(5000))
    log.write_bytes(_fired(4242, "2026-12-01T10:00:00+00:00") + b"{not json startup_watchdog.fired\n" + stacks
                    + _fired(5151, "2026-12-03T10:00:00+00:00") + _fired(4242, "2026-12-03T10:00:00+00:00",
                                                                            tag="other") + stacks)
    started = 1796289600.0  # 2026-12-03T09:20:00Z
    assert gf.startup_watchdog_fired(home, 4242, started) is None  # only an older firing, and another tag
    assert gf.startup_watchdog_fired(home, 5151, started)["pid"] == 5151
    with log.open("ab") as f:
        f.write(_fired(4242, "2026-12-03T10:05:00+00:00") + stacks)
    assert gf.startup_watchdog_fired(home, 4242, started)["elapsed_s"] == 300.1
    assert gf.startup_watchdog_fired(home, 4242, started + 3600) is None  # fired before that process started
    log.rename(home / "elsewhere.log")
    log.symlink_to(home / "elsewhere.log")
    assert gf.startup_watchdog_fired(home, 4242, started) is None  # a link planted by the profile: not followed
    log.unlink()
    os.mkfifo(log)
    assert gf.startup_watchdog_fired(home, 4242, started) is None
