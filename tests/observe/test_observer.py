"""The Observer: one emit reaches the journal, the counters and the hooks; settings sections validate."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from supervisor.observe.journal import JournalSettings
from supervisor.observe.observer import Observer
from supervisor.observe.reader import iter_events
from supervisor.observe.sections import Hook, ObserveConfigError, ObserveSettings, parse_sections


def test_emit_stamps_and_fans_out(events_root, tmp_path):
    marker = tmp_path / "hook-ran"

    async def main():
        obs = Observer(events_root, ObserveSettings(hooks=(Hook("h", frozenset({"held"}), ("/bin/sh", "-c",
                                                                                   f"cat > {marker}")),)),
                       daemon_pid=99, wall=lambda: 1_700_000_000.5)
        obs.open()
        a = obs.emit("daemon_started")
        b = obs.emit("held", "coder", kind="config_error", message="x" * 5000)
        deadline = time.monotonic() + 10
        while obs.hooks.counts["ok"] < 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await obs.aclose()
        return obs, a, b

    obs, a, b = asyncio.run(main())
    assert a == {"ts": 1_700_000_000.5, "seq": 1, "daemon": 99, "type": "daemon_started", "profile": None}
    assert b["seq"] == 2 and len(b["message"]) == 1000  # capped
    assert [e["seq"] for e in iter_events(events_root / ".hermesd" / "events")] == [1, 2]
    assert obs.counters.events == {"daemon_started": 1, "held": 1}
    assert marker.read_text().startswith('{"ts":1700000000.5,"seq":2')


def test_record_takes_the_planners_events_stamped_or_not(events_root):
    obs = Observer(events_root, daemon_pid=5, wall=lambda: 10.0)
    obs.open()
    unstamped = obs.record({"type": "started", "profile": "coder", "pid": 1, "argv0": "hermes"})
    stamped = obs.record({"ts": 11.0, "seq": 7, "daemon": 5, "type": "ready", "profile": "coder", "pid": 1})
    assert unstamped["seq"] == 1 and unstamped["ts"] == 10.0 and stamped["seq"] == 7
    assert [(e["type"], e["seq"]) for e in iter_events(events_root / ".hermesd" / "events")] \
        == [("started", 1), ("ready", 7)]


def test_schema_slips_are_logged_once_and_still_recorded(events_root, caplog):
    obs = Observer(events_root)
    obs.open()
    with caplog.at_level(logging.WARNING, logger="hermesd"):
        obs.emit("exited", "coder", pid=1)
        obs.emit("exited", "coder", pid=2)
        obs.emit("no_such_type", "coder")
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings.count("event schema: exited: missing field 'code'") == 1
    assert "event schema: type: unknown event type 'no_such_type'" in warnings
    assert len(list(iter_events(events_root / ".hermesd" / "events"))) == 3


def test_an_unusable_journal_is_counted_not_fatal(events_root, caplog):
    (events_root / ".hermesd" / "events").write_text("a file where the folder should be")
    obs = Observer(events_root)
    with caplog.at_level(logging.ERROR, logger="hermesd"):
        obs.open()
    obs.emit("daemon_started")
    assert obs.counters.journal_failed == 1 and obs.counters.events == {"daemon_started": 1}
    assert any("event journal unavailable" in r.getMessage() for r in caplog.records)


def test_parse_sections():
    s = parse_sections({"events": {"max_bytes": 65536, "backups": 3},
                        "hooks": [{True: ["held"], "command": "true"}],  # a bare `on:` as PyYAML reads it
                        "metrics": {"listen": "127.0.0.1:9464"}, "command": ["ignored"]})
    assert s.journal == JournalSettings(65536, 3) and s.hooks[0].on == frozenset({"held"})
    assert s.metrics.port == 9464
    assert parse_sections({}) == ObserveSettings(journal=JournalSettings())


@pytest.mark.parametrize(("top", "key"), [
    ({"events": {"max_bytes": 100}}, "events.max_bytes"),
    ({"events": {"backups": -1}}, "events.backups"),
    ({"events": {"size": 1}}, "events.size"),
    ({"events": []}, "events"),
    ({"hooks": {"on": "held"}}, "hooks"),
    ({"metrics": {"listen": "0.0.0.0:1"}}, "metrics.listen"),
])
def test_parse_sections_errors_name_the_key(top, key):
    with pytest.raises(ObserveConfigError) as info:
        parse_sections(top)
    assert info.value.key == key
