"""The pure decisions of a fleet operation: which profiles, the canary, and the health gate.

Status rows are built as the daemon's ``status`` request returns them; time is given to the gate, so
no test sleeps or starts a process.
"""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.hermes.codeid import CodeId
from supervisor.upgrade import decisions
from supervisor.upgrade.decisions import Baseline, Gate, GateRules

NEW = CodeId("0.19.0", "9b409c55aa74")
OLD = CodeId("0.18.2", "795c5131de2f")
T0 = 1_000.0  # monotonic
W0 = 1_700_000_000.0  # wall


def row(name: str, state: str = "running", pid: int | None = 100, **extra: Any) -> dict[str, Any]:
    r: dict[str, Any] = {"name": name, "home": f"/r/{name}", "state": state, "pid": pid if state != "stopped" else None,
                         "restarts": 0, "gateway_state": "running" if state == "running" else None,
                         "platforms": {}, "lock_conflicts": [], "heartbeat_age_s": 1.0, "last_exit": None,
                         "reason": None, "code": {"running": OLD.to_json(), "installed": NEW.to_json(),
                                                  "stale": True, "how": "recorded"}}
    r.update(extra)
    return r


def connected(*names: str, **other: str) -> dict[str, dict[str, Any]]:
    out = {n: {"state": "connected"} for n in names}
    out.update({n: {"state": s} for n, s in other.items()})
    return out


# ----------------------------------------------------------------------------- order


def test_canary_is_the_running_profile_with_fewest_connected_platforms_named_before_default():
    rows = [row("default"), row("coder", platforms=connected("telegram")), row("writer"), row("zed")]
    order = decisions.choose(rows, skip=decisions.stale_or_unknown)
    assert order.canary == "writer"
    assert order.names == ("writer", "default", "coder", "zed")


def test_not_running_and_already_current_profiles_are_left_alone_with_the_reason():
    current = {"running": NEW.to_json(), "installed": NEW.to_json(), "stale": False, "how": "recorded"}
    rows = [row("default", code=current), row("coder"), row("held1", state="held", reason="credential_conflict: x"),
            row("off", state="stopped", reason="stopped by operator")]
    order = decisions.choose(rows, skip=decisions.stale_or_unknown)
    assert order.names == ("coder",)
    assert order.skipped["default"] == "already runs the installed code"
    assert "held: credential_conflict: x" in order.skipped["held1"]
    assert order.skipped["off"].startswith("not running (stopped")
    # a rolling restart takes every running gateway, current or not
    assert decisions.choose(rows, skip=decisions.any_running).names == ("coder", "default")


def test_a_gateway_whose_code_is_unknown_is_upgraded():
    rows = [row("coder", code={"running": None, "installed": NEW.to_json(), "stale": None, "how": "unknown"})]
    assert decisions.choose(rows, skip=decisions.stale_or_unknown).names == ("coder",)


def test_chosen_canary_and_only():
    rows = [row("default"), row("coder"), row("writer", state="backoff")]
    assert decisions.choose(rows, skip=decisions.any_running, canary="default").names == ("default", "coder")
    assert decisions.choose(rows, skip=decisions.any_running, only=["coder"]).names == ("coder",)
    with pytest.raises(decisions.PlanError, match=r"writer.*not running"):
        decisions.choose(rows, skip=decisions.any_running, canary="writer")
    with pytest.raises(decisions.PlanError, match="not among the profiles chosen"):
        decisions.choose(rows, skip=decisions.any_running, canary="default", only=["coder"])
    with pytest.raises(decisions.PlanError, match="not a profile of this root"):
        decisions.choose(rows, skip=decisions.any_running, canary="nobody")


def test_nothing_to_do():
    order = decisions.choose([row("a", state="held")], skip=decisions.any_running)
    assert order.names == () and order.canary is None and "a" in order.skipped


# ----------------------------------------------------------------------------- the gate


def gate(before: dict[str, Any], rules: GateRules | None = None, held: frozenset[str] = frozenset()) -> Gate:
    return Gate(Baseline.of(before), held, rules or GateRules(timeout_s=60, settle_s=5), start=T0, start_wall=W0)


def fresh(name: str = "coder", **extra: Any) -> dict[str, Any]:
    """The profile after its restart: a new PID, one restart more, running the new code."""
    base: dict[str, Any] = {"pid": 200, "restarts": 1,
                            "code": {"running": NEW.to_json(), "installed": NEW.to_json(), "stale": False,
                                     "how": "recorded"}}
    base.update(extra)
    return row(name, **base)


def test_passes_only_after_settling_healthy_and_a_break_restarts_the_settle_time():
    g = gate(row("coder"))
    assert g.observe([row("coder", state="stopping")], T0 + 0.5).state == "pending"
    assert "old gateway is stopping" in g.last.why
    assert g.observe([fresh(state="starting", gateway_state=None)], T0 + 1).why == "the new gateway is starting"
    v = g.observe([fresh()], T0 + 2)
    assert v.state == "pending" and "settling" in v.why
    # a missed heartbeat is a break: settling starts again
    assert g.observe([fresh(gateway_state="starting")], T0 + 4).state == "pending"
    assert g.observe([fresh()], T0 + 5).state == "pending"
    assert g.observe([fresh()], T0 + 9.9).state == "pending"
    assert g.observe([fresh()], T0 + 10).state == "passed"


def test_fails_at_once_on_a_crash_after_the_restart_even_if_it_runs_again():
    g = gate(row("coder"))
    crashed = fresh(pid=300, restarts=2, last_exit={"at": W0 + 3, "kind": "crash", "description": "exit 1",
                                                    "reason": "crashed during start-up"})
    v = g.observe([crashed], T0 + 4)
    assert v.state == "failed" and "exit 1 (crash: crashed during start-up)" in v.why


def test_a_planned_exit_of_the_old_gateway_and_an_old_crash_do_not_fail_it():
    g = gate(row("coder"))
    old_crash = {"at": W0 - 100, "kind": "crash", "description": "exit 1", "reason": "x"}
    planned = {"at": W0 + 1, "kind": "planned", "description": "exit 0", "reason": "stopped by hermesd"}
    assert g.observe([fresh(last_exit=old_crash)], T0 + 1).state == "pending"
    assert g.observe([fresh(last_exit=planned)], T0 + 7).state == "passed"


@pytest.mark.parametrize("state,expect", [("backoff", "in backoff"), ("held", "held: startup_failed"),
                                          ("stopped", "stopped:")])
def test_fails_when_the_profile_is_not_coming_back(state, expect):
    g = gate(row("coder"))
    v = g.observe([row("coder", state=state, pid=None, reason="startup_failed: exit 78")], T0 + 1)
    assert v.state == "failed" and expect in v.why


def test_restarted_twice_fails():
    g = gate(row("coder", restarts=4))
    assert g.observe([fresh(restarts=6)], T0 + 1).state == "failed"
    assert g.observe([fresh(restarts=5)], T0 + 1).state == "pending"


def test_platforms_connected_before_must_connect_again_within_the_timeout():
    before = row("coder", platforms=connected("telegram", "discord", slack="retrying"))
    g = gate(before, GateRules(timeout_s=30, settle_s=1))
    v = g.observe([fresh(platforms=connected("telegram", discord="connecting", slack="retrying"))], T0 + 5)
    assert v.state == "pending" and v.why == "not serving yet: discord (connecting)"
    v = g.observe([fresh(platforms=connected("telegram", discord="retrying"))], T0 + 31)
    assert v.state == "failed" and "not healthy within 30s: not serving yet: discord (retrying)" in v.why
    g = gate(before, GateRules(timeout_s=30, settle_s=1))
    assert g.observe([fresh(platforms=connected("telegram", "discord"))], T0 + 5).state == "pending"
    assert g.observe([fresh(platforms=connected("telegram", "discord"))], T0 + 6).state == "passed"


def test_heartbeat_is_required_only_when_the_release_writes_one():
    beatless = fresh(heartbeat_age_s=None)
    g = gate(row("coder"), GateRules(settle_s=0, heartbeat=True))
    assert g.observe([beatless], T0 + 1).why == "no heartbeat yet"
    assert g.observe([fresh(heartbeat_age_s=200.0)], T0 + 1).why == (
        "not serving yet: its heartbeat is 200s old: its event loop may be stuck")
    assert g.observe([fresh(heartbeat_age_s=3.0)], T0 + 2).state == "passed"
    assert gate(row("coder"), GateRules(settle_s=0)).observe([beatless], T0 + 1).state == "passed"


def test_a_new_hold_anywhere_fails_but_an_old_one_does_not():
    other_held = row("writer", state="held", pid=None, reason="credential_conflict: telegram held by coder")
    g = gate(row("coder"), held=frozenset())
    v = g.observe([fresh(), other_held], T0 + 1)
    assert v.state == "failed" and "writer: credential_conflict" in v.why
    g = gate(row("coder"), GateRules(settle_s=0), held=frozenset({"writer"}))
    assert g.observe([fresh(), other_held], T0 + 1).state == "passed"


def test_a_new_lock_conflict_fails():
    lock = [{"platform": "telegram", "error_code": "telegram-bot-token_lock", "message": "held by PID 9"}]
    g = gate(row("coder"))
    v = g.observe([fresh(lock_conflicts=lock)], T0 + 1)
    assert v.state == "failed" and "telegram (held by PID 9)" in v.why
    g = gate(row("coder", lock_conflicts=lock), GateRules(settle_s=0))
    assert g.observe([fresh(lock_conflicts=lock)], T0 + 1).state == "passed"


def test_the_new_gateway_must_run_the_code_the_upgrade_installed():
    rules = GateRules(settle_s=0, code=NEW)
    other = CodeId("0.19.1", "aaaaaaaaaaaa").to_json()
    v = gate(row("coder"), rules).observe([fresh(code={"running": other, "stale": False})], T0 + 1)
    assert v.state == "failed" and "not 0.19.0 (9b409c55aa74)" in v.why
    v = gate(row("coder"), rules).observe([fresh(code={"running": None, "stale": None})], T0 + 1)
    assert v.state == "pending" and "not known yet" in v.why
    assert gate(row("coder"), rules).observe([fresh()], T0 + 1).state == "passed"


def test_a_removed_profile_fails_and_the_timeout_names_what_it_waited_for():
    g = gate(row("coder"), GateRules(timeout_s=10, settle_s=0))
    assert g.observe([], T0 + 1).why == "the profile is no longer served"
    g = gate(row("coder"), GateRules(timeout_s=10, settle_s=0))
    v = g.observe([row("coder", state="stopping")], T0 + 10)
    assert v.state == "failed" and v.why == "not healthy within 10s: the old gateway is stopping"


def test_baseline_round_trips():
    b = Baseline.of(row("coder", restarts=3, platforms=connected("telegram"),
                        lock_conflicts=[{"platform": "discord"}]))
    assert Baseline.from_json(b.to_json()) == b
    assert b.serving == {"telegram"} and b.lock_conflicts == {"discord"} and b.restarts == 3
    # a record written before serving was judged names the connected platforms
    assert Baseline.from_json({"name": "coder", "connected": ["telegram"]}).serving == {"telegram"}


def api(outcome: str, port: int = 8642) -> dict[str, Any]:
    details = {"answered": f"answers on 127.0.0.1:{port}", "timeout": f"127.0.0.1:{port} did not answer /v1/health "
               "within 2s", "pending": f"127.0.0.1:{port} not checked yet"}
    return {"pid": 200, "port": port, "outcome": outcome, "answered": outcome == "answered",
            "detail": details[outcome]}


def test_a_canary_that_runs_but_does_not_answer_never_passes():
    """Its gateway reports running and api_server connected, its heartbeat is fresh: the old gate's
    "healthy". Its API server does not answer from its own socket: not serving, so the roll waits, and
    fails at the timeout naming why."""
    plats = connected("api_server")
    g = gate(row("coder", platforms=plats, api=api("answered")), GateRules(timeout_s=30, settle_s=1))
    assert g.observe([fresh(platforms=plats, api=api("pending"))], T0 + 1).why == (
        "not serving yet: api_server (127.0.0.1:8642 not checked yet)")
    assert g.observe([fresh(platforms=plats, api=api("timeout"))], T0 + 5).state == "pending"
    v = g.observe([fresh(platforms=plats, api=api("timeout"))], T0 + 31)
    assert v.state == "failed" and v.why == ("not healthy within 30s: not serving yet: api_server (127.0.0.1:8642 "
                                             "did not answer /v1/health within 2s)")
    g = gate(row("coder", platforms=plats, api=api("answered")), GateRules(timeout_s=30, settle_s=1))
    assert g.observe([fresh(platforms=plats, api=api("answered"))], T0 + 1).state == "pending"
    v = g.observe([fresh(platforms=plats, api=api("answered"))], T0 + 2)
    assert v.state == "passed" and v.why == "serving: api_server"


def test_the_api_server_must_answer_even_when_it_did_not_before():
    """Unlike a platform (a network, a token), the API server depends on nothing outside the machine."""
    plats = connected("api_server")
    g = gate(row("coder", platforms=plats, api=api("timeout")), GateRules(timeout_s=30, settle_s=0))
    assert g.observe([fresh(platforms=plats, api=api("timeout"))], T0 + 1).state == "pending"
    assert g.observe([fresh(platforms=plats, api=api("answered"))], T0 + 2).state == "passed"


def test_a_platform_that_served_before_and_now_cannot_fails_at_once_but_one_already_down_does_not():
    before = row("coder", platforms=connected("telegram", discord="fatal"))
    g = gate(before, GateRules(timeout_s=60, settle_s=0))
    fatal = {"telegram": {"state": "fatal", "error_message": "Unauthorized"}, "discord": {"state": "fatal"}}
    v = g.observe([fresh(platforms=fatal)], T0 + 1)
    assert v.state == "failed" and v.why == "not serving: telegram (fatal: Unauthorized)"
    g = gate(before, GateRules(timeout_s=60, settle_s=0))
    v = g.observe([fresh(platforms=connected("telegram", discord="fatal"))], T0 + 1)
    assert v.state == "passed" and v.why == "serving: telegram; not required here: discord (fatal)"
