"""Every number hermesd reads from a file it does not own has a range (issue 33, hole 3).

``agent.restart_drain_timeout: 1e12`` made hermesd wait 10¹² s before killing a gateway that ignored
SIGTERM, and the exports carried a 301-digit ``TimeoutStopSec``. Here: the table in docs/guide.md is
the registry (``profiles.numbers.BOUNDS``); every hermesd.yaml number outside its range is refused
naming file, line and key, without echoing a huge value; a profile's drain, ports and a gateway's
PID record are clamped or ignored, and the daemon's readers and the three exports apply the same
clamp. (That a stop then ends in bounded time is the planner's tests and
``tests/faults/test_stop_bounded.py``.)
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import yaml

from profiles import numbers
from profiles.numbers import BOUNDS, DRAIN, Bound
from profiles.snapshot import read_profile
from profiles.upstream import files as gf
from profiles.upstream.process import drain_seconds, stop_timeout
from supervisor.config import ConfigError, parse
from supervisor.ops import export
from supervisor.plan.policy import KILL_WAIT

REPO = Path(__file__).resolve().parents[2]
HUGE = 10**300  # the 301 digits of issue 33


def test_the_table_in_the_guide_is_the_registry() -> None:
    guide = (REPO / "docs" / "guide.md").read_text()
    assert numbers.table() in guide, "docs/guide.md's table differs from profiles.numbers:\n" + numbers.table()
    assert f"still there {KILL_WAIT:g} s later" in guide  # what a stop waits after its SIGKILL


@pytest.mark.parametrize("bound", BOUNDS, ids=lambda b: b.key)
def test_each_bound_holds_its_ends_and_nothing_else(bound: Bound) -> None:
    assert bound.holds(bound.low) and bound.holds(bound.high)
    for outside in (math.nan, math.inf, -math.inf, True, bound.high * 1.5 + 1, HUGE, -HUGE, "5", None):
        assert not bound.holds(outside), outside
    if bound.low > 0:
        assert not bound.holds(bound.low / 2)
    assert bound.clamp(math.nan) == bound.low and bound.clamp(math.inf) == float(bound.high)
    assert bound.clamp(-math.inf) == bound.low and bound.clamp(float(HUGE)) == float(bound.high)
    assert len(bound.refusal(HUGE)) < 120  # a refusal never echoes 301 digits


# ----------------------------------------------------------------------------- a profile's drain


@pytest.mark.parametrize(("written", "read"), [
    (None, 0), (45, 45), ("45", 45), (1e12, 1800), ("1e12", 1800), (".inf", 1800), (HUGE, 1800),
    (-5, 0), (-HUGE, 0), (".nan", 0), ("junk", 0), (True, 0), ([1], 0), (1800, 1800), (1800.5, 1800),
])
def test_the_drain_is_clamped_to_its_bound(tmp_path: Path, written: object, read: float) -> None:
    text = f"agent:\n  restart_drain_timeout: {written if isinstance(written, str) else json.dumps(written)}\n"
    (tmp_path / "config.yaml").write_text(text)
    facts = read_profile("p", tmp_path, b"salt")
    assert facts.ok and facts.drain_s == read == drain_seconds(facts.config or {})
    assert stop_timeout(facts.drain_s) <= DRAIN.high + 30


def _gateways(root: Path) -> dict[str, int]:
    """The stop timeout each export writes for each profile: systemd, Compose, Kubernetes."""
    units = export.export_files("systemd", root, gateway_command=[sys.executable, "-m", "hermes_cli.main"],
                                hermesd=[sys.executable, "-m", "supervisor"])
    compose = yaml.safe_load(export.export_files("compose", root)["compose.yaml"])["services"]
    out = {}
    for name, text in units.items():
        (line,) = [x for x in text.splitlines() if x.startswith("TimeoutStopSec=")]
        out[f"systemd {name}"] = int(line.split("=", 1)[1])
    for name, svc in compose.items():
        out[f"compose {name}"] = int(svc["stop_grace_period"].rstrip("s"))
    for name, text in export.export_files("kubernetes", root).items():
        dep = list(yaml.safe_load_all(text))[1]
        out[f"kubernetes {name}"] = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    return out


def test_the_exports_carry_the_bounded_stop_timeout(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "profiles" / "writer").mkdir(parents=True)
    (root / "config.yaml").write_text("agent:\n  restart_drain_timeout: 1e12\n")
    (root / "profiles" / "writer" / "config.yaml").write_text(f"agent:\n  restart_drain_timeout: {HUGE}\n")
    got = _gateways(root)
    assert len(got) == 6 and set(got.values()) == {1830}, got


# ----------------------------------------------------------------------------- ports and PID records


@pytest.mark.parametrize(("port", "claimed"), [(8642, "8642"), (65535, "65535"), (0, None), (70000, None),
                                               (-1, None), ("1.0e+300", None), (HUGE, None),
                                               ("not-a-number", "8642")])  # upstream dies; its default
def test_a_port_outside_tcp_is_no_claim(tmp_path: Path, port: object, claimed: str | None) -> None:
    (tmp_path / "config.yaml").write_text(
        "platforms:\n  api_server:\n    enabled: true\n    extra:\n"
        f"      port: {port}\n      key: k-0123456789abcdef\n")
    facts = read_profile("p", tmp_path, b"salt")
    ports = [c.key for c in facts.claims if c.kind == "port"]
    assert ports == ([claimed] if claimed else []), facts


@pytest.mark.parametrize(("record", "pid", "start"), [
    ({"pid": 4242, "start_time": 99}, 4242, 99),
    ({"pid": 1 << 22, "start_time": 99}, None, None),
    ({"pid": 0}, None, None),
    ({"pid": 4242, "start_time": 1 << 64}, 4242, None),
    ({"pid": 4242, "start_time": -1}, 4242, None),
    ({"pid": 4242, "start_time": HUGE}, 4242, None),
])
def test_a_pid_record_out_of_range_names_nothing(tmp_path: Path, record: dict, pid: int | None,
                                                 start: int | None) -> None:
    (tmp_path / gf.PID_FILE).write_text(json.dumps(record))
    rec = gf.read_pid_record(tmp_path)
    assert (rec.pid if rec else None, rec.start_time if rec else None) == (pid, start)


# ----------------------------------------------------------------------------- hermesd.yaml

# Each hermesd.yaml bound and a document that puts {v} where the number goes (1-based line of {v}).
SETTINGS: dict[str, tuple[str, int]] = {
    numbers.STOP_TIMEOUT.key: ("profiles:\n  coder:\n    stop_timeout: {v}\n", 3),
    numbers.INITIAL_DELAY.key: ("restart:\n  initial_delay: {v}\n", 2),
    numbers.MAX_DELAY.key: ("restart:\n  max_delay: {v}\n", 2),
    numbers.FACTOR.key: ("restart:\n  factor: {v}\n", 2),
    numbers.JITTER.key: ("restart:\n  jitter: {v}\n", 2),
    numbers.HEALTHY_AFTER.key: ("restart:\n  healthy_after: {v}\n", 2),
    numbers.LOG_MAX_BYTES.key: ("logs:\n  max_bytes: {v}\n", 2),
    numbers.LOG_BACKUPS.key: ("logs:\n  backups: {v}\n", 2),
    numbers.MAX_STARTING.key: ("max_starting: {v}\n", 1),
    numbers.KANBAN_WORKERS.key: ("kanban:\n  workers_per_profile: {v}\n", 2),
    numbers.KANBAN_RATE.key: ("kanban:\n  requests_per_minute: {v}\n", 2),
    numbers.HUNG_AFTER.key: ("hung_after: {v}\n", 1),
    numbers.STARTUP_GRACE.key: ("profiles:\n  coder:\n    startup_grace: {v}\n", 3),
    numbers.MEMORY_MAX.key: ("limits:\n  memory_max: {v}\n", 2),
    numbers.TASKS_MAX.key: ("limits:\n  tasks_max: {v}\n", 2),
    numbers.CPU_WEIGHT.key: ("kanban:\n  worker_limits:\n    cpu_weight: {v}\n", 3),
    numbers.EVENTS_MAX_BYTES.key: ("events:\n  max_bytes: {v}\n", 2),
    numbers.EVENTS_BACKUPS.key: ("events:\n  backups: {v}\n", 2),
    numbers.HOOK_TIMEOUT.key: ("hooks:\n  - on: backoff\n    command: x\n    timeout: {v}\n", 4),
    numbers.HOOK_AFTER_FAILURES.key: ("hooks:\n  - on: backoff\n    command: x\n    after_failures: {v}\n", 4),
    numbers.METRICS_PORT.key: ("metrics:\n  listen: 127.0.0.1:{v}\n", 2),
    numbers.USER_ID.key: ("isolation:\n  user: {v}\n", 2),
}
OPERATOR = [b for b in BOUNDS if b.outside == "refused"]


def test_every_hermesd_yaml_bound_is_tried_here() -> None:
    assert sorted(SETTINGS) == sorted(b.key for b in OPERATOR)


def _whole(bound: Bound) -> bool:
    return bound.low == int(bound.low) and bound.high == int(bound.high) and bound not in (
        numbers.STOP_TIMEOUT, numbers.INITIAL_DELAY, numbers.MAX_DELAY, numbers.FACTOR, numbers.HEALTHY_AFTER,
        numbers.HUNG_AFTER, numbers.STARTUP_GRACE, numbers.HOOK_TIMEOUT)


@pytest.mark.parametrize("bound", OPERATOR, ids=lambda b: b.key)
def test_each_hermesd_yaml_number_is_refused_past_either_end(tmp_path: Path, bound: Bound) -> None:
    text, line = SETTINGS[bound.key]
    path = tmp_path / "hermesd.yaml"
    high = int(bound.high) if _whole(bound) else bound.high
    parse(text.format(v=high), path)  # the end itself is accepted
    above = [int(bound.high) + 1 if _whole(bound) else bound.high * 1.01 + 0.01, HUGE]
    below = [int(bound.low) - 1 if _whole(bound) else bound.low / 2 - 1] if bound.low > 0 or _whole(bound) else []
    if bound is numbers.METRICS_PORT:
        below, above = [0], [65536, HUGE]  # digits only in HOST:PORT
    nonfinite = [] if _whole(bound) or bound is numbers.METRICS_PORT else [".nan", ".inf"]
    for value in [*above, *below, *nonfinite]:
        with pytest.raises(ConfigError) as caught:
            parse(text.format(v=value), path)
        said = str(caught.value)
        assert said.startswith(f"{path}:{line}: "), said
        assert len(said) < len(str(path)) + 250, said  # never the value's 301 digits
