"""SIGKILL of hermesd in the middle of a spawn, a stop, a restart, and at random during start-up.

After each kill a new hermesd runs on the same root. Nothing may be duplicated (exactly one
gateway per profile), nothing left unsupervised (every tagged process belongs to a gateway the
new daemon adopted), and history (restart counts, operator stops) must carry over.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from tests.fakegw import read_spawned, read_starts, write_behaviour
from tests.faults.helpers import alive_exact, converged, eventually, gateway_leaders
from tests.harness import pid_alive, wait_for, write_config


def homes(root):
    return {"default": root, "coder": root / "profiles" / "coder", "writer": root / "profiles" / "writer"}


def give_writer_a_restart(d) -> None:
    pid = d.wait_running("writer")["writer"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: (r := d.row("writer"))["state"] == "running" and r["restarts"] == 1, 15,
             what="writer restarted once")


def test_sigkill_during_spawn(fake_root, hermesd_factory, faults):
    """hermesd dies while the gateway it just respawned is still starting (3 s before gateway.pid)."""
    h = homes(fake_root)
    for home in h.values():
        write_behaviour(home, write_counter=True)
    write_behaviour(h["coder"], write_counter=True, startup_delay=3.0)
    d = hermesd_factory(fake_root)
    old = d.wait_running("coder", timeout=20)["coder"]
    os.kill(old, signal.SIGKILL)  # crash: respawned at once, and the new one takes 3 s to start
    row = wait_for(lambda: (r := d.row("coder"))["pid"] not in (None, old) and r, 10, what="coder respawned")
    assert row["state"] == "starting"
    mid_start = row["pid"]
    faults.inject()
    d.kill9()
    assert pid_alive(mid_start)

    d2 = hermesd_factory(fake_root)
    pids = converged(d2, fake_root, {"default", "coder", "writer"}, faults)
    row = d2.row("coder")
    ok = pids["coder"] == mid_start and row["adopted"] and row["restarts"] == 1
    ok = ok and read_starts(h["coder"]) == [old, mid_start]
    ok = ok and all(len(read_starts(h[n])) == 1 for n in ("default", "writer"))
    faults.check(ok, f"coder after the kill: {row}, starts {read_starts(h['coder'])}")
    assert ok


def start_with_stubborn_coder(root, hermesd_factory, stubborn, stop_timeout):
    """A running daemon whose coder gateway is hard to stop and whose writer has one restart."""
    write_config(root, stop_timeout=stop_timeout)
    h = homes(root)
    for home in h.values():
        write_behaviour(home, write_counter=True)
    write_behaviour(h["coder"], write_counter=True, **stubborn)
    d = hermesd_factory(root)
    d.wait_running("default", "coder", "writer")
    give_writer_a_restart(d)
    return d, h, d.wait_running("default", "coder", "writer")


@pytest.mark.parametrize("stubborn", [{"ignore_sigterm": True}, {"hang_on_exit": 2.5}],
                         ids=["ignores_sigterm", "slow_drain"])
def test_sigkill_during_stop(fake_root, hermesd_factory, faults, stubborn):
    """hermesd dies while an operator stop waits for a gateway that ignores SIGTERM or drains slowly."""
    d, h, before = start_with_stubborn_coder(fake_root, hermesd_factory, stubborn, stop_timeout=3)
    assert d.cli("stop", "coder", "--no-wait").returncode == 0
    d.wait_state("coder", "stopping")
    faults.inject()
    d.kill9()

    d2 = hermesd_factory(fake_root)
    row = d2.wait_state("coder", "stopped", timeout=20)
    pids = converged(d2, fake_root, {"default", "writer"}, faults)
    ok = (
        pids == {"default": before["default"], "writer": before["writer"]}
        and row["reason"] == "stopped by operator"
        and not pid_alive(before["coder"])
        and d2.row("writer")["restarts"] == 1
        and len(read_starts(h["coder"])) == 1
    )
    faults.check(ok, f"after a kill during a stop: coder {row}, writer {d2.row('writer')}")
    assert ok


@pytest.mark.parametrize("stubborn", [{"ignore_sigterm": True}, {"hang_on_exit": 5.0}],
                         ids=["ignores_sigterm", "slow_drain"])
def test_sigkill_during_restart(fake_root, hermesd_factory, faults, stubborn):
    """hermesd dies while an operator restart waits for the old gateway to go."""
    d, _h, before = start_with_stubborn_coder(fake_root, hermesd_factory, stubborn, stop_timeout=6)
    assert d.cli("restart", "coder", "--no-wait").returncode == 0
    d.wait_state("coder", "stopping")
    faults.inject()
    d.kill9()
    assert pid_alive(before["coder"])  # the kill landed while the old gateway was still going

    d2 = hermesd_factory(fake_root)
    # The restart the operator asked for must still happen: a new coder, counted once.
    came_back = eventually(lambda: (r := d2.row("coder"))["pid"] not in (None, before["coder"])
                           and r["state"] == "running", 14)
    got = d2.row("coder")
    ok = came_back and got["restarts"] == 1 and d2.row("writer")["restarts"] == 1
    faults.check(ok, f"restart lost across the kill: coder {got['state']} pid {got['pid']} "
                     f"(was {before['coder']}), reason {got['reason']!r}, restarts {got['restarts']}")
    # Whatever became of the restart: nothing duplicated, nothing stray.
    running = {"default", "writer"} | ({"coder"} if got["state"] == "running" else set())
    pids = converged(d2, fake_root, running, faults)
    assert pids["writer"] == before["writer"]
    assert ok


@pytest.mark.slow
def test_sigkill_at_random_moments_of_start_up(fake_root, hermesd_factory, faults):
    """Six daemons killed 0-0.3 s after exec, each with two new profiles to spawn besides the ones
    to adopt; then one daemon that lives. Every gateway must have been started exactly once."""
    h = homes(fake_root)
    for home in h.values():
        write_behaviour(home, write_counter=True, startup_delay=0.3)
    rng = random.Random(1234)
    landed = {"before its spawns": 0, "between its spawns": 0, "after its spawns": 0}
    for i in range(6):
        for new in (f"r{i}a", f"r{i}b"):
            h[new] = fake_root / "profiles" / new
            write_behaviour(h[new], write_counter=True, startup_delay=0.3)
        d = hermesd_factory(fake_root, start=False)
        d.start(wait_ready=False)
        time.sleep(rng.uniform(0.0, 0.3))  # fault timing, not synchronisation: kill wherever start-up is
        faults.inject()
        d.kill9()
        up = sum(1 for n in (f"r{i}a", f"r{i}b") if n in gateway_leaders(fake_root))
        landed[("before its spawns", "between its spawns", "after its spawns")[up]] += 1
    faults.note(f"kills landed: {landed}")
    d = hermesd_factory(fake_root)
    converged(d, fake_root, set(h), faults)
    starts = {n: read_starts(home) for n, home in h.items()}
    dup = {n: s for n, s in starts.items() if len(s) != 1}
    faults.survive(faults.injected if not dup else 0)
    faults.lose(sum(len(s) - 1 for s in dup.values()), f"gateways started more than once: {dup}")
    assert dup == {}, starts
    assert all(d.row(n)["restarts"] == 0 for n in h)


def test_orphans_of_a_gateway_that_died_while_hermesd_was_down(fake_root, hermesd_factory, faults):
    coder = homes(fake_root)["coder"]
    write_behaviour(coder, grandchildren=3, grandchildren_setsid=2, write_counter=True)
    d = hermesd_factory(fake_root)
    old = d.wait_running("coder")["coder"]
    kids = wait_for(lambda: len(x := read_spawned(coder)) >= 3 and x, what="grandchildren")
    d.kill9()
    os.kill(old, signal.SIGKILL)  # the gateway dies with nobody watching; its grandchildren live on
    wait_for(lambda: not pid_alive(old), what="old coder gone")
    assert all(alive_exact(k["pid"], k["start_time"]) for k in kids)
    faults.inject(len(kids))

    d2 = hermesd_factory(fake_root)
    new = d2.wait_running("coder")["coder"]
    assert new != old and read_starts(coder)[-1] == new
    gone = eventually(lambda: not any(alive_exact(k["pid"], k["start_time"]) for k in kids), 6)
    left = [k["pid"] for k in kids if alive_exact(k["pid"], k["start_time"])]
    faults.survive(len(kids) - len(left))
    faults.lose(len(left), f"orphans of PID {old} still running beside PID {new}: {left}")
    assert gone, left
