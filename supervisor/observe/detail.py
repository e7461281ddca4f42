"""``hermesd status PROFILE``'s detail from the journal: the last exits and a 24-hour timeline.

A flapping profile should be visible at a glance, without reading a log: one row of cells (48 ×
30 minutes, newest on the right) whose height grows with the number of failed exits
in that half hour, a second row with the worst state the profile was in during it, an hour
axis and a legend. Below that, the last exits with their classification and reason.

API (the status command, for exactly one profile)::

    text = render_detail(root, "coder", now=time.time(), color=use_color, unicode=True)
    print(text)   # after the status table

:func:`render_from_events` is the pure part (events in, text out) and is what the tests drive.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from profiles.printable import printable_tree
from supervisor.observe.events import FAILURE_KINDS, clock, describe_exit, duration
from supervisor.observe.journal import default_folder
from supervisor.observe.reader import ReadStats, iter_events

HOURS = 24
CELLS = 48  # half an hour each
LAST_EXITS = 5

# Exit counts per cell -> bar height. Doubling steps: a loop at the 300 s backoff cap makes 6 a
# half hour, a fast loop dozens; both must look different from one stray crash.
_BARS = "▁▂▃▄▅▆▇█"
_STEPS = (1, 2, 4, 8, 16, 32, 64, 128)  # upper bound of each bar

# The worst state seen in a cell wins: held > backoff > stopped > up > nothing known.
_RANK = {None: 0, "up": 1, "stopped": 2, "backoff": 3, "held": 4}
_STATE_GLYPH = {None: " ", "up": "━", "stopped": "─", "backoff": "╍", "held": "H"}
_STATE_ASCII = {None: " ", "up": "=", "stopped": "-", "backoff": "~", "held": "H"}
_STATE_COLOR = {"up": "32", "stopped": "90", "backoff": "33", "held": "31"}

_NEXT_STATE = {
    "started": "up", "ready": "up", "adopted": "up", "recovered": "up",
    "backoff": "backoff", "held": "held", "foreign": "held",
    "stopped": "stopped", "released": "stopped",
}


@dataclass(frozen=True, slots=True)
class Cell:
    failures: int
    asked: int  # exits someone asked for: planned stops, requested restarts, outside stops
    state: str | None


def _state_after(ev: Mapping[str, Any], state: str | None) -> str | None:
    t = ev.get("type")
    if t == "exited":
        return "backoff" if ev.get("kind") in FAILURE_KINDS else "stopped"
    if t in ("daemon_stopping", "daemon_started"):
        return None  # hermesd was down: nothing known until it adopts or starts the gateway
    return _NEXT_STATE.get(str(t), state)


def timeline(events: Iterable[Mapping[str, Any]], profile: str, *, now: float) -> list[Cell]:
    """The cells of the window ``(now - HOURS, now]``, oldest first. Pure.

    ``events`` in journal order, this profile's and daemon-wide ones (others are ignored). Each
    cell shows the worst state the profile was in at any moment of it.
    """
    span = HOURS * 3600.0 / CELLS
    start = now - HOURS * 3600.0
    fails = [0] * CELLS
    asked = [0] * CELLS
    worst: list[str | None] = [None] * CELLS
    state: str | None = None
    filled = 0  # cells before this one are settled

    def mark(i: int, st: str | None) -> None:
        if _RANK[st] > _RANK[worst[i]]:
            worst[i] = st

    def settle(upto: int) -> None:
        nonlocal filled
        for i in range(filled, upto):
            mark(i, state)
        filled = max(filled, upto)

    for ev in events:
        if ev.get("profile") not in (None, profile):
            continue
        ts = float(ev["ts"])
        if ts > now:
            continue
        if ts <= start:
            state = _state_after(ev, state)
            continue
        idx = min(CELLS - 1, math.floor((ts - start) / span))
        settle(idx)
        mark(idx, state)
        if ev.get("type") == "exited" and ev.get("profile") == profile:
            if ev.get("kind") in FAILURE_KINDS:
                fails[idx] += 1
            else:
                asked[idx] += 1
        state = _state_after(ev, state)
        mark(idx, state)
    settle(CELLS)
    return [Cell(fails[i], asked[i], worst[i]) for i in range(CELLS)]


def _bar(n: int, unicode: bool) -> str:
    """A bar whose height doubles per step; without Unicode, the count itself (``+`` from 10)."""
    if not unicode:
        return str(n) if n < 10 else "+"
    for i, top in enumerate(_STEPS):
        if n <= top:
            return _BARS[i]
    return _BARS[-1]


def _paint(text: str, code: str | None, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[0m" if color and code and text.strip() else text


def render_from_events(events: Iterable[Mapping[str, Any]], profile: str, *, now: float, color: bool = False,
                       unicode: bool = True) -> str:
    """The detail text for ``profile`` from its events (daemon-wide ones included). Pure."""
    evs = [e for e in events if e.get("profile") in (None, profile)]
    cols = timeline(evs, profile, now=now)
    window = now - HOURS * 3600
    recent = [e for e in evs if e.get("profile") == profile and window < float(e["ts"]) <= now]
    exits_24 = [e for e in recent if e.get("type") == "exited"]
    failed = [e for e in exits_24 if e.get("kind") in FAILURE_KINDS]
    kinds: dict[str, int] = {}
    for e in failed:
        kinds[str(e.get("kind"))] = kinds.get(str(e.get("kind")), 0) + 1
    starts = sum(1 for e in recent if e.get("type") == "started")
    holds = sum(1 for e in recent if e.get("type") == "held")
    lines = [f"{profile}: the last {HOURS} h (one cell = {HOURS * 60 // CELLS} min, now on the right)"]
    by_kind = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
    lines.append(
        f"  {len(exits_24)} exit{'s' if len(exits_24) != 1 else ''}"
        + (f" ({len(failed)} failed: {by_kind})" if failed else "")
        + f", {starts} start{'s' if starts != 1 else ''}, {holds} hold{'s' if holds != 1 else ''}"
    )
    dot = "·" if unicode else "."
    asked_glyph = "∘" if unicode else "o"
    exit_row = "".join(
        _paint(_bar(c.failures, unicode), "31", color) if c.failures
        else _paint(asked_glyph, "33", color) if c.asked else dot
        for c in cols
    )
    glyphs = _STATE_GLYPH if unicode else _STATE_ASCII
    state_row = "".join(_paint(glyphs[c.state], _STATE_COLOR.get(str(c.state)), color) for c in cols)
    lines.append(f"  exits  {exit_row}")
    lines.append(f"  state  {state_row}")
    lines.append(f"         {_axis(now)}")
    steps = [(1, "1"), (2, "2"), (4, "3-4"), (8, "5-8"), (16, "9-16"), (32, "17-32"), (64, "33-64"), (128, "65+")]
    legend = " ".join(f"{_bar(n, unicode)}{label}" for n, label in steps) if unicode else "1-9 that many, + 10 or more"
    lines.append(f"  exits: {dot} none  {asked_glyph} only asked-for  failed: {legend}")
    lines.append(
        "  state: "
        + "  ".join(f"{glyphs[s]} {w}" for s, w in (("up", "running"), ("backoff", "backoff"), ("held", "held"),
                                                     ("stopped", "stopped")))
        + "  (blank) hermesd down or no record"
    )
    all_exits = [e for e in evs if e.get("profile") == profile and e.get("type") == "exited"]
    shown = all_exits[-LAST_EXITS:]
    if shown:
        lines.append("")
        lines.append(f"  last {len(shown)} exit{'s' if len(shown) != 1 else ''} (newest last):")
        rows = [["WHEN", "PID", "EXIT", "KIND", "UP", "REASON"]]
        for e in shown:
            rows.append([
                clock(e.get("ts"), date=True),
                str(e.get("pid") if e.get("pid") is not None else "-"),
                describe_exit(e.get("code"), e.get("signal"), e.get("kind")),
                str(e.get("kind") or "-"),
                duration(e.get("uptime_s")),
                str(e.get("reason") or ""),
            ])
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        for r in rows:
            lines.append("    " + "  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5])
    else:
        lines.append("")
        lines.append("  no exits recorded in the journal")
    return "\n".join(line.rstrip() for line in lines)


def _axis(now: float) -> str:
    """Hour labels under the cells: a ``|HH:MM`` every quarter of the window, ``now`` at the end."""
    span = HOURS * 3600 / CELLS
    start = now - HOURS * 3600
    row = [" "] * CELLS
    for i in range(0, CELLS - 5, CELLS // 4):
        label = "|" + datetime.fromtimestamp(start + i * span, UTC).astimezone().strftime("%H:%M")
        if i + len(label) <= CELLS - 4:
            row[i : i + len(label)] = list(label)
    row[CELLS - 3 : CELLS] = list("now")
    return "".join(row)


def render_detail(root: Path, profile: str, *, now: float, color: bool = False, unicode: bool = True) -> str:
    """Read ``root``'s journal and render ``profile``'s detail (works with the daemon down)."""
    stats = ReadStats()
    events = [printable_tree(ev) for ev in
              iter_events(default_folder(root), profiles={profile}, daemon_wide=True, stats=stats)]
    text = render_from_events(events, profile, now=now, color=color, unicode=unicode)
    if stats.skipped:
        text += f"\n  ({stats.skipped} damaged journal line{'s' if stats.skipped != 1 else ''} skipped)"
    return text
