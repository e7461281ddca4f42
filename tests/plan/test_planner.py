"""The planner in-process: every rule of the daemon, with a fake clock, spawner and world, no sleeping."""

from __future__ import annotations

import signal

from supervisor.plan.verdict import HoldKind, ReleaseRules
from tests.plan.world import TOKEN, World, facts


def test_start_up_is_bounded_by_start_slots_and_ordered():
    w = World.make(("default", "a", "b", "c"), max_starting=2, auto_ready=False)
    assert w.spawns == ["default", "a"]  # serving order, two at a time
    assert w.state("b") == "starting" and w.planner.profiles["b"].queued
    w.ready("default")
    assert w.spawns == ["default", "a", "b"]
    w.ready("a")
    w.ready("b")
    assert w.spawns == ["default", "a", "b", "c"]
    w.ready("c")
    assert all(w.state(n) == "running" for n in ("default", "a", "b", "c"))


def test_a_slot_is_given_back_when_start_up_takes_too_long():
    w = World.make(("default", "a"), max_starting=1, start_slot_s=30, auto_ready=False)
    assert w.spawns == ["default"]
    w.advance(31)
    assert w.spawns == ["default", "a"]


def test_crash_restarts_at_once_then_backs_off_to_the_cap():
    w = World.make(("default",))
    w.exit("default")
    assert w.spawns == ["default", "default"]  # first failure: at once
    delays = []
    for _ in range(7):
        w.exit("default")
        delays.append(w.timers[("default", "retry")] - w.now)
        assert w.state("default") == "backoff"
        w.advance(delays[-1])
    assert delays == [1, 2, 4, 8, 8, 8, 8]
    assert w.planner.profiles["default"].restarts == 8


def test_backoff_survives_an_absurd_failure_count():
    w = World.make(("default",))
    w.planner.profiles["default"].failures = 5000
    w.exit("default")
    assert w.timers[("default", "retry")] - w.now == 8  # the cap, not an overflow


def test_healthy_run_resets_the_backoff():
    w = World.make(("default",))
    for _ in range(3):
        w.exit("default")
        w.advance(10)
    w.advance(11)  # up longer than healthy_after
    w.exit("default")
    assert ("default", "retry") not in w.timers and "default" in w.alive


def test_operator_stop_is_planned_and_sticky():
    w = World.make(("default", "a"))
    ident = w.alive["a"]
    result, actions = w.planner.request_stop("a")
    w.run(actions)
    assert result == "stopping" and w.signals == [("a", ident, signal.SIGTERM)]
    assert ("a", "kill") in w.timers
    w.obey_stops()
    assert w.state("a") == "stopped" and "a" not in w.alive
    assert w.planner.profiles["a"].last_exit["kind"] == "planned"
    w.advance(100)
    assert "a" not in w.alive  # stays down
    _, actions = w.planner.request_start("a")
    w.run(actions)
    assert "a" in w.alive


def test_stop_timeout_kills_the_tree():
    w = World.make(("default",), stop_timeout=5)
    ident = w.alive["default"]
    w.run(w.planner.request_stop("default")[1])
    w.advance(5)
    assert w.kills == [("default", ident)]
    assert w.state("default") == "stopped"


def test_restart_is_refused_when_the_files_could_not_start_it():
    w = World.make(("default", "a"))
    ident = w.alive["a"]
    w.run(w.planner.set_facts("a", facts("a", problems=("/r/profiles/a/.env:2: broken",), digest="bad")))
    assert w.alive["a"] == ident and w.state("a") == "running"  # a broken edit takes nothing down
    result, actions = w.planner.request_restart("a")
    assert result.startswith("refused: config_error") and actions == []
    result, actions = w.planner.request_restart("a", force=True)
    w.run(actions)
    assert result == "restarting"
    w.obey_stops()
    assert w.state("a") == "held" and w.planner.profiles["a"].hold.kind is HoldKind.CONFIG_ERROR


def test_a_changed_configuration_restarts_only_that_profile():
    w = World.make(("default", "a", "b"))
    before = dict(w.alive)
    w.run(w.planner.set_facts("a", facts("a", digest="v2")))
    w.obey_stops()
    assert w.alive["a"] != before["a"] and w.alive["b"] == before["b"] and w.alive["default"] == before["default"]
    assert w.planner.profiles["a"].restarts == 1


def test_conflict_holds_the_later_profile_and_releases_it_when_the_holder_stops():
    w = World.make(("default", "a"), claims={"default": (TOKEN,), "a": (TOKEN,)})
    assert w.state("a") == "held" and w.planner.profiles["a"].hold.kind is HoldKind.CREDENTIAL_CONFLICT
    w.run(w.planner.request_stop("default")[1])
    w.obey_stops()
    assert w.state("a") in ("starting", "running") and "a" in w.alive
    assert [e["type"] for e in w.events if e["profile"] == "a"][-4:] == ["held", "released", "started", "ready"]


def test_a_restarting_holder_keeps_its_token():
    w = World.make(("default", "a"), claims={"default": (TOKEN,), "a": (TOKEN,)})
    assert w.state("a") == "held"
    for _ in range(3):  # crash looping: still the holder while it backs off
        w.exit("default")
        assert w.state("a") == "held"
        w.advance(10)


def holder_is_beta() -> World:
    """alpha and beta share a token; alpha, first in serving order, gives it up in its files and beta
    takes it; then alpha's files name it again."""
    w = World.make(("alpha", "beta"), claims={"alpha": (TOKEN,), "beta": (TOKEN,)})
    assert w.state("alpha") == "running" and w.state("beta") == "held"
    w.run(w.planner.set_facts("alpha", facts("alpha", digest="no token")))
    w.obey_stops()
    assert w.state("beta") == "running" and w.planner.profiles["beta"].child.claims == (TOKEN,)
    w.run(w.planner.set_facts("alpha", facts("alpha", claims=(TOKEN,), digest="token again")))
    w.obey_stops()
    return w


def test_an_edit_that_would_conflict_never_stops_a_running_gateway():
    w = holder_is_beta()
    alpha = w.planner.profiles["alpha"]
    assert w.state("alpha") == "running" and alpha.child.claims == ()  # on its last good files, untouched
    assert alpha.pending is not None and alpha.pending.kind is HoldKind.CREDENTIAL_CONFLICT
    assert "'beta' (running)" in alpha.pending.message
    result, actions = w.planner.request_restart("alpha")
    assert result.startswith("refused: credential_conflict") and actions == []


def test_the_holder_keeps_its_token_through_restarts_crashes_and_reloads():
    import dataclasses

    w = holder_is_beta()
    beta = w.planner.profiles["beta"]

    def operator_restart():
        w.run(w.planner.request_restart("beta")[1])

    def crash_after_a_healthy_run():
        w.advance(30)
        w.exit("beta")

    def hermesd_yaml_restarts_only_beta():
        settings = dataclasses.replace(w.planner.settings, specs={"beta": "new settings"})
        w.run(w.planner.set_settings(settings, None))

    for step in (operator_restart, crash_after_a_healthy_run, hermesd_yaml_restarts_only_beta):
        before = beta.child.ident
        step()
        w.obey_stops()
        w.advance(2)
        assert beta.child is not None and beta.child.ident != before, step.__name__  # it did restart
        assert beta.child.claims == (TOKEN,), step.__name__
        assert w.state("alpha") == "running" and w.planner.profiles["alpha"].child.claims == (), step.__name__
    assert [e["type"] for e in w.events if e["profile"] == "alpha"].count("held") == 0
    w.run(w.planner.request_stop("beta")[1])  # for good: now alpha may have it
    w.obey_stops()
    w.obey_stops()
    assert w.planner.profiles["alpha"].child.claims == (TOKEN,)


def test_held_is_announced_once_per_incident():
    """The holder's state changing (first in order, running, restarting) rewords the hold; it is one incident."""
    w = World.make(("alpha", "beta"), claims={"alpha": (TOKEN,), "beta": (TOKEN,)})
    for _ in range(3):
        w.run(w.planner.request_restart("alpha")[1])
        w.obey_stops()
        w.exit("alpha")
        w.advance(30)
    beta = [e["type"] for e in w.events if e["profile"] == "beta"]
    assert beta == ["held"]
    assert "'alpha' (running)" in w.planner.profiles["beta"].hold.message
    w.run(w.planner.request_stop("alpha")[1])
    w.obey_stops()
    assert [e["type"] for e in w.events if e["profile"] == "beta"][:3] == ["held", "released", "started"]


def test_spawn_failure_backs_off_and_retries():
    w = World.make(("default",))
    w.fail_next.add("default")
    w.exit("default")  # restart at once... which fails
    assert w.state("default") == "backoff"
    assert "exec failed" in w.planner.profiles["default"].last_start_problem
    w.advance(2)
    assert "default" in w.alive and w.planner.profiles["default"].last_start_problem is None


def test_foreign_gateway_holds_until_it_exits():
    w = World.make(("default",))
    w.foreign_next["default"] = 4242
    w.run(w.planner.request_stop("default")[1])
    w.obey_stops()
    w.run(w.planner.request_start("default")[1])
    assert w.state("default") == "held" and w.planner.profiles["default"].hold.kind is HoldKind.FOREIGN_GATEWAY
    w.run(w.planner.foreign_gone("default"))
    assert "default" in w.alive


def test_outside_stop_is_taken_back_after_the_foreign_gateway_exits():
    """``hermes gateway restart`` from an upstream wrapper: a clean stop, then its own gateway, then it ends."""
    w = World.make(("default",))
    w.exit("default", 0, None, "stopped")
    assert w.state("default") == "stopped"
    w.run(w.planner.foreign("default", 555))
    state, reason = w.planner.state_of(w.planner.profiles["default"])
    assert state == "stopped" and "PID 555" in reason
    w.run(w.planner.foreign_gone("default"))
    assert "default" in w.alive


def test_exit_78_holds_until_the_files_change():
    w = World.make(("default",))
    w.exit("default", 78)
    assert w.state("default") == "held" and w.planner.profiles["default"].hold.kind is HoldKind.STARTUP_FAILED
    w.advance(100)
    assert "default" not in w.alive
    w.run(w.planner.set_facts("default", facts("default", digest="fixed")))
    assert "default" in w.alive


def test_exit_75_after_a_healthy_run_restarts_at_once_and_a_quick_exit_after_it_backs_off():
    """A restart request after a healthy run is honoured at once, as a crash after one is; it uses
    the one immediate restart, so whatever exit follows quickly waits (no two at once)."""
    w = World.make(("default",))
    w.advance(10)  # healthy_after in World.make's policy
    spawned = len(w.spawns)
    w.exit("default", 75, state="stopped")
    assert "default" in w.alive and len(w.spawns) == spawned + 1 and w.planner.profiles["default"].failures == 1
    w.exit("default", 0)
    assert "default" not in w.alive and ("default", "retry") in w.timers


def test_a_quick_exit_75_forever_backs_off_like_a_crash():
    """75 ("restart me") that comes again and again within seconds: at once the first time, then the
    backoff doubles to its cap; never an unbounded run of immediate restarts."""
    w = World.make(("default",))
    delays = []
    for _ in range(12):
        spawned = len(w.spawns)
        w.exit("default", 75, state="stopped")
        if "default" not in w.alive:
            retry = w.timers[("default", "retry")]
            delays.append(retry - w.now)
            w.advance(retry - w.now)
        else:
            delays.append(0.0)
        assert len(w.spawns) == spawned + 1 and "default" in w.alive
    assert delays[:5] == [0.0, 1.0, 2.0, 4.0, 8.0] and set(delays[5:]) == {8.0}  # the cap
    assert [e["kind"] for e in w.events if e["type"] == "exited"] == ["restart_requested"] * 12
    assert w.state("default") == "running" and not w.problems


def test_attach_exits_back_off_then_become_a_hold_with_the_reason():
    """75 from a gateway whose state file never named it: another gateway serves the profile."""
    w = World.make(("default", "a"))
    who = "the host gateway PID 4242 (launched from /r) serves default, a"
    w.exit("a", 75, stated=False, detail=who)
    assert "a" in w.alive  # the first at once
    w.exit("a", 75, stated=False, detail=who)
    assert w.state("a") == "backoff"
    w.advance(w.timers[("a", "retry")] - w.now)
    w.exit("a", 75, stated=False, detail=who)
    p = w.planner.profiles["a"]
    assert w.state("a") == "held" and p.hold.kind is HoldKind.SERVED_ELSEWHERE
    assert "another gateway serves this profile" in p.hold.message and "PID 4242" in p.hold.message
    w.advance(1000)
    assert "a" not in w.alive and [e["kind"] for e in w.events if e["type"] == "exited"] == ["attached"] * 3
    w.run(w.planner.request_start("a")[1])  # the operator (or a file change) lifts it
    assert "a" in w.alive and "default" in w.alive and not w.problems


def test_on_upstream_main_attach_exits_back_off_without_end_and_never_hold():
    """Upstream main makes every attach exit transient ("a supervisor must retry, never park"): the
    backoff grows to its cap and the profile is never held; the first run that starts clears it."""
    w = World.make(("default", "a"), release=ReleaseRules(release="0.21.3", standalone_required=True,
                                                          retry_attach=True))
    w.run(w.planner.set_facts("a", facts("a", standalone=True)))
    who = "upstream's host gateway record names PID 4242 (alive), launched from /x, serving ?"
    for _ in range(8):
        if "a" not in w.alive:
            w.advance(w.timers[("a", "retry")] - w.now)
        w.exit("a", 75, stated=False, detail=who)
        assert w.state("a") != "held" and w.planner.profiles["a"].hold is None
    backoffs = [e["delay_s"] for e in w.events if e["type"] == "backoff" and e["profile"] == "a"]
    assert backoffs == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0], backoffs  # world's policy: 1 s doubling to 8 s
    assert "PID 4242" in w.planner.profiles["a"].last_exit["reason"]
    w.advance(w.timers[("a", "retry")] - w.now)
    assert "a" in w.alive and w.state("a") == "running" and not w.problems


def test_a_start_up_the_watchdog_ended_backs_off_like_a_crash_not_a_restart_request():
    """75 with the watchdog's record: counted as a failure and backed off, even after a long wedge;
    a plain 75 (a restart request) after the same time would restart at once."""
    w = World.make(("default", "a"), auto_ready=False)
    for _ in range(3):
        if "a" not in w.alive:
            w.advance(w.timers[("a", "retry")] - w.now)
        w.advance(300)  # wedged in start-up for 300 s (the start-up slot times out meanwhile)
        w.exit("a", 75, state="starting", startup_watchdog=True,
               detail="no live event loop after 300 s")
    kinds = [e["kind"] for e in w.events if e["type"] == "exited" and e["profile"] == "a"]
    assert kinds == ["startup_hung"] * 3
    assert [e["delay_s"] for e in w.events if e["type"] == "backoff" and e["profile"] == "a"] == [1.0, 2.0]
    assert w.planner.profiles["a"].failures == 3 and not w.problems


def test_shutdown_stops_everyone_then_finishes():
    w = World.make(("default", "a"))
    w.run(w.planner.shutdown(keep_children=False))
    assert not w.finished
    w.obey_stops()
    assert w.finished and not w.alive


def test_a_shutdown_cures_no_hold():
    """Stopping hermesd releases nothing: a held profile is not announced as released (\"cured\")."""
    w = World.make(("alpha", "beta"), claims={"alpha": (TOKEN,), "beta": (TOKEN,)})
    assert w.state("beta") == "held"
    w.run(w.planner.shutdown(keep_children=False))
    w.obey_stops()
    assert w.finished and [e["type"] for e in w.events if e["profile"] == "beta"] == ["held"]


def test_shutdown_keeping_children_finishes_at_once():
    w = World.make(("default", "a"))
    w.run(w.planner.shutdown(keep_children=True))
    assert w.finished and set(w.alive) == {"default", "a"} and not w.signals


def test_removed_folder_stops_and_forgets_the_profile():
    w = World.make(("default", "a"))
    w.run(w.planner.set_served([("default", facts("default").home)]))
    w.obey_stops()
    assert "a" not in w.planner.profiles and "a" not in w.alive


def test_hung_kill_is_recorded_and_backs_off_like_a_crash():
    from supervisor.plan.policy import ExitKind

    w = World.make(("default",))
    ident = w.alive["default"]
    w.run(w.planner.kill_for("default", ident, ExitKind.HUNG, "heartbeat 130s old"))
    assert w.kills == [("default", ident)]
    w.exit("default", None, signal.SIGKILL)
    last = w.planner.profiles["default"].last_exit
    assert last["kind"] == "hung" and "heartbeat 130s old" in last["reason"]
    assert "default" in w.alive  # first failure: at once
    assert [e["type"] for e in w.events if e["type"] in ("hung_kill", "exited")][-2:] == ["hung_kill", "exited"]


def test_a_restart_says_why_in_its_exit_event():
    import dataclasses

    w = World.make(("default", "a"))
    w.run(w.planner.set_facts("a", facts("a", digest="v2")))
    w.obey_stops()
    w.run(w.planner.set_settings(dataclasses.replace(w.planner.settings, specs={"a": "new"}), None))
    w.obey_stops()
    w.run(w.planner.request_restart("a")[1])
    w.obey_stops()
    w.run(w.planner.request_stop("a")[1])
    w.obey_stops()
    reasons = [e["reason"] for e in w.events if e["type"] == "exited" and e["profile"] == "a"]
    assert reasons == ["restarting: its files (.env, config.yaml) changed",
                       "restarting: its settings in hermesd.yaml changed",
                       "restarted by the operator", "stopped by operator"]
    assert w.planner.profiles["a"].last_exit["reason"] == "stopped by operator"
