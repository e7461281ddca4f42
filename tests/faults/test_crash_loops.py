"""Children that crash: at once and forever, or every second or so. Backoff, accounting, CPU."""

from __future__ import annotations

import itertools
import re
import time

import pytest

from tests.fakegw import read_starts, write_behaviour
from tests.faults.helpers import (
    daemon_cpu_seconds,
    gateway_leaders,
    retry_delays,
    sample_max_leaders,
    tagged_by_profile,
)
from tests.harness import pid_alive, wait_for, write_config

CAP = 0.8


def settle_and_account(d, root, name, faults) -> dict:
    """Stop ``name`` and check that every crash of the fake was counted as exactly one restart.

    Each start the fake recorded either crashed (a fault hermesd must count and answer with a
    restart) or was the last one, stopped here by the operator (a planned exit, not counted).
    """
    home = root / "profiles" / name
    assert d.cli("stop", name).returncode == 0
    row = d.wait_state(name, "stopped", timeout=20)
    starts = read_starts(home)
    # The child stopped here may have died before it could record its start: find it by hermesd's
    # note in the child's log, and count every other recorded start as one crash.
    planned = {int(m) for m in re.findall(r"hermesd: PID (\d+) .*\(planned\)", d.layout.child_log(name).read_text())}
    assert (row["last_exit"]["kind"] == "planned") == bool(planned), (row, planned)
    crashes = len([p for p in starts if p not in planned])
    faults.inject(crashes)
    faults.survive(min(crashes, row["restarts"]))
    faults.lose(abs(crashes - row["restarts"]), f"{crashes} crashes but {row['restarts']} restarts counted")
    leftovers = tagged_by_profile(root).get(name, [])
    faults.lose(len(leftovers), f"left running after stop: {leftovers}")
    assert row["restarts"] == crashes, (starts, row)
    assert leftovers == []
    assert not any(pid_alive(p) for p in starts)
    return row


@pytest.mark.slow
def test_exit_at_once_forever_backs_off_to_cap_cheaply(fake_root, hermesd_factory, faults):
    write_config(fake_root, restart={"initial_delay": 0.1, "max_delay": CAP, "factor": 2.0, "jitter": 0.0,
                                "healthy_after": 3.0})
    coder = fake_root / "profiles" / "coder"
    write_behaviour(coder, exit_at_start=1, write_counter=True)
    d = hermesd_factory(fake_root)
    others = d.wait_running("default", "writer")

    # The announced delays double from initial_delay up to the cap, then stay there.
    delays = wait_for(lambda: (x := retry_delays(d.log.read_text(), "coder")) and len(x) >= 7 and x, 30,
                      what="seven backoff delays")
    assert delays[:4] == [0.1, 0.2, 0.4, CAP], delays
    assert all(a <= b for a, b in itertools.pairwise(delays)), delays
    assert max(delays) == CAP and delays[-3:] == [CAP] * 3, delays

    # status says when the next attempt happens, never further away than the cap.
    row = d.wait_state("coder", "backoff", timeout=10)
    now = time.time()
    assert row["next_retry_at"] is not None and now - 0.5 <= row["next_retry_at"] <= now + CAP + 0.5, row
    assert row["reason"] == "crash loop" and row["last_exit"]["code"] == 1
    # (the human view too; asked until a snapshot lands inside a backoff rather than a start)
    wait_for(lambda: "coder: backoff: crash loop; retry at" in d.cli("status").stdout, 20,
             what="'retry at' in hermesd status")

    # hermesd's own cost while the child dies ~once per cap: well under 10 % of one core.
    n0, cpu0, t0 = len(read_starts(coder)), daemon_cpu_seconds(d.proc.pid), time.monotonic()
    most, _samples = sample_max_leaders(fake_root, "coder", 6.0)
    cpu = (daemon_cpu_seconds(d.proc.pid) - cpu0) / (time.monotonic() - t0)
    crashes_in_window = len(read_starts(coder)) - n0
    faults.note(f"daemon CPU {cpu:.1%} of one core over 6s with {crashes_in_window} crashes")
    assert crashes_in_window >= 3, "the loop kept going at the cap"
    assert cpu < 0.10, f"hermesd used {cpu:.1%} of a core"
    faults.lose(max(0, most - 1), f"{most} coder gateways at once")
    assert most <= 1

    assert {n: d.row(n)["pid"] for n in others} == others  # the rest were never touched
    settle_and_account(d, fake_root, "coder", faults)


@pytest.mark.slow
def test_crash_every_second_or_so(fake_root, hermesd_factory, faults):
    """Runs of 0.8 s (shorter than healthy_after): each crash restarts, with growing delays."""
    write_config(fake_root, restart={"initial_delay": 0.2, "max_delay": 1.0, "factor": 2.0, "jitter": 0.0,
                                "healthy_after": 3.0})
    coder = fake_root / "profiles" / "coder"
    write_behaviour(coder, exit_after=0.8, exit_code=3, write_counter=True)
    d = hermesd_factory(fake_root)
    others = d.wait_running("default", "writer")

    most, _ = 0, 0
    deadline = time.monotonic() + 40
    while len(read_starts(coder)) < 6 and time.monotonic() < deadline:
        m, _ = sample_max_leaders(fake_root, "coder", 0.5)
        most = max(most, m)
    starts = read_starts(coder)
    assert len(starts) >= 6, starts
    assert len(set(starts)) == len(starts)  # every restart is a new process
    assert not any(pid_alive(p) for p in starts[:-2])  # the crashed ones are really gone
    faults.lose(max(0, most - 1), f"{most} coder gateways at once")
    assert most <= 1

    delays = retry_delays(d.log.read_text(), "coder")
    assert delays[:3] == [0.2, 0.4, 0.8], delays
    row = d.row("coder")
    assert row["last_exit"]["code"] == 3 and row["last_exit"]["kind"] == "crash"
    assert {n: d.row(n)["pid"] for n in others} == others
    settle_and_account(d, fake_root, "coder", faults)
    assert len(gateway_leaders(fake_root)) == 2


@pytest.mark.slow
def test_exit_75_at_once_forever_backs_off(fake_root, hermesd_factory, faults):
    """A gateway that asks to be restarted (75, "restart requested" in its state file) the moment it
    runs, forever: once at once, then the backoff, as for any quick exit (measured before on the
    multiplex-default line: 28 restarts in 28 s)."""
    write_config(fake_root, restart={"initial_delay": 0.1, "max_delay": CAP, "factor": 2.0, "jitter": 0.0,
                                "healthy_after": 3.0})
    coder = fake_root / "profiles" / "coder"
    write_behaviour(coder, exit_after=0.0, exit_code=75, exit_after_clean=True, write_counter=True)
    d = hermesd_factory(fake_root)
    others = d.wait_running("default", "writer")
    delays = wait_for(lambda: (x := retry_delays(d.log.read_text(), "coder")) and len(x) >= 6 and x, 30,
                      what="six backoff delays")
    assert delays[:4] == [0.1, 0.2, 0.4, CAP], delays
    assert delays[-2:] == [CAP, CAP], delays
    row = d.row("coder")
    assert row["last_exit"]["code"] == 75 and row["last_exit"]["kind"] == "restart_requested", row
    # bounded: over 4 s at the cap, at most one start per cap (plus the one in flight)
    n0, t0 = len(read_starts(coder)), time.monotonic()
    time.sleep(4.0)  # a measured window: the loop runs by itself meanwhile
    starts = len(read_starts(coder)) - n0
    window = time.monotonic() - t0
    faults.note(f"{starts} starts in {window:.1f}s with 75 at once forever (cap {CAP}s)")
    faults.inject(starts)
    faults.survive(starts if starts <= window / CAP + 2 else 0)
    assert starts <= window / CAP + 2, starts
    assert {n: d.row(n)["pid"] for n in others} == others
    settle_and_account(d, fake_root, "coder", faults)


@pytest.mark.slow
def test_exit_75_before_start_up_is_an_attach_loop_held_with_its_reason(fake_root, hermesd_factory, faults):
    """75 before the gateway ever wrote its state (upstream's "attach": another gateway serves the
    profile): the backoff, then a hold that says so, instead of asking again forever."""
    write_config(fake_root, restart={"initial_delay": 0.1, "max_delay": CAP, "factor": 2.0, "jitter": 0.0,
                                "healthy_after": 3.0})
    coder = fake_root / "profiles" / "coder"
    write_behaviour(coder, exit_at_start=75)
    d = hermesd_factory(fake_root)
    d.wait_running("default", "writer")
    row = d.wait_state("coder", "held", timeout=20)
    faults.inject(1)
    assert row["hold"]["kind"] == "served_elsewhere", row
    assert "another gateway serves this profile" in row["reason"], row
    assert row["last_exit"]["kind"] == "attached" and row["restarts"] == 2, row
    time.sleep(2 * CAP)  # held means no further attempt: measured over two cap periods
    assert d.row("coder")["restarts"] == 2
    faults.survive(1)
