"""Children that resist: ignore SIGTERM, are SIGSTOPped, fork (setsid) grandchildren."""

from __future__ import annotations

import os
import signal
import time

import pytest

from profiles.upstream import files as gf
from profiles.upstream.process import proc_start_time
from tests.fakegw import read_spawned, read_starts, write_behaviour
from tests.faults.helpers import alive_exact, gateway_leaders, tagged_by_profile
from tests.harness import pid_alive, tagged_pids, wait_for, write_config


def homes(root):
    return {"default": root, "coder": root / "profiles" / "coder", "writer": root / "profiles" / "writer"}


def snapshot(root) -> dict[int, int]:
    """Every tagged process of the root, pid -> start time."""
    out = {}
    for pids in tagged_by_profile(root).values():
        for pid in pids:
            st = proc_start_time(pid)
            if st is not None:
                out[pid] = st
    return out


@pytest.mark.slow
def test_full_stop_leaves_no_process_of_any_profile(fake_root, hermesd_factory, faults):
    """SIGTERM ignored, setsid and non-setsid grandchildren, a detached shell spawned at SIGTERM."""
    write_config(fake_root, stop_timeout=1.5)
    h = homes(fake_root)
    write_behaviour(h["coder"], ignore_sigterm=True, grandchildren=4, grandchildren_setsid=2)
    write_behaviour(h["writer"], diagnostic_shell=True, diagnostic_seconds=30, grandchildren=3,
                    grandchildren_setsid=1)
    write_behaviour(h["default"], grandchildren=2, grandchildren_setsid=True)
    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    for name, n in (("coder", 4), ("writer", 3), ("default", 2)):
        wait_for(lambda name=name, n=n: len(read_spawned(h[name])) >= n, what=f"{name} grandchildren")
    before = snapshot(fake_root)
    assert len(before) == 3 + 4 + 3 + 2

    out = d.cli("stop")
    assert out.returncode == 0, out.stderr
    assert d.proc.wait(20) == 0
    # Nothing may survive the daemon: not the stubborn gateway, not a setsid'd grandchild, not the
    # diagnostic shell writer spawned on SIGTERM (and its own children), which were born during the stop.
    spawned = [(g["pid"], g["start_time"]) for name in h for g in read_spawned(h[name])]
    assert any(g["kind"] == "diagnostic" for g in read_spawned(h["writer"]))
    victims = {**before, **dict(spawned)}
    left_tagged = tagged_pids(fake_root)
    survivors = sorted({p for p, st in victims.items() if alive_exact(p, st)} | set(left_tagged))
    faults.inject(len(victims))
    faults.survive(len(victims) - len([p for p in survivors if p in victims]))
    faults.lose(len(survivors), f"alive after hermesd stop: {survivors}")
    assert survivors == [], {p: os.popen(f"ps -o pid,sid,args -p {p}").read() for p in survivors}
    assert d.close() == []


def test_sigstopped_child_is_left_alone_then_stopped_by_sigkill(fake_root, hermesd_factory, faults):
    write_config(fake_root, stop_timeout=1.5)
    h = homes(fake_root)
    for home in h.values():
        write_behaviour(home, write_counter=True, heartbeat_interval=0.3)
    d = hermesd_factory(fake_root)
    pids = d.wait_running("default", "coder", "writer")

    # Frozen for a while, then thawed: not a death, so no restart and no new process.
    os.kill(pids["coder"], signal.SIGSTOP)
    faults.inject()
    wait_for(lambda: gf.read_heartbeat(h["coder"]) and d.row("coder")["heartbeat_age_s"] >= 2.0, 10,
             what="coder's heartbeat going stale while it is stopped")
    row = d.row("coder")
    faults.check(row["pid"] == pids["coder"] and row["restarts"] == 0 and len(read_starts(h["coder"])) == 1,
                 "a SIGSTOPped child was replaced")
    assert row["state"] == "running" and row["pid"] == pids["coder"] and row["restarts"] == 0
    assert len(read_starts(h["coder"])) == 1
    os.kill(pids["coder"], signal.SIGCONT)
    wait_for(lambda: d.row("coder")["heartbeat_age_s"] < 1.0, 10, what="coder beating again")
    assert d.row("coder")["pid"] == pids["coder"]

    # Stopped (SIGTERM stays pending in a stopped process): the stop completes through SIGKILL.
    os.kill(pids["coder"], signal.SIGSTOP)
    faults.inject()
    t0 = time.monotonic()
    assert d.cli("stop", "coder").returncode == 0
    row = d.wait_state("coder", "stopped", timeout=15)
    took = time.monotonic() - t0
    ok = row["last_exit"]["signal"] == "SIGKILL" and not pid_alive(pids["coder"])
    faults.check(ok, "stop of a SIGSTOPped child did not complete")
    assert ok, row
    assert took < 10, took

    # The same for the whole daemon: a stopped child must not hang hermesd's shutdown.
    os.kill(pids["writer"], signal.SIGSTOP)
    faults.inject()
    out = d.cli("stop")
    assert out.returncode == 0, out.stderr
    ok = d.proc.wait(20) == 0 and not pid_alive(pids["writer"]) and tagged_pids(fake_root) == []
    faults.check(ok, "daemon shutdown with a SIGSTOPped child left something")
    assert ok
    assert len(read_starts(h["writer"])) == 1 and len(read_starts(h["default"])) == 1


def test_crashed_gateway_takes_its_grandchildren_along(fake_root, hermesd_factory, faults):
    coder = homes(fake_root)["coder"]
    write_behaviour(coder, grandchildren=4, grandchildren_setsid=2)
    d = hermesd_factory(fake_root)
    pid = d.wait_running("coder")["coder"]
    first = wait_for(lambda: len(x := read_spawned(coder)) >= 4 and x, what="grandchildren")
    for _round in range(3):
        faults.inject()
        os.kill(pid, signal.SIGKILL)
        row = wait_for(lambda pid=pid: (r := d.row("coder"))["state"] == "running" and r["pid"] != pid and r,
                       15, what="coder respawned")
        old_left = [g["pid"] for g in first if alive_exact(g["pid"], g["start_time"])]
        pid = row["pid"]
        fresh = wait_for(lambda pid=pid: len(x := [g for g in read_spawned(coder) if g["parent"] == pid]) >= 4
                         and x, what="new grandchildren")
        mine = sorted([pid] + [g["pid"] for g in fresh])
        ok = old_left == [] and tagged_by_profile(fake_root)["coder"] == mine \
            and gateway_leaders(fake_root)["coder"] == [pid]
        faults.check(ok, f"after a crash: old grandchildren {old_left}, coder processes "
                         f"{tagged_by_profile(fake_root)['coder']} (expected {mine})")
        assert ok
        first = fresh
    assert d.row("coder")["restarts"] == 3
