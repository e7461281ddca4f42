"""Readers: order across files, filters, --since, and a follower that survives rotation and wipes."""

from __future__ import annotations

import shutil
from datetime import datetime

import pytest

from supervisor.observe.journal import Journal, JournalSettings, encode, segment_name
from supervisor.observe.reader import ReadStats, follow, iter_events, last_run, parse_since
from tests.observe.test_journal import ev

NOW = 1_800_000_000.0


def write(folder, events, settings=None):
    j = Journal(folder, settings or JournalSettings())
    j.open()
    for e in events:
        assert j.append(e)
    return j


def test_filters_by_profile_time_and_daemon_wide(events_dir):
    evs = [ev(1, None, "daemon_started"), ev(2, "coder"), ev(3, "writer"), ev(4, "coder-2"), ev(5, "coder")]
    write(events_dir, evs).close()
    assert [e["seq"] for e in iter_events(events_dir, profiles={"coder"})] == [2, 5]
    assert [e["seq"] for e in iter_events(events_dir, profiles={"coder"}, daemon_wide=True)] == [1, 2, 5]
    assert [e["seq"] for e in iter_events(events_dir, since=1_700_000_003.0)] == [3, 4, 5]
    assert [e["seq"] for e in iter_events(events_dir, until=1_700_000_002.0)] == [1, 2]
    assert list(iter_events(events_dir.parent / "nothing-here")) == []


def test_since_skips_whole_old_files_without_reading_them(events_dir):
    write(events_dir, [ev(i, reason="y" * 300) for i in range(1, 200)], JournalSettings(max_bytes=4096, backups=100))
    stats = ReadStats()
    got = [e["seq"] for e in iter_events(events_dir, since=1_700_000_190.0, stats=stats)]
    assert got == list(range(190, 200))
    assert stats.files <= 2 < len(list(events_dir.iterdir()))


def test_last_run_is_the_newest_daemons_events(events_dir):
    evs = [{**ev(1, None, "daemon_started"), "daemon": 7}, {**ev(2), "daemon": 7},
           {**ev(1, None, "daemon_started"), "daemon": 8}, {**ev(2), "daemon": 8}, {**ev(3), "daemon": 8}]
    write(events_dir, evs).close()
    assert [(e["daemon"], e["seq"]) for e in last_run(events_dir)] == [(8, 1), (8, 2), (8, 3)]
    assert [(e["daemon"], e["seq"]) for e in last_run(events_dir, daemon=7)] == [(7, 1), (7, 2)]


@pytest.mark.parametrize(("text", "expected"), [
    ("10m", NOW - 600), ("2h", NOW - 7200), ("1d", NOW - 86400), ("30s", NOW - 30), ("1w", NOW - 604800),
    ("1.5h", NOW - 5400), ("10 min", NOW - 600), ("@1700000000", 1_700_000_000.0),
    ("2027-01-15T10:00:00Z", datetime.fromisoformat("2027-01-15T10:00:00+00:00").timestamp()),
    ("2027-01-15T10:00:00+02:00", datetime.fromisoformat("2027-01-15T08:00:00+00:00").timestamp()),
    ("2027-01-15 10:00", datetime(2027, 1, 15, 10, 0).timestamp()),  # local time
    ("2027-01-15", datetime(2027, 1, 15).timestamp()),
])
def test_parse_since(text, expected):
    assert parse_since(text, NOW) == pytest.approx(expected)


def test_parse_since_relative_words():
    local = datetime.fromtimestamp(NOW).astimezone()
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    assert parse_since("today", NOW) == midnight
    assert parse_since("yesterday", NOW) == pytest.approx(midnight - 86400, abs=3600)  # DST days are 23-25 h
    assert parse_since("08:30", NOW) == local.replace(hour=8, minute=30, second=0, microsecond=0).timestamp()


@pytest.mark.parametrize("bad", ["", "5x", "soon", "25:00", "2027-13-01", "@abc", "-1h"])
def test_parse_since_refuses_junk_with_a_hint(bad):
    with pytest.raises(ValueError, match="10m, 2h, 1d"):
        parse_since(bad, NOW)


class Script:
    """A follower's sleep: each call performs the next write step, so the test is deterministic."""

    def __init__(self, steps):
        self.steps = list(steps)

    def sleep(self, _seconds):
        if self.steps:
            self.steps.pop(0)()

    def going(self):
        return bool(self.steps)


def test_follow_across_rotation_daemon_restart_and_partial_lines(events_dir):
    settings = JournalSettings(max_bytes=4096, backups=3)
    j = write(events_dir, [ev(i) for i in range(1, 6)], settings)
    state = {"j": j, "n": 5}

    def more(k):
        def step():
            for _ in range(k):
                state["n"] += 1
                state["j"].append(ev(state["n"], reason="z" * 200))
        return step

    def restart():  # a new daemon: new writer, same newest file
        state["j"].close()
        state["j"] = Journal(events_dir, settings)
        state["j"].open()

    def half():
        state["n"] += 1
        line = encode(ev(state["n"]))
        state["half"] = line
        with open(state["j"].current_path, "ab") as fh:
            fh.write(line[:20])

    def rest():
        with open(state["j"].current_path, "ab") as fh:
            fh.write(state["half"][20:])
        state["j"]._size += len(state["half"])

    script = Script([more(3), more(40), restart, more(2), half, lambda: None, rest, more(30), lambda: None])
    stats = ReadStats()
    got = [e["seq"] for e in follow(events_dir, history=2, stats=stats, keep_going=script.going, sleep=script.sleep)]
    assert got == [4, 5, *range(6, state["n"] + 1)]
    assert stats.skipped == 0 and stats.missed_files == 0


def test_follow_waits_for_the_folder_and_survives_a_wiped_journal(events_dir):
    state = {}

    def create():
        state["j"] = write(events_dir, [ev(1), ev(2)])

    def wipe_and_restart():
        state["j"].close()
        shutil.rmtree(events_dir)
        state["j"] = write(events_dir, [ev(100), ev(101)])

    def append():
        state["j"].append(ev(102))

    script = Script([lambda: None, create, lambda: None, wipe_and_restart, append, lambda: None])
    got = [e["seq"] for e in follow(events_dir, keep_going=script.going, sleep=script.sleep)]
    assert got == [1, 2, 100, 101, 102]


def test_a_follower_that_falls_behind_rotation_counts_what_it_missed(events_dir):
    settings = JournalSettings(max_bytes=4096, backups=1)
    j = write(events_dir, [ev(1)], settings)

    def flood():
        for i in range(2, 400):
            j.append(ev(i, reason="w" * 100))

    script = Script([flood, lambda: None])
    stats = ReadStats()
    got = [e["seq"] for e in follow(events_dir, stats=stats, keep_going=script.going, sleep=script.sleep)]
    assert got[0] == 1 and got[-1] == 399 and got == sorted(got)
    assert stats.missed_files > 0


def test_follow_counts_a_fragment_left_in_a_finished_file(events_dir):
    j = write(events_dir, [ev(1)], JournalSettings(max_bytes=4096))

    def crash_and_rotate():
        with open(j.current_path, "ab") as fh:
            fh.write(b'{"ts":1700000002.0,"seq":2,"dae')
        # the next daemon starts on a fresh line; rotation then finishes this file
        j2 = Journal(events_dir, JournalSettings(max_bytes=4096))
        j2.open()
        for i in range(3, 40):
            j2.append(ev(i, reason="v" * 200))

    script = Script([crash_and_rotate, lambda: None])
    stats = ReadStats()
    got = [e["seq"] for e in follow(events_dir, stats=stats, keep_going=script.going, sleep=script.sleep)]
    assert got == [1, *range(3, 40)]
    assert stats.skipped == 1
    assert (events_dir / segment_name(2)).exists()
