"""Hung detection, pure: injected clocks, fake heartbeat records, every cause and the cadence."""

from datetime import UTC, datetime

import pytest

from supervisor.limits.hung import beat_age, check_hung, observe
from supervisor.settings import HungSettings

PID = 4242
T0 = 1000.0  # monotonic start of the gateway
W0 = 1_700_000_000.0  # wall clock at T0
S = HungSettings(hung_after=120.0, startup_grace=300.0)


def beat(mono, pid=PID, wall=None, **extra):
    when = W0 + (mono - T0) if wall is None else wall
    rec = {"pid": pid, "monotonic": mono, "updated_at": datetime.fromtimestamp(when, UTC).isoformat(), "start_time": W0}
    rec.update(extra)
    return rec


def check(now, b, state="S", settings=S, **kw):
    return check_hung(
        pid=PID, start_mono=T0, start_wall=W0, proc_state=state, beat=b, settings=settings,
        now_mono=now, now_wall=W0 + (now - T0), **kw,
    )


def test_fresh_beat_is_not_hung_and_next_check_is_when_it_turns_stale():
    r = check(T0 + 100, beat(T0 + 90))
    assert r.hung is None and r.heartbeat_age == pytest.approx(10)
    assert r.next_check == pytest.approx(T0 + 90 + 120, abs=0.01)
    # evaluating at that moment: hung, with the age for the exit record
    r2 = check(r.next_check, beat(T0 + 90))
    assert r2.hung is not None and r2.hung.cause == "heartbeat"
    assert r2.heartbeat_age == pytest.approx(120, abs=0.01)
    assert r2.next_check is None


def test_age_exactly_at_limit_is_hung_just_below_is_not():
    assert check(T0 + 220, beat(T0 + 100)).hung is not None
    r = check(T0 + 219.99, beat(T0 + 100))
    assert r.hung is None and r.next_check > T0 + 219.99


def test_stopped_is_hung_whatever_the_heartbeat():
    for letter in ("T", "t"):
        r = check(T0 + 50, beat(T0 + 45), state=letter)
        assert r.hung is not None and r.hung.cause == "stopped" and r.heartbeat_age == pytest.approx(5)
    assert "tracer" in check(T0 + 50, beat(T0 + 45), state="t").hung.detail


def test_upstreams_own_watchdog_verdict_is_hung_at_once():
    """The multiplex-default line's event-loop watchdog writes degraded + loop_liveness_watchdog, then exits 75."""
    fired = {"pid": PID, "gateway_state": "degraded", "exit_reason": "loop_liveness_watchdog",
             "restart_requested": True}
    r = check(T0 + 50, beat(T0 + 45), gateway_state=fired)
    assert r.hung is not None and r.hung.cause == "watchdog" and "watchdog" in r.hung.detail and r.next_check is None
    # another process's verdict, a plain transient "degraded", or no state: not this gateway's hang
    for other in ({**fired, "pid": PID + 1}, {**fired, "exit_reason": None}, {}, None):
        assert check(T0 + 50, beat(T0 + 45), gateway_state=other).hung is None


def test_gone_or_zombie_gives_nothing_to_do():
    for state in (None, "Z", "X"):
        r = check(T0 + 500, beat(T0 + 1), state=state)
        assert r.hung is None and r.next_check is None


def test_off_means_never():
    off = HungSettings(hung_after=None, startup_grace=300.0)
    r = check(T0 + 10_000, beat(T0 + 1), settings=off)
    assert r.hung is None and r.next_check is None
    assert check(T0 + 10_000, {}, settings=off, state="T").hung is None


def test_grace_before_first_beat():
    r = check(T0 + 10, {})
    assert r.hung is None and r.heartbeat_age is None
    assert r.next_check == pytest.approx(T0 + 130, abs=0.01)  # at most hung_after later
    r = check(T0 + 250, {})
    assert r.next_check == pytest.approx(T0 + 300, abs=0.01)  # the grace ends first
    r = check(T0 + 300, {})
    assert r.hung is not None and r.hung.cause == "no_heartbeat" and r.heartbeat_age is None


def test_grace_unbounded_keeps_looking_every_hung_after():
    s = HungSettings(hung_after=120.0, startup_grace=None)
    r = check(T0 + 5000, {}, settings=s)
    assert r.hung is None and r.next_check == pytest.approx(T0 + 5120, abs=0.01)


def test_first_beat_seen_late_still_meets_the_hung_after_promise():
    """A gateway that beats once at T0+11 and freezes is caught at T0+131, not at the grace end."""
    b = beat(T0 + 11)
    t = T0 + 10
    r = check(t, {})  # before the first beat
    t = r.next_check  # T0 + 130: the beat is there now
    r = check(t, b)
    assert r.hung is None
    r = check(r.next_check, b)
    assert r.hung is not None and r.hung.cause == "heartbeat"
    assert r.heartbeat_age == pytest.approx(120, abs=0.01)


def test_previous_gateways_beat_is_not_ours():
    old = beat(T0 - 5, pid=999)  # the last gateway, another PID
    r = check(T0 + 20, old)
    assert r.heartbeat_age is None and r.hung is None
    assert check(T0 + 300, old).hung.cause == "no_heartbeat"


def test_same_pid_but_from_before_our_start_is_not_ours():
    recycled = beat(T0 - 3600)  # same PID, an hour before this process started
    assert check(T0 + 20, recycled).heartbeat_age is None


def test_monotonic_from_another_boot_or_clock_is_not_ours():
    assert check(T0 + 20, beat(T0 + 10_000)).heartbeat_age is None


def test_wall_clock_step_does_not_matter_when_monotonic_is_there():
    b = beat(T0 + 100, wall=W0 - 86400)  # the wall clock jumped back a day after the beat
    r = check_hung(pid=PID, start_mono=T0, start_wall=W0, proc_state="S", beat=b, settings=S,
                   now_mono=T0 + 110, now_wall=W0 + 7 * 86400)  # ... and now forward a week
    assert r.hung is None and r.heartbeat_age == pytest.approx(10)


def test_wall_fallback_without_monotonic():
    b = {"pid": PID, "updated_at": datetime.fromtimestamp(W0 + 50, UTC).isoformat()}
    assert beat_age(b, pid=PID, start_mono=T0, now_mono=T0 + 60, now_wall=W0 + 60, start_wall=W0) == pytest.approx(10)
    naive = {"pid": PID, "updated_at": datetime.fromtimestamp(W0 + 50, UTC).replace(tzinfo=None).isoformat()}
    assert beat_age(naive, pid=PID, start_mono=T0, now_mono=T0 + 60, now_wall=W0 + 60) == pytest.approx(10)
    before_start = {"pid": PID, "updated_at": datetime.fromtimestamp(W0 - 100, UTC).isoformat()}
    assert beat_age(before_start, pid=PID, start_mono=T0, now_mono=T0 + 60, now_wall=W0 + 60, start_wall=W0) is None


@pytest.mark.parametrize(
    "junk",
    [
        None, {}, [], "x", {"pid": "4242", "monotonic": T0 + 1}, {"pid": True, "monotonic": T0 + 1},
        {"pid": PID, "monotonic": float("nan")}, {"pid": PID, "monotonic": "soon"},
        {"pid": PID, "updated_at": "yesterday"}, {"pid": PID, "updated_at": 12}, {"pid": PID},
        {"pid": PID, "updated_at": "x" * 10_000},
    ],
)
def test_junk_heartbeats_count_as_none(junk):
    assert beat_age(junk, pid=PID, start_mono=T0, now_mono=T0 + 5, now_wall=W0 + 5, start_wall=W0) is None


def test_observe_reads_state_and_heartbeat(tmp_path):
    import json
    import os

    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "gateway.heartbeat").write_text(json.dumps({"pid": os.getpid(), "monotonic": 1.0}))
    (tmp_path / "gateway_state.json").write_text(json.dumps({"pid": os.getpid(), "gateway_state": "degraded"}))
    state, b, g = observe(tmp_path, os.getpid())
    assert state in ("R", "S") and b["pid"] == os.getpid() and g["gateway_state"] == "degraded"
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "state" / "gateway.heartbeat").unlink()
    os.symlink(tmp_path / "fifo", tmp_path / "state" / "gateway.heartbeat")
    assert observe(tmp_path, os.getpid())[1] == {}  # a FIFO never blocks the loop
    assert observe(tmp_path, 0x3FFFFF)[0] is None
