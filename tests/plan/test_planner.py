"""The planner in-process: every rule of the daemon, with a fake clock, spawner and world, no sleeping."""

from __future__ import annotations

import signal

from supervisor.plan import words
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


def test_a_conflict_names_its_holder_by_what_its_gateway_does():
    """The holder is named "(running)" only while its gateway runs: starting, restarting and stopping are said."""
    w = World.make(("alpha", "beta"), auto_ready=False, claims={"alpha": (TOKEN,), "beta": (TOKEN,)})

    def holder() -> str:
        hold = w.planner.profiles["beta"].hold
        assert hold is not None
        return hold.message.split("'alpha' ", 1)[1].split(",")[0]

    assert holder() == "(starting)"
    w.ready("alpha")
    assert holder() == "(running)"
    w.run(w.planner.request_restart("alpha")[1])
    assert holder() == "(restarting)"
    w.obey_stops()
    w.ready("alpha")
    w.run(w.planner.request_stop("alpha")[1])
    assert holder() == "(stopping)"
    w.obey_stops()
    assert w.planner.profiles["beta"].hold is None and w.state("beta") == "starting"
    assert [e["type"] for e in w.events if e["profile"] == "beta"].count("held") == 1  # one incident


def test_a_stop_during_start_up_reads_as_a_stop_not_a_kill():
    """The gateway took the stop's SIGTERM before upstream's handler was installed: a stop, in every word."""
    from supervisor.observe.events import summary

    w = World.make(("default",), auto_ready=False)
    w.run(w.planner.request_stop("default")[1])
    w.exit("default", None, signal.SIGTERM)
    last = w.planner.profiles["default"].last_exit
    assert last["kind"] == "planned" and last["description"] == "stopped by SIGTERM"
    exited = next(e for e in w.events if e["type"] == "exited")
    assert summary(exited).startswith(f"PID {exited['pid']} stopped by SIGTERM after ")
    w.run(w.planner.request_start("default")[1])
    w.exit("default", None, signal.SIGTERM)  # nobody asked: that is a kill
    assert w.planner.profiles["default"].last_exit["description"] == "killed by SIGTERM"


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
    """``hermes gateway restart`` from an upstream wrapper: a clean stop, then its own gateway (found only
    later), then it ends. While it serves the profile, the profile is held for it, as the docs say."""
    w = World.make(("default",))
    w.exit("default", 0, None, "stopped")
    assert w.state("default") == "stopped"
    w.run(w.planner.foreign("default", 555))
    state, reason = w.planner.state_of(w.planner.profiles["default"])
    assert state == "held" and reason.startswith("foreign_gateway: ") and "PID 555" in reason
    w.run(w.planner.foreign_gone("default"))
    assert "default" in w.alive


def test_a_gateway_replaced_from_outside_is_held_for_its_replacement():
    """``hermes gateway run --replace``: the replacement stops ours (a clean exit, "stopped") and serves the
    profile as ours ends. Held foreign_gateway at once, never "stays down until started"; taken back after."""
    from supervisor.observe.events import summary

    w = World.make(("default",))
    ident = w.alive.pop("default")
    w.run(w.planner.child_exited("default", ident, 0, None, "stopped", replaced_by=555))
    p = w.planner.profiles["default"]
    assert w.state("default") == "held" and p.hold.kind is HoldKind.FOREIGN_GATEWAY and "PID 555" in p.hold.message
    assert p.down is None and p.last_exit["reason"] == "replaced by a gateway hermesd did not start (PID 555)"
    said = [summary(e) for e in w.events if e["type"] in ("exited", "stopped", "foreign", "held")]
    assert said[-3:] == [said[-3], "a gateway hermesd did not start holds the profile (PID 555)",
                         f"held (foreign_gateway): {p.hold.message}"]
    assert not any("stays down until started" in line for line in said)
    w.run(w.planner.foreign_gone("default"))
    assert "default" in w.alive and w.state("default") == "running"
    ident = w.alive.pop("default")
    w.run(w.planner.child_exited("default", ident, 0, None, "stopped"))  # hermes gateway stop: nobody replaced it
    assert w.state("default") == "stopped" and w.planner.profiles["default"].hold is None


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


def test_a_restart_names_the_files_that_changed(tmp_path):
    """The reason names the files whose content changed (read as the daemon reads them), no other."""
    import dataclasses

    from profiles.snapshot import read_profile

    folder = tmp_path / "a"
    folder.mkdir()
    w = World.make(("default", "a"))

    def edit(*files: tuple[str, str], specs: dict[str, str] | None = None) -> list[str]:
        for name, text in files:
            (folder / name).write_text(text)
        if specs is not None:
            w.run(w.planner.set_settings(dataclasses.replace(w.planner.settings, specs=specs), None))
        read = read_profile("a", folder, b"salt")
        w.run(w.planner.set_facts("a", dataclasses.replace(read, home=facts("a").home)))
        w.obey_stops()
        return [e["reason"] for e in w.events if e["type"] == "exited" and e["profile"] == "a"]

    edit((".env", "OPENAI_API_KEY=x\n"), ("config.yaml", "model: one\n"))
    before = len(edit())
    assert edit(("config.yaml", "model: two\n"))[before:] == ["restarting: its config.yaml changed"]
    assert edit(("config.yaml", "# a comment only\nmodel: two\n"))[before:] == \
        ["restarting: its config.yaml changed"]  # the comment restarted nothing
    assert edit((".env", "OPENAI_API_KEY=y\n"))[before + 1:] == ["restarting: its .env changed"]
    assert edit(("config.yaml", "model: three\n"), (".op.env", "A=1\n"))[before + 2:] == \
        ["restarting: its config.yaml and .op.env changed"]
    assert edit(specs={"a": "new"})[before + 3:] == ["restarting: its settings in hermesd.yaml changed"]
    then = read_profile("a", folder, b"salt").digest
    (folder / ".env").write_text("OPENAI_API_KEY=z\n")
    now = read_profile("a", folder, b"salt").digest
    assert words.what_changed(f"{then}/s1", f"{now}/s2") == "its .env and its settings in hermesd.yaml changed"


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
    assert reasons == ["restarting: its files changed",  # digests that are no file's: not more than that
                       "restarting: its settings in hermesd.yaml changed",
                       "restarted by the operator", "stopped by operator"]
    assert w.planner.profiles["a"].last_exit["reason"] == "stopped by operator"


def test_a_child_that_survives_sigkill_is_let_go_so_a_stop_ends():
    """A gateway in uninterruptible sleep ignores even SIGKILL until it wakes (issue 33): the stop
    kills it at its timeout, waits ``KILL_WAIT`` more, then stops waiting (the SIGKILL stays pending
    and ends it when it wakes), records which PID is left, and a shutdown finishes."""
    from supervisor.plan.policy import KILL_WAIT

    w = World.make(("default", "a"), stop_timeout=5)
    w.unkillable.add("a")
    stuck = w.alive["a"]
    w.run(w.planner.shutdown(keep_children=False))
    w.exit("default", 0, None, "stopped")  # default obeys; a ignores SIGTERM
    w.advance(5)
    assert w.kills == [("a", stuck)] and "a" in w.alive and not w.finished
    w.advance(KILL_WAIT - 0.5)
    assert not w.finished and w.released == []
    w.advance(0.5)
    assert w.released == [stuck] and w.finished and not w.problems
    last = w.planner.profiles["a"].last_exit
    assert last["kind"] == "planned" and f"PID {stuck.pid} did not end" in last["reason"], last


def test_a_per_profile_stop_and_a_hung_kill_end_too():
    from supervisor.plan.policy import KILL_WAIT, ExitKind

    w = World.make(("default", "a"), stop_timeout=5)
    w.unkillable.update({"default", "a"})
    stuck = w.alive["a"]
    w.run(w.planner.request_stop("a")[1])
    w.advance(5 + KILL_WAIT)
    assert w.state("a") == "stopped" and w.released == [stuck]
    hung = w.alive["default"]
    w.run(w.planner.kill_for("default", hung, ExitKind.HUNG, "heartbeat 130s old"))
    w.advance(KILL_WAIT)
    assert w.released == [stuck, hung]
    assert w.planner.profiles["default"].last_exit["kind"] == "hung"
    assert w.alive["default"] != hung and not w.problems  # restarted like any hung kill (a new child)


def test_a_child_that_ends_after_its_sigkill_is_not_released():
    w = World.make(("default",), stop_timeout=5)
    w.run(w.planner.request_stop("default")[1])
    w.advance(5)  # the world's child dies at the SIGKILL
    assert ("default", "release") not in w.timers and w.released == [] and w.state("default") == "stopped"
