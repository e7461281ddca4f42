"""Ready means serving: :func:`supervisor.plan.readiness.judge` over status rows, rule by rule (pure: no
clock, no file, no process)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.plan.readiness import HEARTBEAT_MAX_S, Outcome, judge


def row(state: str = "running", gateway_state: str | None = "running", platforms: dict[str, Any] | None = None,
        api: dict[str, Any] | None = None, heartbeat_age_s: float | None = 3.0) -> dict[str, Any]:
    return {"name": "coder", "state": state, "gateway_state": gateway_state, "platforms": platforms or {},
            "api": api, "heartbeat_age_s": heartbeat_age_s}


def plat(state: str, code: str | None = None, message: str | None = None) -> dict[str, Any]:
    return {"state": state, "error_code": code, "error_message": message}


def check(outcome: Outcome, detail: str = "") -> dict[str, Any]:
    return {"pid": 100, "port": 8642, "outcome": str(outcome), "answered": outcome == Outcome.ANSWERED,
            "detail": detail or str(outcome)}


def test_not_running_is_not_serving_and_only_held_or_stopped_is_settled():
    for state, settled in (("held", True), ("stopped", True), ("backoff", False), ("starting", False),
                           ("stopping", False)):
        v = judge(row(state))
        assert (v.ready, v.word, v.settled) == (False, "-", settled)
        assert v.why == f"not running ({state})"


def test_the_gateway_must_report_running():
    assert judge(row(gateway_state=None)).why == "its gateway has not reported yet"
    for reported in ("starting", "draining", "degraded", "stopped"):
        v = judge(row(gateway_state=reported))
        assert not v.ready and not v.settled and v.why == f"its gateway reports {reported}"


def test_a_heartbeat_older_than_three_beats_is_not_serving():
    assert judge(row(heartbeat_age_s=HEARTBEAT_MAX_S)).ready
    assert judge(row(heartbeat_age_s=None)).ready  # before the first beat, or a release that does not beat
    v = judge(row(heartbeat_age_s=HEARTBEAT_MAX_S + 1))
    assert not v.ready and v.why == "its heartbeat is 91s old: its event loop may be stuck"


def test_no_platform_configured_is_ready():
    """Upstream's gateway with nothing to connect still runs, for scheduled jobs: not a false red."""
    v = judge(row())
    assert (v.ready, v.word, v.settled, v.channels) == (True, "yes", True, ())
    assert v.why == "running, no platform configured (it runs scheduled jobs only)"


def test_every_platform_connected_is_ready():
    v = judge(row(platforms={"telegram": plat("connected"), "discord": plat("connected")}))
    assert v.ready and v.word == "yes" and v.why == "serving: discord, telegram"
    assert v.serving_channels == {"telegram", "discord"}


def test_platforms_that_may_still_connect_are_waited_for():
    for state in ("connecting", "retrying", "disconnected", "someday-new-state"):
        v = judge(row(platforms={"telegram": plat(state, "telegram_network", "timed out")}))
        assert not v.ready and not v.settled and v.word == "no"
    v = judge(row(platforms={"telegram": plat("connecting")}))
    assert v.why == "telegram (connecting)"


def test_platforms_that_need_someone_to_act_are_settled():
    for state in ("fatal", "paused", "disabled"):
        v = judge(row(platforms={"telegram": plat(state, "telegram_token_invalid", "Unauthorized")}))
        assert not v.ready and v.settled and v.why == f"telegram ({state}: Unauthorized)"


def test_a_platform_retrying_on_another_gateway_s_lock_is_not_serving_and_settled():
    v = judge(row(platforms={"telegram": plat("retrying", "telegram-bot-token_lock", "in use by PID 4242")}))
    assert not v.ready and v.settled
    assert v.why == "telegram (blocked: another gateway holds its credential: in use by PID 4242)"


def test_some_channels_serving_is_partly_and_not_ready():
    v = judge(row(platforms={"telegram": plat("connected"), "discord": plat("fatal", message="bad token")}))
    assert (v.ready, v.word, v.settled) == (False, "partly", True)
    assert v.why == "discord (fatal: bad token)"
    assert [c.to_json()["serving"] for c in v.channels] == [False, True]


def test_the_api_server_serves_only_when_its_check_answered():
    connected = {"api_server": plat("connected")}
    v = judge(row(platforms=connected, api=check(Outcome.ANSWERED, "answers on 127.0.0.1:8642")))
    assert v.ready and v.why == "serving: api_server"
    # connected in the gateway's own state, yet not answering (a SIGSTOPped gateway): not serving
    v = judge(row(platforms=connected, api=check(Outcome.TIMEOUT, "127.0.0.1:8642 did not answer /v1/health")))
    assert not v.ready and not v.settled and v.why == "api_server (127.0.0.1:8642 did not answer /v1/health)"
    for outcome in (Outcome.PENDING, Outcome.REFUSED, Outcome.NO_LISTENER, Outcome.NOT_ITS_OWN,
                    Outcome.BAD_ANSWER, Outcome.UNTRACED, Outcome.UNKNOWN):
        assert not judge(row(platforms=connected, api=check(outcome))).ready, outcome
    # the check alone is enough when the gateway does not report the platform
    assert judge(row(api=check(Outcome.ANSWERED))).ready
    assert not judge(row(api=check(Outcome.PENDING))).ready


def test_the_api_server_s_own_state_decides_when_it_is_not_connected():
    v = judge(row(platforms={"api_server": plat("fatal", "api_server_port_in_use", "Port 8642 already in use")},
                  api=check(Outcome.NOT_ITS_OWN)))
    assert not v.ready and v.settled and v.why == "api_server (fatal: Port 8642 already in use)"


def test_an_api_server_listening_only_elsewhere_is_judged_by_its_platform_state():
    elsewhere = check(Outcome.ELSEWHERE, "it listens on port 8642 only on 10.0.0.5; hermesd checks 127.0.0.1 only")
    v = judge(row(platforms={"api_server": plat("connected")}, api=elsewhere))
    assert v.ready
    assert not judge(row(api=elsewhere)).ready


def test_required_channels_are_the_only_ones_that_count():
    """The upgrade gate: a platform already broken before the restart does not block it."""
    plats = {"telegram": plat("connected"), "discord": plat("fatal", message="revoked")}
    v = judge(row(platforms=plats), required={"telegram"})
    assert v.ready and v.word == "partly"
    assert v.why == "serving: telegram; not required here: discord (fatal: revoked)"
    v = judge(row(platforms={"telegram": plat("connecting"), "discord": plat("fatal")}), required={"telegram"})
    assert not v.ready and not v.settled and v.why == "telegram (connecting)"
    assert judge(row(platforms=plats), required=set()).ready


def test_the_json_form():
    v = judge(row(platforms={"telegram": plat("connected")}))
    assert v.to_json() == {"ready": True, "word": "yes", "why": "serving: telegram", "settled": True,
                           "channels": [{"name": "telegram", "serving": True, "settled": False, "why": "connected"}]}


_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12)


_platforms = st.dictionaries(st.text(max_size=8), st.fixed_dictionaries(
    {}, optional={"state": st.sampled_from(["connected", "fatal", "retrying"]) | _junk, "error_code": _junk,
                  "error_message": _junk}) | _junk, max_size=3) | _junk
_api = st.fixed_dictionaries({}, optional={"outcome": st.sampled_from(list(Outcome)) | _junk, "detail": _junk}) | _junk


@settings(max_examples=200)
@given(st.fixed_dictionaries({}, optional={
    "state": st.sampled_from(["running", "held", "backoff"]) | _junk,
    "gateway_state": st.sampled_from(["running", "starting"]) | _junk,
    "platforms": _platforms, "api": _api, "heartbeat_age_s": _junk,
}), st.fixed_dictionaries({"state": st.just("running"), "gateway_state": st.just("running")},
                          optional={"platforms": _platforms, "api": _api}))
def test_any_row_gets_a_verdict_and_ready_always_means_every_channel_serves(raw, running):
    """Rows carry what a gateway's own files said: whatever they hold, the verdict is given, and a ready
    verdict (every channel required) has no channel that does not serve."""
    for r in (raw, running):
        v = judge(r)
        v.to_json()
        assert v.word in ("yes", "partly", "no", "-")
        if v.ready:
            assert v.word == "yes" and all(c.serving for c in v.channels)
