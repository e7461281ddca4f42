"""Event sequences the daemon's planner emits for the issue's scenarios (kill, crash loop, hold, stop).

The lead's end-to-end tests drive a real daemon; these are the same sequences emitted through the
Observer, so journal, readers, counters, metrics and hooks are tested against exactly what
the planner produces (``supervisor/plan/planner.py``'s ``_emit`` calls).
"""

from __future__ import annotations

from typing import Any

Step = tuple[str, str | None, dict[str, Any]]


def kill(profile: str, pid: int, new_pid: int) -> list[Step]:
    """A SIGKILL of a healthy gateway: exit (crash), immediate restart, ready again."""
    return [
        ("exited", profile, {"pid": pid, "code": None, "signal": "SIGKILL", "kind": "crash",
                             "reason": "crashed after a healthy run; restarting at once", "uptime_s": 120.0}),
        ("started", profile, {"pid": new_pid, "argv0": "hermes"}),
        ("ready", profile, {"pid": new_pid}),
    ]


def crash_loop(profile: str, first_pid: int, n: int) -> list[Step]:
    """``n`` quick crashes with doubling backoff, then a healthy run."""
    steps: list[Step] = []
    pid = first_pid
    for i in range(1, n + 1):
        steps.append(("exited", profile, {"pid": pid, "code": 1, "signal": None, "kind": "crash",
                                          "reason": f"exit 1 after 0.4s (failure {i})", "uptime_s": 0.4}))
        steps.append(("backoff", profile, {"delay_s": min(300.0, 2.0 ** (i - 1)), "failures": i,
                                           "retry_at": 1_700_000_000.0 + i}))
        pid += 1
        steps.append(("started", profile, {"pid": pid, "argv0": "hermes"}))
    steps.append(("ready", profile, {"pid": pid}))
    steps.append(("recovered", profile, {"after_failures": n}))
    return steps


def hold_and_release(profile: str, pid: int) -> list[Step]:
    """Exit 78 (configuration error) holds the profile; fixing its files releases and starts it."""
    return [
        ("exited", profile, {"pid": pid, "code": 78, "signal": None, "kind": "config_error",
                             "reason": "configuration error (exit 78): held until the files change", "uptime_s": 1.0}),
        ("held", profile, {"kind": "config_error", "message": "gateway exit 78: configuration error"}),
        ("released", profile, {"kind": "config_error", "why": "cured"}),
        ("started", profile, {"pid": pid + 1, "argv0": "hermes"}),
        ("ready", profile, {"pid": pid + 1}),
    ]


def operator_stop(profile: str, pid: int) -> list[Step]:
    return [
        ("stopped", profile, {"by": "operator"}),
        ("exited", profile, {"pid": pid, "code": 0, "signal": None, "kind": "planned",
                             "reason": "stopped by hermesd", "uptime_s": 30.0}),
    ]


def daemon_run(profiles: list[str]) -> list[Step]:
    """A whole daemon run touching every scenario, between daemon_started and daemon_stopping."""
    steps: list[Step] = [("daemon_started", None, {}), ("config_applied", None, {})]
    for i, p in enumerate(profiles):
        steps += [("started", p, {"pid": 1000 + 100 * i, "argv0": "hermes"}), ("ready", p, {"pid": 1000 + 100 * i})]
    a, b = profiles[0], profiles[-1]
    steps += kill(a, 1000, 1001)
    steps += crash_loop(b, 1000 + 100 * (len(profiles) - 1), 4)
    steps += hold_and_release(a, 1001)
    steps += [("platform", a, {"platform": "telegram", "state": "connected", "error_code": None,
                               "error_message": None})]
    steps += [("hung_kill", b, {"pid": 9, "age_s": 200.0}),
              ("limit_kill", b, {"pid": 10, "limit": "memory_max", "value": 600_000_000, "max": 536_870_912})]
    steps += [("config_rejected", None, {"error": "hermesd.yaml:3: restart.factor: expected a number >= 1, got 0"})]
    steps += operator_stop(a, 1002)
    steps += [("daemon_stopping", None, {"keep_children": False})]
    return steps
