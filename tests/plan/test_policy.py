"""Exit classification and backoff: pure functions, no sleeping, seeded randomness."""

import itertools
import random
import signal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.plan.policy import (
    FAILURES,
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
        # 75 from a process the state file never named: upstream's attach (another gateway serves it)
        (ExitFacts(75, None, False, stated=False), ExitKind.ATTACHED),
        # upstream's event-loop watchdog: state "degraded", then exit 75 on its own: a hang, not a request
        (ExitFacts(75, None, False, gateway_state="degraded", restart_requested=True), ExitKind.HUNG),
        (ExitFacts(None, None, False, gateway_state="degraded", restart_requested=True), ExitKind.HUNG),
        (ExitFacts(75, None, True, stated=False), ExitKind.PLANNED),
        # upstream's start-up watchdog left its record for this PID: a start-up that hung, whether the state
        # file named the process ("starting") or not (it hung in its imports), never a restart request
        (ExitFacts(75, None, False, gateway_state="starting", startup_watchdog=True), ExitKind.STARTUP_HUNG),
        (ExitFacts(75, None, False, stated=False, startup_watchdog=True), ExitKind.STARTUP_HUNG),
        (ExitFacts(None, None, False, stated=False, startup_watchdog=True), ExitKind.STARTUP_HUNG),
        (ExitFacts(1, None, False, startup_watchdog=True), ExitKind.CRASH),  # not the watchdog's 75
        (ExitFacts(75, None, True, startup_watchdog=True), ExitKind.PLANNED),
        (ExitFacts(1, None, False, stated=False), ExitKind.CRASH),
        (ExitFacts(78, None, False), ExitKind.CONFIG_ERROR),
        (ExitFacts(1, None, False, gateway_state="startup_failed"), ExitKind.CONFIG_ERROR),
        (ExitFacts(0, None, False, gateway_state="stopped"), ExitKind.EXTERNAL_STOP),
        # upstream's marker watcher began the stop, the stopper's SIGTERM then ended it: still a planned stop
        (ExitFacts(None, signal.SIGTERM, False, gateway_state="stopped"), ExitKind.EXTERNAL_STOP),
        (ExitFacts(None, signal.SIGINT, False, gateway_state="stopped"), ExitKind.EXTERNAL_STOP),
        (ExitFacts(None, signal.SIGKILL, False, gateway_state="stopped"), ExitKind.CRASH),
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
    healthy = decide(ExitKind.RESTART_REQUESTED, failures=5, uptime=P.healthy_after, policy=P)
    assert (healthy.action, healthy.delay, healthy.failures) == (Action.RESTART, 0.0, 1)  # the one at-once restart
    first_quick = decide(ExitKind.RESTART_REQUESTED, failures=0, uptime=1, policy=P)
    assert (first_quick.action, first_quick.delay, first_quick.failures) == (Action.RESTART, 0.0, 1)
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
    assert describe_exit(None, signal.SIGTERM, ExitKind.PLANNED) == describe_exit(None, "SIGTERM", "planned") \
        == "stopped by SIGTERM"  # the stop's own signal, taken during start-up
    assert describe_exit(None, signal.SIGKILL, ExitKind.PLANNED) == "killed by SIGKILL"  # the stop timed out
    assert describe_exit(None, 99) == "killed by signal 99"


@pytest.mark.parametrize("kind", [ExitKind.RESTART_REQUESTED, ExitKind.CRASH, ExitKind.ATTACHED, ExitKind.HUNG,
                                  ExitKind.SPAWN_ERROR, ExitKind.MEMORY_LIMIT, ExitKind.TASKS_LIMIT])
def test_no_exit_kind_restarts_at_once_more_than_once_in_a_row_when_quick(kind):
    """A quick exit of any kind that restarts is bounded by the backoff from the second one on
    (the first crash or restart request restarts at once; a failed spawn waits from the first)."""
    rng = random.Random(3)
    failures, immediate = 0, 0
    for _ in range(40):
        d = decide(kind, failures=failures, uptime=0.2, policy=P, rng=rng)
        if d.action is not Action.RESTART:
            break
        failures = d.failures
        immediate += d.delay == 0.0
        assert d.delay <= P.max_delay
    assert immediate <= 1


@given(st.lists(st.tuples(st.sampled_from(list(ExitKind)), st.floats(0, 200)), max_size=60), st.integers(0, 99))
def test_quick_restarts_are_bounded_whatever_the_sequence(exits, seed):
    """Whatever kinds of exit come in whatever order, two immediate restarts in a row only ever follow
    a healthy run (uptime >= healthy_after) between them."""
    rng = random.Random(seed)
    failures, last_immediate_quick = 0, False
    for kind, uptime in exits:
        d = decide(kind, failures=failures, uptime=uptime, policy=P, rng=rng)
        if d.action is not Action.RESTART:
            failures = d.failures
            last_immediate_quick = False
            continue
        immediate_quick = d.delay == 0.0 and uptime < P.healthy_after
        assert not (immediate_quick and last_immediate_quick), (kind, uptime, failures)
        last_immediate_quick = immediate_quick
        failures = d.failures


def test_attach_loop_becomes_a_hold():
    d1 = decide(ExitKind.ATTACHED, failures=0, uptime=3, policy=P)
    d2 = decide(ExitKind.ATTACHED, failures=d1.failures, uptime=3, policy=P, rng=random.Random(1))
    d3 = decide(ExitKind.ATTACHED, failures=d2.failures, uptime=3, policy=P)
    assert (d1.action, d1.delay) == (Action.RESTART, 0.0) and d2.action is Action.RESTART and d2.delay > 0
    assert d3.action is Action.HOLD and "another gateway serves this profile" in d3.reason


def test_an_attach_exit_is_retried_without_end_where_the_release_says_it_is_transient():
    """Upstream main: every attach exit is a transient verdict a supervisor must retry, never park on."""
    failures = 0
    delays = []
    for _ in range(12):
        d = decide(ExitKind.ATTACHED, failures=failures, uptime=1, policy=P, rng=random.Random(3), hold_attach=False)
        assert d.action is Action.RESTART, d
        delays.append(d.delay)
        failures = d.failures
    assert delays[0] == 0.0 and delays[1] > 0 and max(delays) <= P.max_delay and delays[-1] > P.max_delay / 2


def test_a_start_up_the_watchdog_ended_is_no_healthy_run():
    """300 s of a wedged start-up is no healthy run: it wipes no failures, so the backoff keeps growing."""
    d1 = decide(ExitKind.STARTUP_HUNG, failures=0, uptime=301, policy=P)
    d2 = decide(ExitKind.STARTUP_HUNG, failures=d1.failures, uptime=301, policy=P, rng=random.Random(1))
    d3 = decide(ExitKind.STARTUP_HUNG, failures=d2.failures, uptime=301, policy=P, rng=random.Random(1))
    assert (d1.action, d1.delay) == (Action.RESTART, 0.0) and "start-up watchdog" in d1.reason
    assert d2.action is Action.RESTART and 0 < d2.delay < d3.delay and d3.failures == 3
    assert ExitKind.STARTUP_HUNG in FAILURES
