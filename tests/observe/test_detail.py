"""``hermesd status PROFILE``'s detail: the 24-hour timeline and the last exits, from the journal."""

from __future__ import annotations

from supervisor.observe.detail import render_detail, render_from_events, timeline
from supervisor.observe.observer import Observer
from tests.observe import scenarios

NOW = 1_800_000_000.0
CELL = 1800.0


def evs(*items):
    out = []
    for seq, (ago, type_, profile, fields) in enumerate(items, 1):
        out.append({"ts": NOW - ago, "seq": seq, "daemon": 1, "type": type_, "profile": profile, **fields})
    return out


def crash(ago, pid=1):
    return (ago, "exited", "coder", {"pid": pid, "code": 1, "signal": None, "kind": "crash", "reason": "boom",
                                     "uptime_s": 0.5})


def test_cells_count_failed_exits_and_show_the_worst_state():
    items = [(30 * 3600, "started", "coder", {"pid": 1}), (30 * 3600 - 5, "ready", "coder", {"pid": 1})]
    items += [crash(10 * 3600 + 60 + 60 * i) for i in range(5)]  # five crashes in one half hour
    items += [(10 * 3600 + 30, "backoff", "coder", {"delay_s": 8, "failures": 5, "retry_at": 0})]
    items += [(9 * 3600, "started", "coder", {"pid": 2})]
    items += [(5 * 3600, "exited", "coder", {"pid": 2, "code": 0, "signal": None, "kind": "planned", "reason": "r",
                                             "uptime_s": 1})]
    items += [(5 * 3600 - 1, "held", "coder", {"kind": "config_error", "message": "m"})]
    items += [(2 * 3600, "released", "coder", {"kind": "config_error", "why": "cured"}),
              (2 * 3600 - 1, "started", "coder", {"pid": 3}), crash(60, 3)]
    items += [crash(3 * 3600, 9)]  # ... but the other profile's exit does not count
    items[-1] = (3 * 3600, "exited", "writer", items[-1][3])
    cells = timeline(evs(*items), "coder", now=NOW)
    assert len(cells) == 48
    assert [c.state for c in cells[:27]] == ["up"] * 27  # up since before the window
    i10 = int((24 * 3600 - 10 * 3600 - 60) // CELL)
    assert cells[i10].failures == 5 and cells[i10].state == "backoff"
    i5 = int((24 * 3600 - 5 * 3600) // CELL)
    assert cells[i5].asked == 1 and cells[i5].state == "held"
    assert all(c.state == "held" for c in cells[i5:int((24 * 3600 - 2 * 3600) // CELL)])
    assert cells[-1].failures == 1
    assert sum(c.failures for c in cells) == 6


def test_a_flapping_profile_is_visible_at_a_glance():
    items = [(86000, "started", "coder", {"pid": 1})]
    for i in range(60):  # a crash loop of 60 exits over the last 5 hours
        items += [crash(5 * 3600 - 300 * i, 100 + i),
                  (5 * 3600 - 300 * i - 1, "backoff", "coder", {"delay_s": 300, "failures": i + 1, "retry_at": 0})]
    text = render_from_events(evs(*items), "coder", now=NOW)
    rows = {line.split()[0]: line for line in text.splitlines()[2:4]}
    exits_row = rows["exits"].split(None, 1)[1]
    assert len(exits_row) == 48
    assert exits_row[:38] == "·" * 38 and exits_row[-10:] == "▄" * 10  # six exits per half hour: 5-8 bar
    assert "60 exits (60 failed: 60 crash)" in text
    assert "last 5 exits (newest last)" in text and text.count("exit 1") == 5
    plain = render_from_events(evs(*items), "coder", now=NOW, unicode=False)
    assert plain.isascii() and "666666" in plain
    colored = render_from_events(evs(*items), "coder", now=NOW, color=True)
    assert "\x1b[31m▄\x1b[0m" in colored


def test_no_history_says_so():
    text = render_from_events([], "coder", now=NOW)
    assert "0 exits, 0 starts, 0 holds" in text and "no exits recorded" in text


def test_render_detail_reads_the_journal_with_the_daemon_down(events_root):
    obs = Observer(events_root)
    obs.open()
    for type_, profile, fields in scenarios.daemon_run(["coder", "writer"]):
        obs.emit(type_, profile, **fields)
    obs.journal.close()
    import time

    text = render_detail(events_root, "writer", now=time.time())
    assert text.startswith("writer: the last 24 h")
    assert "4 exits (4 failed: 4 crash)" in text
    assert "exit 1" in text and "failure 4" in text
