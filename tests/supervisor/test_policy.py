"""Exit classification and backoff: pure functions, no sleeping, seeded randomness."""

import itertools
import random
import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.plan.policy import (
    Action,
    ExitFacts,
    ExitKind,
    RestartPolicy,
    backoff_delay,
    classify_exit,
    decide,
    describe_exit,
)

P = RestartPolicy()


@pytest.mark.parametrize(
    ("facts", "kind"),
    [
        (ExitFacts(75, None, False), ExitKind.RESTART_REQUESTED),
        (ExitFacts(78, None, False), ExitKind.CONFIG_ERROR),
        (ExitFacts(1, None, False, gateway_state="startup_failed"), ExitKind.CONFIG_ERROR),
        (ExitFacts(0, None, False, gateway_state="stopped"), ExitKind.EXTERNAL_STOP),
        # upstream exits 0 on a bare SIGTERM during start-up, leaving "running": not a planned stop
        (ExitFacts(0, None, False, gateway_state="running"), ExitKind.CRASH),
        (ExitFacts(0, None, False), ExitKind.CRASH),
        (ExitFacts(0, None, True), ExitKind.PLANNED),
        (ExitFacts(1, None, True), ExitKind.PLANNED),
        (ExitFacts(None, signal.SIGKILL, True), ExitKind.PLANNED),
        (ExitFacts(1, None, False, gateway_state="running"), ExitKind.CRASH),
        (ExitFacts(None, signal.SIGKILL, False), ExitKind.CRASH),
        (ExitFacts(None, signal.SIGHUP, False, gateway_state="running"), ExitKind.CRASH),
        # adopted children: no status, only the gateway's own last words
        (ExitFacts(None, None, False, gateway_state="stopped", restart_requested=True), ExitKind.RESTART_REQUESTED),
        (ExitFacts(None, None, False, gateway_state="stopped"), ExitKind.EXTERNAL_STOP),
        (ExitFacts(None, None, False, gateway_state="startup_failed"), ExitKind.CONFIG_ERROR),
        (ExitFacts(None, None, False, gateway_state="running"), ExitKind.CRASH),
        (ExitFacts(None, None, False), ExitKind.CRASH),
    ],
)
def test_classify(facts, kind):
    assert classify_exit(facts) is kind


def test_decisions_for_each_kind():
    assert decide(ExitKind.RESTART_REQUESTED, failures=5, uptime=1, policy=P) == decide(
        ExitKind.RESTART_REQUESTED, failures=0, uptime=100, policy=P
    )
    d = decide(ExitKind.RESTART_REQUESTED, failures=5, uptime=1, policy=P)
    assert (d.action, d.delay, d.failures) == (Action.RESTART, 0.0, 0)
    assert decide(ExitKind.CONFIG_ERROR, failures=2, uptime=1, policy=P).action is Action.HOLD
    assert decide(ExitKind.EXTERNAL_STOP, failures=2, uptime=1, policy=P).action is Action.STOP
    assert decide(ExitKind.PLANNED, failures=2, uptime=1, policy=P).action is Action.STOP


def test_crash_loop_backs_off_to_cap_and_healthy_run_resets():
    rng = random.Random(7)
    failures, delays = 0, []
    for _ in range(15):
        d = decide(ExitKind.CRASH, failures=failures, uptime=0.5, policy=P, rng=rng)
        assert d.action is Action.RESTART
        failures = d.failures
        delays.append(d.delay)
    assert delays[0] == 0.0  # the first failure restarts at once
    assert 0.9 <= delays[1] <= 1.1
    assert 1.8 <= delays[2] <= 2.2
    assert 3.6 <= delays[3] <= 4.4
    assert all(b >= a * 0.8 for a, b in itertools.pairwise(delays[1:]))
    assert max(delays) <= P.max_delay
    assert delays[-1] >= P.max_delay * 0.9  # reached the cap
    healthy = decide(ExitKind.CRASH, failures=failures, uptime=P.healthy_after, policy=P, rng=rng)
    assert (healthy.delay, healthy.failures) == (0.0, 1)
    assert "healthy" in healthy.reason


@given(st.integers(min_value=1, max_value=200), st.integers(min_value=0, max_value=2**32))
def test_backoff_delay_bounds(failures, seed):
    d = backoff_delay(failures, P, random.Random(seed))
    base = min(P.max_delay, P.initial_delay * P.factor ** (failures - 1))
    assert base * (1 - P.jitter) - 1e-9 <= d <= min(P.max_delay, base * (1 + P.jitter)) + 1e-9


def test_describe_exit():
    assert describe_exit(1, None) == "exit 1"
    assert describe_exit(None, signal.SIGKILL) == "killed by SIGKILL"
    assert "adopted" in describe_exit(None, None)
