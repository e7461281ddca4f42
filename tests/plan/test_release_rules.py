"""What the multiplex-default line asks of the profiles' files, judged by the one verdict; and the planner's
answers to a child that serves other profiles or a second gateway beside its own."""

from __future__ import annotations

import signal
from pathlib import Path

from profiles.upstream.releases import KNOWN, contract_for
from supervisor.plan.verdict import Candidate, HoldKind, ReleaseRules, judge
from tests.plan.world import World, facts

MUX = ReleaseRules(release="0.22.2", standalone_required=True, default_sees_named=False, parked_marker=True)


def _judge(rules, **kw):
    names = ("default", "a", "b")
    cands = [Candidate(facts(n, **kw.get(n, {})), n) for n in names]
    return judge(cands, None, rules)


def test_per_profile_line_asks_nothing():
    assert ReleaseRules.of(contract_for("0.20.1"), "0.20.1", default_hidden=False).standalone_required is False
    assert set(_judge(ReleaseRules.of(contract_for("0.19.0"), "0.19.0", default_hidden=False)).values()) == {None}
    assert ReleaseRules.of(None, None, default_hidden=True) is None


def test_named_profiles_need_standalone_and_the_message_says_how():
    got = _judge(MUX, a={"standalone": True})
    assert got["default"] is None and got["a"] is None
    hold = got["b"]
    assert hold.kind is HoldKind.STANDALONE_REQUIRED
    assert "gateway.standalone: true" in hold.message and str(Path("/r/profiles/b/config.yaml")) in hold.message
    assert "hermesd standalone --root /r" in hold.message and "consent" in hold.message


def test_default_is_held_only_when_its_gateway_could_see_profiles_to_fold_in():
    seeing = ReleaseRules(release="0.22.2", standalone_required=True, default_sees_named=True, parked_marker=True)
    got = _judge(seeing, a={"standalone": True})
    assert got["default"].kind is HoldKind.WOULD_MULTIPLEX and "serve b as well" in got["default"].message
    assert _judge(seeing, a={"standalone": True}, b={"standalone": True})["default"] is None
    assert _judge(seeing, a={"standalone": True}, b={"parked": True})["default"] is None  # parked: not served
    assert _judge(MUX)["default"] is None  # isolation hides them from it


def test_parked_profiles_stay_stopped_while_the_marker_is_there():
    got = _judge(MUX, a={"standalone": True, "parked": True}, b={"standalone": True})
    assert got["a"].kind is HoldKind.PARKED and "gateway.parked" in got["a"].message and got["b"] is None


def test_every_held_kind_has_a_doctor_code_and_fix():
    for kind in (HoldKind.STANDALONE_REQUIRED, HoldKind.WOULD_MULTIPLEX, HoldKind.PARKED,
                 HoldKind.SERVED_ELSEWHERE, HoldKind.MULTIPLEXING):
        assert kind.doctor_code and kind.fix and kind.severity in ("error", "warning")


def test_held_named_profiles_start_when_their_files_opt_out():
    w = World.make(("default", "a"), release=MUX)
    assert w.state("a") == "held" and "default" in w.alive
    w.run(w.planner.set_facts("a", facts("a", digest="v2", standalone=True)))
    assert "a" in w.alive and not w.problems


def test_a_child_serving_others_is_stopped_and_held_until_files_change():
    w = World.make(("default", "a"))
    pid = w.alive["default"].pid
    w.run(w.planner.served("default", pid, ("a",), "its gateway.sock identify"))
    assert w.signals[-1][2] == signal.SIGTERM  # a planned stop of our own child
    w.obey_stops()
    p = w.planner.profiles["default"]
    assert w.state("default") == "held" and p.hold.kind is HoldKind.MULTIPLEXING and "served a" in p.hold.message
    assert [e["type"] for e in w.events].count("multiplexing") == 1
    w.advance(1000)
    assert "default" not in w.alive
    w.run(w.planner.set_facts("a", facts("a", digest="v2", standalone=True)))  # another profile's file cures it
    assert "default" in w.alive and not w.problems


def test_a_second_gateway_beside_ours_makes_ours_stand_down_until_it_exits():
    w = World.make(("default", "a"))
    ours = w.alive["a"]
    w.run(w.planner.rival("a", 9999, "its gateway.pid names it"))
    assert any(s[1] == ours for s in w.signals)
    w.obey_stops()
    p = w.planner.profiles["a"]
    assert p.hold.kind is HoldKind.FOREIGN_GATEWAY and "PID 9999" in p.hold.message and p.foreign_pid == 9999
    assert next(e for e in w.events if e["type"] == "rival")["ours"] == ours.pid
    w.run(w.planner.foreign("a", 9999))  # the loop finds the same gateway again before the respawn
    assert [e["type"] for e in w.events].count("held") == 1 and "served this profile" in p.hold.message
    w.advance(100)
    assert "a" not in w.alive
    w.run(w.planner.foreign_gone("a"))
    assert "a" in w.alive and not w.problems


def test_reports_about_another_process_change_nothing():
    w = World.make(("default", "a"))
    before = dict(w.alive)
    w.run(w.planner.served("a", 12345, ("default",), "state"))  # not our child's PID
    w.run(w.planner.served("a", before["a"].pid, (), "state"))  # serves only itself
    w.run(w.planner.rival("a", before["a"].pid, "same PID as ours"))
    assert w.alive == before and not w.signals


def test_known_rows_of_the_new_lines():
    rows = {c.release: c for c in KNOWN}
    assert rows["0.20.1"].records_home and not rows["0.20.1"].multiplex_default
    mux = rows["0.22.2"]
    assert mux.multiplex_default and mux.force_flag and mux.standalone_key and mux.attach_exit == 75
    assert mux.gateway_args == ("gateway", "run", "--external-supervisor", "--force")
