"""``hermesd events``: scenarios read back with --json, readable lines, follow mode, errors and exit codes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from supervisor.observe.events import validate
from supervisor.observe.journal import Journal, JournalSettings, encode, segment_name
from supervisor.observe.observer import Observer
from tests.observe import scenarios
from tests.observe.conftest import CLI, REPO, json_lines, run_cli


def emit_all(root, steps, **kw):
    obs = Observer(root, **kw)
    obs.open()
    for type_, profile, fields in steps:
        obs.emit(type_, profile, **fields)
    obs.journal.close()
    return obs


def kinds(events):
    return [(e["type"], e.get("kind") or e.get("by")) for e in events]


def test_each_scenario_reads_back_in_order_through_events_json(events_root):
    (events_root / "profiles" / "coder").mkdir()
    emit_all(events_root, scenarios.daemon_run(["coder", "writer"]))
    (events_root / "profiles" / "writer").mkdir()
    done = run_cli("events", "coder", "--json", "--root", str(events_root))
    assert done.returncode == 0, done.stderr
    coder = json_lines(done.stdout)
    assert all(not validate(e) and e["profile"] == "coder" for e in coder)
    assert [e["seq"] for e in coder] == sorted(e["seq"] for e in coder)
    got = kinds(coder)
    kill = [("exited", "crash"), ("started", None), ("ready", None)]
    hold = [("exited", "config_error"), ("held", "config_error"), ("released", "config_error"),
            ("started", None), ("ready", None)]
    stop = [("stopped", "operator"), ("exited", "planned")]
    assert got == [("started", None), ("ready", None), *kill, *hold, ("platform", None), *stop]
    loop = kinds(json_lines(run_cli("events", "writer", "--json", "--root", str(events_root)).stdout))
    assert loop[2:14] == [("exited", "crash"), ("backoff", None), ("started", None)] * 4
    assert loop[14:16] == [("ready", None), ("recovered", None)]
    everything = json_lines(run_cli("events", "--json", "--root", str(events_root)).stdout)
    assert everything[0]["type"] == "daemon_started" and everything[-1]["type"] == "daemon_stopping"
    assert [e["seq"] for e in everything] == list(range(1, len(everything) + 1))


def test_readable_lines_say_what_happened(events_root):
    emit_all(events_root, scenarios.daemon_run(["coder", "writer"]))
    done = run_cli("events", "--root", str(events_root))
    assert done.returncode == 0 and done.stderr == ""
    text = done.stdout
    for expected in ("hermesd started", "coder     PID 1000 killed by SIGKILL after 2m00s (crash)",
                     "backoff: retry in 1.0s", "held (config_error): gateway exit 78", "released from config_error",
                     "stopped by the operator", "recovered: running healthy again after 4 failures",
                     "hung, heartbeat 3m20s old: killed PID 9", "memory_max limit: killed PID 10",
                     "configuration rejected, previous one kept", "platform telegram: connected", "hermesd stopping"):
        assert expected in text, expected
    assert len(text.splitlines()) == len(json_lines(run_cli("events", "--json", "--root", str(events_root)).stdout))


def test_since_and_lines(events_root):
    obs = Observer(events_root, wall=lambda: 1_700_000_000.0)
    obs.open()
    obs.emit("daemon_started")
    obs.wall = time.time
    obs.emit("started", "coder", pid=1, argv0="hermes")
    obs.emit("ready", "coder", pid=1)
    obs.journal.close()
    (events_root / "profiles" / "coder").mkdir()
    recent = json_lines(run_cli("events", "--json", "--since", "10m", "--root", str(events_root)).stdout)
    assert [e["type"] for e in recent] == ["started", "ready"]
    last = json_lines(run_cli("events", "--json", "-n", "1", "--root", str(events_root)).stdout)
    assert [e["type"] for e in last] == ["ready"]
    old = run_cli("events", "--json", "--since", "2023-11-14T22:00:00Z", "--root", str(events_root))
    assert len(json_lines(old.stdout)) == 3


def test_usage_errors_exit_2_with_one_line(events_root):
    (events_root / "profiles" / "coder").mkdir()
    emit_all(events_root, [("started", "gone", {"pid": 1, "argv0": "hermes"})])
    for args, wording in [
        (["events", "nosuch"], "no such profile: 'nosuch'"),
        (["events", "codr"], "did you mean 'coder'"),
        (["events", "--since", "yesterdayish"], "--since: cannot read time"),
        (["events", "-n", "-3"], "--lines"),
    ]:
        done = run_cli(*args, "--root", str(events_root))
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.startswith("hermesd: error: ") and wording in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    # a profile that is gone from disk but still in the history is known
    assert run_cli("events", "gone", "--root", str(events_root)).returncode == 0
    assert run_cli("events", "coder", "--root", str(events_root)).returncode == 0


def test_no_journal_yet_is_not_an_error(events_root):
    done = run_cli("events", "--root", str(events_root))
    assert done.returncode == 0 and done.stdout == "" and "no events recorded yet" in done.stderr


def test_a_journal_cut_mid_line_by_sigkill_is_still_readable(events_root):
    """A daemon SIGKILLed while writing: the torn line is skipped and named; the next daemon's events follow."""
    folder = events_root / ".hermesd" / "events"
    emit_all(events_root, scenarios.kill("coder", 1, 2))
    last = folder / segment_name(1)
    with open(last, "ab") as fh:
        fh.write(encode({"ts": 1.0, "seq": 4, "daemon": 1, "type": "exited", "profile": "coder"})[:33])
    done = run_cli("events", "--json", "--root", str(events_root))
    assert done.returncode == 0
    assert [e["type"] for e in json_lines(done.stdout)] == ["exited", "started", "ready"]
    assert "skipped 1 damaged line" in done.stderr
    emit_all(events_root, [("daemon_started", None, {}), ("adopted", "coder", {"pid": 2})])
    done = run_cli("events", "--json", "--root", str(events_root))
    assert [e["type"] for e in json_lines(done.stdout)] == ["exited", "started", "ready", "daemon_started", "adopted"]
    assert "skipped 1 damaged line" in done.stderr


def test_follow_prints_new_events_across_rotation_until_interrupted(events_root):
    folder = events_root / ".hermesd" / "events"
    (events_root / "profiles" / "coder").mkdir()
    settings = JournalSettings(max_bytes=4096, backups=50)
    j = Journal(folder, settings)
    j.open()
    for i in range(1, 21):
        j.append({"ts": 1_700_000_000.0 + i, "seq": i, "daemon": 1, "type": "started", "profile": "coder",
                  "pid": i, "argv0": "hermes"})
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, *CLI, "events", "-f", "--json", "coder", "--root", str(events_root)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        lines = LineReader(proc)
        first = lines.take(10)  # -f without --since: the last 10 first
        assert [e["seq"] for e in first] == list(range(11, 21))
        for i in range(21, 121):
            j.append({"ts": 1_700_000_000.0 + i, "seq": i, "daemon": 1, "type": "ready", "profile": "coder",
                      "pid": i, "reason": "q" * 150})
        assert j.stats.rotations >= 3
        assert [e["seq"] for e in lines.take(100)] == list(range(21, 121))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    j.close()


class LineReader:
    """JSON lines from a child's stdout, each wait bounded by a deadline (a hang fails, never blocks)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buf = b""

    def take(self, n: int, timeout: float = 15.0) -> list[dict]:
        import select

        deadline = time.monotonic() + timeout
        while self.buf.count(b"\n") < n:
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {n} lines (got {self.buf!r:.300})"
            if select.select([self.fd], [], [], left)[0]:
                chunk = os.read(self.fd, 65536)
                assert chunk, "the command exited"
                self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n", n)
        if len(lines) > n:
            self.buf = b"\n".join(lines[n:]) + b"\n" + self.buf
        return [json_lines(line.decode())[0] for line in lines[:n]]


@pytest.mark.parametrize("type_", ["held", "exited", "backoff", "recovered"])
def test_every_event_type_renders_without_the_schema_fields_too(type_):
    from supervisor.observe.events import render_line, summary

    assert summary({"type": type_, "ts": 1.0})  # junk-tolerant: fields missing
    assert "coder" in render_line({"type": type_, "ts": 1.0, "profile": "coder"})
